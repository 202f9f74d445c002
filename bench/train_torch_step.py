"""torch's side of dtr_train_bench: one training step of the seed tutorial's Net (batch 64,
CPU, forward, nll_loss, backward, SGD lr 0.01 momentum 0.5), the median steps/s of the
repeats. Prints "torch steps/s R"."""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

# The seed's Net, written once (with the test that checks dtr's against it).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "training"))
from seed_net_torch import Net  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=3)
    a = p.parse_args()
    torch.manual_seed(1234)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.5)
    x = torch.randn(64, 1, 28, 28)
    y = torch.randint(0, 10, (64,))

    def step():
        opt.zero_grad()
        loss = F.nll_loss(net(x), y)
        loss.backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    rates = []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        for _ in range(a.steps):
            step()
        rates.append(a.steps / (time.perf_counter() - t0))
    rates.sort()
    print("torch threads %d" % torch.get_num_threads())
    print("torch steps/s %.3f" % rates[len(rates) // 2])


if __name__ == "__main__":
    main()
