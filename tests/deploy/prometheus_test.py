#!/usr/bin/env python3
"""Debian's Prometheus server against two real dtr workers (issue 45): the rules pass
promtool's checks and unit tests (deploy/prometheus/dtr-rules.test.yml), the Grafana
dashboard is JSON whose every metric the workers or the rules serve, and a server started
here scrapes the workers (their /metrics) with the expected labels, loads the rules,
computes the recording rules, and sees a stopped worker go down (DtrWorkerDown pending).

Usage: prometheus_test.py DTR_WORKER SOURCE_DIR
Exits 77 (skipped) where prometheus or promtool is not installed (Debian: apt-get install
prometheus; scripts/test.sh installs it). Every wait is bounded; the processes started here
are stopped at the end, whatever happens."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

from deploy_support import fail, free_port

LIMIT = 1 << 30  # worker w0's --memory-limit


def get(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def wait_for(what, fn, timeout, procs=()):
    """fn() until it returns something true (exceptions count as not yet); fails after
    timeout seconds, or at once when one of procs has exited."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        for name, p in procs:
            if p.poll() is not None:
                fail(f"{name} exited with {p.returncode} while waiting for {what}")
        try:
            value = fn()
            if value:
                return value
        except Exception as e:  # noqa: BLE001  (not up yet)
            last = e
        time.sleep(0.5)
    fail(f"no {what} within {timeout} s (last error: {last})")


def promtool_checks(promtool, rules_dir):
    for args in (["check", "rules", "dtr-rules.yml"], ["test", "rules", "dtr-rules.test.yml"]):
        r = subprocess.run([promtool, *args], cwd=rules_dir, capture_output=True, text=True,
                           timeout=60)
        if r.returncode != 0:
            fail(f"promtool {' '.join(args)} failed:\n{r.stdout}{r.stderr}")


def check_dashboard(path, metrics_text, rules_text):
    dash = json.load(open(path))
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    if len(exprs) < 5:
        fail(f"{path}: only {len(exprs)} queries")
    served = set(re.findall(r"^# HELP (\S+)", metrics_text, re.M))
    served |= set(re.findall(r"record: (\S+)", rules_text)) | {"up"}
    for e in exprs:
        for name in re.findall(r"\b(dtr_worker_[a-z_]+|dtr:[a-z_0-9:]+|up)\b", e):
            if name not in served:
                fail(f"{path}: query {e!r} names {name}, which neither the worker nor the rules "
                     "serve")


def start_workers(worker_bin, tmp):
    workers = []
    for i in range(2):
        port = free_port()
        log = open(os.path.join(tmp, f"w{i}.log"), "w")
        cmd = [worker_bin, "--listen", "tcp://127.0.0.1:*", "--name", f"w{i}", "--metrics-port",
               str(port), "--memory-limit", str(LIMIT if i == 0 else 0)]
        workers.append((f"w{i}", port, subprocess.Popen(cmd, stdout=log, stderr=log)))
    for name, port, p in workers:
        wait_for(f"{name}'s /metrics", lambda: get(f"http://127.0.0.1:{port}/metrics"), 30,
                 [(name, p)])
    return workers


def query(base, q):
    r = json.loads(get(f"{base}/api/v1/query?query={urllib.parse.quote(q)}"))
    if r["status"] != "success":
        fail(f"query {q!r}: {r}")
    return r["data"]["result"]


def check_server(base, workers, server):
    procs = [("prometheus", server)]
    wait_for("a ready server", lambda: get(f"{base}/-/ready"), 60, procs)
    instances = {f"127.0.0.1:{port}": name for name, port, _ in workers}
    wait_for("both workers up", lambda: len([r for r in query(base, 'up{job="dtr-worker"}')
                                             if r["value"][1] == "1"]) == 2, 60, procs)
    series = wait_for("dtr_worker_session_active of both",
                      lambda: len(query(base, "dtr_worker_session_active")) == 2 and
                      query(base, "dtr_worker_session_active"), 30, procs)
    for s in series:
        m = s["metric"]
        if m.get("job") != "dtr-worker" or instances.get(m.get("instance")) != m.get("worker"):
            fail(f"unexpected labels {m} (instances {instances})")
    limits = query(base, "dtr_worker_memory_limit_bytes")
    if [(r["metric"]["worker"], r["metric"]["device"], r["value"][1]) for r in limits] != \
            [("w0", "cpu", str(LIMIT))]:
        fail(f"dtr_worker_memory_limit_bytes: {limits}")
    groups = json.loads(get(f"{base}/api/v1/rules"))["data"]["groups"]
    if sorted(g["name"] for g in groups) != ["dtr-alerts", "dtr-recording"]:
        fail(f"the server loaded the rule groups {[g['name'] for g in groups]}")
    ratio = wait_for("the recording rule dtr:worker_memory_used:ratio",
                     lambda: query(base, "dtr:worker_memory_used:ratio"), 30, procs)
    if [(r["metric"]["worker"], float(r["value"][1])) for r in ratio] != [("w0", 0.0)]:
        fail(f"dtr:worker_memory_used:ratio: {ratio}")
    wait_for("dtr:worker_commands:rate1m", lambda: query(base, "dtr:worker_commands:rate1m"),
             30, procs)


def check_worker_down(base, workers, server):
    name, port, p = workers[1]
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=30)
    instance = f"127.0.0.1:{port}"
    wait_for(f"up == 0 for {name}",
             lambda: [r for r in query(base, 'up{job="dtr-worker"} == 0')
                      if r["metric"]["instance"] == instance], 30, [("prometheus", server)])
    wait_for("DtrWorkerDown pending for it",
             lambda: [r for r in query(base, 'ALERTS{alertname="DtrWorkerDown"}')
                      if r["metric"]["instance"] == instance], 30, [("prometheus", server)])


def main():
    worker_bin, source = sys.argv[1], sys.argv[2]
    prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if not prometheus or not promtool:
        print("SKIPPED: prometheus / promtool not installed (Debian: apt-get install "
              "prometheus; scripts/test.sh installs it)")
        sys.exit(77)
    rules_dir = os.path.join(source, "deploy", "prometheus")
    rules = os.path.join(rules_dir, "dtr-rules.yml")
    promtool_checks(promtool, rules_dir)
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            workers = start_workers(worker_bin, tmp)
            procs += [p for _, _, p in workers]
            check_dashboard(os.path.join(source, "deploy", "grafana", "dtr-dashboard.json"),
                            get(f"http://127.0.0.1:{workers[0][1]}/metrics"), open(rules).read())
            port = free_port()
            config = os.path.join(tmp, "prometheus.yml")
            targets = ", ".join(f"'127.0.0.1:{p}'" for _, p, _ in workers)
            with open(config, "w") as f:
                f.write(f"global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                        f"rule_files: ['{rules}']\nscrape_configs:\n  - job_name: dtr-worker\n"
                        f"    static_configs:\n      - targets: [{targets}]\n")
            r = subprocess.run([promtool, "check", "config", config], capture_output=True,
                               text=True, timeout=60)
            if r.returncode != 0:
                fail(f"promtool check config:\n{r.stdout}{r.stderr}")
            log = open(os.path.join(tmp, "prometheus.log"), "w")
            server = subprocess.Popen(
                [prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp}/data",
                 f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                stdout=log, stderr=log)
            procs.append(server)
            base = f"http://127.0.0.1:{port}"
            check_server(base, workers, server)
            check_worker_down(base, workers, server)
            version = subprocess.run([prometheus, "--version"], capture_output=True, text=True,
                                     timeout=30).stdout.splitlines()[0]
            print(f"prometheus_test: ok ({version})")
        finally:
            for p in procs:
                if p.poll() is None:
                    p.terminate()
            for p in procs:
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            if sys.exc_info()[0] is not None:  # failed: show what the processes said
                for name in os.listdir(tmp):
                    if name.endswith(".log"):
                        print(f"--- {name}\n{open(os.path.join(tmp, name)).read()[-3000:]}")


if __name__ == "__main__":
    main()
