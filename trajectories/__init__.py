"""Run records (config, steps, tool calls, retrieved ids, verdicts) and the closed loop.

Empty until the tools issue lands: the package exists so the layout and namespace are
fixed from the first release.
"""
