"""Dataset loaders, metrics, and the benchmark runners behind ``memstrata bench``."""
