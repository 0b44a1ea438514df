"""omnitune installed from its wheel, not run from this checkout: the wheel built from this tree,
installed in a fresh virtual environment, knows its version and finds its bundled workloads
(omnitune/workloads/) from any folder.

The new environment sees torch and the other dependencies through a .pth file naming this
environment's site-packages. A path in a .pth file goes on sys.path, but the .pth files in that
folder are not run, so this checkout's editable install (its finder, or its path) stays out:
the test checks that `omnitune` is imported from the new environment.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
VERSION = re.search(r'^version = "(.+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)


def _run(cmd, cwd, timeout=120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}     # nothing of this checkout
    out = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{cmd} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}"
    return out


@pytest.fixture(scope="module")
def installed():
    """(the new environment, an empty folder to run in); both removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="omnitune-wheel-") as tmp:
        tmp = Path(tmp).resolve()
        # Built from a copy, so that setuptools' build/ and egg-info stay out of the checkout.
        src = tmp / "src"
        src.mkdir()
        shutil.copy(ROOT / "pyproject.toml", src)
        shutil.copy(ROOT / "README.md", src)
        shutil.copytree(ROOT / "omnitune", src / "omnitune", ignore=shutil.ignore_patterns("__pycache__"))
        _run([sys.executable, "-m", "pip", "wheel", src, "--no-deps", "--no-build-isolation", "--no-index",
              "-q", "-w", tmp / "dist"], cwd=tmp)
        wheel, = (tmp / "dist").glob("omnitune-*.whl")

        env = tmp / "venv"
        venv.create(env, with_pip=False)
        python = env / "bin" / "python"
        # Installed before the .pth exists, so that pip sees no omnitune already there.
        _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", "-q",
              wheel], cwd=tmp)
        site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                         cwd=tmp).stdout.strip())
        ours = dict.fromkeys([sysconfig.get_path("purelib"), sysconfig.get_path("platlib")])
        (site / "omnitune-test-deps.pth").write_text("".join(f"{p}\n" for p in ours))

        empty = tmp / "work"
        empty.mkdir()
        yield env, empty


def test_wheel_ships_the_workloads():
    names = {p.name for p in (ROOT / "omnitune" / "workloads").glob("*.py")}
    assert {"__init__.py", "lenet_digits.py"} <= names


def test_installed_omnitune_is_the_wheels(installed):
    env, empty = installed
    code = ("import omnitune; from omnitune.runtime import workload as w\n"
            "print(omnitune.__file__); print(w.resolve('lenet-digits'))\n"
            "try:\n    w.resolve('nope')\nexcept Exception as e:\n    print(e)\n")
    module, lenet, unknown = _run([env / "bin" / "python", "-c", code], cwd=empty).stdout.splitlines()
    assert Path(module).is_relative_to(env) and not Path(module).is_relative_to(ROOT)
    assert Path(lenet).is_relative_to(env) and Path(lenet).name == "lenet_digits.py"
    assert re.fullmatch(r"--workload: unknown workload 'nope' \(known: .*\blenet-digits, .*\)", unknown)
    assert "__init__" not in unknown


def test_version(installed):
    env, empty = installed
    assert _run([env / "bin" / "omnitune", "--version"], cwd=empty).stdout == f"omnitune {VERSION}\n"


@pytest.mark.slow
def test_profile_a_bundled_workload(installed):
    """On one single-thread CPU worker (5 s here; this machine's three layouts took 20 s)."""
    env, empty = installed
    (empty / "one.yaml").write_text("schema_version: 1\nnodes:\n  - {host: 127.0.0.1, cpu_workers: [1], gpus: []}\n"
                                    "rendezvous: 127.0.0.1:0\nserver_host: 127.0.0.1\n")
    _run([env / "bin" / "omnitune", "profile", "--workload", "lenet-digits", "--quick", "--max-batch", "8",
          "--cluster", "one.yaml", "--out", "p.json"], cwd=empty, timeout=300)
    assert json.loads((empty / "p.json").read_text())["workload"] == "lenet-digits"
