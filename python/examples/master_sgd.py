"""sgd.py's synchronous SGD driven from one master: every worker holds a replica of the
model and its partition of the data; each step the master queues the forward and backward
pass on every node, then one all_reduce per gradient among the workers (worker to worker:
the master never carries those bytes), then the update. It waits only to print the loss
once per epoch. Same data, partition, model and arithmetic as sgd.py, so with as many
workers as sgd.py has ranks both end with the same parameters, bit for bit.
Run: python -m dtr.exec --workers 2 master_sgd.py [--epochs 10]"""

import argparse
import hashlib

import dtr
from sgd import GLOBAL_BATCH, HIDDEN, INPUTS, LR, SAMPLES, DataPartitioner, make_dataset
from dtr import local


class Replica:
    """One node's data and copy of the parameters, all on that node."""

    def __init__(self, node, x, y, params, batch):
        self.node, self.batch = node, batch
        self.x, self.y = dtr.dist_send(x, node=node), dtr.dist_send(y, node=node)
        self.params = [dtr.dist_send(p, node=node) for p in params]
        self.loss = dtr.zeros((), node=node)

    def forward_backward(self, step):
        """Queues one step's passes on the node; returns the gradients (remote tensors)."""
        b = self.batch
        x, y = self.x[step * b:(step + 1) * b], self.y[step * b:(step + 1) * b]
        w1, b1, w2, b2 = self.params
        h = (x.matmul(w1) + b1).tanh()
        diff = h.matmul(w2) + b2 - y
        self.loss += (diff * diff).mean()
        d_out = diff * (2.0 / b)
        d_h = d_out.matmul(w2.t()) * (1 - h * h)
        return [x.t().matmul(d_h), d_h.sum(0), h.t().matmul(d_out), d_out.sum(0)]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=10)
    args = p.parse_args()
    dtr.init_master_worker()  # DTR_WORKERS (python -m dtr.exec --workers N sets it)
    n = dtr.node_count()
    x_all, y_all = make_dataset()
    parts = DataPartitioner(SAMPLES, [1.0 / n] * n)
    gen = dtr.Generator(7)  # sgd.py's initial parameters
    init = [local.randn(INPUTS, HIDDEN, generator=gen) * 0.3, local.zeros(HIDDEN),
            local.randn(HIDDEN, 1, generator=gen) * 0.3, local.zeros(1)]
    bsz = GLOBAL_BATCH // n
    replicas = [Replica(k, x_all[parts.use(k)], y_all[parts.use(k)], init, bsz) for k in range(n)]
    steps = len(parts.use(0)) // bsz
    for epoch in range(args.epochs):
        for r in replicas:
            r.loss.zero_()
        for step in range(steps):
            grads = [r.forward_backward(step) for r in replicas]
            for i in range(len(init)):
                dtr.all_reduce([g[i] for g in grads], dtr.ReduceOp.SUM)  # among the workers
            for r, g in zip(replicas, grads):
                for w, gi in zip(r.params, g):
                    gi /= float(n)
                    w -= gi * LR
        for r in replicas:  # sync points
            print(f"node {r.node}, epoch {epoch}: {r.loss.item() / steps:.6f}")
    for r in replicas:
        data = b"".join(w.to_local().numpy().tobytes() for w in r.params)
        print(f"node {r.node} parameters {hashlib.sha256(data).hexdigest()[:16]}")
    dtr.shutdown_master_worker()


if __name__ == "__main__":
    main()
