"""The two ends with side effects that start processes: the launcher and the worker code."""
