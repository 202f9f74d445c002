"""dtr.distributed against real ranks: every call of the API on 4 ranks started by
`python -m dtr.exec` (tests/spmd_checks.py), and rendezvous through tcp:// and file://
with ranks started here."""

import os
import sys
import tempfile

import pytest

from conftest import HERE, run_python

TWO_RANKS = r"""
import sys, dtr, dtr.distributed as dist
rank = int(sys.argv[1])
dist.init_process_group("zmq", init_method=sys.argv[2], rank=rank, world_size=2, timeout=60)
t = dtr.local.full((3,), float(rank + 1))
dist.all_reduce(t)
print("rank", dist.get_rank(), "of", dist.get_world_size(), t.tolist(), flush=True)
dist.destroy_process_group()
"""


def test_every_call_on_four_ranks():
    r = run_python(["-m", "dtr.exec", "-n", "4", "--timeout", "120",
                    os.path.join(HERE, "spmd_checks.py")], timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    for rank in range(4):
        assert f"[{rank}] rank {rank} ok" in r.stdout.splitlines(), r.stdout + r.stderr


@pytest.mark.parametrize("method", ["tcp", "file"])
def test_init_methods(method):
    import socket
    import subprocess

    if method == "tcp":
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            url = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    else:
        url = "file://" + os.path.join(tempfile.mkdtemp(), "rendezvous")
    env = dict(os.environ, DTR_PG_ADDR="127.0.0.1")  # a file store names no host to route to
    procs = [subprocess.Popen([sys.executable, "-c", TWO_RANKS, str(r), url], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    outs = [p.communicate(timeout=90) for p in procs]
    for r, (p, (out, err)) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, err
        assert f"rank {r} of 2 [3.0, 3.0, 3.0]" in out


def test_bad_backend_and_misuse():
    r = run_python(["-c", "import dtr.distributed as d\n"
                    "try:\n    d.get_rank()\nexcept Exception as e: print(type(e).__name__, e)\n"
                    "try:\n    d.init_process_group('carrier-pigeon', init_method='tcp://127.0.0.1:1', "
                    "rank=0, world_size=1)\nexcept Exception as e: print(type(e).__name__, e)\n"])
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("InvalidArgument") and "init" in lines[0], lines
    assert lines[1].startswith("InvalidArgument") and "carrier-pigeon" in lines[1], lines


def test_mpi_job_that_never_destroys_its_group_ends_cleanly():
    # A script that ends (or catches an error and ends) without destroy_process_group():
    # MPI was left unfinalized and mpirun reported the job as "exiting improperly".
    import shutil
    import subprocess

    import dtr.distributed as dist
    mpirun = shutil.which("mpirun")
    if mpirun is None or not dist.is_mpi_available():
        pytest.skip("needs mpirun and a dtr built with mpi")
    code = ("import dtr.distributed as dist, dtr.local as local\n"
            "dist.init_process_group('mpi', timeout=30)\n"
            "x = local.ones((4 + dist.get_rank(),))\n"
            "try:\n    dist.all_reduce(x)\nexcept Exception as e:\n    print(type(e).__name__)\n")
    r = subprocess.run([mpirun, "--oversubscribe", "--allow-run-as-root", "--timeout", "100",
                        "--mca", "btl", "self,vader", "-np", "2", sys.executable, "-c", code],
                       capture_output=True, text=True, timeout=150)
    # mpirun may cut the two ranks' lines into one another: count, not lines.
    assert r.stdout.count("ShapeError") == 2, r.stdout + r.stderr
    assert r.returncode == 0 and "exiting improperly" not in r.stdout + r.stderr, \
        r.stdout + r.stderr
