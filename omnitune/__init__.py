"""omnitune: find the fastest way to train a model on a set of CPUs and GPUs, then run it."""

__version__ = "0.1.0"
