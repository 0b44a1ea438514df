"""What this host is: its name, cores, platform, Python, torch and visible CUDA devices."""

from __future__ import annotations

import os
import platform
import socket
import sys

import torch

from omnitune.core.profile import HostFacts


def host_facts() -> HostFacts:
    cuda = tuple(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())) \
        if torch.cuda.is_available() else ()
    return HostFacts(hostname=socket.gethostname(), cpu_count=os.cpu_count() or 1,
                     platform=platform.platform(), python=sys.version.split()[0],
                     torch=torch.__version__, cuda_devices=cuda)
