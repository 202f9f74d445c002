#!/usr/bin/python3
"""Markdown tables of dtr's collectives against the peer baselines (gloo, OpenMPI).

Reads `RESULT {json}` lines (the format of bench/collectives_bench.cpp and of
../shared/bench-peers) from every file given, takes the median over repeated runs of each
(suite, bench, transport, world, bytes), and prints, per op and world size, one row per
tool with bandwidth (median / p99 time) at each size, then the goal checks of issues 5 and
17.

usage: collectives_table.py RESULT_FILE... > table.md
"""
import json
import statistics
import sys
from collections import defaultdict

SIZES = [4, 4096, 256 * 1024, 4 << 20, 64 << 20]
NAMES = {4: "4 B", 4096: "4 KiB", 256 * 1024: "256 KiB", 4 << 20: "4 MiB", 16 << 20: "16 MiB",
         64 << 20: "64 MiB"}
TOOLS = [  # (suite, transport, label)
    ("dtr-pg", "shm", "dtr zmq shm"),
    ("dtr-pg", "tcp", "dtr zmq tcp"),
    ("dtr-pg", "ipc", "dtr zmq ipc"),
    ("dtr-pg", "gloo", "dtr gloo"),
    ("dtr-pg", "mpi-tcp", "dtr mpi tcp"),
    ("dtr-pg", "mpi-shm", "dtr mpi shm"),
    ("gloo-cpp", "tcp(gloo)", "gloo (C++) tcp"),
    ("torch-gloo", "tcp(gloo)", "torch gloo tcp"),
    ("mpi", "tcp", "OpenMPI tcp"),
    ("mpi", "shm(vader)", "OpenMPI shm"),
]

groups = defaultdict(list)
for path in sys.argv[1:]:
    for line in open(path, errors="replace"):
        i = line.find("RESULT {")
        if i < 0:
            continue
        try:
            r = json.loads(line[i + 7:])
        except json.JSONDecodeError:
            continue
        groups[(r["suite"], r["bench"], r["transport"], r["world"], r["bytes"])].append(r)


def get(suite, bench, tr, world, nbytes):
    rs = groups.get((suite, bench, tr, world, nbytes))
    if not rs:
        return None
    return dict(med=statistics.median(r["median_us"] for r in rs),
                p99=statistics.median(r["p99_us"] for r in rs),
                rate=statistics.median(r["rate"] for r in rs), runs=len(rs))


def fus(x):
    if x >= 10000:
        return f"{x / 1000:.1f} ms"
    if x >= 100:
        return f"{x:.0f} µs"
    return f"{x:.1f} µs"


def frate(x):
    return f"{x:.3g}" if x >= 0.01 else f"{x:.1e}"


def table(bench, title):
    worlds = sorted({k[3] for k in groups if k[1] == bench})
    if not worlds:
        return
    print(f"\n**{title}** — cell: GB/s (median / p99 time per op)\n")
    print("| tool | w | " + " | ".join(NAMES[s] for s in SIZES) + " |")
    print("|---|---|" + "---|" * len(SIZES))
    for w in worlds:
        for suite, tr, label in TOOLS:
            cells = []
            for s in SIZES:
                g = get(suite, bench, tr, w, s)
                cells.append("—" if g is None else
                             f"{frate(g['rate'])} ({fus(g['med'])} / {fus(g['p99'])})")
            if any(c != "—" for c in cells):
                print(f"| {label} | {w} | " + " | ".join(cells) + " |")


def print_rows(title, columns, rows):
    """A titled markdown table of `rows` (already formatted), when there are any."""
    if not rows:
        return
    print(f"\n{title}\n")
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    print("\n".join(rows))


def ratio(a, b):
    return "—" if a is None or b is None else f"{a / b:.2f}x"


table("all_reduce", "all_reduce (SUM, float32), busbw = 2(n-1)/n · bytes / time")
table("broadcast", "broadcast (root 0), busbw = bytes / time on the root")
table("all_gather", "all_gather (bytes = gathered output), busbw = (n-1)/n · bytes / time")
table("sendrecv_pingpong", "send/recv ping-pong 0↔1, rate = 2 · bytes / round trip")



def best_gloo(world, nbytes):
    """The faster of gloo from C++ and through torch (the stricter reference)."""
    gs = [g for g in (get("gloo-cpp", "all_reduce", "tcp(gloo)", world, nbytes),
                      get("torch-gloo", "all_reduce", "tcp(gloo)", world, nbytes)) if g]
    return min(gs, key=lambda g: g["med"]) if gs else None


print("\n**Goals (issue 5), all_reduce** — gloo: the faster of gloo (C++) and torch gloo\n")
print("| w | dtr transport | goal | dtr | gloo | OpenMPI tcp | dtr / gloo | dtr / MPI | met |")
print("|---|---|---|---|---|---|---|---|---|")
for w in sorted({k[3] for k in groups if k[0] == "dtr-pg" and k[1] == "all_reduce"}):
    for tr in ("tcp", "ipc"):
        if get("dtr-pg", "all_reduce", tr, w, 4) is None:
            continue
        for s in (4 << 20, 64 << 20):
            d = get("dtr-pg", "all_reduce", tr, w, s)
            g = best_gloo(w, s)
            m = get("mpi", "all_reduce", "tcp", w, s)
            if d is None:
                continue
            met = g is not None and m is not None and d["rate"] >= 1.2 * g["rate"] and \
                d["rate"] >= m["rate"]
            print(f"| {w} | {tr} | busbw {NAMES[s]} ≥ 1.2× gloo, ≥ MPI-tcp | "
                  f"{frate(d['rate'])} GB/s | {frate(g['rate']) + ' GB/s' if g else '—'} | "
                  f"{frate(m['rate']) + ' GB/s' if m else '—'} | "
                  f"{ratio(d['rate'], g['rate'] if g else None)} | "
                  f"{ratio(d['rate'], m['rate'] if m else None)} | {'yes' if met else 'no'} |")
        d = get("dtr-pg", "all_reduce", tr, w, 4)
        g = best_gloo(w, 4)
        m = get("mpi", "all_reduce", "tcp", w, 4)
        met = g is not None and d["med"] <= g["med"] / 2
        print(f"| {w} | {tr} | 4 B time ≤ ½ gloo's | {fus(d['med'])} | "
              f"{fus(g['med']) if g else '—'} | {fus(m['med']) if m else '—'} | "
              f"{ratio(d['med'], g['med'] if g else None)} (time) | "
              f"{ratio(d['med'], m['med'] if m else None)} (time) | {'yes' if met else 'no'} |")
        worst = max(((get("dtr-pg", b, tr, w, s) or {}).get("p99", 0) /
                     (get("dtr-pg", b, tr, w, s) or {}).get("med", 1), b, s)
                    for b in ("all_reduce", "broadcast", "all_gather", "sendrecv_pingpong")
                    for s in SIZES)
        print(f"| {w} | {tr} | p99 ≤ 3× median, every op and size | worst {worst[0]:.2f}× "
              f"({worst[1]} {NAMES[worst[2]]}) | — | — | — | — | "
              f"{'yes' if worst[0] <= 3 else 'no'} |")


# Issue 17: dtr's gloo and mpi backends against the same libraries called directly.
WRAPPED = [  # (dtr transport, library suite, library transport, label)
    ("gloo", "gloo-cpp", "tcp(gloo)", "gloo (C++)"),
    ("mpi-tcp", "mpi", "tcp", "OpenMPI tcp"),
    ("mpi-shm", "mpi", "shm(vader)", "OpenMPI shm"),
]
rows = []
for bench in ("all_reduce", "broadcast", "sendrecv_pingpong"):
    for w in sorted({k[3] for k in groups if k[1] == bench}):
        for tr, suite, ltr, label in WRAPPED:
            for s in SIZES:
                d = get("dtr-pg", bench, tr, w, s)
                lib = get(suite, bench, ltr, w, s)
                if d is None or lib is None:
                    continue
                r = d["rate"] / lib["rate"]
                rows.append(f"| {bench} | {w} | {label} | {NAMES[s]} | {frate(d['rate'])} | "
                            f"{frate(lib['rate'])} | {r:.2f}x | {'yes' if r >= 0.95 else 'no'} |")
print_rows("**Goals (issue 17), the wrapper costs nothing** — dtr's backend / the library "
           "called directly, rate (≥ 0.95×)",
           ["op", "w", "library", "size", "dtr", "library", "ratio", "met"], rows)


# Issue 17: the same-host path against gloo and OpenMPI's shared memory; the sockets.
rows = []
for w in sorted({k[3] for k in groups if k[0] == "dtr-pg" and k[2] == "shm"}):
    d = get("dtr-pg", "all_reduce", "shm", w, 4)
    g = best_gloo(w, 4)
    m = get("mpi", "all_reduce", "shm(vader)", w, 4)
    if d is not None:
        met = g is not None and m is not None and d["med"] <= 0.1 * g["med"] and \
            d["med"] <= 10 * m["med"]
        rows.append(f"| {w} | 4 B all_reduce time ≤ 0.1× gloo's, ≤ 10× OpenMPI-shm's | "
                    f"{fus(d['med'])} | {fus(g['med']) if g else '—'} | "
                    f"{fus(m['med']) if m else '—'} | {ratio(d['med'], g['med'] if g else None)}"
                    f" / {ratio(d['med'], m['med'] if m else None)} (time) | "
                    f"{'yes' if met else 'no'} |")
    d = get("dtr-pg", "all_reduce", "shm", w, 4 << 20)
    m = get("mpi", "all_reduce", "shm(vader)", w, 4 << 20)
    g = best_gloo(w, 4 << 20)
    if d is not None:
        met = m is not None and d["rate"] >= m["rate"]
        rows.append(f"| {w} | 4 MiB all_reduce busbw ≥ 1.0× OpenMPI-shm | {frate(d['rate'])} GB/s"
                    f" | {frate(g['rate']) + ' GB/s' if g else '—'} | "
                    f"{frate(m['rate']) + ' GB/s' if m else '—'} | "
                    f"{ratio(d['rate'], m['rate'] if m else None)} (vs MPI) | "
                    f"{'yes' if met else 'no'} |")
    worst = max(((get("dtr-pg", b, "shm", w, s) or {}).get("p99", 0) /
                 (get("dtr-pg", b, "shm", w, s) or {}).get("med", 1), b, s)
                for b in ("all_reduce", "broadcast", "all_gather") for s in SIZES)
    rows.append(f"| {w} | p99 ≤ 3× median, every op and size (shm) | worst {worst[0]:.2f}× "
                f"({worst[1]} {NAMES[worst[2]]}) | — | — | — | {'yes' if worst[0] <= 3 else 'no'} |")
    d = get("dtr-pg", "all_reduce", "tcp", w, 4 << 20)
    m = get("mpi", "all_reduce", "tcp", w, 4 << 20)
    if d is not None:
        met = m is not None and d["rate"] >= m["rate"]
        rows.append(f"| {w} | sockets: 4 MiB busbw (dtr tcp) ≥ 1.0× OpenMPI-tcp | "
                    f"{frate(d['rate'])} GB/s | — | {frate(m['rate']) + ' GB/s' if m else '—'} | "
                    f"{ratio(d['rate'], m['rate'] if m else None)} | {'yes' if met else 'no'} |")
    for s in (4 << 20, 16 << 20, 64 << 20):
        d = get("dtr-pg", "all_reduce", "tcp", w, s)
        g = best_gloo(w, s)
        if d is not None and g is not None:
            met = d["rate"] >= 1.2 * g["rate"]
            rows.append(f"| {w} | sockets: {NAMES.get(s, str(s))} busbw (dtr tcp) ≥ 1.2× gloo | "
                        f"{frate(d['rate'])} GB/s | {frate(g['rate'])} GB/s | — | "
                        f"{ratio(d['rate'], g['rate'])} | {'yes' if met else 'no'} |")
print_rows("**Goals (issue 17), same-host path and sockets, all_reduce** — gloo: the faster of "
           "gloo (C++) and torch gloo", ["w", "goal", "dtr", "gloo", "OpenMPI", "ratio", "met"],
           rows)
