"""Distributed synchronous SGD (the tutorial's example) with dtr.distributed: each rank
trains a replica of a small two-layer network on its partition of the data set (the
tutorial's DataPartitioner); after each batch the gradients are averaged with all_reduce,
so every replica stays identical. Gradients are written out by hand (dtr has no autograd).
Run: python -m dtr.exec -n 2 sgd.py [--epochs 10]"""

import argparse
import hashlib
from random import Random

import numpy as np

import dtr
import dtr.distributed as dist
from dtr import local

INPUTS, HIDDEN, SAMPLES, GLOBAL_BATCH, LR = 8, 32, 4096, 64, 0.1


def make_dataset():
    """A regression set made from a fixed seed: the same on every rank."""
    gen = dtr.Generator(1234)
    a = local.randn(INPUTS, 16, generator=gen) * 0.5
    b = local.randn(16, 1, generator=gen)
    x = local.randn(SAMPLES, INPUTS, generator=gen)
    noise = local.randn(SAMPLES, 1, generator=gen) * 0.05
    return x.numpy(), (x.matmul(a).tanh().matmul(b) + noise).numpy()


class DataPartitioner:
    """Partitions a dataset into different chunks (a seeded shuffle of the indices)."""

    def __init__(self, n, sizes, seed=1234):
        rng = Random()
        rng.seed(seed)
        indexes = list(range(n))
        rng.shuffle(indexes)
        self.partitions = []
        for frac in sizes:
            part_len = int(frac * n)
            self.partitions.append(indexes[:part_len])
            indexes = indexes[part_len:]

    def use(self, partition):
        return self.partitions[partition]


def average_gradients(grads):
    """Gradient averaging."""
    size = float(dist.get_world_size())
    for g in grads:
        dist.all_reduce(g, op=dist.ReduceOp.SUM)
        g /= size


def step(params, x, y):
    """One forward and backward pass of tanh(x w1 + b1) w2 + b2 with the MSE loss."""
    w1, b1, w2, b2 = params
    h = (x.matmul(w1) + b1).tanh()
    out = h.matmul(w2) + b2
    diff = out - y
    loss = (diff * diff).mean().item()
    d_out = diff * (2.0 / x.shape[0])
    g_w2 = h.t().matmul(d_out)
    g_b2 = d_out.sum(0)
    d_h = d_out.matmul(w2.t()) * (1 - h * h)
    g_w1 = x.t().matmul(d_h)
    g_b1 = d_h.sum(0)
    return loss, [g.contiguous() for g in (g_w1, g_b1, g_w2, g_b2)]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=10)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    x_all, y_all = make_dataset()
    rows = DataPartitioner(SAMPLES, [1.0 / size] * size).use(rank)
    x, y = x_all[rows], y_all[rows]
    bsz = GLOBAL_BATCH // size
    gen = dtr.Generator(7)  # the same initial parameters on every rank
    params = [local.randn(INPUTS, HIDDEN, generator=gen) * 0.3, local.zeros(HIDDEN),
              local.randn(HIDDEN, 1, generator=gen) * 0.3, local.zeros(1)]
    num_batches = len(rows) // bsz
    for epoch in range(args.epochs):
        epoch_loss = 0.0
        for i in range(num_batches):
            xb = local.from_numpy(np.ascontiguousarray(x[i * bsz:(i + 1) * bsz]))
            yb = local.from_numpy(np.ascontiguousarray(y[i * bsz:(i + 1) * bsz]))
            loss, grads = step(params, xb, yb)
            epoch_loss += loss
            average_gradients(grads)
            for w, g in zip(params, grads):
                w -= g * LR
        print(f"Rank {rank}, epoch {epoch}: {epoch_loss / num_batches:.6f}")
    digest = hashlib.sha256(b"".join(w.numpy().tobytes() for w in params)).hexdigest()[:16]
    print(f"Rank {rank} parameters {digest}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
