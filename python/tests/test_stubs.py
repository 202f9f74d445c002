"""The type stubs (python/dtr/_dtr/*.pyi) are those nanobind.stubgen makes from the built
module: an op or function added without regenerating them fails here. To regenerate:
PYTHONPATH=build/python python3 -m nanobind.stubgen -m dtr._dtr -r -P --exclude-values \
    -O python/dtr -q"""

import os
import subprocess
import sys
import tempfile

import pytest

import dtr
from conftest import SOURCE_DIR


# The Python the committed stubs were made with (Debian 12's, as on CI). stubgen's output
# follows the interpreter: from 3.12 on, classes with the buffer protocol gain __buffer__.
STUBS_PYTHON = (3, 11)


def test_stubs_match_the_module():
    # nanobind is there wherever the module was built from this tree (CMake needs it); an
    # installed package (pip) may lack it, having needed it only to build.
    pytest.importorskip("nanobind.stubgen")
    if sys.version_info[:2] != STUBS_PYTHON:
        pytest.skip("the stubs were made with Python %d.%d; stubgen's output differs on %d.%d"
                    % (STUBS_PYTHON + sys.version_info[:2]))
    out = tempfile.mkdtemp()
    # Values left out: built_with_cuda and the like differ between builds.
    subprocess.run([sys.executable, "-m", "nanobind.stubgen", "-m", "dtr._dtr", "-r", "-P",
                    "--exclude-values", "-O", out, "-q"], check=True, timeout=120)
    committed = os.path.join(SOURCE_DIR, "python", "dtr", "_dtr")
    for name in ("__init__.pyi", "local.pyi", "pg.pyi", "autograd.pyi", "optim.pyi", "nn.pyi",
                 "data.pyi"):
        with open(os.path.join(out, "_dtr", name)) as f:
            fresh = f.read()
        with open(os.path.join(committed, name)) as f:
            assert f.read() == fresh, f"python/dtr/_dtr/{name} is stale: regenerate it"


def test_stubs_name_every_public_binding():
    with open(os.path.join(SOURCE_DIR, "python", "dtr", "_dtr", "__init__.pyi")) as f:
        text = f.read()
    for name in ("Tensor", "LocalTensor", "add_", "dist_send", "Stream", "Event", "RemoteError",
                 "node_info", "memory_stats", "all_reduce", "requires_grad_", "backward", "grad_fn"):
        assert name in text, name
    assert os.path.exists(os.path.join(os.path.dirname(dtr.__file__), "py.typed"))
