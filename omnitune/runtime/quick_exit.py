"""Imported by a process that has imported torch, to end without the interpreter's last garbage
collections: they walk every object torch's import made, 0.9-1.1 s of wall time on this machine
(`python -c "import torch"` took 4.1-4.6 s, 3.2-3.4 s with the objects frozen first). Frozen at
exit, they go with the process. The `omnitune` command imports it, and so does the fork server
(launch.PRELOAD), which otherwise spent 1-2 s of a core tearing down after its command had ended,
beside whatever command came next."""

import atexit
import gc

atexit.register(gc.freeze)
