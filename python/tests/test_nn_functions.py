"""scatter_reduce and the compositions of issue 42 (dtr/nn.hpp, dtr/composite.hpp): padding
modes, adaptive average pooling, interpolation, group and batch normalization, scaled
dot-product attention, cross entropy, logsumexp, var_mean, amax/amin, index_add, eye,
randint, bernoulli, randperm and the sync points (nonzero, masked_select, x[mask]). Against
numpy's formulas here, and outputs and input gradients against torch (Debian's python3-torch
under /usr/bin/python3, skipped without it) in float32 and float64; on a worker, the same
bits as here."""

import json
import os
import subprocess
import tempfile

import numpy as np
import pytest

import dtr
import dtr.nn.functional as F
from dtr import local
from conftest import torch_python

RNG = np.random.default_rng(42)
ARRAYS = {
    "x3": RNG.standard_normal((2, 3, 5)),
    "x4": RNG.standard_normal((2, 4, 4, 5)),
    "x5": RNG.standard_normal((1, 2, 3, 4, 5)),
    "w": RNG.standard_normal(4),
    "b": RNG.standard_normal(4),
    "rm": RNG.standard_normal(4),
    "rv": RNG.random(4) + 0.5,
    "q": RNG.standard_normal((2, 2, 5, 4)),
    "k": RNG.standard_normal((2, 2, 6, 4)),
    "v": RNG.standard_normal((2, 2, 6, 3)),
    "amask": RNG.standard_normal((5, 6)),
    "bmask": np.tril(np.ones((5, 6), dtype=bool), 1),
    "idx": np.array([2, 0, 2]),
    "src3": RNG.standard_normal((2, 3, 5)),
    "cls": np.array([[0, 3, 1, 1, 2], [3, 3, 0, 2, 1]]),  # (N, d) targets of x4 (2, 4, ., 5)
    "cls2": np.array([[1, 3, -100, 0, 2], [2, 0, 0, -100, 1]]),
    "prob": RNG.random((2, 4, 4, 5)),
    "sidx": RNG.integers(0, 5, (2, 3, 4)),
    "ssrc": RNG.standard_normal((2, 3, 4)),
}
GRAD_OF = ("x3", "x4", "x5", "w", "b", "q", "k", "v", "src3", "ssrc")

# name -> expression over F and the arrays, spelled the same for dtr and torch.
CASES = {
    "reflect1d": "F.pad(x3, (2, 4), mode='reflect')",
    "reflect2d": "F.pad(x4, (1, 2, 3, 1), mode='reflect')",
    "reflect3d": "F.pad(x5, (1, 1, 2, 0, 1, 2), mode='reflect')",
    "replicate1d": "F.pad(x3, (3, 0), mode='replicate')",
    "replicate2d": "F.pad(x4, (2, 0, 1, 3), mode='replicate')",
    "replicate3d": "F.pad(x5, (0, 2, 1, 1, 3, 0), mode='replicate')",
    "circular1d": "F.pad(x3, (5, 2), mode='circular')",
    "circular2d": "F.pad(x4, (1, 2, 4, 0), mode='circular')",
    "adaptive1d": "F.adaptive_avg_pool1d(x3, 3)",
    "adaptive1d_same": "F.adaptive_avg_pool1d(x3, 5)",
    "adaptive1d_up": "F.adaptive_avg_pool1d(x3, 7)",
    "adaptive2d": "F.adaptive_avg_pool2d(x4, (3, 2))",
    "adaptive2d_global": "F.adaptive_avg_pool2d(x4, 1)",
    "adaptive2d_none": "F.adaptive_avg_pool2d(x4, (None, 3))",
    "adaptive3d": "F.adaptive_avg_pool3d(x5, (2, 3, 4))",
    "adaptive3d_odd": "F.adaptive_avg_pool3d(x5[0], (3, 2, 3))",
    "linear_up": "F.interpolate(x3, size=7, mode='linear')",
    "linear_down_ac": "F.interpolate(x3, size=3, mode='linear', align_corners=True)",
    "linear_scale": "F.interpolate(x3, scale_factor=1.7, mode='linear')",
    "nearest1d": "F.interpolate(x3, scale_factor=2.5, mode='nearest')",
    "nearest2d": "F.interpolate(x4, size=(5, 7), mode='nearest')",
    "nearest2d_x2": "F.interpolate(x4, scale_factor=2)",
    "nearest2d_down": "F.interpolate(x4, size=(3, 2), mode='nearest')",
    "nearest_exact": "F.interpolate(x4, size=(7, 3), mode='nearest-exact')",
    "bilinear_scale": "F.interpolate(x4, scale_factor=1.7, mode='bilinear')",
    "bilinear_ac": "F.interpolate(x4, size=(3, 9), mode='bilinear', align_corners=True)",
    "bilinear_recompute": "F.interpolate(x4, scale_factor=(1.3, 0.7), mode='bilinear', "
                          "recompute_scale_factor=True)",
    "area": "F.interpolate(x4, size=(3, 2), mode='area')",
    "trilinear": "F.interpolate(x5, size=(4, 5, 3), mode='trilinear')",
    "nearest3d": "F.interpolate(x5, scale_factor=2, mode='nearest')",
    "group_norm": "F.group_norm(x4, 2, w, b)",
    "group_norm_plain": "F.group_norm(x5, 1)",
    "batch_norm_train": "F.batch_norm(x4, rm, rv, w, b, True, 0.1, 1e-5)",
    "batch_norm_stats": "[F.batch_norm(x4, rm, rv, None, None, True, 0.3), rm, rv][1:]",
    "batch_norm_nostats": "F.batch_norm(x3, None, None, training=True)",
    "batch_norm_eval": "F.batch_norm(x4, rm, rv, w, b, False)",
    "logsumexp": "x4.logsumexp((1, 3))",
    "logsumexp_keep": "M.logsumexp(x3, -1, keepdim=True)",
    "var_mean": "list(M.var_mean(x4, (0, 2)))",
    "amax": "x4.amax((0, 2))",
    "amin": "M.amin(x5, -1, keepdim=True)",
    "index_add": "x3.index_add(1, idx, src3, alpha=2)",
    "ce_nd": "F.cross_entropy(x4[:, :, 0], cls)",
    "ce_nd_none": "F.cross_entropy(x4[:, :, 1], cls2, reduction='none')",
    "ce_smooth": "F.cross_entropy(x4[:, :, 2], cls2, label_smoothing=0.2)",
    "ce_smooth_w": "F.cross_entropy(x4[:, :, 3], cls2, w.abs().detach(), label_smoothing=0.1)",
    "ce_smooth_sum": "F.cross_entropy(x3[:, :, 1:], cls[:, :4] % 3, reduction='sum', "
                     "label_smoothing=0.3)",
    "ce_probs": "F.cross_entropy(x4, prob, w.abs().detach(), label_smoothing=0.05)",
    "ce_one_sample": "F.cross_entropy(x4[0, :, 0, 0], cls[0, 1])",
    "nll_nd_w": "F.nll_loss(x4[:, :, 0], cls2, w.abs().detach())",
    "scatter_sum": "x3.scatter_reduce(2, sidx, ssrc, 'sum')",
    "scatter_prod": "x3.scatter_reduce(2, sidx, ssrc, 'prod', include_self=False)",
    "scatter_mean": "x3.scatter_reduce(2, sidx, ssrc, 'mean')",
    "scatter_amax": "x3.scatter_reduce(2, sidx, ssrc, 'amax', include_self=False)",
    "scatter_amin": "x3.scatter_reduce(2, sidx, ssrc, reduce='amin')",
    "sdpa_causal": "F.scaled_dot_product_attention(q, k, v, is_causal=True)",
    "sdpa_bool_mask": "F.scaled_dot_product_attention(q, k, v, bmask)",
    "sdpa_float_mask": "F.scaled_dot_product_attention(q, k, v, amask, scale=0.3)",
}

# Evaluates every case with `F` and `make(name, array, requires_grad)`; returns name ->
# output array and "name/array" -> the gradient of sum(out ** 2) for that array.
RUNNER = """
def run_cases(F, M, make, arrays, cases, grad_of, dtype):
    out = {}
    for name, expr in cases.items():
        env = {k: make(v.astype(dtype), k in grad_of) if v.dtype.kind == "f" else make(v, False)
               for k, v in arrays.items()}
        y = eval(expr, {"F": F, "M": M, **env})
        ys = y if isinstance(y, list) else [y]
        for i, t in enumerate(ys):
            out[f"{name}#{i}"] = t.detach().numpy().copy()
        if ys[0].requires_grad:
            (ys[0] * ys[0]).sum().backward()
            for k in grad_of:
                if env[k].grad is not None:
                    out[f"{name}/{k}"] = env[k].grad.numpy().copy()
    return out
"""
exec(RUNNER)  # noqa: S102  (defines run_cases, the same text torch's side runs)

TORCH_SCRIPT = RUNNER + """
import json, sys
import numpy as np, torch
import torch.nn.functional as F
if not hasattr(F, "scaled_dot_product_attention"):  # torch < 2.0: the documented math form
    def _sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
        s = q @ k.transpose(-2, -1) * (scale if scale is not None else q.shape[-1] ** -0.5)
        if is_causal:
            attn_mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            s = s.masked_fill(~attn_mask, float("-inf"))
        elif attn_mask is not None:
            s = s + attn_mask
        return s.softmax(-1) @ v
    F.scaled_dot_product_attention = _sdpa
arrays = dict(np.load(sys.argv[1]))
cases = json.load(open(sys.argv[2]))
res = {}
for dt in ("float32", "float64"):
    got = run_cases(F, torch, lambda a, g: torch.from_numpy(a).requires_grad_(g), arrays, cases,
                    json.loads(sys.argv[4]), dt)
    res.update({f"{dt}:{k}": v for k, v in got.items()})
np.savez(sys.argv[3], **res)
"""


def _dtr_make(a, grad):
    t = local.from_numpy(np.ascontiguousarray(a)).clone()
    return t.requires_grad_(grad) if grad else t


def test_outputs_and_gradients_match_torch():
    exe = torch_python()
    if exe is None:
        pytest.skip("no /usr/bin/python3 with torch and numpy (Debian: python3-torch; "
                    "scripts/test.sh installs it)")
    with tempfile.TemporaryDirectory() as tmp:
        paths = [os.path.join(tmp, n) for n in ("in.npz", "cases.json", "out.npz")]
        np.savez(paths[0], **ARRAYS)
        with open(paths[1], "w") as f:
            json.dump(CASES, f)
        r = subprocess.run([exe, "-c", TORCH_SCRIPT, *paths, json.dumps(GRAD_OF)],
                           capture_output=True, text=True, timeout=240)
        assert r.returncode == 0, r.stderr[-3000:]
        ref = dict(np.load(paths[2]))
    for dt, tol in (("float32", 2e-5), ("float64", 1e-11)):
        got = run_cases(F, local, _dtr_make, ARRAYS, CASES, GRAD_OF, dt)  # noqa: F821
        want = {k.split(":", 1)[1]: v for k, v in ref.items() if k.startswith(dt + ":")}
        assert sorted(got) == sorted(want), (dt, set(got) ^ set(want))
        for key, value in want.items():
            assert got[key].shape == value.shape, (dt, key, got[key].shape, value.shape)
            np.testing.assert_allclose(got[key], value, rtol=tol, atol=tol, err_msg=f"{dt} {key}")


@pytest.mark.parametrize("mode,np_mode", [("reflect", "reflect"), ("replicate", "edge"),
                                          ("circular", "wrap")])
def test_pad_modes_match_numpy_for_every_dtype(mode, np_mode):
    for npdt in (np.float32, np.float64, np.int64, np.int32):
        a = (np.arange(60) * 7 % 11).reshape(1, 3, 4, 5).astype(npdt)
        x = local.from_numpy(a)
        assert np.array_equal(F.pad(x, (2, 3, 1, 3), mode=mode).numpy(),
                              np.pad(a, ((0, 0), (0, 0), (1, 3), (2, 3)), mode=np_mode))
        assert np.array_equal(F.pad(x[0], (4, 1), mode=mode).numpy(),
                              np.pad(a[0], ((0, 0), (0, 0), (4, 1)), mode=np_mode))


def test_pad_crops_with_negative_pads_and_refuses_what_torch_refuses():
    a = np.arange(20, dtype=np.float32).reshape(1, 4, 5)
    x = local.from_numpy(a)
    assert F.pad(x, (-1, 2), mode="replicate").numpy().tolist() == \
        np.pad(a[:, :, 1:], ((0, 0), (0, 0), (0, 2)), mode="edge").tolist()
    with pytest.raises(dtr.ShapeError, match=r"padding \(5, 0\) for dim 2 .*must be less than"):
        F.pad(x, (5, 0), mode="reflect")
    with pytest.raises(dtr.ShapeError, match="wraps around once"):
        F.pad(x, (0, 6), mode="circular")
    with pytest.raises(dtr.InvalidArgument, match="last 1 to 3 dims .* shape \\[1, 4, 5\\]"):
        F.pad(x, (1, 1, 1, 1, 1, 1), mode="reflect")
    with pytest.raises(dtr.InvalidArgument, match="'mirror' is not one of"):
        F.pad(x, (1, 1), mode="mirror")
    with pytest.raises(dtr.InvalidArgument, match="takes no value"):
        F.pad(x, (1, 1), mode="reflect", value=3)
    with pytest.raises(dtr.ShapeError, match="empty"):
        F.pad(local.zeros(1, 2, 0), (1, 1), mode="replicate")


def _adaptive_ref(a, sizes):
    """numpy: torch's bins [floor(i n / m), ceil((i + 1) n / m)) over the last dims."""
    for j, m in enumerate(sizes):
        d = a.ndim - len(sizes) + j
        n = a.shape[d]
        parts = [a.take(range(i * n // m, -(-(i + 1) * n // m)), axis=d).mean(axis=d,
                                                                             keepdims=True)
                 for i in range(m)]
        a = np.concatenate(parts, axis=d)
    return a


def test_adaptive_avg_pool_matches_the_bin_formula_and_its_backward_is_the_transpose():
    a = RNG.standard_normal((2, 3, 7, 10))
    x = local.from_numpy(a)
    for sizes in ((3, 4), (7, 5), (1, 1), (10, 3), (2, 10)):
        np.testing.assert_allclose(F.adaptive_avg_pool2d(x, sizes).numpy(),
                                   _adaptive_ref(a, sizes), rtol=1e-12, atol=1e-12)
        # <pool(x), g> == <x, pool_backward(g)> for every x and g: the backward is the
        # adjoint of the forward.
        g = RNG.standard_normal((2, 3) + sizes)
        back = dtr.local.adaptive_avg_pool_backward(local.from_numpy(g), x).numpy()
        assert back.shape == a.shape
        assert abs((_adaptive_ref(a, sizes) * g).sum() - (a * back).sum()) < 1e-10
    with pytest.raises(dtr.DTypeError, match="floating"):
        F.adaptive_avg_pool2d(local.zeros(1, 2, 3, dtype=dtr.int64), 2)
    with pytest.raises(dtr.ShapeError, match="need an input of 2 or 3 dims"):
        F.adaptive_avg_pool1d(local.zeros(1, 1, 2, 3), 2)


def test_interpolate_arguments_are_checked_as_torch_does():
    x = local.zeros(1, 2, 4, 4)
    with pytest.raises(ValueError, match="align_corners"):
        F.interpolate(x, size=3, align_corners=True)
    with pytest.raises(ValueError, match="exactly one of size and scale_factor"):
        F.interpolate(x)
    with pytest.raises(dtr.ShapeError, match="'trilinear' needs a 5-D input"):
        F.interpolate(x, size=3, mode="trilinear")
    with pytest.raises(dtr.InvalidArgument, match="'bicubic' is not supported"):
        F.interpolate(x, size=3, mode="bicubic")
    with pytest.raises(dtr.InvalidArgument, match="antialias"):
        F.interpolate(x, size=3, mode="bilinear", antialias=True)
    with pytest.raises(dtr.DTypeError, match="'bilinear' is defined for floating"):
        F.interpolate(local.zeros(1, 1, 2, 2, dtype=dtr.int64), size=3, mode="bilinear")
    # nearest copies any dtype's values
    ints = local.from_numpy(np.arange(4).reshape(1, 1, 4))
    assert F.interpolate(ints, size=8).numpy().ravel().tolist() == [0, 0, 1, 1, 2, 2, 3, 3]


def test_group_and_batch_norm_match_numpy_and_check_their_arguments():
    a = RNG.standard_normal((3, 4, 5, 2))
    x, w, b = local.from_numpy(a), local.from_numpy(ARRAYS["w"]), local.from_numpy(ARRAYS["b"])
    g = a.reshape(3, 2, -1)
    want = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5))
    want = want.reshape(a.shape) * ARRAYS["w"][:, None, None] + ARRAYS["b"][:, None, None]
    np.testing.assert_allclose(F.group_norm(x, 2, w, b).numpy(), want, rtol=1e-10, atol=1e-12)
    rm, rv = local.zeros(4, dtype=dtr.float64), local.ones(4, dtype=dtr.float64)
    out = F.batch_norm(x, rm, rv, training=True, momentum=0.25)
    mean, var = a.mean((0, 2, 3)), a.var((0, 2, 3))
    c = (slice(None), None, None)
    np.testing.assert_allclose(out.numpy(), (a - mean[c]) / np.sqrt(var[c] + 1e-5), rtol=1e-10,
                               atol=1e-12)
    np.testing.assert_allclose(rm.numpy(), 0.25 * mean, rtol=1e-12)
    np.testing.assert_allclose(rv.numpy(), 0.25 * a.var((0, 2, 3), ddof=1) + 0.75, rtol=1e-12)
    with pytest.raises(dtr.InvalidArgument, match="num_groups 3 must divide the 4 channels"):
        F.group_norm(x, 3)
    with pytest.raises(dtr.ShapeError, match="bias of shape \\[3\\] for an input of 4 channels"):
        F.group_norm(x, 2, w, local.zeros(3, dtype=dtr.float64))
    with pytest.raises(dtr.InvalidArgument, match="required when not training"):
        F.batch_norm(x, None, None)
    with pytest.raises(dtr.InvalidArgument, match="more than 1 value per channel"):
        F.batch_norm(local.zeros(1, 4), None, None, training=True)
    with pytest.raises(dtr.DTypeError, match="group_norm: defined for floating"):
        F.group_norm(local.zeros(2, 4, dtype=dtr.int64), 2)


def test_group_norm_backward_is_autograd_s():
    a = RNG.standard_normal((2, 4, 3))
    x = local.from_numpy(a).clone().requires_grad_()
    w = local.from_numpy(ARRAYS["w"]).clone().requires_grad_()
    b = local.from_numpy(ARRAYS["b"]).clone().requires_grad_()
    out = F.group_norm(x, 2, w, b)
    gout = RNG.standard_normal(out.shape)
    (out * local.from_numpy(gout)).sum().backward()
    gi, gw, gb = dtr.local.group_norm_backward(local.from_numpy(gout), local.from_numpy(a), 2,
                                               local.from_numpy(ARRAYS["w"]))
    for got, want in ((gi, x.grad), (gw, w.grad), (gb, b.grad)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-10, atol=1e-12)


def test_randperm_is_a_seeded_permutation():
    p = local.randperm(1000, generator=dtr.Generator(7))
    assert p.dtype == dtr.int64 and sorted(p.numpy().tolist()) == list(range(1000))
    assert p.numpy().tolist() == local.randperm(1000, generator=dtr.Generator(7)).numpy().tolist()
    assert p.numpy().tolist() != list(range(1000))
    assert local.randperm(0).shape == (0,)
    assert local.randperm(5, dtype=dtr.int32).dtype == dtr.int32
    with pytest.raises(dtr.InvalidArgument, match="non-negative"):
        local.randperm(-1)


def test_on_a_worker_the_same_bits_as_here(session):
    got = run_cases(F, dtr, lambda a, g: dtr.tensor(np.ascontiguousarray(a)).requires_grad_(g),  # noqa: F821
                    ARRAYS, CASES, GRAD_OF, "float32")
    here = run_cases(F, local, _dtr_make, ARRAYS, CASES, GRAD_OF, "float32")  # noqa: F821
    assert sorted(got) == sorted(here)
    for key in here:
        assert np.array_equal(got[key], here[key]), key
    e = dtr.eye(3, 4, dtype=dtr.int32, node=1)
    assert e.get_node() == 1 and e.tolist() == np.eye(3, 4, dtype=np.int32).tolist()
    r = dtr.randint(2, 9, (500,), generator=dtr.Generator(4), node=1)
    assert r.tolist() == local.randint(2, 9, (500,), generator=dtr.Generator(4)).numpy().tolist()
    p = dtr.randperm(50, generator=dtr.Generator(3), node=1)
    assert p.get_node() == 1
    assert p.tolist() == local.randperm(50, generator=dtr.Generator(3)).numpy().tolist()


def test_eye_randint_and_bernoulli():
    assert local.eye(3).numpy().tolist() == np.eye(3, dtype=np.float32).tolist()
    assert local.eye(2, 4, dtype=dtr.bool).numpy().tolist() == np.eye(2, 4, dtype=bool).tolist()
    assert local.eye(0).shape == (0, 0)
    r = local.randint(3, 8, size=(4000,), generator=dtr.Generator(1)).numpy()
    assert r.dtype == np.int64 and sorted(set(r.tolist())) == [3, 4, 5, 6, 7]
    assert local.randint(4, (2, 3)).shape == (2, 3)
    assert local.randint(4, (5,), dtype=dtr.int32).dtype == dtr.int32
    with pytest.raises(dtr.InvalidArgument, match=r"low \(5\) must be less than high \(5\)"):
        local.randint(5, 5, (2,))
    with pytest.raises(TypeError, match="randint\\(high, size\\)"):
        local.randint(5)
    p = local.full((20000,), 0.3, dtype=dtr.float64)
    b = p.bernoulli(generator=dtr.Generator(5)).numpy()
    assert set(b.tolist()) == {0.0, 1.0} and abs(b.mean() - 0.3) < 0.02
    assert b.tolist() == local.bernoulli(p, generator=dtr.Generator(5)).numpy().tolist()
    with pytest.raises(dtr.DTypeError, match="bernoulli: the probabilities must be floating"):
        local.ones(2, dtype=dtr.int64).bernoulli()


def test_composites_refuse_bad_arguments():
    x = local.zeros(3, 4)
    with pytest.raises(dtr.ShapeError, match="index_add: source of shape \\[2, 4\\]"):
        x.index_add(0, local.from_numpy(np.array([0, 1, 2])), local.zeros(2, 4))
    with pytest.raises(dtr.DTypeError, match="same dtype"):
        x.index_add(0, local.from_numpy(np.array([0])), local.zeros(1, 4, dtype=dtr.float64))
    with pytest.raises(dtr.IndexError, match="1-D int64 or int32"):
        x.index_add(0, local.zeros(1), local.zeros(1, 4))
    with pytest.raises(dtr.InvalidArgument, match="dim 1 appears more than once"):
        x.logsumexp((1, -1))
    q = local.zeros(1, 2, 4)
    with pytest.raises(dtr.ShapeError, match="expected q \\(..., L, E\\)"):
        F.scaled_dot_product_attention(q, local.zeros(1, 2, 3), q)
    with pytest.raises(dtr.InvalidArgument, match="should not be set when is_causal"):
        F.scaled_dot_product_attention(q, q, q, local.ones(2, 2, dtype=dtr.bool), is_causal=True)
    with pytest.raises(dtr.InvalidArgument, match="enable_gqa"):
        F.scaled_dot_product_attention(q, q, q, enable_gqa=True)


def test_sync_points_nonzero_masked_select_and_boolean_indexing():
    a = (np.arange(24).reshape(2, 3, 4) % 5).astype(np.float32)
    x = local.from_numpy(a.copy())
    assert x.nonzero().numpy().tolist() == np.argwhere(a).tolist()
    assert [t.numpy().tolist() for t in x.nonzero(as_tuple=True)] == \
        [v.tolist() for v in np.nonzero(a)]
    m = np.array([True, False, True, True])
    assert x.masked_select(local.from_numpy(m)).numpy().tolist() == a[:, :, m].ravel().tolist()
    rows = np.array([[True, False, True], [False, False, True]])
    assert x[local.from_numpy(rows)].numpy().tolist() == a[rows].tolist()
    assert local.zeros(3).nonzero().shape == (0, 1)
    x[local.from_numpy(rows)] = local.from_numpy(np.array([9.0, 8, 7, 6], dtype=np.float32))
    a[rows] = np.array([9.0, 8, 7, 6])
    assert x.numpy().tolist() == a.tolist()
    with pytest.raises(dtr.DTypeError, match="masked_select: the mask must be bool"):
        x.masked_select(local.ones(4))


def test_sync_points_on_a_worker_return_to_its_node(session):
    a = (np.arange(12).reshape(3, 4) % 3).astype(np.int64)
    y = dtr.tensor(a, node=1)
    nz = y.nonzero()
    assert nz.get_node() == 1 and nz.tolist() == np.argwhere(a).tolist()
    assert dtr.masked_select(y, y.gt(1)).tolist() == a[a > 1].tolist()


def test_unique_is_numpy_s_and_a_sync_point_on_the_node(session):
    a = np.array([[3, 1, 3], [7, 1, 0]])
    want, inv, cnt = np.unique(a, return_inverse=True, return_counts=True)
    for x in (local.from_numpy(a), dtr.tensor(a, node=1)):
        values, inverse, counts = x.unique(return_inverse=True, return_counts=True)
        assert values.tolist() == want.tolist() and counts.tolist() == cnt.tolist()
        assert inverse.tolist() == inv.reshape(a.shape).tolist()
    assert dtr.unique(dtr.tensor(a)).tolist() == want.tolist()
    assert local.unique(local.zeros(0)).shape == (0,)
    assert local.unique(local.tensor([2.0, 2.0]), return_counts=True)[1].tolist() == [2]
    with pytest.raises(dtr.InvalidArgument, match="dim is not supported"):
        local.from_numpy(a).unique(dim=0)
