"""The commands (app.py) and the plots of `omnitune report` (report.py)."""

from omnitune.cli.app import app, main

__all__ = ["app", "main"]
