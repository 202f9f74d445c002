"""Data for training (dtr::data, include/dtr/data.hpp): IDX files (MNIST's format) read
strictly and written, MNIST as normalized tensors, synthetic MNIST-like files for tests and
demos, and the seed tutorial's DataPartitioner (Python's exact seeded shuffle).

    files = dtr.data.write_synthetic_mnist("/tmp/mnist", 1024, seed=1234)
    mnist = dtr.data.load_mnist(files.images, files.labels)   # images (N, 1, 28, 28)
    part = dtr.data.DataPartitioner(len(mnist.labels), [0.5, 0.5]).use(rank)
    images = dtr.data.gather_rows(mnist.images, part)

Reader errors are dtr.InvalidArgument naming the file and what is wrong. File reads and
writes release the GIL.
"""

from __future__ import annotations

from . import _dtr

_d = _dtr.data
IdxType = _d.IdxType
IdxFile = _d.IdxFile
Mnist = _d.Mnist
MnistFiles = _d.MnistFiles
DataPartitioner = _d.DataPartitioner
read_idx = _d.read_idx
write_idx = _d.write_idx
load_mnist = _d.load_mnist
write_synthetic_mnist = _d.write_synthetic_mnist
gather_rows = _d.gather_rows

__all__ = ["IdxType", "IdxFile", "Mnist", "MnistFiles", "DataPartitioner", "read_idx",
           "write_idx", "load_mnist", "write_synthetic_mnist", "gather_rows"]
