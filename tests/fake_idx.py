"""Small MNIST-format data sets for tests: IDX files written from NumPy arrays."""
import gzip
import struct
from pathlib import Path

import numpy as np


def idx_bytes(array: np.ndarray, code: int = 0x08) -> bytes:
    """The IDX encoding of a uint8 array: magic 00 00 <code> <ndim>, big-endian dims, payload."""
    header = struct.pack(f">2xBB{array.ndim}I", code, array.ndim, *array.shape)
    return header + np.ascontiguousarray(array, np.uint8).tobytes()


def write_idx(path: Path, array: np.ndarray, gz: bool = True) -> Path:
    data = idx_bytes(array)
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
    return path


def write_dataset(directory: Path, n_train: int = 6_100, n_test: int = 50, gz: bool = True,
                  seed: int = 0) -> Path:
    """The four files of a fake data set in directory (created); labels are row % 10."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    suffix = ".gz" if gz else ""
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)  # (n, 28, 28) uint8
        labels = (np.arange(n) % 10).astype(np.uint8)  # (n,) uint8
        write_idx(directory / f"{prefix}-images-idx3-ubyte{suffix}", images, gz)
        write_idx(directory / f"{prefix}-labels-idx1-ubyte{suffix}", labels, gz)
    return directory
