"""The examples (python/examples/: the seed documents' programs in Python) run as a user
runs them, with their output checked."""

import os
import re
import shutil
import subprocess
import sys

import pytest

import dtr.distributed as dist
from conftest import SOURCE_DIR, run_python

EXAMPLES = os.path.join(SOURCE_DIR, "python", "examples")

# p2p.py, sgd.py and seed_sgd.py call init_process_group("gloo") as the seed documents do;
# a dtr built without gloo (DTR_WITH_GLOO off, or libgloo-dev missing) cannot run them.
needs_gloo = pytest.mark.skipif(not dist.is_gloo_available(),
                                reason="the example uses the gloo backend, not built here")


def example(name):
    return os.path.join(EXAMPLES, name)


def lines_of(r):
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout.splitlines()


def test_quickstart_with_its_own_workers():
    out = lines_of(run_python([example("quickstart.py")]))
    assert out == ["z.get_node(), z.get_device() == 0 -1", "a.get_node() == 1",
                   "z.sum() = 1800.0", "b = " + str([5.5] * 10), "arr: (20, 20) float32 4.5"]


def test_quickstart_under_dtr_exec_workers():
    out = lines_of(run_python(["-m", "dtr.exec", "--workers", "2", "--timeout", "60",
                               example("quickstart.py")]))
    assert "z.sum() = 1800.0" in out and "a.get_node() == 1" in out


@needs_gloo
def test_p2p_blocking_and_nonblocking():
    out = lines_of(run_python(["-m", "dtr.exec", "-n", "4", "--timeout", "60", example("p2p.py")]))
    for rank, blocking, nonblocking in [(0, 1.0, 2.0), (1, 0.0, 0.0), (2, 0.0, 0.0),
                                        (3, 1.0, 2.0)]:
        got = [line for line in out if line.startswith(f"[{rank}] Rank  {rank}  has data")]
        assert got == [f"[{rank}] Rank  {rank}  has data  {blocking}",
                       f"[{rank}] Rank  {rank}  has data  {nonblocking}"], out
    assert "[0] Rank 0 started sending" in out and "[3] Rank 3 started receiving" in out


def test_reduce_and_broadcast():
    out = lines_of(run_python(["-m", "dtr.exec", "-n", "4", "--timeout", "60",
                               example("reduce_broadcast.py")]))
    values = set()
    for rank in range(4):
        (line,) = [x for x in out if x.startswith(f"[{rank}] rank {rank}:")]
        assert "(the mean: True)" in line, line
        values.add(line.split(":", 1)[1])
    assert len(values) == 1, out  # every rank holds the same reduced and broadcast values


@needs_gloo
def test_synchronous_sgd_keeps_replicas_identical_and_learns():
    out = lines_of(run_python(["-m", "dtr.exec", "-n", "2", "--timeout", "120", example("sgd.py"),
                               "--epochs", "6"], timeout=180))
    digests = {re.search(r"parameters (\w+)", x).group(1) for x in out if "parameters" in x}
    assert len(digests) == 1, out
    for rank in range(2):
        losses = [float(x.rsplit(":", 1)[1]) for x in out
                  if x.startswith(f"[{rank}] Rank {rank}, epoch")]
        assert len(losses) == 6 and losses[-1] < losses[0] / 5, losses


@needs_gloo
def test_master_driven_sgd_matches_the_spmd_one_bit_for_bit():
    spmd = lines_of(run_python(["-m", "dtr.exec", "-n", "2", "--timeout", "120",
                                example("sgd.py"), "--epochs", "3"], timeout=180))
    master = lines_of(run_python(["-m", "dtr.exec", "--workers", "2", "--timeout", "120",
                                  example("master_sgd.py"), "--epochs", "3"], timeout=180))
    spmd_digests = {x.rsplit(" ", 1)[1] for x in spmd if "parameters" in x}
    master_digests = {x.rsplit(" ", 1)[1] for x in master if "parameters" in x}
    assert len(master_digests) == 1 and master_digests == spmd_digests, (spmd, master)
    assert "node 1, epoch 2: " in "\n".join(master)


@needs_gloo
def test_seed_sgd_with_autograd_learns_and_keeps_ranks_identical(tmp_path):
    # The seed tutorial 003 in Python: dtr's autograd, nn, optim and data; short (synthetic
    # MNIST, 2048 samples, 4 epochs of 16 batches per rank).
    out = lines_of(run_python(["-m", "dtr.exec", "-n", "2", "--timeout", "120",
                               example("seed_sgd.py"), "--epochs", "4", "--samples", "2048",
                               "--data-dir", str(tmp_path)], timeout=180))
    hashes = {x.rsplit(" ", 1)[1] for x in out if "parameters fnv1a64" in x}
    assert len(hashes) == 1 and len([x for x in out if "parameters" in x]) == 2, out
    for rank in range(2):
        losses = [float(x.rsplit(":", 1)[1]) for x in out
                  if x.startswith(f"[{rank}] Rank  {rank} , epoch")]
        assert len(losses) == 4, out
        assert losses[-1] < losses[0] - 0.1 and losses[-1] < losses[-2], losses


def _cxx_seed_sgd():
    """The C++ seed_sgd of this build tree (examples/), or None (an installed package)."""
    try:
        from dtr import _build_paths
    except ImportError:
        return None
    for d in _build_paths.BIN_DIRS:
        exe = os.path.join(os.path.dirname(d), "examples", "seed_sgd")
        if os.path.exists(exe):
            return exe
    return None


@needs_gloo
def test_seed_sgd_master_driven_and_cxx_end_with_the_same_parameters(tmp_path):
    args = ["--epochs", "2", "--samples", "1024", "--data-dir", str(tmp_path)]
    spmd = lines_of(run_python(["-m", "dtr.exec", "-n", "2", "--timeout", "120",
                                example("seed_sgd.py")] + args, timeout=180))
    master = lines_of(run_python(["-m", "dtr.exec", "--workers", "2", "--timeout", "120",
                                  example("seed_sgd.py")] + args, timeout=180))
    spmd_hashes = {x.rsplit(" ", 1)[1] for x in spmd if "parameters fnv1a64" in x}
    master_hashes = {x.rsplit(" ", 1)[1] for x in master if "parameters fnv1a64" in x}
    assert len(spmd_hashes) == 1 and master_hashes == spmd_hashes, (spmd, master)
    assert any(x.startswith("Node  1 , epoch  1 :") for x in master), master
    exe = _cxx_seed_sgd()
    if exe is None:
        return
    cxx = lines_of(run_python(["-m", "dtr.exec", "-n", "2", "--timeout", "120", exe] + args,
                              timeout=180))
    last = {x.rsplit(" ", 1)[1] for x in cxx if ", epoch 1:" in x}
    assert last == spmd_hashes, (cxx, spmd)


def test_master_sgd_as_one_mpi_job_on_the_mpi_backend():
    # mpirun -np 3 python -m dtr.exec --launched master_sgd.py: a Python master (rank 0) and
    # two workers, their collectives on MPI; the parameters of `--workers 2` bit for bit.
    # (python -m dtr.exec --launched gives the ranks but 0 the package's dtr-worker.)
    mpirun = shutil.which("mpirun")
    if mpirun is None or not dist.is_mpi_available():
        pytest.skip("needs mpirun and a dtr built with mpi")
    env = dict(os.environ, DTR_BACKEND="mpi")
    r = subprocess.run([mpirun, "--oversubscribe", "--allow-run-as-root", "--timeout", "140",
                        "-np", "3", sys.executable, "-m", "dtr.exec", "--launched",
                        example("master_sgd.py"), "--epochs", "2"],
                       capture_output=True, text=True, timeout=180, env=env)
    job = lines_of(r)
    local = lines_of(run_python(["-m", "dtr.exec", "--workers", "2", "--timeout", "120",
                                 example("master_sgd.py"), "--epochs", "2"], timeout=180))
    job_digests = {x.rsplit(" ", 1)[1] for x in job if "parameters" in x}
    local_digests = {x.rsplit(" ", 1)[1] for x in local if "parameters" in x}
    assert len(job_digests) == 1 and job_digests == local_digests, (job, r.stderr, local)
