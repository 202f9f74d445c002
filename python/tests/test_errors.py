"""dtr's errors as Python exceptions against real workers: RemoteError with the worker's
report (op, tensor, node, device, cause), WorkerLost, connection failures, misuse."""

import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest

import dtr
import dtr.distributed as dist
from conftest import run_python


def start_worker(*extra):
    """One dtr-worker on 127.0.0.1 with extra options; returns (process, endpoint)."""
    d = tempfile.mkdtemp()
    f = os.path.join(d, "endpoint")
    p = subprocess.Popen([dtr.find_program("dtr-worker"), "--listen", "tcp://127.0.0.1:*",
                          "--endpoint-file", f, "--log-level", "error", *extra])
    deadline = time.monotonic() + 20
    while not (os.path.exists(f) and open(f).read().strip()):
        assert time.monotonic() < deadline, "the worker did not report its endpoint"
        assert p.poll() is None, "the worker exited"
        time.sleep(0.02)
    return p, open(f).read().strip()


def stop(p):
    p.terminate()
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def test_the_hierarchy_mirrors_dtr_error():
    assert issubclass(dtr.InvalidArgument, dtr.Error) and issubclass(dtr.Error, RuntimeError)
    for cls in (dtr.ShapeError, dtr.DTypeError, dtr.IndexError):
        assert issubclass(cls, dtr.InvalidArgument) and issubclass(cls, ValueError)
    assert issubclass(dtr.WorkerLost, dtr.TransportError)
    assert issubclass(dtr.AuthenticationError, dtr.TransportError)
    for cls in (dtr.OutOfMemory, dtr.DeviceError, dtr.ProtocolError, dtr.TimeoutError,
                dtr.RemoteError, dtr.TransportError):
        assert issubclass(cls, dtr.Error)
    assert dtr.RemoteError.__module__ == "dtr"


def test_no_session_is_a_clear_error():
    assert not dtr.is_master_worker_initialized()
    with pytest.raises(dtr.InvalidArgument, match="init_master_worker"):
        dtr.zeros(3)


def test_unreachable_worker_times_out_naming_it():
    with pytest.raises((dtr.TimeoutError, dtr.TransportError), match="127.0.0.1:1"):
        dtr.init_master_worker(["tcp://127.0.0.1:1"], connect_timeout=0.5)
    assert not dtr.is_master_worker_initialized()


def test_remote_error_carries_the_workers_report():
    p, endpoint = start_worker("--memory-limit", "1MiB")
    try:
        dtr.init_master_worker(endpoint)
        big = dtr.zeros(1 << 20)  # 4 MiB: past the worker's limit
        y = big + 1  # runs after its input failed
        with pytest.raises(dtr.RemoteError) as e:
            y.sum().item()
        err = e.value
        assert err.node == 0 and err.device == -1 and err.op == "sum"
        assert err.cause_op == "full" and err.cause_tensor == big.id
        assert "memory" in err.cause_message.lower() and "full producing tensor" in err.cause
        assert "node 0 (cpu)" in str(err)
        # The session goes on: other tensors work, and a failure raised by item() is not
        # raised again by synchronize() (each failure is raised once).
        assert (dtr.ones(2) + 1).sum().item() == 4
        dtr.synchronize()  # nothing left to report
    finally:
        dtr.shutdown_master_worker()
        stop(p)


def test_worker_lost_is_reported_and_other_nodes_go_on():
    dtr.init_master_worker(local_workers=2, heartbeat_timeout=1.0)
    try:
        x1 = dtr.ones(3, node=1)
        assert x1.sum().item() == 3
        os.kill(dtr._local_workers.pids[1], signal.SIGKILL)
        with pytest.raises(dtr.WorkerLost) as e:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                x1.sum().item()
                time.sleep(0.05)
        assert "node 1" in str(e.value) and isinstance(e.value, dtr.TransportError)
        assert (dtr.ones(2) * 3).sum().item() == 6  # node 0 is unaffected
    finally:
        dtr.shutdown_master_worker()


def test_undefined_and_misused_handles():
    with pytest.raises(dtr.InvalidArgument, match="no master-worker session"):
        dtr.synchronize()
    with pytest.raises(TypeError, match="a shape is ints"):
        dtr.local.zeros(2.5)
    with pytest.raises(dtr.InvalidArgument, match="at most 12 dims"):
        dtr.local.zeros(*([1] * 13))


def test_the_workers_backend_is_chosen_and_checked():
    # mpi needs the master in an MPI job with its workers (mpirun dtr-exec --launched).
    with pytest.raises(dtr.InvalidArgument, match="mpirun -np N\\+1 dtr-exec --launched"):
        dtr.init_master_worker(["tcp://127.0.0.1:1"], backend="mpi")
    with pytest.raises(dtr.InvalidArgument, match="unknown backend 'glo'"):
        dtr.init_master_worker(local_workers=2, backend="glo")
    assert not dtr.is_master_worker_initialized()
    if not dist.is_backend_available("gloo"):
        pytest.skip("this dtr is built without gloo")
    dtr.init_master_worker(local_workers=2, backend="gloo")
    try:
        ts = [dtr.ones(4, node=k) * (k + 1) for k in range(2)]
        dtr.all_reduce(ts, dtr.ReduceOp.SUM)
        assert [t.tolist() for t in ts] == [[3.0] * 4, [3.0] * 4]
    finally:
        dtr.shutdown_master_worker()


def test_options_apply_to_the_workers_the_environment_names():
    # dtr-exec --workers names them in DTR_WORKERS (--launched in MASTER_ADDR/...): timeouts
    # given to init_master_worker() were refused there, asking to "set DTR_WORKERS".
    code = ("import dtr; dtr.init_master_worker(connect_timeout=30, sync_timeout=60, "
            "heartbeat_timeout=5); print('nodes', dtr.node_count()); "
            "dtr.shutdown_master_worker()")
    r = run_python(["-m", "dtr.exec", "--workers", "1", "--timeout", "60", sys.executable, "-c",
                    code], timeout=90)
    assert r.returncode == 0 and "nodes 1" in r.stdout.splitlines(), r.stdout + r.stderr
