#!/usr/bin/env python3
"""How much of torch's core ATen opset a dtr worker runs (issue 42).

Reads the core ATen overloads from torch's own list, the entries of native_functions.yaml
tagged `core` (torchgen ships the file in every torch wheel, at
torchgen/packaged/ATen/native/native_functions.yaml), and dtr's own op table and tensor
methods from the built Python module, then prints each overload as covered or missing and
the count. An overload is covered when dtr's table has an op of its name, or dtr's remote
Tensor has a method of that name, or the dtr module or dtr.nn.functional a function of that
name, that runs on the worker (a composition of table ops, such as split_with_sizes,
repeat or embedding), under the ATen-to-dtr renames below where the names differ; the
overloads listed in NOT_COVERED (none today) would take an argument dtr lacks: missing.
Metadata queries (sym_size, sym_stride, ...) are covered by the Tensor methods the master
answers from its own record of the tensor, without a round trip.

Usage: PYTHONPATH=build/python scripts/aten_coverage.py [--yaml PATH] [--missing]
  --yaml PATH  native_functions.yaml (default: the one of the importable torchgen)
  --missing    print only the missing overloads
Exits 0; prints "covered N of M (P%)" last.
"""

import argparse
import os
import re
import sys

# ATen names that dtr spells differently (the same op, the same arguments).
RENAMES = {
    "_softmax": "softmax",
    "_log_softmax": "log_softmax",
    "_softmax_backward_data": "softmax_backward",
    "_log_softmax_backward_data": "log_softmax_backward",
    "_to_copy": "to",
    "native_dropout": "dropout",
    "nll_loss_forward": "nll_loss",
    "max_pool2d_with_indices": "max_pool2d_indices",
    "max_pool2d_with_indices_backward": "max_pool2d_backward",
    "mm": "matmul",
    "bmm": "matmul",
    "alias": "view",
    "_unsafe_view": "view",
    "amax": "max",
    "amin": "min",
    "full_like": "full",
    "expand_copy": "expand",
    "permute_copy": "permute",
    "view_copy": "view",
    "select_copy": "select",
    "slice_copy": "slice",
    "squeeze_copy": "squeeze",
    "unsqueeze_copy": "unsqueeze",
    "transpose_copy": "transpose",
    "scalar_tensor": "full",  # full of shape ()
    "native_layer_norm": "layer_norm",  # mean and rstd are not outputs: recomputed in backward
    # grad_input; grad_weight is layer_norm_weight_grad, grad_bias a sum of grad.
    "native_layer_norm_backward": "layer_norm_backward",
    "sort": "sort_indices",  # the values are gathered at the positions (x.sort)
    "_local_scalar_dense": "item",  # a sync point, as in torch
    # The functional forms of in-place ops: x.clone().copy_(src), x.clone().fill_(value).
    "copy": "copy_",
    "fill": "fill_",
    # dtr.nn.functional's pad with mode "reflect" / "replicate" (index_selects of positions
    # computed on the worker), interpolate (nearest: an index_select per dim; bilinear: two
    # per dim, weighted), adaptive_avg_pool*d, group_norm and batch_norm (dtr/nn.hpp).
    "reflection_pad1d": "pad",
    "reflection_pad2d": "pad",
    "reflection_pad3d": "pad",
    "replication_pad2d": "pad",
    "replication_pad3d": "pad",
    "upsample_nearest2d": "interpolate",
    "upsample_bilinear2d": "interpolate",
    "_adaptive_avg_pool2d": "adaptive_avg_pool2d",
    "_adaptive_avg_pool3d": "adaptive_avg_pool3d",
    "_adaptive_avg_pool2d_backward": "adaptive_avg_pool_backward",
    # (out, mean, rstd): dtr returns out; the backward recomputes the statistics from x.
    "native_group_norm": "group_norm",
    "native_group_norm_backward": "group_norm_backward",
    # With running statistics (training), without (no_stats), and in eval mode
    # (no_training): F.batch_norm's three cases.
    "_native_batch_norm_legit": "batch_norm",
    "_native_batch_norm_legit_no_training": "batch_norm",
    # Metadata, answered by the master.
    "sym_size": "size",
    "sym_stride": "stride",
    "sym_numel": "numel",
    "sym_storage_offset": "storage_offset",
    "sym_is_contiguous": "is_contiguous",
}

# Data-dependent ops: covered, as sync points (the values come to the master, as torch's
# nonzero synchronizes with the device); printed as such.
SYNC_POINTS = {"nonzero"}

# Overloads whose extra arguments dtr's op of that name does not take (div's rounding_mode
# is taken: x.div(y, rounding_mode=...) runs floor_divide or trunc_divide).
NOT_COVERED: set = set()


def core_overloads(path):
    """The "name.overload" of every entry tagged core, in file order."""
    text = open(path, encoding="utf-8").read()
    out = []
    # Entries are "- func: name.overload(args) -> ret" followed by their keys.
    for entry in re.split(r"\n(?=- func:)", text):
        m = re.match(r"- func: ([A-Za-z0-9_]+)(?:\.([A-Za-z0-9_]+))?\(", entry)
        if not m:
            continue
        tags = re.search(r"\n  tags: *(\[[^\]]*\]|[^\n]*)", entry)
        if tags and re.search(r"\bcore\b", tags.group(1)):
            out.append(f"{m.group(1)}.{m.group(2) or 'default'}")
    return out


def dtr_names():
    import dtr  # noqa: PLC0415 (needs PYTHONPATH)
    import dtr.nn.functional  # noqa: PLC0415
    table = {name for name, _, _, _ in dtr._dtr._op_table()}
    methods = {n for n in dir(dtr.Tensor) if not n.startswith("__")}
    functions = {n for n in dir(dtr) if callable(getattr(dtr, n)) and not n.startswith("_")}
    functions |= set(dtr.nn.functional.__all__)
    return table, methods, functions


def find_yaml():
    try:
        import torchgen  # noqa: PLC0415
    except ImportError:
        sys.exit("aten_coverage: no torchgen to import; pass --yaml PATH "
                 "(torchgen/packaged/ATen/native/native_functions.yaml of a torch wheel)")
    return os.path.join(os.path.dirname(torchgen.__file__),
                        "packaged", "ATen", "native", "native_functions.yaml")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--yaml")
    ap.add_argument("--missing", action="store_true")
    args = ap.parse_args()
    overloads = core_overloads(args.yaml or find_yaml())
    if not overloads:
        sys.exit("aten_coverage: no entry tagged core in the file: not torch's "
                 "native_functions.yaml?")
    table, methods, functions = dtr_names()
    covered = 0
    for overload in overloads:
        name = overload.split(".")[0]
        dtr_name = RENAMES.get(name, name)
        how = None
        if overload not in NOT_COVERED:
            if dtr_name in table:
                how = f"op {dtr_name}"
            elif dtr_name in methods:
                how = f"method {dtr_name}"
            elif dtr_name in functions:
                how = f"function {dtr_name}"
        covered += how is not None
        if how is None:
            print(f"missing  {overload}")
        elif not args.missing:
            sync = " (a sync point)" if name in SYNC_POINTS else ""
            print(f"covered  {overload:45s} {how}{sync}")
    print(f"covered {covered} of {len(overloads)} core ATen overloads "
          f"({100.0 * covered / len(overloads):.1f}%)")


if __name__ == "__main__":
    main()
