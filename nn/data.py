"""MNIST-format data sets: find (or download and verify) the four IDX files, check them, split them.

The split is CME 213's: the first 54,000 training images train, the last 6,000 validate, and the
10,000 test images test. One image per row of X; pixels stay 0..255 unless ``scale="unit"``.

    python -m nn.data [--dataset NAME] [--data-dir DIR]    # fetch if needed, print where and sizes
"""
if __name__ == "__main__":  # first: a stop signal while the modules below load ends in one line, no traceback
    from autogemm import signals

    signals.starting()

import errno
import functools
import gzip
import hashlib
import http.client
import os
import struct
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from autogemm import cache_dir, files
from nn.backends.base import host_free_bytes
from nn.errors import ArgumentParser, NNError, exit_status


class DataError(NNError):
    """A missing, corrupt or unverifiable data file, or a bad argument to the loader."""


@dataclass(frozen=True)
class Split:
    x: np.ndarray  # (N, 784) float, one image per row, C-contiguous
    y: np.ndarray  # (N,) int64 labels 0..9


@dataclass(frozen=True)
class Dataset:
    name: str
    train: Split
    val: Split
    test: Split
    source: str  # the directory the files came from
    classes: int = 10


# ---------------------------------------------------------------- the data sets and where they live

DATASETS = ("fashion-mnist", "mnist")
FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",  # each may be gzipped (.gz) or not
         "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
N_VAL = 6_000  # the last rows of the training files
SCALES = ("raw", "unit")
SYSTEM_DIRS = {"fashion-mnist": Path("/usr/share/datasets/fashion-mnist")}  # Debian's package
MIRRORS = {
    "fashion-mnist": ("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
                      "https://github.com/zalandoresearch/fashion-mnist/raw/master/data/fashion/"),
    "mnist": ("https://ossci-datasets.s3.amazonaws.com/mnist/",
              "https://storage.googleapis.com/cvdf-datasets/mnist/"),
}
# SHA-256 of each .gz file a download may deliver. Fashion-MNIST: the upstream file first, then
# Debian's repack (the same IDX bytes; its gzip header lacks the file name), so that a mirror of
# /usr/share/datasets/fashion-mnist verifies too. MNIST: as in tensorflow-datasets' url_checksums.
SHA256 = {
    "fashion-mnist": {
        "train-images-idx3-ubyte.gz": (
            "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
            "b0564c3eedabfbf835052cff8503ea422014ce006caf5b757f851416ee8300c7"),
        "train-labels-idx1-ubyte.gz": (
            "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
            "0ae29f65d86684f32d1b9c85147786c547b9c6aebcaf235f0400a0cce308b056"),
        "t10k-images-idx3-ubyte.gz": (
            "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
            "cc1d090a38ace84dfa1aa66e3ada7c336ef481a96936906477e6dd344da56eaa"),
        "t10k-labels-idx1-ubyte.gz": (
            "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5",
            "8d3605d196f4be44669e46906da9733c8131fef761fdbfec72c424d5222f1a05"),
    },
    "mnist": {
        "train-images-idx3-ubyte.gz": (
            "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",),
        "train-labels-idx1-ubyte.gz": (
            "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",),
        "t10k-images-idx3-ubyte.gz": (
            "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",),
        "t10k-labels-idx1-ubyte.gz": (
            "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",),
    },
}
TIMEOUT_S = 30  # per read of an HTTP response
DEADLINE_S = 600  # per file
MAX_DOWNLOAD_BYTES = 64 << 20  # the largest .gz of both data sets is 26 MB
MAX_IDX_BYTES = 1 << 30  # the most an IDX file may hold (MNIST's training images: 47 MB), gzipped or not
MAX_ROWS = 1_000_000  # the most images or labels an IDX file may hold: MNIST's and Fashion-MNIST's training
#                      sets have 60,000, EMNIST's digits 240,000 (a header that claims more is a bomb or a mistake)
MAX_DEFLATE_RATIO = 1032  # deflate never packs more than 1032 bytes into one: the most a .gz of n bytes inflates to


# ---------------------------------------------------------------- loading

def load_dataset(name="fashion-mnist", data_dir=None, scale="raw", dtype=np.float64,
                 train_size=None) -> Dataset:
    """The data set split 54,000 / 6,000 / 10,000; ``train_size`` keeps the first n train rows."""
    if scale not in SCALES:
        raise DataError(f"data: scale must be one of {', '.join(SCALES)}, not {scale!r}")
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        raise DataError(f"data: {dtype!r} is not a NumPy dtype") from None
    if dtype.kind != "f":
        raise DataError(f"data: dtype must be a floating type, not {dtype}")
    directory = locate(name, data_dir)
    rows = sum(_claimed_rows(_find(directory, stem)) or 0 for stem in FILES[::2])  # images, before any is inflated
    free = host_free_bytes()
    need = rows * 28 * 28 * (1 + dtype.itemsize)  # the inflated bytes and their copy in dtype
    if free is not None and need > free:
        raise DataError(f"data: {directory} claims {rows} images: {need} bytes as uint8 and {dtype}, "
                        f"more than the {free} bytes this host has free")
    train_images, train_labels = _read_pair(directory, "train")
    test_images, test_labels = _read_pair(directory, "t10k")
    n_fit = len(train_labels) - N_VAL
    if n_fit < 1:
        raise DataError(f"data: {directory} holds {len(train_labels)} training images; "
                        f"the split needs more than {N_VAL}")
    if len(test_labels) < 1:
        raise DataError(f"data: {directory} holds no test images (t10k-*); the test split needs at least one")
    n = n_fit if train_size is None else train_size
    if not isinstance(n, (int, np.integer)) or not 1 <= n <= n_fit:
        raise DataError(f"data: train_size must be an integer in 1..{n_fit}, not {train_size!r}")

    def split(images, labels) -> Split:
        x = images.reshape(len(images), -1).astype(dtype)  # (n, 784) dtype, a fresh C array
        if scale == "unit":
            x /= 255
        return Split(x, labels.astype(np.int64))

    return Dataset(name=name,
                   train=split(train_images[:n], train_labels[:n]),
                   val=split(train_images[n_fit:], train_labels[n_fit:]),
                   test=split(test_images, test_labels),
                   source=str(directory))


def _read_pair(directory: Path, prefix: str) -> tuple[np.ndarray, np.ndarray]:
    """Images (N, 28, 28) and labels (N,) uint8 of prefix "train" or "t10k", checked together."""
    images_path = _find(directory, f"{prefix}-images-idx3-ubyte")
    labels_path = _find(directory, f"{prefix}-labels-idx1-ubyte")
    n_images, n_labels = _claimed_rows(images_path), _claimed_rows(labels_path)
    if None not in (n_images, n_labels) and n_images != n_labels:  # told before either is inflated
        raise DataError(f"data: {images_path} holds {n_images} images but {labels_path} {n_labels} labels")
    images, labels = read_idx(images_path), read_idx(labels_path)
    if images.shape[1:] != (28, 28):
        raise DataError(f"data: {images_path} holds {_dims(images.shape)} bytes, "
                        f"expected N x 28 x 28 images")
    if labels.ndim != 1:
        raise DataError(f"data: {labels_path} holds {_dims(labels.shape)} bytes, expected N labels")
    if len(images) != len(labels):
        raise DataError(f"data: {images_path} holds {len(images)} images but {labels_path} "
                        f"{len(labels)} labels")
    if labels.size and labels.max() >= 10:
        i = int(np.argmax(labels >= 10))
        raise DataError(f"data: {labels_path} has label {labels[i]} at row {i}, expected 0..9; "
                        f"{_advice(labels_path)}")
    return images, labels


def _claimed_rows(path: Path) -> int | None:
    """The rows (images or labels) an IDX file's header claims, read without inflating the rest;
    None where it has no readable header (read_idx then says why)."""
    if path is None:
        return None
    try:
        with files.open_regular(path) as raw:
            gzipped = raw.read(2) == b"\x1f\x8b"
            raw.seek(0)
            return _header(path, gzip.GzipFile(fileobj=raw) if gzipped else raw)[0]
    except (files.FileError, DataError, OSError, EOFError, zlib.error):
        return None


def _dims(shape) -> str:
    return "x".join(map(str, shape))


# ---------------------------------------------------------------- the IDX format

def read_idx(path) -> np.ndarray:
    """The uint8 array of an IDX file, gzipped or raw, validated; read-only, cached per process."""
    path = Path(path)
    try:
        stat = files.regular(path)
    except files.FileError as e:
        raise DataError(f"data: cannot read {path}: {e}") from None
    return _decode(path, stat.st_mtime_ns, stat.st_size)


@functools.cache
def _decode(path: Path, mtime_ns: int, size: int) -> np.ndarray:
    """read_idx's work; the file's mtime and size in the cache key make a rewritten file re-read.
    The header says how many bytes follow: no more than that (and one to see whether more
    follows) is read or inflated, so a gzip bomb costs no more than the honest file would."""
    try:
        with files.open_regular(path) as raw:
            gzipped = raw.read(2) == b"\x1f\x8b"
            raw.seek(0)
            stream = gzip.GzipFile(fileobj=raw) if gzipped else raw
            try:
                dims = _header(path, stream)
                want = int(np.prod(dims, dtype=object))
                if want > MAX_IDX_BYTES:
                    raise DataError(f"data: {path}'s header says {_dims(dims)} = {want} bytes, more than the "
                                    f"{MAX_IDX_BYTES >> 20} MiB an IDX file of this reader may hold")
                if dims[0] > MAX_ROWS:
                    raise DataError(f"data: {path}'s header says {dims[0]} {'labels' if len(dims) == 1 else 'images'}, "
                                    f"more than the {MAX_ROWS:,} an MNIST-format file may hold; {_advice(path)}")
                if gzipped and want > size * MAX_DEFLATE_RATIO:
                    raise DataError(f"data: {path}'s header says {_dims(dims)} = {want} bytes, more than a gzip file "
                                    f"of {size} bytes can inflate to ({MAX_DEFLATE_RATIO}:1 at most); {_advice(path)}")
                free = host_free_bytes()
                if free is not None and want > free:
                    raise DataError(f"data: {path}'s header says {_dims(dims)} = {want} bytes, more than the "
                                    f"{free} bytes of memory this host has free")
                data = stream.read(want + 1)
            except (OSError, EOFError, zlib.error) as e:
                if not gzipped:
                    raise
                raise DataError(f"data: {path} is not a valid gzip file ({e}); {_advice(path)}") from None
    except files.FileError as e:
        raise DataError(f"data: cannot read {path}: {e}") from None
    except OSError as e:
        raise DataError(f"data: cannot read {path}: {files.failure(e)}") from None
    if len(data) != want:
        what = "truncated" if len(data) < want else "too long"
        raise DataError(f"data: {path} is {what}: header says {_dims(dims)} = {want} bytes, "
                        f"file has {len(data) if len(data) < want else 'more'}; {_advice(path)}")
    return np.frombuffer(data, np.uint8).reshape(dims)  # dims, uint8, read-only


def _header(path: Path, stream) -> tuple[int, ...]:
    """The dimensions in an IDX header, read from `stream`, checked."""
    head = stream.read(4)
    if len(head) < 4:
        raise DataError(f"data: {path} is truncated: {len(head)} bytes, no IDX header; {_advice(path)}")
    if head[:2] != b"\0\0":
        raise DataError(f"data: {path} is not an IDX file: magic 0x{head.hex()}, expected "
                        f"0x00000801 (labels) or 0x00000803 (images)")
    code, ndim = head[2], head[3]
    if code != 0x08:
        raise DataError(f"data: {path} holds element type 0x{code:02x}, expected unsigned bytes "
                        f"(0x08)")
    if ndim not in (1, 3):
        raise DataError(f"data: {path} has {ndim} dimensions, expected 1 (labels) or 3 (images)")
    sizes = stream.read(4 * ndim)
    if len(sizes) < 4 * ndim:
        raise DataError(f"data: {path} is truncated: shorter than its IDX header; {_advice(path)}")
    return struct.unpack(f">{ndim}I", sizes)


def _advice(path: Path) -> str:
    """What to do about a damaged file: fetch it again where autogemm downloaded it, else replace it."""
    cache = Path(os.path.realpath(cache_dir() / "data"))
    if cache in Path(os.path.realpath(path)).parents:
        return "delete it and run again to re-download"
    return "replace it with an intact copy"


# ---------------------------------------------------------------- finding and downloading

def locate(name, data_dir=None) -> Path:
    """The directory holding the data set's four files: data_dir, else the first complete one
    of the search path (env vars, Debian's package, the cache), else the cache after a download."""
    if name not in DATASETS:
        raise DataError(f"data: unknown data set {name!r}; choose one of {', '.join(DATASETS)}")
    if data_dir is not None:
        return _complete(files.expand(data_dir), str(data_dir))
    if name == "mnist" and os.environ.get("MNIST_DIR"):     # named for this data set: it must hold it
        return _complete(files.expand(os.environ["MNIST_DIR"]), f"MNIST_DIR={os.environ['MNIST_DIR']}")
    searched = _search_dirs(name)
    unreadable = []     # places on the search path that cannot be read: skipped, and named if all fail
    for directory in searched[:-1]:
        try:
            if all(_find(directory, stem) for stem in FILES):
                return directory
        except DataError as e:
            unreadable.append(str(e).removeprefix("data: "))
    try:
        return _download(name, searched[-1])
    except DataError as e:
        raise DataError(f"{e}" + "".join(f"; skipped: {u}" for u in unreadable[:1])) from None


def _complete(directory: Path, given: str) -> Path:
    """`directory`, if it holds the four files; DataError naming how it was given otherwise."""
    missing = [f"{stem}[.gz]" for stem in FILES if _find(directory, stem) is None]
    if missing:
        raise DataError(f"data: {given} lacks {', '.join(missing)}")
    return directory


def _search_dirs(name: str) -> list[Path]:
    """Where to look, in order; the last one is the download cache."""
    env = os.environ
    dirs = [files.expand(env["AUTOGEMM_DATA_DIR"]) / name] if env.get("AUTOGEMM_DATA_DIR") else []
    if name in SYSTEM_DIRS:
        dirs.append(SYSTEM_DIRS[name])
    return dirs + [cache_dir() / "data" / name]


def _find(directory: Path, stem: str) -> Path | None:
    """stem.gz or stem in directory, whichever exists (gzipped first); DataError where the
    directory cannot be looked into (no permission, a symlink loop)."""
    for path in (directory / f"{stem}.gz", directory / stem):
        try:
            files.stat(path)
        except files.FileError as e:
            if e.errno in (errno.ENOENT, errno.ENOTDIR):
                continue
            raise DataError(f"data: cannot read {path}: {e}") from None
        return path
    return None


def _download(name: str, cache: Path) -> Path:
    """Fetch the files missing from cache, trying each mirror in turn; return cache (at once if
    it has them all)."""
    mirror = os.environ.get("AUTOGEMM_DATA_MIRROR")
    if mirror and not mirror.lower().startswith(("http://", "https://")):
        raise DataError(f"data: AUTOGEMM_DATA_MIRROR={mirror!r} is not an http:// or https:// address")
    bases = (mirror,) if mirror else MIRRORS[name]
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DataError(f"data: cannot create the cache {cache}: {e.strerror}") from None
    for stem in FILES:
        if _find(cache, stem):
            continue
        for base in bases:
            url = f"{base.rstrip('/')}/{stem}.gz"
            try:
                _fetch(url, cache / f"{stem}.gz", SHA256[name][f"{stem}.gz"])
                break
            except (OSError, ValueError, http.client.HTTPException) as e:  # URLError is an OSError
                failure = f"{url}: {_reason(e)}"
        else:
            raise DataError(_not_found(name, cache, failure))
    return cache


def _fetch(url: str, dest: Path, expected: tuple[str, ...]) -> None:
    """Download url to dest through a temp file beside it, renamed into place only if its
    SHA-256 is expected; nothing is left behind otherwise. A download that grows past
    MAX_DOWNLOAD_BYTES or outlasts DEADLINE_S is abandoned (a server that trickles or never ends)."""
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    deadline = time.monotonic() + DEADLINE_S
    try:
        digest, size = hashlib.sha256(), 0
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            while chunk := response.read(1 << 20):
                size += len(chunk)
                if size > MAX_DOWNLOAD_BYTES:
                    raise ValueError(f"more than {MAX_DOWNLOAD_BYTES >> 20} MiB, larger than any file of the data set")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"not finished after {DEADLINE_S} s")
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() not in expected:
            raise DataError(f"data: {url} fails its checksum: sha256 {digest.hexdigest()}, "
                            f"expected {' or '.join(expected)}; nothing was cached")
        os.replace(tmp, dest)
    finally:
        Path(tmp).unlink(missing_ok=True)


def _reason(e: Exception) -> str:
    if isinstance(e, urllib.error.HTTPError):
        return f"HTTP {e.code} {e.reason}"
    if isinstance(e, urllib.error.URLError):
        return str(e.reason)
    return str(e) or type(e).__name__


def _not_found(name: str, cache: Path, failure: str) -> str:
    """The one-line message for a data set neither found nor downloadable."""
    files = ", ".join(f"{stem}.gz" for stem in FILES)
    env = ("set MNIST_DIR=DIR" if name == "mnist"
           else "set AUTOGEMM_DATA_DIR=DIR with the files in DIR/fashion-mnist, "
                "or apt install dataset-fashion-mnist")
    return (f"data: {name} is not on this machine and the download failed ({failure}); "
            f"put {files} (gzipped or not) in {cache}, or pass --data-dir DIR, or {env}")


# ---------------------------------------------------------------- command line

def main(argv=None) -> int:
    parser = ArgumentParser(prog="python -m nn.data", description="Find or download a data set, check "
                            "it, and print where it is and its split sizes. Needs no GPU.")
    parser.add_argument("--dataset", default="fashion-mnist",
                        help=f"one of {', '.join(DATASETS)} (default: %(default)s)")
    parser.add_argument("--data-dir", help="directory holding the four IDX files "
                        "(default: search the usual places, then download)")

    def command():
        args = parser.parse_args(argv)
        ds = load_dataset(args.dataset, args.data_dir, dtype=np.float32)
        print(f"{ds.name}: {ds.source} (train {len(ds.train.y)}, val {len(ds.val.y)}, test {len(ds.test.y)})")

    return exit_status(command)


if __name__ == "__main__":
    sys.exit(main())
