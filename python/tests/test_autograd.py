"""Training from Python: autograd on local and remote tensors (the C++ runtime's, bound),
dtr.nn modules and functions, dtr.optim, dtr.data, and the errors. Gradients are checked
against known values and central differences; remote gradients against local ones bit for
bit; a small Net against torch when an interpreter with torch is at hand."""

import os
import subprocess
import tempfile
from random import Random

import numpy as np
import pytest

import dtr
import dtr.nn as nn
import dtr.nn.functional as F
from dtr import local
from conftest import torch_python


def arr(t):
    return (t.to_local() if isinstance(t, dtr.Tensor) else t).numpy().copy()


# ---- tensors: requires_grad, grad, backward, detach ----

def test_known_gradients_of_a_scalar_function():
    x = local.tensor([1.0, 2.0, 3.0], requires_grad=True)
    assert x.requires_grad and x.is_leaf and x.grad is None and x.grad_fn is None
    y = (x * x).sum()
    assert y.requires_grad and not y.is_leaf and y.grad_fn
    y.backward()
    np.testing.assert_array_equal(arr(x.grad), [2.0, 4.0, 6.0])
    (x * 3).sum().backward()  # gradients accumulate
    np.testing.assert_array_equal(arr(x.grad), [5.0, 7.0, 9.0])
    x.grad = None
    assert x.grad is None


def test_backward_with_a_gradient_and_retain_graph():
    x = local.ones(2, 2, requires_grad=True)
    y = x * 2
    y.backward(local.full((2, 2), 0.5), retain_graph=True)
    y.backward(local.full((2, 2), 0.5))
    np.testing.assert_array_equal(arr(x.grad), np.full((2, 2), 2.0))


def test_creation_functions_take_requires_grad():
    for t in (local.zeros(2, requires_grad=True), local.randn(2, requires_grad=True),
              local.full((2,), 1.0, requires_grad=True), local.rand(3, requires_grad=True)):
        assert t.requires_grad and t.is_leaf
    assert not local.zeros(2).requires_grad
    w = local.ones(3)
    w.requires_grad = True
    assert w.requires_grad
    assert w.requires_grad_(False) is w and not w.requires_grad


def test_detach_and_data_share_storage_outside_the_graph():
    x = local.ones(3, requires_grad=True)
    y = x * 2
    d = y.detach()
    assert not d.requires_grad and d.is_leaf
    assert not x.data.requires_grad
    x.data.fill_(5.0)  # writes through: the same storage
    assert arr(x).tolist() == [5.0, 5.0, 5.0]


def _numeric_grad(f, x, eps=1e-6):
    base = x.numpy()
    g = np.zeros_like(base)
    for i in np.ndindex(base.shape):
        old = base[i]
        base[i] = old + eps
        hi = f(x).item()
        base[i] = old - eps
        lo = f(x).item()
        base[i] = old
        g[i] = (hi - lo) / (2 * eps)
    return g


def _check(f, *shape, seed=0, positive=False):
    g = dtr.Generator(seed)
    x = local.rand(*shape, generator=g, dtype=dtr.float64) + 0.5 if positive else \
        local.randn(*shape, generator=g, dtype=dtr.float64)
    x = x.contiguous()
    with dtr.no_grad():
        expected = _numeric_grad(f, x)
    x.requires_grad_()
    f(x).backward()
    np.testing.assert_allclose(arr(x.grad), expected, rtol=1e-5, atol=1e-6)


W = local.randn(4, 3, generator=dtr.Generator(5), dtype=dtr.float64)
K = local.randn(2, 2, 3, 3, generator=dtr.Generator(6), dtype=dtr.float64)
TARGET = local.tensor([1, 0, 3], dtype=dtr.int64)


@pytest.mark.parametrize("name,f,shape,positive", [
    ("tanh", lambda x: x.tanh().sum(), (3, 4), False),
    ("sigmoid*exp", lambda x: (x.sigmoid() * x.exp()).sum(), (5,), False),
    ("log/sqrt", lambda x: (x.log() + x.sqrt() / x).sum(), (2, 3), True),
    ("matmul", lambda x: x.matmul(W).pow(2).mean(), (2, 4), False),
    ("linear", lambda x: F.linear(x, W.t(), None).relu().sum(), (3, 4), False),
    ("log_softmax+nll", lambda x: F.nll_loss(F.log_softmax(x, 1), TARGET), (3, 4), False),
    ("softmax", lambda x: (F.softmax(x, 1) * W.t()[:3]).sum(), (3, 4), False),
    ("conv2d", lambda x: F.conv2d(x, K, None, padding=1).pow(2).sum(), (1, 2, 4, 4), False),
    ("max_pool2d", lambda x: F.max_pool2d(x, 2).sum() * 3, (1, 1, 4, 4), False),
    ("avg_pool2d", lambda x: (F.avg_pool2d(x, 2) ** 2).sum(), (1, 2, 4, 4), False),
    ("views", lambda x: x.t().reshape(-1)[1:5].sum() + x.sum(1).max(), (3, 4), False),
])
def test_gradients_match_central_differences(name, f, shape, positive):
    _check(f, *shape, positive=positive)


# ---- grad mode ----

def test_no_grad_enable_grad_and_set_grad_enabled():
    x = local.ones(2, requires_grad=True)
    assert dtr.is_grad_enabled()
    with dtr.no_grad():
        assert not dtr.is_grad_enabled()
        assert not (x * 2).requires_grad
        with dtr.enable_grad():
            assert (x * 2).requires_grad
        assert not dtr.is_grad_enabled()
    assert dtr.is_grad_enabled() and (x * 2).requires_grad

    @dtr.no_grad()
    def f():
        return x * 2

    assert not f().requires_grad and dtr.is_grad_enabled()
    dtr.set_grad_enabled(False)
    assert not dtr.is_grad_enabled()
    dtr.set_grad_enabled(True)
    with dtr.set_grad_enabled(False):
        assert not dtr.is_grad_enabled()
    assert dtr.is_grad_enabled()
    try:
        with dtr.no_grad():
            raise KeyError("x")
    except KeyError:
        pass
    assert dtr.is_grad_enabled()


def test_autograd_grad_returns_gradients_without_accumulating():
    x = local.tensor([1.0, 2.0], requires_grad=True)
    y = local.tensor([3.0], requires_grad=True)
    z = local.tensor([1.0], requires_grad=True)
    out = (x * x).sum() * y.sum()
    gx, gy = dtr.autograd.grad(out, [x, y], retain_graph=True)
    np.testing.assert_array_equal(arr(gx), [6.0, 12.0])
    np.testing.assert_array_equal(arr(gy), [5.0])
    assert x.grad is None
    with pytest.raises(dtr.InvalidArgument):
        dtr.autograd.grad(out, [z], retain_graph=True)
    (gz,) = dtr.autograd.grad(out, [z], allow_unused=True)
    assert gz is None
    a = local.ones(2, requires_grad=True)
    dtr.autograd.backward([(a * 2).sum(), (a * 3).sum()])
    np.testing.assert_array_equal(arr(a.grad), [5.0, 5.0])


# ---- errors ----

def test_errors_are_clear():
    x = local.ones(3)
    with pytest.raises(dtr.InvalidArgument, match="does not require grad"):
        x.sum().backward()
    with pytest.raises(ValueError):  # InvalidArgument is a ValueError
        x.sum().backward()
    w = local.ones(3, requires_grad=True)
    with pytest.raises(dtr.InvalidArgument, match="one-element"):
        (w * 2).backward()
    with pytest.raises(dtr.ShapeError):
        (w * 2).backward(local.ones(2))
    with pytest.raises(dtr.InvalidArgument, match="requires grad and grad mode is on"):
        w.add_(1)
    with dtr.no_grad():
        w.add_(1)  # allowed: what an optimizer step does
    with pytest.raises(dtr.InvalidArgument, match="floating"):
        local.zeros(2, dtype=dtr.int64).requires_grad_()
    with pytest.raises(dtr.InvalidArgument, match="not a leaf"):
        (w * 2).requires_grad_(False)
    with pytest.raises(dtr.ShapeError):
        w.grad = local.ones(4)
    y = (w * w).sum()
    y.backward()
    with pytest.raises(dtr.Error):  # the graph was freed (no retain_graph)
        y.backward()
    with pytest.raises(dtr.InvalidArgument, match="empty parameter list"):
        dtr.optim.SGD([], lr=0.1)
    with pytest.raises(dtr.InvalidArgument, match="does not require grad"):
        dtr.optim.SGD([local.ones(2)], lr=0.1)
    with pytest.raises(dtr.InvalidArgument):
        dtr.optim.SGD([w], lr=-1.0)
    with pytest.raises(dtr.InvalidArgument, match="nesterov"):
        dtr.optim.SGD([w], lr=0.1, nesterov=True)
    with pytest.raises(TypeError):
        dtr.optim.Adam([1.0])


# ---- nn, optim ----

class TinyNet(nn.Module):
    def __init__(self, **where):
        super().__init__()
        self.fc1 = nn.Linear(4, 16, **where)
        self.drop = nn.Dropout(0.0)
        self.fc2 = nn.Linear(16, 3, **where)

    def forward(self, x):
        return F.log_softmax(self.fc2(self.drop(F.relu(self.fc1(x)))), 1)


def _blobs(n=96, seed=3):
    g = dtr.Generator(seed)
    labels = local.tensor([i % 3 for i in range(n)], dtype=dtr.int64)
    centers = local.tensor([[2.0, 0, 0, 1], [0, 2.0, 1, 0], [0, 0, -2.0, 2.0]])
    x = centers.index_select(0, labels) + local.randn(n, 4, generator=g) * 0.3
    return x, labels


def test_module_registration_modes_and_state(tmp_path):
    dtr.manual_seed(1)
    net = TinyNet()
    names = [n for n, _ in net.named_parameters()]
    assert names == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert all(isinstance(p, dtr.LocalTensor) and p.requires_grad for p in net.parameters())
    assert [type(m).__name__ for m in net.children()] == ["Linear", "Dropout", "Linear"]
    assert net.eval() is net and not net.drop.training
    net.train()
    assert net.drop.training
    net.extra = nn.Parameter(local.zeros(2))
    assert isinstance(net.extra, nn.Parameter) and isinstance(net.fc1.weight, nn.Parameter)
    assert not isinstance(local.zeros(2), nn.Parameter)
    assert "extra" in dict(net.named_parameters())
    del net.extra
    state = net.state_dict()
    assert list(state) == names and state["fc1.weight"].shape == (16, 4)
    path = str(tmp_path / "tiny.dtrstate")
    net.save(path)
    dtr.manual_seed(2)
    other = TinyNet()
    assert not np.array_equal(arr(other.fc1.weight), arr(net.fc1.weight))
    other.load(path)
    for a, b in zip(net.parameters(), other.parameters()):
        np.testing.assert_array_equal(arr(a), arr(b))
    with pytest.raises(dtr.InvalidArgument, match="names no parameter"):
        other.load_state_dict({**state, "nope": local.zeros(1)})
    with pytest.raises(dtr.ShapeError):
        other.load_state_dict({**state, "fc2.bias": local.zeros(4)})
    assert "Linear(in_features=4, out_features=16" in repr(net)


def test_same_seed_same_parameters_as_the_cxx_initialization_order():
    # weight then bias, uniform within 1/sqrt(fan_in), from the default generator
    dtr.manual_seed(7)
    lin = nn.Linear(5, 2)
    dtr.manual_seed(7)
    w = local.empty(2, 5).uniform_(-1 / 5 ** 0.5, 1 / 5 ** 0.5)
    b = local.empty(2).uniform_(-1 / 5 ** 0.5, 1 / 5 ** 0.5)
    np.testing.assert_array_equal(arr(lin.weight), arr(w))
    np.testing.assert_array_equal(arr(lin.bias), arr(b))


@pytest.mark.parametrize("opt", ["sgd", "sgd-nesterov", "adam"])
def test_a_local_training_loop_learns(opt):
    dtr.manual_seed(0)
    net = TinyNet()
    x, y = _blobs()
    if opt == "sgd":
        optimizer = dtr.optim.SGD(net.parameters(), lr=0.1, momentum=0.5, weight_decay=1e-4)
    elif opt == "sgd-nesterov":
        optimizer = dtr.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, nesterov=True)
    else:
        optimizer = dtr.optim.Adam(net.parameters(), lr=0.01)
    losses = []
    for _ in range(30):
        optimizer.zero_grad()
        loss = F.nll_loss(net(x), y)
        losses.append(loss.item())
        loss.backward()
        optimizer.step()
    assert losses[-1] < losses[0] / 3, losses


def test_optimizer_step_matches_the_formula():
    p = local.tensor([1.0, -2.0], requires_grad=True)
    opt = dtr.optim.SGD([p], lr=0.5, momentum=0.9)
    for _ in range(2):
        opt.zero_grad()
        (p * local.tensor([1.0, 2.0])).sum().backward()
        opt.step()
    # b1 = g, p1 = p0 - 0.5 g; b2 = 0.9 g + g, p2 = p1 - 0.5 * 1.9 g
    np.testing.assert_allclose(arr(p), [1.0 - 0.5 - 0.95, -2.0 - 1.0 - 1.9], rtol=1e-6)
    assert opt.params[0] is not None and len(opt.params) == 1


# ---- remote: on two workers ----

def test_remote_gradients_are_bit_identical_to_local_ones(session):
    dtr.manual_seed(11)
    remote_net = TinyNet()  # a session runs: parameters on the current node
    assert all(isinstance(p, dtr.Tensor) for p in remote_net.parameters())
    local_net = TinyNet().to_local()
    local_net.load_state_dict(remote_net.state_dict())
    x, y = _blobs(12)
    for net, xx, yy in ((local_net, x, y), (remote_net, dtr.dist_send(x), dtr.dist_send(y))):
        loss = F.cross_entropy(net.fc2(F.relu(net.fc1(xx))), yy)
        loss.backward()
    for (name, a), b in zip(local_net.named_parameters(), remote_net.parameters()):
        assert a.grad is not None and b.grad is not None, name
        np.testing.assert_array_equal(arr(a.grad), arr(b.grad), err_msg=name)


def test_remote_training_on_node_1_with_adam(session):
    dtr.manual_seed(0)
    net = TinyNet(node=1)
    assert {p.get_node() for p in net.parameters()} == {1}
    x, y = _blobs()
    x, y = dtr.dist_send(x, node=1), dtr.dist_send(y, node=1)
    opt = dtr.optim.Adam(net.parameters(), lr=0.01)
    first = None
    for _ in range(20):
        opt.zero_grad()
        loss = F.nll_loss(net(x), y)
        loss.backward()
        opt.step()
        first = first if first is not None else loss.item()
    assert loss.item() < first / 2
    net.to(0)
    assert {p.get_node() for p in net.parameters()} == {0}
    assert all(p.requires_grad and p.grad is None for p in net.parameters())
    assert net(dtr.dist_send(_blobs(6)[0])).get_node() == 0


def test_remote_no_grad_backward_errors_and_to(session):
    x = dtr.ones(3, requires_grad=True)
    assert x.requires_grad and x.grad is None
    y = x.to(1) * 2  # the copy is recorded: the gradient goes back to node 0
    assert y.get_node() == 1 and y.grad_fn
    y.sum().backward()
    assert x.grad.get_node() == 0 and arr(x.grad).tolist() == [2.0, 2.0, 2.0]
    with dtr.no_grad():
        assert not (x * 2).requires_grad
    with pytest.raises(dtr.InvalidArgument, match="does not require grad"):
        dtr.ones(2).sum().backward()
    with pytest.raises(TypeError):
        dtr.autograd.backward([x.sum(), local.ones(1)])  # not one tensor class
    r = dtr.randn(2, 2, requires_grad=True, node=1)
    assert r.requires_grad and r.get_node() == 1


def test_differentiable_all_reduce_between_workers(session):
    xs = [dtr.tensor([1.0, 2.0], node=k, requires_grad=True) for k in range(2)]
    ys = dtr.autograd.all_reduce(xs)
    assert [arr(y).tolist() for y in ys] == [[2.0, 4.0], [2.0, 4.0]]
    assert arr(xs[0]).tolist() == [1.0, 2.0]  # the inputs are left as they are
    dtr.autograd.backward([(ys[0] * 3).sum(), ys[1].sum()])
    # d/dx_k of 3 sum(y_0) + sum(y_1), y_j = x_0 + x_1: 4 for every element
    assert [arr(x.grad).tolist() for x in xs] == [[4.0, 4.0], [4.0, 4.0]]


# ---- data ----

def test_data_synthetic_mnist_idx_and_partitioner(tmp_path):
    files = dtr.data.write_synthetic_mnist(str(tmp_path / "m"), 40, seed=3)
    m = dtr.data.load_mnist(files.images, files.labels)
    assert m.images.shape == (40, 1, 28, 28) and m.images.dtype == dtr.float32
    assert m.labels.shape == (40,) and m.labels.dtype == dtr.int64
    idx = dtr.data.read_idx(files.labels)
    assert idx.type == dtr.data.IdxType.UInt8 and idx.values.shape == (40,)
    np.testing.assert_array_equal(arr(idx.values), arr(m.labels))
    p = str(tmp_path / "x.idx")
    dtr.data.write_idx(p, local.tensor([[1.5, 2.0]]), dtr.data.IdxType.Float32)
    assert arr(dtr.data.read_idx(p).values).tolist() == [[1.5, 2.0]]
    with open(p, "ab") as f:
        f.write(b"\0")
    with pytest.raises(dtr.InvalidArgument, match="x.idx"):
        dtr.data.read_idx(p)
    part = dtr.data.DataPartitioner(100, [0.5, 0.3])
    indexes = list(range(100))
    Random(1234).shuffle(indexes)  # the tutorial's partitioner, in Python
    assert len(part) == 2 and list(part.use(0)) == indexes[:50] and list(part.use(1)) == \
        indexes[50:80]
    with pytest.raises(IndexError):
        part.use(2)
    rows = dtr.data.gather_rows(m.images, [3, 1])
    np.testing.assert_array_equal(arr(rows)[1], arr(m.images)[1])


# ---- against torch, where an interpreter has it ----

TORCH_SCRIPT = r"""
import json, sys, numpy as np, torch, torch.nn.functional as F
d = np.load(sys.argv[1])
ps = {k: torch.tensor(d[k], requires_grad=True) for k in d.files if k not in ("x", "y")}
x, y = torch.tensor(d["x"]), torch.tensor(d["y"])
h = F.relu(F.max_pool2d(F.conv2d(x, ps["c.w"], ps["c.b"]), 2))
h = F.log_softmax(F.linear(h.reshape(h.shape[0], -1), ps["l.w"], ps["l.b"]), 1)
loss = F.nll_loss(h, y)
loss.backward()
np.savez(sys.argv[2], loss=loss.detach().numpy(), **{k: p.grad.numpy() for k, p in ps.items()})
"""


def test_a_small_net_matches_torch():
    exe = torch_python()
    if exe is None:
        pytest.skip("no interpreter with torch and numpy")
    dtr.manual_seed(3)
    conv, lin = nn.Conv2d(1, 4, 3).to_local(), nn.Linear(4 * 3 * 3, 5).to_local()
    g = dtr.Generator(9)
    x = local.randn(6, 1, 8, 8, generator=g)
    y = local.tensor([0, 1, 2, 3, 4, 0], dtype=dtr.int64)
    out = F.relu(F.max_pool2d(conv(x), 2))
    loss = F.nll_loss(F.log_softmax(lin(out.reshape(6, -1)), 1), y)
    loss.backward()
    with tempfile.TemporaryDirectory() as tmp:
        inp, res = os.path.join(tmp, "in.npz"), os.path.join(tmp, "out.npz")
        np.savez(inp, x=arr(x), y=arr(y), **{"c.w": arr(conv.weight), "c.b": arr(conv.bias),
                                             "l.w": arr(lin.weight), "l.b": arr(lin.bias)})
        r = subprocess.run([exe, "-c", TORCH_SCRIPT, inp, res], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        ref = dict(np.load(res))
    assert abs(float(ref["loss"]) - loss.item()) < 1e-5
    for key, p in (("c.w", conv.weight), ("c.b", conv.bias), ("l.w", lin.weight),
                   ("l.b", lin.bias)):
        np.testing.assert_allclose(arr(p.grad), ref[key], rtol=1e-4, atol=1e-6, err_msg=key)


def test_sequential_losses_and_local_to_remote(session):
    dtr.manual_seed(4)
    seq = nn.Sequential(nn.Flatten(), nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 3),
                        nn.LogSoftmax(1)).to_local()
    assert len(seq) == 5 and isinstance(seq[1], nn.Linear)
    assert [n for n, _ in seq.named_parameters()] == ["1.weight", "1.bias", "3.weight",
                                                      "3.bias"]
    x = local.randn(5, 2, 4, generator=dtr.Generator(1))
    y = local.tensor([0, 1, 2, 0, 1], dtype=dtr.int64)
    out = seq(x)
    a = nn.NLLLoss()(out, y).item()
    b = nn.CrossEntropyLoss()(seq[3](seq[2](seq[1](seq[0](x)))), y).item()
    assert abs(a - b) < 1e-6
    assert abs(nn.MSELoss()(out, out * 0).item() - (out * out).mean().item()) < 1e-6
    seq.to(node=1)  # local parameters sent to node 1
    assert {(type(p).__name__, p.get_node()) for p in seq.parameters()} == {("Tensor", 1)}
    r = seq(dtr.dist_send(x, node=1))
    np.testing.assert_allclose(arr(r), arr(out), rtol=1e-6)


SPMD_SCRIPT = r"""
import dtr, dtr.distributed as dist, dtr.nn.functional as F
dist.init_process_group(BACKEND)
rank = dist.get_rank()
x = dtr.local.full((2,), float(rank + 1), requires_grad=True)
y = F.all_reduce(x * 2)                     # differentiable: sum over ranks of 2 x
(y * (rank + 1)).sum().backward()           # backward all-reduces the gradient
print("rank", rank, y.tolist(), x.grad.tolist(), flush=True)
dist.destroy_process_group()
"""


@pytest.mark.parametrize("backend", ["zmq", "gloo"])
def test_spmd_differentiable_all_reduce(tmp_path, backend):
    from conftest import run_python
    import dtr.distributed as dist
    if not dist.is_backend_available(backend):
        pytest.skip(f"this dtr is built without {backend}")
    script = tmp_path / "spmd_ar.py"
    script.write_text(SPMD_SCRIPT.replace("BACKEND", repr(backend)))
    r = run_python(["-m", "dtr.exec", "-n", "2", "--timeout", "60", str(script)], timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = sorted(x for x in r.stdout.splitlines() if "rank" in x)
    # y = 2 (x0 + x1) = [6, 6] on both; d/dx_k of sum_r (r + 1) sum(y_r) = 2 * (1 + 2) = 6
    assert lines == ["[0] rank 0 [6.0, 6.0] [6.0, 6.0]", "[1] rank 1 [6.0, 6.0] [6.0, 6.0]"], \
        r.stdout


def test_clone_of_a_tracked_local_tensor_passes_the_gradient():
    # LocalTensor.clone used to copy outside the graph: x.grad stayed None, silently.
    x = local.ones(3, dtype=dtr.float64).requires_grad_()
    y = x.clone()
    assert y.requires_grad and not y.is_leaf
    (y * 2).sum().backward()
    assert arr(x.grad).tolist() == [2.0, 2.0, 2.0]
    assert not local.ones(2).clone().requires_grad  # untracked: a plain copy
