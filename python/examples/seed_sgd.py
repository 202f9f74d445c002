"""The seed tutorial 003 ("Distributed Synchronous SGD") as its author wrote it, with dtr in
place of torch: MNIST split by the DataPartitioner (one partition per rank), the
tutorial's Net, batches of 128 / world size, SGD(lr=0.01, momentum=0.5), the gradients
averaged with all_reduce after every backward. Autograd, the layers and the optimizer are
dtr's C++ ones; examples/seed_sgd.cpp is the same program in C++, and both print the same
parameter hashes.

Run: python -m dtr.exec -n 2 seed_sgd.py          # SPMD: two ranks, process groups
     python -m dtr.exec --workers 2 seed_sgd.py   # one master, a replica on each worker
Options: --epochs N (10), --batches N (at most N batches per epoch), --samples N (2048
synthetic samples), --images PATH --labels PATH (real MNIST IDX files).

Without --images/--labels the data is synthetic MNIST (dtr.data.write_synthetic_mnist).
Each epoch shuffles the partition (the DataLoader's shuffle=True) with
random.Random(1234 + epoch), the same on every rank. As in examples/seed_net.hpp, the
dropout draws come from a generator each replica owns (seeded 1234), so that replicas
driven from one master draw what ranks in their own processes draw. Printed per epoch and
rank: the mean loss; at the end an FNV-1a hash of the parameters' bytes, the same on every
rank and in both modes.
"""

import argparse
import os
from math import ceil
from random import Random

import dtr
import dtr.distributed as dist
import dtr.nn as nn
import dtr.nn.functional as F
import dtr.optim as optim


class Partition(object):
    """Dataset-like object, but only access a subset of it."""

    def __init__(self, data, index):
        self.data = data
        self.index = index

    def __len__(self):
        return len(self.index)


class DataPartitioner(object):
    """Partitions a dataset into different chunks."""

    def __init__(self, data, sizes=[0.7, 0.2, 0.1], seed=1234):
        self.data = data
        self.partitions = []
        rng = Random()
        rng.seed(seed)
        data_len = len(data)
        indexes = [x for x in range(0, data_len)]
        rng.shuffle(indexes)

        for frac in sizes:
            part_len = int(frac * data_len)
            self.partitions.append(indexes[0:part_len])
            indexes = indexes[part_len:]

    def use(self, partition):
        return Partition(self.data, self.partitions[partition])


class DataLoader(object):
    """torch.utils.data.DataLoader(partition, batch_size, shuffle=True) over (images,
    labels): batches gathered with dtr.data.gather_rows, shuffled per epoch."""

    def __init__(self, partition, batch_size, max_batches=None):
        self.dataset = partition
        self.batch_size = batch_size
        self.max_batches = max_batches
        self.epoch = 0

    def __iter__(self):
        order = list(range(len(self.dataset)))
        Random(1234 + self.epoch).shuffle(order)
        self.epoch += 1
        rows = [self.dataset.index[i] for i in order]
        images, labels = self.dataset.data
        for b, start in enumerate(range(0, len(rows), self.batch_size)):
            if self.max_batches is not None and b >= self.max_batches:
                return
            batch = rows[start:start + self.batch_size]
            yield dtr.data.gather_rows(images, batch), dtr.data.gather_rows(labels, batch)


class MnistData(object):
    def __init__(self, mnist):
        self.images, self.labels = mnist.images, mnist.labels

    def __len__(self):
        return self.labels.shape[0]

    def __iter__(self):
        return iter((self.images, self.labels))


class Net(nn.Module):
    """Network architecture."""

    def __init__(self, dropout_generator=None):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d(generator=dropout_generator)
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)
        self.generator = dropout_generator

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training, generator=self.generator)
        x = self.fc2(x)
        return F.log_softmax(x)


def load_dataset(args):
    if args.images:
        return MnistData(dtr.data.load_mnist(args.images, args.labels))
    files = dtr.data.write_synthetic_mnist(os.path.join(args.data_dir, str(os.getpid())),
                                           args.samples, 1234)
    return MnistData(dtr.data.load_mnist(files.images, files.labels))


def partition_dataset(args):
    """Partitioning MNIST"""
    dataset = load_dataset(args)
    size = dist.get_world_size()
    bsz = 128 // size
    partition_sizes = [1.0 / size for _ in range(size)]
    partition = DataPartitioner(dataset, partition_sizes)
    partition = partition.use(dist.get_rank())
    train_set = DataLoader(partition, batch_size=bsz, max_batches=args.batches)
    return train_set, bsz


def average_gradients(model):
    """Gradient averaging."""
    size = float(dist.get_world_size())
    for param in model.parameters():
        dist.all_reduce(param.grad.data, op=dist.reduce_op.SUM, group=0)
        param.grad.data /= size


def parameters_hash(model):
    h = 1469598103934665603
    for p in model.parameters():
        for byte in p.detach().contiguous().numpy().tobytes():
            h = ((h ^ byte) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def run(rank, size, args):
    """Distributed Synchronous SGD Example"""
    dtr.manual_seed(1234)
    train_set, bsz = partition_dataset(args)
    model = Net(dtr.Generator(1234))
    optimizer = optim.SGD(model.parameters(), lr=0.01, momentum=0.5)

    num_batches = ceil(len(train_set.dataset) / float(bsz))
    if args.batches is not None:
        num_batches = min(num_batches, args.batches)
    for epoch in range(args.epochs):
        epoch_loss = 0.0
        for data, target in train_set:
            optimizer.zero_grad()
            output = model(data)
            loss = F.nll_loss(output, target)
            epoch_loss += loss.item()
            loss.backward()
            average_gradients(model)
            optimizer.step()
        print('Rank ', dist.get_rank(), ', epoch ', epoch, ': ', epoch_loss / num_batches,
              flush=True)
    print(f"Rank {rank} parameters fnv1a64 {parameters_hash(model)}", flush=True)


def run_master(args):
    """The same from one master: a replica per worker (parameters, data and every op on its
    node), the gradient averaging a master-issued all_reduce among the workers."""
    size = dtr.node_count()
    dataset = load_dataset(args)
    bsz = 128 // size
    partitioner = DataPartitioner(dataset, [1.0 / size for _ in range(size)])
    loaders, models, optimizers = [], [], []
    for k in range(size):
        with dtr.node(k):
            dtr.manual_seed(1234)  # every replica starts from the same parameters
            models.append(Net(dtr.Generator(1234)))
        optimizers.append(optim.SGD(models[k].parameters(), lr=0.01, momentum=0.5))
        loaders.append(DataLoader(partitioner.use(k), batch_size=bsz, max_batches=args.batches))
    num_batches = ceil(len(loaders[0].dataset) / float(bsz))
    if args.batches is not None:
        num_batches = min(num_batches, args.batches)
    for epoch in range(args.epochs):
        losses = [dtr.zeros((), node=k) for k in range(size)]
        for batches in zip(*loaders):
            for k, (data, target) in enumerate(batches):
                data, target = dtr.dist_send(data, node=k), dtr.dist_send(target, node=k)
                optimizers[k].zero_grad()
                loss = F.nll_loss(models[k](data), target)
                with dtr.no_grad():
                    losses[k] += loss
                loss.backward()
            params = [list(m.parameters()) for m in models]
            for i in range(len(params[0])):  # average_gradients, worker to worker
                grads = [p[i].grad for p in params]
                dtr.all_reduce(grads, dtr.ReduceOp.SUM)
                for g in grads:
                    g /= float(size)
            for opt in optimizers:
                opt.step()
        for k in range(size):
            print('Node ', k, ', epoch ', epoch, ': ', losses[k].item() / num_batches, flush=True)
    for k in range(size):
        print(f"Node {k} parameters fnv1a64 {parameters_hash(models[k].to_local())}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batches", type=int, default=None, help="at most N batches per epoch")
    p.add_argument("--samples", type=int, default=2048, help="synthetic MNIST samples")
    p.add_argument("--data-dir", default="/tmp/dtr-seed-mnist")
    p.add_argument("--images", default="")
    p.add_argument("--labels", default="")
    args = p.parse_args()
    if os.environ.get("DTR_WORKERS") and not os.environ.get("RANK"):
        dtr.init_master_worker()
        run_master(args)
        dtr.shutdown_master_worker()
        return
    dist.init_process_group("gloo")
    run(dist.get_rank(), dist.get_world_size(), args)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
