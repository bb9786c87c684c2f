"""DSPy modules (predictor, responder, judge, extractor, reconciler, QA, executors).

Empty until the models issue lands: the package exists so the layout and namespace are
fixed from the first release.
"""
