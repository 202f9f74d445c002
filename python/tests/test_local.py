"""Local tensors: ops, operators, dtypes, indexing, numpy (buffer protocol, __array__),
DLPack both ways, errors. No workers needed."""

import numpy as np
import pytest

import dtr
from dtr import local

DTYPES = [(dtr.float32, np.float32), (dtr.float64, np.float64), (dtr.int32, np.int32),
          (dtr.int64, np.int64), (dtr.bool, np.bool_), (dtr.float16, np.float16)]


@pytest.mark.parametrize("dt,npdt", DTYPES)
def test_numpy_round_trip_every_dtype_without_copy(dt, npdt):
    a = (np.arange(12).reshape(3, 4) % 3).astype(npdt)
    t = local.from_numpy(a)
    assert t.dtype == dt and t.shape == (3, 4)
    back = t.numpy()
    assert back.dtype == npdt and np.array_equal(back, a)
    # One memory: a write through numpy shows in the tensor and the other way round.
    a[0, 0] = 1
    assert t[0, 0].item() == 1
    t.fill_(0)
    assert not a.any() and not back.any()


def test_buffer_protocol_and_array_interface():
    t = local.arange(6).reshape(2, 3).float()
    m = memoryview(t)
    assert m.format == "f" and m.shape == (2, 3) and m.strides == (12, 4) and not m.readonly
    assert np.asarray(t).tolist() == [[0, 1, 2], [3, 4, 5]]
    assert np.array(t, dtype=np.float64).dtype == np.float64
    # A transposed view: strided buffer, shared memory.
    tt = t.t()
    a = np.asarray(tt)
    assert a.strides == (4, 12) and a.tolist() == [[0, 3], [1, 4], [2, 5]]
    with pytest.raises(BufferError, match="contiguous"):
        np.frombuffer(tt, dtype=np.float32)  # asks for a simple (contiguous) buffer
    assert memoryview(local.zeros(2, dtype=dtr.float16)).format == "e"


def test_dlpack_both_ways():
    t = local.arange(5).float()
    a = np.from_dlpack(t)
    t[1] = 42
    assert a[1] == 42.0  # the same memory
    assert t.__dlpack_device__() == (1, 0)
    back = local.from_dlpack(a)
    back[2] = -1
    if not a.flags.writeable:
        # NumPy 2.2 (Debian 13's) imports every DLPack capsule read-only, its own included;
        # dtr never writes into memory lent read-only: it imports a copy.
        assert t[2].item() == 2.0 and a[2] == 2.0
        return
    a[3] = 7
    assert t[3].item() == 7.0
    assert t[2].item() == -1.0


def test_bfloat16_through_dlpack():
    t = local.tensor([1.5, -2.0, 3.25], dtype=dtr.bfloat16)
    assert t.dtype == dtr.bfloat16
    with pytest.raises(dtr.DTypeError, match="bfloat16"):
        t.numpy()
    with pytest.raises(BufferError, match="bfloat16"):
        memoryview(t)
    u = local.from_dlpack(t)  # through its __dlpack__ capsule: same memory
    assert u.dtype == dtr.bfloat16
    u[0] = 8
    assert t[0].item() == 8.0
    assert t.to(dtr.float32).tolist() == [8.0, -2.0, 3.25]


def test_float16_maps_to_numpy_float16():
    t = local.tensor([0.5, 65504.0], dtype=dtr.float16)
    a = t.numpy()
    assert a.dtype == np.float16 and a.tolist() == [0.5, 65504.0]


def test_unsupported_arrays_are_refused_clearly():
    with pytest.raises(dtr.DTypeError, match="uint8"):
        local.from_numpy(np.zeros(3, dtype=np.uint8))
    with pytest.raises(dtr.DTypeError, match="complex"):
        local.from_numpy(np.zeros(3, dtype=np.complex64))
    with pytest.raises(dtr.InvalidArgument, match="negative strides"):
        local.from_numpy(np.arange(4.0)[::-1])
    with pytest.raises(TypeError, match="expected a tensor"):
        local.from_dlpack(object())


def test_ops_operators_and_inplace_forms():
    a = local.tensor([[1.0, 2.0], [3.0, 4.0]])
    b = local.tensor([10.0, 20.0])
    assert (a + b).tolist() == [[11, 22], [13, 24]]
    assert (1 - a).tolist() == [[0, -1], [-2, -3]]
    assert (a * 2).tolist() == [[2, 4], [6, 8]]
    assert (a / 2).tolist() == [[0.5, 1], [1.5, 2]]
    assert (2 / a)[0, 0].item() == 2.0
    assert (a ** 2).tolist() == [[1, 4], [9, 16]]
    assert (-a)[1, 1].item() == -4 and abs(-a)[1, 1].item() == 4
    assert (a @ a).tolist() == [[7, 10], [15, 22]]
    assert (a > 2).dtype == dtr.bool and (a > 2).tolist() == [[False, False], [True, True]]
    assert (a == a).all() if hasattr(a, "all") else (a == a).sum().item() == 4
    c = a.clone()
    same = c.add_(1)
    assert same is c and c.tolist() == [[2, 3], [4, 5]]
    c += b
    c -= 1
    c *= 2
    c /= 2
    assert c.tolist() == [[11, 22], [13, 24]]
    assert a.exp_() is a and abs(a[0, 0].item() - np.e) < 1e-6
    assert a.sum().dtype == dtr.float32 and local.ones(3, dtype=dtr.int32).sum().dtype == dtr.int64
    assert local.tensor([1, 2, 3]).dtype == dtr.int64
    assert local.tensor([True, False]).dtype == dtr.bool


def test_every_op_of_the_table_has_its_method():
    for name, kind, inplace, _ in dtr._dtr._op_table():
        if kind in ("create", "join", "indexing", "nn"):  # functions (the last three: methods too)
            assert hasattr(dtr, name) and hasattr(local, name), name
        if kind in ("create", "join"):
            continue
        assert hasattr(dtr.Tensor, name) and hasattr(dtr.LocalTensor, name), name
        if inplace:
            assert hasattr(dtr.Tensor, name + "_") and hasattr(dtr.LocalTensor, name + "_"), name


def test_reductions_norms_and_moments():
    a = local.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert a.sum().item() == 21 and a.sum(1).tolist() == [6, 15]
    assert a.sum(0, keepdim=True).shape == (1, 3)
    assert a.mean().item() == 3.5 and a.max().item() == 6 and a.argmin(1).tolist() == [0, 0]
    assert abs(a.norm().item() - np.linalg.norm(np.arange(1, 7))) < 1e-5
    assert abs(a.var().item() - np.var(np.arange(1, 7), ddof=1)) < 1e-5
    assert abs(a.std(1, correction=0)[0].item() - np.std([1, 2, 3])) < 1e-6
    assert a.clamp(2, 5).tolist() == [[2, 2, 3], [4, 5, 5]]
    assert a.clamp(max=2).tolist()[1] == [2, 2, 2]


@pytest.mark.parametrize("index", [0, -1, (1, 2), slice(1, 3), (slice(None), 1),
                                   (Ellipsis, 2), (None, 1), (1, None, slice(0, 4, 2)),
                                   (slice(None, None, 2), Ellipsis), (slice(-2, None),)])
def test_indexing_matches_numpy(index):
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)[1:]  # also an offset view
    a = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    t = local.from_numpy(a)
    assert np.array_equal(t[index].numpy(), a[index])


def test_setitem_and_iteration():
    t = local.zeros(3, 4)
    t[1] = 5
    t[:, 2] = local.tensor([1.0, 2.0, 3.0])
    assert t.tolist() == [[0, 0, 1, 0], [5, 5, 2, 5], [0, 0, 3, 0]]
    assert [row.sum().item() for row in t] == [1, 17, 3]
    assert len(t) == 3


def test_bad_input_raises_the_matching_classes():
    a, b = local.ones(2, 3), local.ones(4)
    with pytest.raises(dtr.ShapeError) as e:
        a + b
    assert isinstance(e.value, dtr.InvalidArgument) and isinstance(e.value, ValueError)
    assert "[2, 3]" in str(e.value) and "[4]" in str(e.value)
    with pytest.raises(dtr.DTypeError) as e:
        local.ones(2, dtype=dtr.int32).mean()
    assert isinstance(e.value, TypeError)
    with pytest.raises(dtr.IndexError) as e:
        a[5]
    assert isinstance(e.value, IndexError)
    with pytest.raises(dtr.IndexError, match="too many indices"):
        a[0, 0, 0]
    # A 0-d tensor: torch's words and its hint (it said "too many indices").
    with pytest.raises(dtr.IndexError, match=r"invalid index of a 0-dim tensor: use x.item\(\)"):
        local.ones(()).data[0]
    assert local.ones(())[None].shape == (1,) and local.ones(())[...].shape == ()
    assert a[[0, 1]].shape == (2,) + tuple(a.shape[1:])  # advanced indexing
    assert a[a > 0].shape == (int((a > 0).sum().item()),)  # a boolean index: a sync point
    with pytest.raises(dtr.IndexError, match="mask"):  # beside other indices: not supported
        a[0, a[0] > 0]
    with pytest.raises(dtr.IndexError, match="shape of the mask \\[3\\] does not match"):
        a[local.ones(3, dtype=dtr.bool)]
    with pytest.raises(dtr.IndexError, match="beside a tensor index"):
        a[[0], None]
    with pytest.raises(dtr.InvalidArgument, match="ambiguous"):
        bool(a)
    with pytest.raises(TypeError):
        a + "x"
    with pytest.raises(TypeError, match="a number"):
        a.fill_("x")
    with pytest.raises(OverflowError):
        a + 2**70
    with pytest.raises(dtr.DTypeError, match="unknown dtype"):
        local.zeros(2, dtype="uint7")
    with pytest.raises(dtr.DeviceError):
        local.ones(2).cuda() if not dtr.built_with_cuda else (_ for _ in ()).throw(
            dtr.DeviceError("skip"))


def test_scalars_from_numpy_and_dtype_names():
    a = local.ones(2, dtype=dtr.int32)
    assert (a + np.int64(2)).dtype == dtr.int32
    assert (a + np.float32(0.5)).dtype == dtr.float32
    assert (a * np.bool_(True)).tolist() == [1, 1]
    assert local.zeros(2, dtype="float64").dtype == dtr.float64
    assert local.zeros(2, dtype=np.float16).dtype == dtr.float16
    assert local.zeros(2, dtype=float).dtype == dtr.float32
    assert dtr.promote_types(dtr.float16, dtr.bfloat16) == dtr.float32


def test_generators_make_the_same_values():
    g1, g2 = dtr.Generator(7), dtr.Generator(7)
    assert local.randn(5, generator=g1).tolist() == local.randn(5, generator=g2).tolist()
    dtr.manual_seed(3)
    x = local.rand(4)
    dtr.manual_seed(3)
    assert local.rand(4).tolist() == x.tolist()


def test_hostile_index_objects_raise_their_own_errors():
    class BadIndex:
        def __index__(self):
            raise ZeroDivisionError("bad __index__")

    t = local.zeros(3, 3)
    with pytest.raises(ZeroDivisionError):
        t[BadIndex()]
    with pytest.raises(ZeroDivisionError):
        local.zeros(BadIndex())
    with pytest.raises(TypeError):  # not a number, then: the operator gives up
        t + BadIndex()
    with pytest.raises(dtr.InvalidArgument, match="step must be positive"):
        t[::-1]


def test_read_only_arrays_are_copied_not_written():
    a = np.frombuffer(b"\x00\x00\x80\x3f" * 4, dtype=np.float32)  # read-only memory
    t = local.from_numpy(a)
    t += 1
    assert t.tolist() == [2.0] * 4 and a.tolist() == [1.0] * 4
    w = np.arange(4.0)
    local.from_numpy(w).add_(1)  # writable: shared
    assert w.tolist() == [1.0, 2.0, 3.0, 4.0]


def test_nn_and_indexing_ops_from_their_signatures():
    x = local.tensor(np.arange(2 * 3 * 6 * 6, dtype=np.float32).reshape(2, 3, 6, 6) / 100)
    w = local.tensor(np.ones((4, 3, 3, 3), dtype=np.float32))
    b = local.tensor(np.array([1, 2, 3, 4], dtype=np.float32))
    # Method and function, positional and keyword; an optional tensor left out.
    y = x.conv2d(w, b, padding=1)
    assert y.shape == (2, 4, 6, 6)
    assert local.conv2d(x, w, b, 1, 1).tolist() == y.tolist()
    assert x.conv2d(w, stride=(2, 1)).shape == (2, 4, 2, 4)
    g = local.ones(*y.shape)
    assert g.conv2d_weight_grad(x, 3, padding=1).shape == (4, 3, 3, 3)
    assert g.conv2d_input_grad(w, (6, 6), padding=1).shape == (2, 3, 6, 6)
    # Lists of tensors, tensors after an int, a pair of results.
    assert local.cat([x, x, x], 1).shape == (2, 9, 6, 6)
    assert local.stack([b, b], dim=1).tolist() == [[1, 1], [2, 2], [3, 3], [4, 4]]
    values, indices = b.topk(2)
    assert values.tolist() == [4, 3] and indices.tolist() == [3, 2]
    assert local.topk(b, 2, largest=False).tolist() == [1, 2]
    assert b.gather(0, local.tensor([3, 0])).tolist() == [4, 1]
    assert local.where(b > 2, b, b * 0).tolist() == [0, 0, 3, 4]
    assert b.masked_fill(b > 2, -1).tolist() == [1, 2, -1, -1]
    assert b.cumsum(0).tolist() == [1, 3, 6, 10]
    assert local.tensor([1, 0]).one_hot(3).tolist() == [[0, 1, 0], [1, 0, 0]]
    # Pools, softmax, nll_loss with a reduction by name, dropout with a generator.
    assert x.max_pool2d(2).shape == (2, 3, 3, 3)
    assert x.max_pool2d_indices(3, stride=1, padding=1).dtype == dtr.int64
    assert x.avg_pool2d(2, divisor_override=2).shape == (2, 3, 3, 3)
    lp = local.tensor([[0.5, 1.5, -1.0], [2.0, 0.0, 1.0]]).log_softmax(1)
    t = local.tensor([1, 0])
    assert lp.nll_loss(t, reduction="sum").item() == pytest.approx(
        -(lp.numpy()[0, 1] + lp.numpy()[1, 0]))
    m1 = x.dropout(0.5, generator=dtr.Generator(4)).numpy()
    m2 = x.dropout(0.5, generator=dtr.Generator(4)).numpy()
    assert (m1 == m2).all() and (m1 == 0).any()
    assert x.flatten(1).shape == (2, 108) and x.flatten(2, 3).shape == (2, 3, 36)
    assert local.tensor([-1.5, 0.5, 2.5]).round().tolist() == [-2, 0, 2]
    with pytest.raises(TypeError, match=r"conv2d\(\): argument 'stride' must be an int or a pair"):
        x.conv2d(w, stride=(1, 2, 3))
    with pytest.raises(TypeError, match=r"nll_loss\(\): argument 'reduction' must be"):
        lp.nll_loss(t, reduction="avg")
    with pytest.raises(dtr.ShapeError, match=r"conv2d: .*\[2, 3, 6, 6\]"):
        x.conv2d(b)
    with pytest.raises(dtr.IndexError, match="index 7 is out of range"):
        b.index_select(0, local.tensor([7]))


def test_gelu_silu_and_the_formula_unary_ops():
    import math
    x = np.array([-2.0, -0.5, 0.0, 0.75, 3.0])
    t = local.from_numpy(x)
    F = dtr.nn.functional
    gelu = [0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x]
    u = [math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3) for v in x]
    gelu_tanh = [0.5 * v * (1 + math.tanh(w)) for v, w in zip(x, u)]
    silu = [v / (1 + math.exp(-v)) for v in x]
    assert np.allclose(F.gelu(t).numpy(), gelu, rtol=1e-14, atol=0)
    assert np.allclose(F.gelu(t, approximate="tanh").numpy(), gelu_tanh, rtol=1e-14, atol=0)
    assert np.allclose(dtr.nn.GELU("tanh")(t).numpy(), gelu_tanh, rtol=1e-14, atol=0)
    assert np.allclose(dtr.nn.SiLU()(t).numpy(), silu, rtol=1e-14, atol=0)
    # A mistyped approximation is refused, never taken for the exact form.
    with pytest.raises(ValueError, match="approximate must be 'none' or 'tanh', got 'tahn'"):
        F.gelu(t, approximate="tahn")
    with pytest.raises(ValueError, match="got 'Tanh'"):
        dtr.nn.GELU("Tanh")
    # silu(inplace=True) writes into its input, as torch's does.
    s = local.from_numpy(x.copy())
    assert F.silu(s, inplace=True) is s and np.allclose(s.numpy(), silu, rtol=1e-14, atol=0)
    for name in ("erf", "expm1", "asinh", "atan", "sinh", "cosh", "tan"):
        expected = [getattr(math, name)(v) for v in x]
        assert np.allclose(getattr(t, name)().numpy(), expected, rtol=1e-14, atol=0), name


def test_modulo_bitwise_and_logical_operators_match_numpy():
    a = np.array([-7, -3, 0, 3, 7, 12], dtype=np.int64)
    b = np.array([2, -2, 5, -4, 3, 5], dtype=np.int64)
    x, y = local.from_numpy(a), local.from_numpy(b)
    # Python's % is remainder (the divisor's sign); fmod keeps the dividend's.
    assert (x % y).numpy().tolist() == (a % b).tolist()
    assert (x % 4).numpy().tolist() == (a % 4).tolist()
    assert (17 % y).numpy().tolist() == (17 % b).tolist()
    assert x.fmod(y).numpy().tolist() == np.fmod(a, b).tolist()
    assert (x & y).numpy().tolist() == (a & b).tolist()
    assert (x | 6).numpy().tolist() == (a | 6).tolist()
    assert (5 ^ x).numpy().tolist() == (5 ^ a).tolist()
    assert (~x).numpy().tolist() == (~a).tolist()
    z = local.from_numpy(a.copy())
    z %= 5
    z &= 3
    assert z.numpy().tolist() == ((a % 5) & 3).tolist()
    f = local.from_numpy(np.array([0.0, np.nan, -1.5]))
    assert f.logical_and(local.from_numpy(np.array([1.0, 1.0, 0.0]))).numpy().tolist() == [
        False, True, False]
    assert np.allclose(f.atan2(local.from_numpy(np.array([1.0, 1.0, -1.0]))).numpy(),
                       np.arctan2([0.0, np.nan, -1.5], [1.0, 1.0, -1.0]), equal_nan=True)
    # Integer division by zero raises, naming the op; floats give NaN as in torch.
    with pytest.raises(ValueError, match="remainder: integer division by zero"):
        x % 0
    assert np.isnan((f % 0.0).numpy()).all()
    with pytest.raises(TypeError, match="bitwise_and"):
        f & local.from_numpy(a[:3])


def test_clamp_with_tensor_bounds_and_the_optimizer_steps():
    x = np.array([[-2.0, 0.5, 3.0], [np.nan, 1.0, -1.0]])
    lo, hi = np.array([-1.0, 1.0, 0.0]), np.array([[2.0], [0.0]])
    t = local.from_numpy(x)
    L, H = local.from_numpy(lo), local.from_numpy(hi)
    # torch's clamp: max then min; NaN stays NaN; a lower bound above the upper gives the upper.
    want = np.minimum(np.maximum(x, lo), hi)
    np.testing.assert_array_equal(t.clamp(L, H).numpy(), want)
    np.testing.assert_array_equal(t.clamp(min=L).numpy(), np.maximum(x, lo))
    np.testing.assert_array_equal(t.clamp(L, 0.75).numpy(), np.minimum(np.maximum(x, lo), 0.75))
    np.testing.assert_array_equal(t.clamp(-0.5, H).numpy(), np.minimum(np.maximum(x, -0.5), hi))
    np.testing.assert_array_equal(t.clamp_max(H).numpy(), np.minimum(x, hi))
    a, b, c = (np.linspace(-1, 1, 6).reshape(2, 3) * k for k in (1.0, 2.0, 3.0))
    A, B, C = local.from_numpy(a), local.from_numpy(b), local.from_numpy(c + 4)
    np.testing.assert_allclose(A.addcmul(B, C, value=0.5).numpy(), a + 0.5 * b * (c + 4))
    np.testing.assert_allclose(A.addcdiv(B, C, value=-2).numpy(), a - 2 * b / (c + 4))
    np.testing.assert_allclose(A.lerp(B, 0.25).numpy(), a + 0.25 * (b - a))
    np.testing.assert_array_equal(A.lerp(B, 1.0).numpy(), b)
    W = local.from_numpy(np.array([0.0, 0.6, 1.0]))
    np.testing.assert_allclose(A.lerp(B, W).numpy(), a + np.array([0.0, 0.6, 1.0]) * (b - a))


def test_split_chunk_repeat_and_clone_as_torch():
    a = np.arange(10.0).reshape(2, 5)
    t = local.from_numpy(a)
    parts = t.split(2, dim=1)
    assert isinstance(parts, tuple) and [p.shape for p in parts] == [(2, 2), (2, 2), (2, 1)]
    np.testing.assert_array_equal(parts[1].numpy(), a[:, 2:4])
    assert [p.shape for p in t.split([1, 4], 1)] == [(2, 1), (2, 4)]
    assert len(t.chunk(4, 1)) == 3  # ceil(5 / 4) = 2 per piece, as torch
    np.testing.assert_array_equal(t.repeat(2, 1).numpy(), np.tile(a, (2, 1)))
    np.testing.assert_array_equal(t.repeat((1, 2, 1)).numpy(), np.tile(a, (1, 2, 1)))
    c = t.clone()
    c.fill_(0)
    assert t.numpy()[1, 4] == 9  # a copy
    with pytest.raises(ValueError, match="split_with_sizes: the sizes add up to 4, not to 5"):
        t.split([2, 2], 1)
    with pytest.raises(ValueError, match="repeat: 1 repeats for a tensor of 2 dims"):
        t.repeat(2)


def test_max_and_min_over_one_dim_give_values_and_indices_as_torch():
    # x.max(1) gave the values alone: `values, indices = x.max(1)` unpacked two rows of
    # values, silently (issue 41).
    x = local.tensor([[1.0, 5, 2], [7, 0, 3]])
    values, indices = x.max(1)
    assert values.tolist() == [5.0, 7.0] and indices.tolist() == [1, 0]
    r = x.min(0, keepdim=True)
    assert r.values.tolist() == [[1.0, 0.0, 2.0]] and r.indices.tolist() == [[0, 1, 0]]
    assert x.max().item() == 7.0 and x.min((0, 1)).item() == 0.0  # all dims, several dims
