"""omnitune's version, as pyproject.toml names it: `omnitune.__version__`, and a part of a kept
profile's key (profiling/cache.py). It lives here, not in omnitune/__init__.py, so that a module
reads it without importing the package's face."""

VERSION = "0.1.0"
