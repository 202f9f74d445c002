#!/usr/bin/env python3
"""Summarise (and merge) dtr timeline traces: docs/observability.md.

A trace is the JSON file dtr::stop_trace(path) or DTR_TRACE=path writes (Chrome's trace
event format; open it in https://ui.perfetto.dev or chrome://tracing). This prints, in
text:

  top ops by time     slices of the nodes' streams by name: count, total, mean, max
  waits               time streams spent waiting (event waits, copies' arrivals, inputs
                      made on other streams), by node and stream, the longest first
  idle fractions      per stream track: the share of the trace's span with nothing running
  arrows              cross-node arrows (copies, notifications), and any left unconnected

Usage:
  trace_summary.py TRACE.json [MORE.json ...] [--merge OUT.json] [--top N]

With several files (traces of separate runs, or of the ranks of one job) the summary
covers all of them, each file's processes keeping their own rows; --merge writes them
into one trace (processes renumbered, their names prefixed with the file's name) that
Perfetto opens as one timeline.
"""
import argparse
import json
import os
import sys
from collections import defaultdict


def load(paths):
    """The events of every file, pids renumbered per file when there are several."""
    events = []
    lost = []
    for index, path in enumerate(paths):
        with open(path) as f:
            doc = json.load(f)
        if isinstance(doc, list):
            doc = {"traceEvents": doc}
        other = doc.get("otherData", {})
        for node in other.get("nodes", []):
            if node.get("lost"):
                lost.append((os.path.basename(path), node.get("node")))
        offset = index * 1000 if len(paths) > 1 else 0
        label = os.path.basename(path)
        for e in doc.get("traceEvents", []):
            e = dict(e)
            e["pid"] = e.get("pid", 0) + offset
            if len(paths) > 1 and e.get("ph") == "M" and e.get("name") == "process_name":
                e["args"] = {"name": "%s: %s" % (label, e.get("args", {}).get("name", ""))}
            events.append(e)
    return events, lost


def names_of(events):
    processes, tracks = {}, {}
    for e in events:
        if e.get("ph") != "M":
            continue
        if e.get("name") == "process_name":
            processes[e["pid"]] = e["args"]["name"]
        elif e.get("name") == "thread_name":
            tracks[(e["pid"], e["tid"])] = e["args"]["name"]
    return processes, tracks


def busy_time(slices):
    """The union of [ts, ts + dur) of the slices (nested ones count once)."""
    total, end = 0.0, None
    for ts, dur in sorted(slices):
        if end is None or ts >= end:
            total += dur
            end = ts + dur
        elif ts + dur > end:
            total += ts + dur - end
            end = ts + dur
    return total


def ms(us):
    return "%.3f ms" % (us / 1000.0)


def summarise(events, lost, top, out):
    processes, tracks = names_of(events)
    slices = [e for e in events if e.get("ph") == "X"]
    if not slices:
        print("no slices in the trace", file=out)
        return
    begin = min(e["ts"] for e in slices)
    end = max(e["ts"] + e["dur"] for e in slices)
    span = max(end - begin, 1e-9)
    node_slices = [e for e in slices if not processes.get(e["pid"], "").startswith("master")
                   and "master (" not in processes.get(e["pid"], "")]
    print("trace: %d slices over %s, %d processes" % (len(slices), ms(span), len(processes)),
          file=out)
    for node in lost:
        print("  lost: %s node %s (its slices are missing)" % node, file=out)

    print("\ntop ops by time (the nodes' streams):", file=out)
    by_name = defaultdict(list)
    for e in node_slices:
        if e.get("cat") != "flow":
            by_name[e["name"]].append(e["dur"])
    rows = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:top]
    print("  %-22s %8s %14s %12s %12s" % ("name", "count", "total", "mean", "max"), file=out)
    for name, durs in rows:
        print("  %-22s %8d %14s %9.3f us %9.3f us" % (name, len(durs), ms(sum(durs)),
                                                        sum(durs) / len(durs), max(durs)), file=out)

    print("\nwaits (by node and stream, longest first):", file=out)
    waits = defaultdict(float)
    for e in node_slices:
        args = e.get("args", {})
        waited = args.get("waited_us", 0.0)
        if e.get("cat") == "wait":
            waited = max(waited, e["dur"])
        if waited > 0:
            waits[(e["pid"], e["tid"], e["name"])] += waited
    if not waits:
        print("  none", file=out)
    for (pid, tid, name), w in sorted(waits.items(), key=lambda kv: -kv[1])[:top]:
        print("  %-40s %-24s %s" % ("%s, %s" % (processes.get(pid, pid), tracks.get((pid, tid), tid)),
                                    name, ms(w)), file=out)

    print("\nidle fractions (per track, of the trace's %s):" % ms(span), file=out)
    per_track = defaultdict(list)
    for e in slices:
        per_track[(e["pid"], e["tid"])].append((e["ts"], e["dur"]))
    for (pid, tid) in sorted(per_track):
        busy = busy_time(per_track[(pid, tid)])
        print("  %-40s %-42s idle %5.1f%%  (busy %s)" % (
            processes.get(pid, pid), tracks.get((pid, tid), tid), 100.0 * (1 - busy / span),
            ms(busy)), file=out)

    starts = defaultdict(int)
    finishes = defaultdict(int)
    for e in events:
        if e.get("ph") == "s":
            starts[(e["pid"] // 1000, e["id"])] += 1
        elif e.get("ph") == "f":
            finishes[(e["pid"] // 1000, e["id"])] += 1
    unmatched = set(starts) ^ set(finishes)
    print("\narrows: %d cross-node arrows, %d unconnected" % (len(set(starts) & set(finishes)),
                                                             len(unmatched)), file=out)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("traces", nargs="+", help="trace files (JSON)")
    p.add_argument("--merge", metavar="OUT", help="write the traces merged into one file")
    p.add_argument("--top", type=int, default=15, help="rows per table (default 15)")
    args = p.parse_args(argv)
    events, lost = load(args.traces)
    if args.merge:
        with open(args.merge, "w") as f:
            json.dump({"traceEvents": events, "displayTimeUnit": "ms",
                       "otherData": {"producer": "dtr trace_summary.py --merge",
                                     "sources": args.traces}}, f)
        print("merged %d events into %s" % (len(events), args.merge))
    summarise(events, lost, args.top, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
