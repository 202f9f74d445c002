"""Issue 42: dtr's CPU kernels against torch CPU's own (ATen) kernels, in the same run, on
transformer-sized float32 inputs (GPT-2 small: B*T = 8*512 = 4096 token rows, D = 768).

  layer_norm  x (4096, 768), weight and bias (768), eps 1e-5, over the last dim
  softmax     attention scores (8, 12, 256, 256) along the last dim
  gelu        (4096, 3072), the exact erf form
  emb_bwd     the dense gradient of an embedding 50257 x 768 from 4096 indices
              (dtr.local.embedding_dense_backward / aten::embedding_dense_backward)
  sdpa        causal scaled dot product attention, q, k, v (4, 12, 256, 64). torch 1.13 has
              no F.scaled_dot_product_attention, so torch's side is its math path composed
              of ops: matmul(q, k^T) * scale, masked_fill(causal, -inf), softmax(-1), matmul v.
              dtr's side is dtr.nn.functional.scaled_dot_product_attention when it exists and
              takes LocalTensors, else the same composition of dtr ops (the output says which).

dtr's side runs on LocalTensors (dtr.local: the CPU kernels a worker runs, no network),
made with dtr.local.from_numpy (zero-copy) from the same numpy arrays torch.from_numpy wraps.
Both contestants allocate a fresh output per call. Results are checked against each other
(np.allclose); the script exits 1 when they disagree, not when a goal is missed.

Threads: dtr's intra-op pool takes $DTR_NUM_THREADS (read once, at the first parallel
kernel; tensor/parallel.cpp), which this script sets before importing dtr; torch gets
torch.set_num_threads with the same N (--threads, default: the machine's core count).

Timing: warm-up reps, then reps interleaved one by one with the order alternating
(dtr, torch, torch, dtr, ...), enough for about --min-time s per contestant per op; the median
time per call of each, and the ratio torch_time / dtr_time (>= 1: dtr as fast or faster).
--runs N repeats the whole measurement and prints, per op, the median ratio and its
[min-max] over the runs, and whether the goal (>= 0.8) is met, as a markdown table.

Run: PYTHONPATH=build-dev/python /usr/bin/python3 bench/aten_ops_vs_torch.py --runs 3
"""
import argparse
import math
import os
import platform
import subprocess
import sys
import time

GOAL = 0.8


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=1, help="whole measurements (default 1)")
    p.add_argument("--reps", type=int, default=0,
                   help="timed reps per contestant per op (default: enough for --min-time)")
    p.add_argument("--min-time", type=float, default=0.3,
                   help="seconds per contestant per op when --reps is not given (default 0.3)")
    p.add_argument("--warmup", type=int, default=3, help="warm-up reps each (default 3)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                   help="threads for both (default: the machine's cores, %d)" % (os.cpu_count() or 1))
    p.add_argument("--quick", action="store_true", help="small sizes, short timing: a smoke test")
    p.add_argument("--ops", default="layer_norm,softmax,gelu,emb_bwd,sdpa",
                   help="comma-separated subset of layer_norm,softmax,gelu,emb_bwd,sdpa")
    a = p.parse_args()
    if a.quick:
        a.min_time = min(a.min_time, 0.02)
        a.warmup = min(a.warmup, 1)
    return a


ARGS = parse_args()
# Before dtr is imported: the pool's size is fixed at its first use.
_env_threads_before = os.environ.get("DTR_NUM_THREADS")
os.environ["DTR_NUM_THREADS"] = str(ARGS.threads)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import dtr  # noqa: E402,F401
import dtr.local as L  # noqa: E402
import dtr.nn.functional as DF  # noqa: E402

TORCH_DEFAULT_THREADS = torch.get_num_threads()
torch.set_num_threads(ARGS.threads)


def sizes(quick):
    if quick:
        return dict(rows=256, d=128, ffn=512, sm=(2, 2, 64, 64), vocab=1000, attn=(1, 2, 64, 16))
    return dict(rows=8 * 512, d=768, ffn=3072, sm=(8, 12, 256, 256), vocab=50257,
                attn=(4, 12, 256, 64))


def fmt_shape(s):
    return "\u00d7".join(str(v) for v in s)


class Op:
    """One contestant pair: dtr_fn() and torch_fn() each return a fresh output."""

    def __init__(self, name, figure, dtr_fn, torch_fn, to_np_dtr, to_np_torch, rtol, atol,
                 note=""):
        self.name, self.figure = name, figure
        self.dtr_fn, self.torch_fn = dtr_fn, torch_fn
        self.to_np_dtr, self.to_np_torch = to_np_dtr, to_np_torch
        self.rtol, self.atol, self.note = rtol, atol, note


def build_ops(sz, wanted):
    rng = np.random.default_rng(42)
    ops = []
    f32 = np.float32

    def dnp(t):
        return np.asarray(t.numpy())

    def tnp(t):
        return t.numpy()

    if "layer_norm" in wanted:
        x = rng.standard_normal((sz["rows"], sz["d"]), dtype=f32)
        w = (1.0 + 0.1 * rng.standard_normal(sz["d"], dtype=f32)).astype(f32)
        b = (0.1 * rng.standard_normal(sz["d"], dtype=f32)).astype(f32)
        lx, lw, lb = L.from_numpy(x), L.from_numpy(w), L.from_numpy(b)
        tx, tw, tb = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b)
        d = sz["d"]
        ops.append(Op("layer_norm", "layer_norm (%s) f32, weight and bias, last dim"
                      % fmt_shape(x.shape),
                      lambda: lx.layer_norm(lw, lb, 1e-5),
                      lambda: torch.nn.functional.layer_norm(tx, (d,), tw, tb, 1e-5),
                      dnp, tnp, rtol=1e-4, atol=1e-4))

    if "softmax" in wanted:
        s = (2.0 * rng.standard_normal(sz["sm"], dtype=f32)).astype(f32)
        ls, ts = L.from_numpy(s), torch.from_numpy(s)
        ops.append(Op("softmax", "softmax (%s) f32, last dim" % fmt_shape(s.shape),
                      lambda: ls.softmax(-1), lambda: torch.softmax(ts, -1),
                      dnp, tnp, rtol=1e-4, atol=1e-6))

    if "gelu" in wanted:
        g = rng.standard_normal((sz["rows"], sz["ffn"]), dtype=f32)
        lg, tg = L.from_numpy(g), torch.from_numpy(g)
        ops.append(Op("gelu", "gelu (%s) f32, exact (erf)" % fmt_shape(g.shape),
                      lambda: lg.gelu(), lambda: torch.nn.functional.gelu(tg),
                      dnp, tnp, rtol=1e-5, atol=1e-6))

    if "emb_bwd" in wanted:
        grad = rng.standard_normal((sz["rows"], sz["d"]), dtype=f32)
        idx = rng.integers(0, sz["vocab"], size=sz["rows"], dtype=np.int64)
        lgr, lid = L.from_numpy(grad), L.from_numpy(idx)
        tgr, tid = torch.from_numpy(grad), torch.from_numpy(idx)
        nw = sz["vocab"]
        ops.append(Op("emb_bwd", "embedding backward, dense: %d indices, %s \u2192 (%s) f32"
                      % (sz["rows"], fmt_shape(grad.shape), fmt_shape((nw, sz["d"]))),
                      lambda: L.embedding_dense_backward(lgr, lid, nw),
                      lambda: torch.ops.aten.embedding_dense_backward(tgr, tid, nw, -1, False),
                      dnp, tnp, rtol=1e-5, atol=1e-5))

    if "sdpa" in wanted:
        B, H, T, E = sz["attn"]
        q, k, v = (rng.standard_normal((B, H, T, E), dtype=f32) for _ in range(3))
        mask = np.triu(np.ones((T, T), dtype=bool), 1)  # True above the diagonal: masked
        scale = 1.0 / math.sqrt(E)
        lq, lk, lv, lm = (L.from_numpy(a) for a in (q, k, v, mask))
        tq, tk, tv, tm = (torch.from_numpy(a) for a in (q, k, v, mask))

        def dtr_composed():
            s = lq.matmul(lk.transpose(-2, -1)) * scale
            return s.masked_fill(lm, float("-inf")).softmax(-1).matmul(lv)

        def torch_composed():
            s = torch.matmul(tq, tk.transpose(-2, -1)) * scale
            return torch.matmul(s.masked_fill(tm, float("-inf")).softmax(-1), tv)

        dtr_fn, how = dtr_composed, "dtr: composed of dtr ops (no dtr F.sdpa yet)"
        f = getattr(DF, "scaled_dot_product_attention", None)
        if f is not None:
            try:
                out = f(lq, lk, lv, is_causal=True)
                if np.allclose(dnp(out), tnp(torch_composed()), rtol=1e-3, atol=1e-4):
                    dtr_fn = lambda: f(lq, lk, lv, is_causal=True)  # noqa: E731
                    how = "dtr: dtr.nn.functional.scaled_dot_product_attention"
                else:
                    how = ("dtr: composed of dtr ops (dtr F.sdpa exists but disagreed with "
                           "torch's math path)")
            except Exception as e:  # noqa: BLE001 - any refusal falls back to the composition
                how = "dtr: composed of dtr ops (dtr F.sdpa refused LocalTensors: %s)" % (
                    str(e).splitlines()[0][:100] if str(e) else type(e).__name__)
        how += "; torch 1.13: its math path composed of ops (no F.scaled_dot_product_attention)"
        if "BLAS_INFO=generic" in torch.__config__.show():
            how += ("; torch's matmuls here run on the system's generic BLAS (BLAS_INFO=generic:"
                    " Debian's netlib reference BLAS unless an alternative is installed), so"
                    " the ratio mostly compares GEMMs")
        ops.append(Op("sdpa", "causal sdpa, q k v (%s) f32" % fmt_shape((B, H, T, E)),
                      dtr_fn, torch_composed, dnp, tnp, rtol=1e-3, atol=1e-4, note=how))
    return ops


def check(op):
    a = op.to_np_dtr(op.dtr_fn())
    b = op.to_np_torch(op.torch_fn())
    if a.shape != b.shape:
        return "shape %s != torch's %s" % (a.shape, b.shape)
    if not np.allclose(a, b, rtol=op.rtol, atol=op.atol):
        err = np.abs(a.astype(np.float64) - b.astype(np.float64))
        return "max abs diff %.3g (rtol %g, atol %g)" % (np.nanmax(err), op.rtol, op.atol)
    return None


def timed(fn):
    t0 = time.perf_counter()
    r = fn()
    t1 = time.perf_counter()
    del r
    return t1 - t0


def measure(op):
    """(median dtr s/call, median torch s/call, reps)."""
    warm_d, warm_t = [], []
    for i in range(max(ARGS.warmup, 1)):
        if i % 2 == 0:
            warm_d.append(timed(op.dtr_fn))
            warm_t.append(timed(op.torch_fn))
        else:
            warm_t.append(timed(op.torch_fn))
            warm_d.append(timed(op.dtr_fn))
    if ARGS.reps > 0:
        reps = ARGS.reps
    else:
        fastest = max(min(min(warm_d), min(warm_t)), 1e-7)
        reps = int(min(max(math.ceil(ARGS.min_time / fastest), 7), 100000))
    td, tt = [], []
    for i in range(reps):
        if i % 2 == 0:
            td.append(timed(op.dtr_fn))
            tt.append(timed(op.torch_fn))
        else:
            tt.append(timed(op.torch_fn))
            td.append(timed(op.dtr_fn))
    return float(np.median(td)), float(np.median(tt)), reps


def sh(cmd):
    try:
        env = dict(os.environ, GIT_OPTIONAL_LOCKS="0")
        return subprocess.run(cmd, capture_output=True, text=True, cwd=os.path.dirname(
            os.path.abspath(__file__)), env=env, timeout=20).stdout.strip()
    except Exception:  # noqa: BLE001
        return ""


def ms(s):
    return "%.3f" % (s * 1e3) if s < 0.01 else "%.2f" % (s * 1e3)


def main():
    wanted = set(ARGS.ops.split(","))
    sz = sizes(ARGS.quick)
    ops = build_ops(sz, wanted)

    commit = sh(["git", "rev-parse", "--short", "HEAD"]) or "not recorded"
    dirty = bool(sh(["git", "status", "--porcelain", "--untracked-files=no"]))
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    print("# dtr CPU kernels vs torch CPU (ATen) kernels, same run (issue 42)")
    print("python %s, torch %s, numpy %s; %s, %d cores; load average %.2f %.2f %.2f"
          % (platform.python_version(), torch.__version__, np.__version__, platform.machine(),
             os.cpu_count() or 0, *load))
    print("threads: torch default %d -> torch.set_num_threads(%d), now %d; dtr DTR_NUM_THREADS=%s"
          " (was %s)" % (TORCH_DEFAULT_THREADS, ARGS.threads, torch.get_num_threads(),
                         os.environ["DTR_NUM_THREADS"],
                         _env_threads_before if _env_threads_before is not None else "unset"))
    print("commit %s%s; sizes: %s; runs %d, warm-up %d, %s"
          % (commit, " (tree has uncommitted changes)" if dirty else "",
             "quick" if ARGS.quick else "full", ARGS.runs, ARGS.warmup,
             "reps %d" % ARGS.reps if ARGS.reps else "reps for >= %.2f s each" % ARGS.min_time))

    bad = False
    for op in ops:
        err = check(op)
        if err:
            print("WRONG: %s: dtr disagrees with torch: %s" % (op.name, err))
            bad = True
        else:
            print("ok: %s matches torch (rtol %g, atol %g)" % (op.name, op.rtol, op.atol))
        if op.note:
            print("  %s: %s" % (op.name, op.note))
    if bad:
        sys.exit(1)

    results = {op.name: [] for op in ops}  # name -> [(dtr, torch, ratio, reps)]
    for r in range(ARGS.runs):
        print("\n## run %d/%d" % (r + 1, ARGS.runs))
        print("| op | reps | dtr ms/call | torch ms/call | torch/dtr |")
        print("|---|---|---|---|---|")
        for op in ops:
            d, t, reps = measure(op)
            results[op.name].append((d, t, t / d, reps))
            print("| %s | %d | %s | %s | %.3f |" % (op.name, reps, ms(d), ms(t), t / d))
            sys.stdout.flush()

    print("\n## summary over %d run%s: ratio torch_time / dtr_time (>= 1: dtr as fast or "
          "faster), median [min\u2013max]" % (ARGS.runs, "" if ARGS.runs == 1 else "s"))
    met_all = True
    for op in ops:
        rs = [x[2] for x in results[op.name]]
        m = float(np.median(rs))
        met = m >= GOAL
        met_all &= met
        print("%-10s %.3f [%.3f\u2013%.3f]  goal >= %.1f: %s"
              % (op.name, m, min(rs), max(rs), GOAL, "met" if met else "NOT MET"))
    print("all goals met: %s" % ("yes" if met_all else "no"))
    if hasattr(os, "getloadavg"):
        print("load average at the end: %.2f %.2f %.2f" % os.getloadavg())

    print("\n## markdown (docs/performance.md)\n")
    print("| figure | dtr | baseline (same run) | ratio | goal | machine | commit | cmd |")
    print("|---|---|---|---|---|---|---|---|")
    for op in ops:
        rows = results[op.name]
        ds = [x[0] for x in rows]
        ts = [x[1] for x in rows]
        rs = [x[2] for x in rows]
        m = float(np.median(rs))
        met = m >= GOAL
        rng = lambda v: ms(min(v)) if len(v) == 1 else "%s\u2013%s" % (ms(min(v)), ms(max(v)))  # noqa: E731,E501
        ratio = "%.2f" % m if len(rs) == 1 else "%.2f [%.2f\u2013%.2f]" % (m, min(rs), max(rs))
        if met:
            ratio = "**%s**" % ratio if len(rs) == 1 else "**%.2f** [%.2f\u2013%.2f]" % (
                m, min(rs), max(rs))
        print("| %s | %s ms | torch %s, %d thread%s: %s ms | %s \u2191 | \u2265 %.1f: %s | %s | %s | A1 |"
              % (op.figure + (" (torch: math path of ops)" if op.name == "sdpa" else ""),
                 rng(ds), torch.__version__.split("a")[0], ARGS.threads,
                 "" if ARGS.threads == 1 else "s", rng(ts), ratio, GOAL,
                 "met" if met else "not met", "VM" if (os.cpu_count() or 0) <= 2 else platform.node(),
                 commit + ("+" if dirty else ""), ))
    print("\n- A1: `PYTHONPATH=build-dev/python /usr/bin/python3 bench/aten_ops_vs_torch.py %s`"
          % " ".join(sys.argv[1:]))
    for op in ops:
        if op.note:
            print("- %s: %s" % (op.name, op.note))


if __name__ == "__main__":
    main()
