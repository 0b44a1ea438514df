"""Imported by a process that has imported torch, to end without the interpreter's last garbage
collections: they walk every object torch's import made, about a second of wall time
(docs/decisions.md, quick_exit). Frozen at exit, they go with the process. The `omnitune` command
imports it, and so does the fork server (launch.PRELOAD), which otherwise spends a second or more
of a core tearing down after its command has ended, beside whatever command comes next."""

import atexit
import gc

atexit.register(gc.freeze)
