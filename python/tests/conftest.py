"""Shared fixtures of the Python tests: a master-worker session against two dtr-worker
daemons started on 127.0.0.1 (stopped at the end), and helpers to run programs."""

import os
import subprocess
import sys

import pytest

import dtr

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("DTR_SOURCE_DIR", os.path.join(HERE, "..", ".."))


@pytest.fixture(scope="module")
def session():
    """Two local workers and a session with them, for one test file."""
    dtr.init_master_worker(local_workers=2, connect_timeout=30)
    assert dtr.node_count() == 2
    yield dtr
    dtr.shutdown_master_worker()


def run_python(args, timeout=120, env=None, input=None):
    """Runs `python3 args...` with this package importable; returns the CompletedProcess."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([sys.executable] + list(args), capture_output=True, text=True,
                          timeout=timeout, env=full_env, input=input)


def torch_python():
    """Debian's /usr/bin/python3 when it imports torch and numpy (python3-torch, which
    scripts/test.sh installs), for the tests that compare with torch in a subprocess;
    else None (those tests skip, saying so)."""
    exe = "/usr/bin/python3"
    if os.path.exists(exe) and subprocess.run([exe, "-c", "import torch, numpy"],
                                              capture_output=True, timeout=120).returncode == 0:
        return exe
    return None
