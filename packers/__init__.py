"""Per-layer packers with explicit budgets, and the ContextBuilder.

Empty until the models issue lands: the package exists so the layout and namespace are
fixed from the first release.
"""
