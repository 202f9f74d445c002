#!/usr/bin/env python3
"""The systemd unit of dtr workers (issue 45, deploy/systemd/): `systemd-analyze verify`
accepts dtr-worker@.service with nothing to say, and the unit's exact command line (its
ExecStart with %i and the paths put where this test keeps them) runs a worker from a
config file in the format of deploy/systemd/worker-example.conf, as an unprivileged user
where this test runs as root: it listens, serves its metrics with the configured name and
memory limit, and stops cleanly on SIGTERM within the unit's TimeoutStopSec. A config
naming an option the worker does not know stops it with an error naming the option.

Usage: systemd_test.py DTR_WORKER SOURCE_DIR
Exits 77 (skipped) where systemd-analyze is not installed (Debian: apt-get install
systemd; scripts/test.sh installs it)."""

import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import urllib.request

from deploy_support import fail, free_port


def unit_for_test(unit_text, worker_bin, conf_dir):
    """The unit with the installed paths replaced by this test's."""
    text = unit_text.replace("/usr/bin/dtr-worker", worker_bin)
    return text.replace("/etc/dtr/", conf_dir + "/")


def verify(unit_text, tmp):
    path = os.path.join(tmp, "dtr-worker@test.service")
    with open(path, "w") as f:
        f.write(unit_text)
    r = subprocess.run(["systemd-analyze", "verify", "--man=no", path], capture_output=True,
                       text=True, timeout=60)
    if r.returncode != 0 or r.stdout.strip() or r.stderr.strip():
        fail(f"systemd-analyze verify: exit {r.returncode}\n{r.stdout}{r.stderr}")


def exec_start(unit_text, instance):
    lines = [l for l in unit_text.splitlines() if l.startswith("ExecStart=")]
    if len(lines) != 1:
        fail(f"expected one ExecStart line, got {lines}")
    return shlex.split(lines[0][len("ExecStart="):].replace("%i", instance))


def stop_seconds(unit_text):
    m = re.search(r"^TimeoutStopSec=(\d+)s$", unit_text, re.M)
    return int(m.group(1)) if m else 90


def reachable_by_others(path):
    """Whether a user other than the owner can reach path (o+x on every directory above)."""
    path = os.path.abspath(path)
    while True:
        parent = os.path.dirname(path)
        if parent == path:
            return True
        if not os.stat(parent).st_mode & stat.S_IXOTH:
            return False
        path = parent


def as_unprivileged(worker_bin):
    """setpriv to nobody when this test runs as root (the unit's User=dtr is unprivileged),
    where nobody can reach the build tree; else as this user, saying so."""
    if os.geteuid() != 0:
        return []
    if not shutil.which("setpriv") or not reachable_by_others(worker_bin):
        print("systemd_test: the worker runs as root here (no setpriv, or the build tree is "
              "not reachable by other users)")
        return []
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def run_configured_worker(argv, tmp, metrics_port, stop_after):
    log_path = os.path.join(tmp, "worker.log")
    with open(log_path, "w") as log:
        p = subprocess.Popen(as_unprivileged(argv[0]) + argv, stdout=log, stderr=log, cwd=tmp)
    try:
        deadline = time.monotonic() + 30
        text = None
        while time.monotonic() < deadline and text is None:
            if p.poll() is not None:
                fail(f"the worker exited with {p.returncode}:\n{open(log_path).read()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics",
                                            timeout=5) as r:
                    text = r.read().decode()
            except OSError:
                time.sleep(0.3)
        if text is None:
            fail(f"no metrics within 30 s:\n{open(log_path).read()}")
        if 'dtr_worker_memory_limit_bytes{worker="test-node",device="cpu"} 268435456' not in text:
            fail(f"the configured name and memory limit are not in the metrics:\n{text}")
        p.send_signal(signal.SIGTERM)
        try:
            rc = p.wait(timeout=stop_after)
        except subprocess.TimeoutExpired:
            fail(f"the worker did not stop within the unit's {stop_after} s after SIGTERM")
        if rc != 0:
            fail(f"the worker exited with {rc} after SIGTERM:\n{open(log_path).read()}")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return open(log_path).read()


def main():
    worker_bin, source = sys.argv[1], sys.argv[2]
    if not shutil.which("systemd-analyze"):
        print("SKIPPED: systemd-analyze not installed (Debian: apt-get install systemd; "
              "scripts/test.sh installs it)")
        sys.exit(77)
    unit = open(os.path.join(source, "deploy", "systemd", "dtr-worker@.service")).read()
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
        test_unit = unit_for_test(unit, worker_bin, tmp)
        verify(test_unit, tmp)
        # The example's format, with this test's ports, name and limit.
        example = open(os.path.join(source, "deploy", "systemd", "worker-example.conf")).read()
        listen_port, metrics_port = free_port(), free_port()
        conf = re.sub(r'^listen = .*$', f'listen = "tcp://127.0.0.1:{listen_port}"', example,
                      flags=re.M)
        conf = re.sub(r'^name = .*$', 'name = "test-node"', conf, flags=re.M)
        conf = re.sub(r'^key = .*\n', '', conf, flags=re.M)  # loopback: no key needed
        conf = re.sub(r'^memory-limit = .*$', 'memory-limit = "256MiB"', conf, flags=re.M)
        conf = re.sub(r'^metrics-port = .*$', f'metrics-port = {metrics_port}', conf, flags=re.M)
        conf = re.sub(r'^metrics-address = .*$', 'metrics-address = "127.0.0.1"', conf,
                      flags=re.M)
        with open(os.path.join(tmp, "worker-test.conf"), "w") as f:
            f.write(conf)
        log = run_configured_worker(exec_start(test_unit, "test"), tmp, metrics_port,
                                    stop_seconds(unit))
        if f"listening on tcp://127.0.0.1:{listen_port} as test-node" not in log:
            fail(f"the log does not say where it listened:\n{log}")
        # A typo in the config is an error naming it, not a setting silently ignored.
        with open(os.path.join(tmp, "worker-typo.conf"), "w") as f:
            f.write(conf + "memory-limt = \"1GiB\"\n")
        r = subprocess.run(exec_start(test_unit, "typo"), capture_output=True, text=True,
                           timeout=30)
        if r.returncode == 0 or "memory-limt" not in r.stdout + r.stderr:
            fail(f"a config with an unknown option: exit {r.returncode}\n{r.stdout}{r.stderr}")
    print("systemd_test: ok (verify clean, the unit's command line ran, stopped on SIGTERM)")


if __name__ == "__main__":
    main()
