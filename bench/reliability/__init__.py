"""``memstrata bench reliability``: faults, load and hostile input, measured.

Each module holds scenarios (``SCENARIOS``, name -> ``run(ctx) -> Scenario``); ``suite``
runs them in order, bounded in count and time, and writes ``reliability.json``.
"""
