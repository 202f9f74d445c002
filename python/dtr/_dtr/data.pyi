"""Data for training (dtr::data)."""

from collections.abc import Sequence
import enum

import dtr._dtr


class IdxType(enum.Enum):
    """The element type of an IDX file."""

    UInt8 = 8

    Int8 = 9

    Int16 = 11

    Int32 = 12

    Float32 = 13

    Float64 = 14

class IdxFile:
    """An IDX file's type and values."""

    @property
    def type(self) -> IdxType: ...

    @property
    def values(self) -> dtr._dtr.LocalTensor:
        """
        int32 for the integer types, else float32 or float64, with the file's dims
        """

def read_idx(path: str) -> IdxFile:
    """Reads an IDX file strictly (InvalidArgument naming what is wrong)."""

def write_idx(path: str, values: dtr._dtr.LocalTensor, type: IdxType) -> None: ...

class Mnist:
    """MNIST images and labels."""

    @property
    def images(self) -> dtr._dtr.LocalTensor:
        """
        float32 (N, 1, H, W), normalized as the seed: (x / 255 - 0.1307) / 0.3081
        """

    @property
    def labels(self) -> dtr._dtr.LocalTensor:
        """int64 (N)"""

def load_mnist(images: str, labels: str) -> Mnist: ...

class MnistFiles:
    """The paths of an image and a label file."""

    @property
    def images(self) -> str: ...

    @property
    def labels(self) -> str: ...

def write_synthetic_mnist(dir: str, n: int, seed: int = ...) -> MnistFiles:
    """
    Writes n synthetic 28x28 MNIST-like samples into dir under MNIST's file names (same seed, same bytes).
    """

class DataPartitioner:
    """
    The tutorial's DataPartitioner: 0..n-1 shuffled by random.Random(seed).shuffle, cut into pieces of int(fraction * n) indices.
    """

    def __init__(self, n: int, sizes: Sequence[float] = ..., seed: int = ...) -> None: ...

    def use(self, partition: int) -> list[int]:
        """The indices of a partition (IndexError for one that does not exist)."""

    def __len__(self) -> int: ...

def gather_rows(tensor: dtr._dtr.LocalTensor, rows: Sequence[int]) -> dtr._dtr.LocalTensor:
    """The rows of tensor (dim 0) stacked into a new tensor."""
