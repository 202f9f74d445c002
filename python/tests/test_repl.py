"""python -m dtr: Python's REPL with dtr imported against two local workers, stopped on
exit; and its --connect mode."""

import os
import socket
import subprocess

from conftest import run_python

SCRIPT = """\
x = ones(3) * 2
print("sum", x.sum().item())
with node(1): y = zeros(2)

print("node", y.get_node(), node_count())
print("endpoints", ",".join(dtr.local_worker_endpoints()))
print("builtins", int("3") + 1, float("2"), bool(0), dtr.int is dtr.int32)
"""


def port_open(endpoint):
    host, port = endpoint.replace("tcp://", "").rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False


def test_repl_with_local_workers_stops_them_on_exit():
    r = run_python(["-m", "dtr"], input=SCRIPT, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "sum 6.0" in r.stdout and "node 1 2" in r.stdout
    assert "builtins 4 2.0 False True" in r.stdout  # dtr's names hide no builtin
    assert "2 nodes" not in r.stderr  # piped input runs as a script: no banner
    endpoints = next(x for x in r.stdout.splitlines() if "endpoints" in x).split()[-1]
    for e in endpoints.split(","):
        assert e.startswith("tcp://127.0.0.1:") and not port_open(e), e


def test_repl_connects_to_running_workers():
    import dtr

    workers = dtr._dtr.LocalWorkers(2, dtr.find_program("dtr-worker"))
    try:
        r = run_python(["-m", "dtr", "-q", "--connect", ",".join(workers.endpoints)],
                       input="print('nodes', node_count(), randn(2, 2).shape)\n", timeout=60)
        assert r.returncode == 0, r.stderr
        assert "nodes 2 (2, 2)" in r.stdout
    finally:
        workers.stop()


def test_repl_reports_a_bad_endpoint():
    r = run_python(["-m", "dtr", "--connect", "tcp://127.0.0.1:1", "--connect-timeout", "0.5"],
                   input="", timeout=60)
    assert r.returncode != 0 and "127.0.0.1:1" in r.stderr
    # One line, as dtr-repl's, not a traceback; exit status 2 as a usage error.
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("python -m dtr: "), r.stderr


def test_repl_options_are_checked():
    # --workers 0 was passed on and refused as "give either worker endpoints ... or an
    # endpoint to listen on", with a traceback.
    for args, text in [(["--workers", "0"], "argument --workers: expected a number above 0"),
                       (["--connect-timeout", "0"], "expected a number above 0, got 0"),
                       (["--connect", "127.0.0.1:7000"], "no transport: write tcp://")]:
        r = run_python(["-m", "dtr", *args], input="", timeout=60)
        assert r.returncode == 2 and text in r.stderr and "Traceback" not in r.stderr, r.stderr
    import dtr
    import pytest
    with pytest.raises(dtr.InvalidArgument, match="local_workers must be a whole number of at "
                       "least 1, got 0"):
        dtr.init_master_worker(local_workers=0)


def test_piped_script_stops_at_its_first_error():
    # Piped input runs as a script: the first uncaught exception prints its traceback and
    # the run exits 1 (it exited 0, the interactive console going on past the error).
    script = ("print('before')\n"
              "x = ones(2) + ones(3)\n"
              "print('after')\n")
    r = run_python(["-m", "dtr", "-q"], input=script, timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "before" in r.stdout and "after" not in r.stdout
    assert "Traceback" in r.stderr and "ShapeError" in r.stderr, r.stderr
    # SystemExit keeps its status.
    r = run_python(["-m", "dtr", "-q"], input="import sys\nsys.exit(7)\n", timeout=60)
    assert r.returncode == 7, r.stderr
