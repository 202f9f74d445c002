"""Python against C++ on the same workers, in one run (docs/performance.md, "Python (issue
18)"). Starts one local dtr-worker; each round runs, against it, the Python workloads
(this process, import dtr) and the same workloads from C++ (bench/python_compare.cpp),
the order alternating between rounds:

  dispatch   N x.add_(1) on a 1-element float tensor, then synchronize(): ops/s
  roundtrip  (x + 1).item(): median and p99 over R iterations after W warm-up, in us
             (and x.item() alone, the round trip without an op)

Usage: PYTHONPATH=build/python python3 bench/python_bench.py [--cpp build/bench/dtr_python_compare]
           [--ops 1000000] [--rounds 3]
Prints each round and the medians and ranges of the ratios Python / C++."""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import dtr


def python_side(endpoints, n, rounds, warmup):
    dtr.init_master_worker(endpoints)
    try:
        x = dtr.zeros(1)
        start = time.perf_counter()
        for _ in range(n):
            x.add_(1)
        dtr.synchronize()
        seconds = time.perf_counter() - start
        ok = x.item() == n
        y = dtr.zeros(1)
        us = []
        for i in range(warmup + rounds):
            t0 = time.perf_counter()
            v = (y + 1).item()
            t1 = time.perf_counter()
            assert v == 1.0
            if i >= warmup:
                us.append((t1 - t0) * 1e6)
        item_us = []  # y.item() alone: the round trip without an op
        for i in range(warmup + rounds):
            t0 = time.perf_counter()
            v = y.item()
            t1 = time.perf_counter()
            assert v == 0.0
            if i >= warmup:
                item_us.append((t1 - t0) * 1e6)
        us.sort()
        item_us.sort()
        return {"dispatch_ops_per_s": n / seconds, "dispatch_ok": ok,
                "roundtrip_median_us": us[len(us) // 2],
                "roundtrip_p99_us": us[min(len(us) - 1, len(us) * 99 // 100)],
                "item_median_us": item_us[len(item_us) // 2]}
    finally:
        dtr.shutdown_master_worker()


def cpp_side(binary, endpoints, n, rounds, warmup):
    env = dict(os.environ, DTR_WORKERS=",".join(endpoints))
    out = subprocess.run([binary, str(n), str(rounds), str(warmup)], env=env, check=True,
                         capture_output=True, text=True, timeout=600).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cpp",
                   default=os.path.join(here, "..", "build", "bench", "dtr_python_compare"))
    p.add_argument("--ops", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rt-iters", type=int, default=2000)
    p.add_argument("--rt-warmup", type=int, default=200)
    a = p.parse_args()
    workers = dtr._dtr.LocalWorkers(1, dtr.find_program("dtr-worker"))
    ratios = {"dispatch": [], "roundtrip": []}
    try:
        for r in range(a.rounds):
            args = (workers.endpoints, a.ops, a.rt_iters, a.rt_warmup)
            sides = [("python", lambda: python_side(*args)),
                     ("cpp", lambda: cpp_side(a.cpp, *args))]
            if r % 2:
                sides.reverse()
            res = {name: run() for name, run in sides}
            py, cpp = res["python"], res["cpp"]
            if not (py["dispatch_ok"] and cpp["dispatch_ok"]):
                sys.exit("a dispatch run ended with the wrong value")
            d = py["dispatch_ops_per_s"] / cpp["dispatch_ops_per_s"]
            rt = py["roundtrip_median_us"] / cpp["roundtrip_median_us"]
            ratios["dispatch"].append(d)
            ratios["roundtrip"].append(rt)
            print(f"round {r + 1}: dispatch python {py['dispatch_ops_per_s'] / 1e6:.3f} M/s, "
                  f"C++ {cpp['dispatch_ops_per_s'] / 1e6:.3f} M/s, ratio {d:.2f}; round trip "
                  f"python {py['roundtrip_median_us']:.0f} us (p99 {py['roundtrip_p99_us']:.0f}), "
                  f"C++ {cpp['roundtrip_median_us']:.0f} us (p99 {cpp['roundtrip_p99_us']:.0f}), "
                  f"ratio {rt:.2f}; item() alone python {py['item_median_us']:.0f} us, C++ "
                  f"{cpp['item_median_us']:.0f} us", flush=True)
    finally:
        workers.stop()
    for name, goal in (("dispatch", ">= 0.5"), ("roundtrip", "<= 1.2")):
        v = ratios[name]
        print(f"{name} python/C++: median {statistics.median(v):.2f} "
              f"[{min(v):.2f}-{max(v):.2f}] over {len(v)} rounds (goal {goal})")


if __name__ == "__main__":
    main()
