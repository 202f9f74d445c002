"""State files of modules (dtr::nn)."""

from collections.abc import Sequence

import dtr._dtr


def save_state(path: str, tensors: Sequence[tuple[str, dtr._dtr.LocalTensor]]) -> None:
    """
    Writes (name, float32/float64 LocalTensor) pairs to a versioned, checksummed file.
    """

def load_state(path: str) -> list[tuple[str, dtr._dtr.LocalTensor]]:
    """Reads a file save_state wrote: a list of (name, LocalTensor)."""
