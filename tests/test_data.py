"""nn.data: the real Fashion-MNIST, synthetic IDX files, the search path, and downloads from a
local HTTP server (127.0.0.1 only)."""
import functools
import gzip
import hashlib
import http.server
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import numpy as np
import pytest

from fake_idx import idx_bytes, write_dataset, write_idx
from nn import data
from nn.data import DataError, load_dataset, locate, read_idx

ROOT = Path(__file__).resolve().parents[1]
DEBIAN = Path("/usr/share/datasets/fashion-mnist")
ENV_VARS = ("AUTOGEMM_DATA_DIR", "MNIST_DIR", "AUTOGEMM_DATA_MIRROR",
            "http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    """No data dirs or proxies from the environment; the download cache under tmp_path."""
    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AUTOGEMM_CACHE", str(tmp_path / "cache"))


def assert_one_line_error(excinfo, path):
    message = str(excinfo.value)
    assert str(path) in message and "\n" not in message, message
    return message


# ---------------------------------------------------------------- the real data set

@pytest.mark.skipif(not DEBIAN.is_dir(), reason="Debian's dataset-fashion-mnist is not installed")
def test_real_fashion_mnist():
    ds = load_dataset()
    assert ds.source == str(DEBIAN) and ds.classes == 10
    for split, n in ((ds.train, 54_000), (ds.val, 6_000), (ds.test, 10_000)):
        assert split.x.shape == (n, 784) and split.x.dtype == np.float64
        assert split.x.flags.c_contiguous and split.x.max() == 255
        assert split.y.shape == (n,) and split.y.dtype == np.int64
        assert set(np.unique(split.y)) == set(range(10))

    small = load_dataset(scale="unit", dtype=np.float32, train_size=1_000)
    assert small.train.x.shape == (1_000, 784) and small.train.x.dtype == np.float32
    assert 0 <= small.train.x.min() and small.train.x.max() <= 1
    np.testing.assert_allclose(small.val.x, ds.val.x / 255, rtol=1e-6)
    np.testing.assert_array_equal(small.train.y, ds.train.y[:1_000])


# ---------------------------------------------------------------- IDX files

@pytest.mark.parametrize("gz", [True, False])
def test_read_idx_round_trip(tmp_path, gz):
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (7, 28, 28), dtype=np.uint8)  # (7, 28, 28) uint8
    labels = rng.integers(0, 10, 7, dtype=np.uint8)  # (7,) uint8
    for name, array in (("images", images), ("labels", labels)):
        got = read_idx(write_idx(tmp_path / name, array, gz))
        np.testing.assert_array_equal(got, array)
        assert got.dtype == np.uint8 and not got.flags.writeable


def test_read_idx_caches_and_sees_rewrites(tmp_path):
    path = write_idx(tmp_path / "labels.gz", np.arange(5, dtype=np.uint8))
    assert read_idx(path) is read_idx(path)
    write_idx(path, np.arange(6, dtype=np.uint8))
    assert len(read_idx(path)) == 6


def corrupt_gzip(raw: bytes) -> bytes:
    packed = bytearray(gzip.compress(raw, mtime=0))
    packed[len(packed) // 2] ^= 0xFF
    return bytes(packed)


IMAGES = np.zeros((3, 28, 28), np.uint8)
BAD_FILES = {  # name: (file bytes, words the message must hold)
    "truncated": (idx_bytes(IMAGES)[:-10],
                  "truncated: header says 3x28x28 = 2352 bytes, file has 2342"),
    "too long": (idx_bytes(IMAGES) + b"\0", "too long"),
    "wrong magic": (b"\x12\x34" + idx_bytes(IMAGES)[2:], "not an IDX file"),
    "wrong dtype": (idx_bytes(IMAGES, code=0x0D), "element type 0x0d"),
    "two dims": (idx_bytes(IMAGES[0]), "2 dimensions"),
    "empty": (b"", "truncated"),
    "corrupt gzip": (corrupt_gzip(idx_bytes(IMAGES)), "not a valid gzip file"),
    "cut gzip": (gzip.compress(idx_bytes(IMAGES))[:-20], "not a valid gzip file"),
}


@pytest.mark.parametrize("case", BAD_FILES)
def test_read_idx_rejects(tmp_path, case):
    content, words = BAD_FILES[case]
    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes(content)
    with pytest.raises(DataError) as excinfo:
        read_idx(path)
    assert words in assert_one_line_error(excinfo, path)


def test_a_decompression_bomb_is_never_inflated(tmp_path):
    """A header of 3 images, then 256 MiB of zeros that gzip packs into 256 KB: refused after reading
    what the header promised, so in a fraction of a second and a few KB of memory."""
    path = tmp_path / "train-images-idx3-ubyte.gz"
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)      # gzip framing
    zeros = bytes(1 << 20)
    with open(path, "wb") as f:
        f.write(compressor.compress(idx_bytes(IMAGES)))
        for _ in range(256):
            f.write(compressor.compress(zeros))
        f.write(compressor.flush())
    assert path.stat().st_size < 1 << 20
    start = time.monotonic()
    with pytest.raises(DataError, match="is too long: header says 3x28x28 = 2352 bytes, file has more"):
        read_idx(path)
    assert time.monotonic() - start < 1


def test_a_header_that_promises_too_much_is_refused_before_reading(tmp_path):
    path = tmp_path / "labels"
    path.write_bytes(struct.pack(">2xBB3I", 8, 3, 4_000_000_000, 28, 28))
    with pytest.raises(DataError, match="more than the 1024 MiB an IDX file of this reader may hold"):
        read_idx(path)


def test_special_files_fail_at_once(tmp_path):
    os.mkfifo(tmp_path / "train-images-idx3-ubyte.gz")
    start = time.monotonic()
    with pytest.raises(DataError, match="a FIFO, not a regular file"):
        read_idx(tmp_path / "train-images-idx3-ubyte.gz")
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(DataError, match="a symlink loop"):
        read_idx(loop)
    assert time.monotonic() - start < 1


def test_damage_advice_depends_on_whose_file_it_is(tmp_path, fake_dir):
    """Only the download cache re-downloads; a user's own --data-dir is theirs to replace."""
    mine = shutil.copytree(fake_dir, tmp_path / "mine")
    cache = shutil.copytree(fake_dir, tmp_path / "cache" / "data" / "mnist")
    for folder in (mine, cache):
        (folder / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(idx_bytes(np.zeros(3, np.uint8)))[:-20])
    with pytest.raises(DataError, match="replace it with an intact copy$"):
        load_dataset("mnist", mine)
    with pytest.raises(DataError, match="delete it and run again to re-download$"):
        load_dataset("mnist")


@pytest.mark.parametrize("gz", [True, False])
def test_read_idx_gzip_detected_by_content(tmp_path, gz):
    path = tmp_path / "labels.bin"  # no .gz suffix either way
    np.testing.assert_array_equal(read_idx(write_idx(path, np.arange(4, dtype=np.uint8), gz)),
                                  np.arange(4))


# ---------------------------------------------------------------- data sets from a directory

@pytest.fixture(scope="module")
def fake_dir(tmp_path_factory):
    """A fake data set: 6,100 training rows (100 train + 6,000 val), 50 test rows, gzipped."""
    return write_dataset(tmp_path_factory.mktemp("fake"), n_train=6_100, n_test=50)


def test_load_synthetic_split(fake_dir):
    images = read_idx(fake_dir / "train-images-idx3-ubyte.gz")
    ds = load_dataset("mnist", fake_dir, scale="unit", dtype=np.float32, train_size=40)
    assert (len(ds.train.y), len(ds.val.y), len(ds.test.y)) == (40, 6_000, 50)
    assert ds.source == str(fake_dir) and ds.name == "mnist"
    np.testing.assert_array_equal(ds.train.x, images[:40].reshape(40, 784) / np.float32(255))
    np.testing.assert_array_equal(ds.val.x * 255, images[100:].reshape(6_000, 784))
    np.testing.assert_array_equal(ds.val.y, np.arange(100, 6_100) % 10)
    assert ds.train.x.flags.c_contiguous and ds.val.x.flags.c_contiguous
    assert load_dataset("mnist", fake_dir).train.x.shape == (100, 784)


def test_load_raw_files(tmp_path):
    write_dataset(tmp_path, n_train=6_010, n_test=5, gz=False)
    ds = load_dataset("fashion-mnist", tmp_path)
    assert ds.train.x.shape == (10, 784) and ds.train.x.max() > 1


@pytest.mark.parametrize("case,words", [
    ("labels >= 10", "has label 12 at row 3"),
    ("count mismatch", "holds 50 images but"),
    ("not 28x28", "expected N x 28 x 28 images"),
])
def test_load_rejects_bad_pair(tmp_path, fake_dir, case, words):
    shutil.copytree(fake_dir, tmp_path, dirs_exist_ok=True)
    labels = np.zeros(50, np.uint8)  # (50,) uint8
    if case == "labels >= 10":
        labels[3] = 12
        bad = write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", labels)
    elif case == "count mismatch":
        bad = write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", labels[:49])
    else:
        bad = write_idx(tmp_path / "t10k-images-idx3-ubyte.gz", np.zeros((50, 32, 32), np.uint8))
    with pytest.raises(DataError) as excinfo:
        load_dataset("mnist", tmp_path)
    assert words in assert_one_line_error(excinfo, bad)


@pytest.mark.parametrize("kwargs", [
    dict(name="nope"), dict(scale="std"), dict(dtype=np.int32), dict(dtype="nonsense"),
    dict(train_size=0), dict(train_size=101), dict(train_size=2.5),
])
def test_load_rejects_arguments(fake_dir, kwargs):
    with pytest.raises(DataError) as excinfo:
        load_dataset(**{"name": "mnist", "data_dir": fake_dir, **kwargs})
    assert "\n" not in str(excinfo.value)


# ---------------------------------------------------------------- the search path

def test_locate_order(tmp_path, fake_dir, monkeypatch):
    system = write_dataset(tmp_path / "system", n_train=1, n_test=1)
    monkeypatch.setitem(data.SYSTEM_DIRS, "fashion-mnist", system)
    assert locate("fashion-mnist") == system

    ours = write_dataset(tmp_path / "ours" / "fashion-mnist", n_train=1, n_test=1, gz=False)
    monkeypatch.setenv("AUTOGEMM_DATA_DIR", str(ours.parent))
    assert locate("fashion-mnist") == ours
    assert locate("fashion-mnist", fake_dir) == fake_dir

    (ours / "t10k-labels-idx1-ubyte").unlink()  # incomplete: skipped
    assert locate("fashion-mnist") == system


def test_an_unreadable_place_on_the_search_path_is_skipped(tmp_path, fake_dir, monkeypatch):
    """A symlink loop, or a folder this user may not enter, where $AUTOGEMM_DATA_DIR points: the
    next place with the data set serves; named in the error only when no place has it."""
    monkeypatch.setitem(data.SYSTEM_DIRS, "fashion-mnist", fake_dir)
    loop = tmp_path / "ours" / "fashion-mnist"
    loop.parent.mkdir()
    loop.symlink_to(loop)
    monkeypatch.setenv("AUTOGEMM_DATA_DIR", str(loop.parent))
    assert locate("fashion-mnist") == fake_dir
    locked = tmp_path / "locked" / "fashion-mnist"
    real_stat = os.stat

    def stat(path, *args, **kwargs):          # root may enter any folder: play a user who may not
        if str(path).startswith(str(locked)):
            raise PermissionError(13, "Permission denied", str(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)
    monkeypatch.setenv("AUTOGEMM_DATA_DIR", str(locked.parent))
    assert locate("fashion-mnist") == fake_dir
    monkeypatch.setitem(data.SYSTEM_DIRS, "fashion-mnist", tmp_path / "nowhere")
    monkeypatch.setenv("AUTOGEMM_DATA_MIRROR", "http://127.0.0.1:9/")
    with pytest.raises(DataError, match=f"skipped: cannot read {locked}/train-images-idx3-ubyte.gz: permission denied"):
        locate("fashion-mnist")


def test_locate_mnist_dir_first(tmp_path, fake_dir, monkeypatch):
    cache = write_dataset(tmp_path / "cache" / "data" / "mnist", n_train=1, n_test=1)
    assert locate("mnist") == cache
    monkeypatch.setenv("AUTOGEMM_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("MNIST_DIR", str(fake_dir))
    assert locate("mnist") == fake_dir


def test_locate_data_dir_must_be_complete(tmp_path):
    write_dataset(tmp_path, n_train=1, n_test=1)
    (tmp_path / "train-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DataError) as excinfo:
        locate("mnist", tmp_path)
    assert "lacks train-labels-idx1-ubyte[.gz]" in assert_one_line_error(excinfo, tmp_path)


# ---------------------------------------------------------------- downloads (127.0.0.1 only)

class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def server(tmp_path, monkeypatch):
    """A local HTTP server of a small fake mnist, its SHA256 entry patched to match; yields
    (served dir, base URL)."""
    served = write_dataset(tmp_path / "served", n_train=20, n_test=5)
    monkeypatch.setitem(data.SHA256, "mnist", {
        p.name: (hashlib.sha256(p.read_bytes()).hexdigest(),) for p in served.iterdir()})
    handler = functools.partial(QuietHandler, directory=str(served))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield served, f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()
    thread.join()


@pytest.fixture
def closed_url():
    """A URL on 127.0.0.1 that refuses connections."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/"


def cache_files(tmp_path):
    return sorted(p.name for p in (tmp_path / "cache" / "data" / "mnist").iterdir())


def test_download_verifies_and_caches(tmp_path, server, monkeypatch):
    served, url = server
    monkeypatch.setenv("AUTOGEMM_DATA_MIRROR", url)
    cache = locate("mnist")
    assert cache == tmp_path / "cache" / "data" / "mnist"
    assert cache_files(tmp_path) == sorted(f"{stem}.gz" for stem in data.FILES)
    for p in served.iterdir():
        assert (cache / p.name).read_bytes() == p.read_bytes()
    shutil.rmtree(served)  # the cache is used from now on
    assert locate("mnist") == cache


def test_download_tries_mirrors_in_turn(tmp_path, server, closed_url, monkeypatch):
    monkeypatch.setitem(data.MIRRORS, "mnist", (closed_url, server[1]))
    assert locate("mnist") == tmp_path / "cache" / "data" / "mnist"
    assert len(cache_files(tmp_path)) == 4


def test_download_rejects_bad_checksum(tmp_path, server, monkeypatch):
    served, url = server
    monkeypatch.setenv("AUTOGEMM_DATA_MIRROR", url)
    bad = served / "t10k-images-idx3-ubyte.gz"
    expected = data.SHA256["mnist"][bad.name][0]
    bad.write_bytes(bad.read_bytes() + b"\0")  # one byte too many
    with pytest.raises(DataError) as excinfo:
        locate("mnist")
    message = assert_one_line_error(excinfo, f"{url}{bad.name}")
    assert expected in message and hashlib.sha256(bad.read_bytes()).hexdigest() in message
    assert bad.name not in cache_files(tmp_path)
    assert not [name for name in cache_files(tmp_path) if name.startswith(".")]  # no temp file


def test_download_404(tmp_path, server, monkeypatch):
    served, url = server
    monkeypatch.setenv("AUTOGEMM_DATA_MIRROR", url)
    (served / "train-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DataError) as excinfo:
        locate("mnist")
    assert "HTTP 404" in assert_one_line_error(excinfo, f"{url}train-labels-idx1-ubyte.gz")
    assert cache_files(tmp_path) == ["train-images-idx3-ubyte.gz"]


def test_mnist_offline_says_where_to_put_files(tmp_path, closed_url, monkeypatch):
    monkeypatch.setenv("AUTOGEMM_DATA_MIRROR", closed_url)
    with pytest.raises(DataError) as excinfo:
        load_dataset("mnist")
    message = assert_one_line_error(excinfo, tmp_path / "cache" / "data" / "mnist")
    for stem in data.FILES:
        assert f"{stem}.gz" in message
    assert "--data-dir" in message and "MNIST_DIR" in message


# ---------------------------------------------------------------- command line

def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "nn.data", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_cli_bad_dataset():
    result = run_cli("--dataset", "nope")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr


def test_cli_reports_sizes(fake_dir):
    result = run_cli("--dataset", "mnist", "--data-dir", str(fake_dir))
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"mnist: {fake_dir} (train 100, val 6000, test 50)\n"


def test_a_data_set_without_test_images_is_one_line(tmp_path):
    write_dataset(tmp_path, n_train=6_010, n_test=0)
    with pytest.raises(DataError, match="holds no test images"):
        load_dataset("mnist", tmp_path)


def test_mnist_dir_names_the_data_set_and_must_hold_it(tmp_path, monkeypatch):
    monkeypatch.setenv("MNIST_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(DataError, match=f"MNIST_DIR={tmp_path / 'nowhere'} lacks train-images"):
        locate("mnist")


def test_an_unknown_user_in_a_path_is_left_as_written(tmp_path, monkeypatch):
    """As a shell leaves ~nouser: a folder of that name (here, missing), not a traceback."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AUTOGEMM_CACHE", "~no-such-user-here")
    monkeypatch.setenv("AUTOGEMM_DATA_MIRROR", "http://127.0.0.1:9/")
    with pytest.raises(DataError, match="put .* in ~no-such-user-here/data/mnist"):
        locate("mnist")
    with pytest.raises(DataError, match="data: ~no-such-user-here/x lacks"):
        locate("mnist", "~no-such-user-here/x")


def test_a_mirror_must_be_http(monkeypatch, tmp_path):
    monkeypatch.setenv("AUTOGEMM_DATA_MIRROR", f"file://{tmp_path}/")
    with pytest.raises(DataError, match="AUTOGEMM_DATA_MIRROR='file://.*' is not an http:// or https:// address"):
        locate("mnist")


def test_a_download_that_never_ends_is_cut_off(tmp_path, monkeypatch):
    """A server that sends more than any file of the data set (here /dev/zero's worth)."""
    class Endless:
        def read(self, n):
            return bytes(n)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(data.urllib.request, "urlopen", lambda url, timeout: Endless())
    monkeypatch.setattr(data, "MAX_DOWNLOAD_BYTES", 8 << 20)
    monkeypatch.setenv("AUTOGEMM_DATA_MIRROR", "http://127.0.0.1:9/")
    with pytest.raises(DataError, match="more than 8 MiB, larger than any file of the data set"):
        locate("mnist")
    assert os.listdir(tmp_path / "cache" / "data" / "mnist") == []          # no .part left


def test_the_ranks_data_hash_sees_one_pixel_anywhere(tmp_path):
    """Issue 38 #18: the same-data check across ranks hashed every 31st image; image 401 (not a
    multiple of 31) changed by one pixel must change the hash."""
    from nn.trainer import sample_hash

    ds = load_dataset("mnist", write_dataset(tmp_path / "d", n_train=6_500, n_test=10))
    before = sample_hash(ds)
    ds.train.x[401, 300] += 1
    assert sample_hash(ds) != before


def test_a_header_that_claims_more_than_the_gzip_stream_can_hold_is_refused_unread(tmp_path):
    """Issue 38 #3: a .gz of a few KB whose header claims 100,000 images (78 MB): deflate packs at most
    1032 bytes into one, so it cannot hold them; refused from the header and the file's size."""
    path = tmp_path / "t10k-images-idx3-ubyte.gz"
    path.write_bytes(gzip.compress(struct.pack(">2xBB3I", 8, 3, 100_000, 28, 28) + bytes(1 << 20)))
    start = time.monotonic()
    with pytest.raises(DataError) as excinfo:
        read_idx(path)
    line = assert_one_line_error(excinfo, path)
    assert f"header says 100000x28x28 = 78400000 bytes, more than a gzip file of {path.stat().st_size} bytes " \
           "can inflate to (1032:1 at most)" in line
    assert time.monotonic() - start < 1


def test_a_file_that_claims_more_rows_than_any_mnist_is_refused_unread(tmp_path):
    """Issue 38 #3's bomb claimed 1,369,568 images and labels (zeros, in the 1 GiB limit): it took 50 s
    and 18 GB, then trained. No MNIST-format data set has over 1,000,000 rows a file."""
    path = tmp_path / "t10k-labels-idx1-ubyte.gz"
    path.write_bytes(gzip.compress(struct.pack(">2xBBI", 8, 1, 1_369_568) + bytes(1_369_568)))
    with pytest.raises(DataError) as excinfo:
        read_idx(path)
    assert "header says 1369568 labels, more than the 1,000,000 an MNIST-format file may hold" \
        in assert_one_line_error(excinfo, path)


def test_a_file_larger_than_free_memory_is_refused_unread(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "host_free_bytes", lambda: 2000)
    path = write_idx(tmp_path / "train-images-idx3-ubyte.gz", np.zeros((3, 28, 28), np.uint8))
    with pytest.raises(DataError) as excinfo:
        read_idx(path)
    assert "header says 3x28x28 = 2352 bytes, more than the 2000 bytes of memory this host has free" \
        in assert_one_line_error(excinfo, path)


def test_images_and_labels_that_disagree_are_refused_before_either_is_inflated(tmp_path, fake_dir, monkeypatch):
    folder = shutil.copytree(fake_dir, tmp_path / "d")
    write_idx(folder / "train-labels-idx1-ubyte.gz", np.zeros(6_099, np.uint8))
    monkeypatch.setattr(data, "read_idx", lambda path: pytest.fail(f"{path} was inflated"))
    with pytest.raises(DataError, match="train-images-idx3-ubyte.gz holds 6100 images but .*-labels-idx1-ubyte.gz 6099"):
        load_dataset("mnist", folder)


def test_a_data_set_larger_than_free_memory_as_floats_is_refused_before_reading(fake_dir, monkeypatch):
    """6,150 images are 4.8 MB as bytes and 43 MB as float64: with 10 MB free, refused unread."""
    monkeypatch.setattr(data, "host_free_bytes", lambda: 10 << 20)
    monkeypatch.setattr(data, "read_idx", lambda path: pytest.fail(f"{path} was inflated"))
    with pytest.raises(DataError, match=r"claims 6150 images: 43394400 bytes as uint8 and float64, more than the "
                                        r"10485760 bytes this host has free$"):
        load_dataset("mnist", fake_dir)
