"""The seed's Net in torch against dtr's on the same weights and batch.

Also the one torch definition of the Net: bench/train_torch_step.py imports it.

Reads the state file seed_net_dump wrote (format: nn/state_file.cpp) and checks, within
float32 tolerance: the outputs in eval mode and in training mode (torch's dropouts replaced
by dtr's masks), every parameter's gradient in both modes, and the parameters after one
SGD step (lr 0.01, momentum 0.5). Exits 77 (skipped) where torch is missing.
"""
import struct
import sys

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    print("SKIPPED: torch is not installed (Debian: apt-get install python3-torch)")
    sys.exit(77)


def read_state(path):
    data = open(path, "rb").read()
    assert data[:8] == b"DTRSTATE", "not a dtr state file"
    version, count = struct.unpack_from("<II", data, 8)
    assert version == 1
    pos, out = 16, {}
    for _ in range(count):
        (n,) = struct.unpack_from("<I", data, pos)
        name = data[pos + 4:pos + 4 + n].decode()
        pos += 4 + n
        dtype, ndim = struct.unpack_from("<BB", data, pos)
        pos += 2
        shape = struct.unpack_from("<%dq" % ndim, data, pos)
        pos += 8 * ndim
        (nbytes,) = struct.unpack_from("<Q", data, pos)
        pos += 8
        t = torch.frombuffer(bytearray(data[pos:pos + nbytes]),
                             dtype=torch.float32 if dtype == 0 else torch.float64)
        out[name] = t.reshape(shape)
        pos += nbytes
    return out


class Net(nn.Module):
    """The seed's network, as written."""

    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


class Masked(nn.Module):
    """Dropout with a given keep mask: x * mask / (1 - p)."""

    def __init__(self, mask, p=0.5):
        super(Masked, self).__init__()
        self.mask, self.p = mask, p

    def forward(self, t):
        return t * self.mask / (1 - self.p)


failures = []


def check(what, got, want, rtol=1e-4, atol=1e-5):
    scale = max(want.abs().max().item(), 1e-30)
    err = (got - want).abs().max().item()
    ok = torch.allclose(got, want, rtol=rtol, atol=atol * max(scale, 1.0))
    print("%-34s max |diff| %.3g (scale %.3g) %s" % (what, err, scale, "ok" if ok else "FAIL"))
    if not ok:
        failures.append(what)


def main():
    s = read_state(sys.argv[1])
    torch.manual_seed(0)
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    net.load_state_dict({n: s["param." + n] for n in names})
    x, target = s["input"], s["target"].long()

    net.eval()
    y = net(x)
    check("output (eval)", y, s["out.eval"])
    F.nll_loss(y, target).backward()
    for n, p in net.named_parameters():
        check("grad %s (eval)" % n, p.grad, s["grad.eval." + n])
    net.zero_grad()

    # Training mode with dtr's masks: Dropout2d and dropout as x * mask / (1 - p).
    net.train()
    net.conv2_drop = Masked(s["mask.conv2_drop"])
    real_dropout = F.dropout
    F.dropout = lambda t, training=True, p=0.5: t * s["mask.dropout"] / (1 - p)
    try:
        y = net(x)
    finally:
        F.dropout = real_dropout
    check("output (train)", y, s["out.train"])
    loss = F.nll_loss(y, target)
    check("loss (train)", loss.view(1), s["loss.train"])
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.5)
    loss.backward()
    for n, p in net.named_parameters():
        check("grad %s (train)" % n, p.grad, s["grad.train." + n])
    opt.step()
    for n, p in net.named_parameters():
        check("after SGD step %s" % n, p.detach(), s["step." + n], rtol=1e-6, atol=1e-7)
    if failures:
        print("seed_net_torch: %d checks failed: %s" % (len(failures), ", ".join(failures)))
        sys.exit(1)
    print("seed_net_torch: ok (torch %s)" % torch.__version__)


if __name__ == "__main__":
    main()
