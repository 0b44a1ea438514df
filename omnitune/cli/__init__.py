"""The commands (commands.py) and the plots of `omnitune report` (report.py)."""

from omnitune.cli.commands import app, main

__all__ = ["app", "main"]
