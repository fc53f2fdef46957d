"""autogemm.files: only regular files are read (a FIFO or a device fails at once, never blocks),
with a size cap; atomic writes; and the check that a path can be written before it is needed."""
import errno
import json
import os
import time

import pytest

from autogemm import files


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


def test_a_fifo_is_refused_at_once_not_waited_on(fifo):
    start = time.monotonic()
    with pytest.raises(files.FileError, match="^a FIFO, not a regular file$"):
        files.read_regular(fifo, 100)
    assert time.monotonic() - start < 1


@pytest.mark.parametrize("path, what", [("/dev/zero", "a character device"), ("/", "a folder")])
def test_devices_and_folders_are_refused(path, what):
    with pytest.raises(files.FileError, match=f"^{what}, not a regular file$"):
        files.read_regular(path, 100)


def test_symlink_loops_missing_files_and_the_size_cap(tmp_path):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(files.FileError, match="^a symlink loop$"):
        files.read_regular(loop, 100)
    with pytest.raises(files.FileError, match="^a symlink loop$") as info:
        files.stat(loop)
    assert info.value.errno == errno.ELOOP
    with pytest.raises(files.FileError, match="^no such file$") as info:
        files.read_regular(tmp_path / "none", 100)
    assert info.value.errno == errno.ENOENT
    (tmp_path / "big").write_bytes(b"x" * (2 << 20))
    with pytest.raises(files.FileError, match="larger than 1 MiB"):
        files.read_regular(tmp_path / "big", 1 << 20)
    assert files.read_regular(tmp_path / "big", 2 << 20) == b"x" * (2 << 20)


def test_json_nested_too_deeply_is_a_value_error():
    with pytest.raises(ValueError, match="nested too deeply"):
        files.parse_json("[" * 100_000 + "]" * 100_000)
    assert files.parse_json('{"a": [1]}') == {"a": [1]}
    with pytest.raises(json.JSONDecodeError):
        files.parse_json("{")


def test_an_output_is_claimed_before_the_work(tmp_path, fifo):
    """The folder is made and takes a file; an existing file is replaced only if `ours` says it is
    an earlier output of the same kind."""
    assert files.claim_output(tmp_path / "new" / "deeper" / "out.json") is False
    assert (tmp_path / "new" / "deeper").is_dir() and os.listdir(tmp_path / "new" / "deeper") == []
    (tmp_path / "file").write_text("x")
    with pytest.raises(files.FileError, match=f"^{tmp_path / 'file'} is not a folder$"):
        files.claim_output(tmp_path / "file" / "out.json")
    with pytest.raises(files.FileError, match="^not a directory$"):
        files.claim_output(tmp_path / "file" / "deeper" / "out.json")
    with pytest.raises(files.FileError, match="^exists$"):
        files.claim_output(tmp_path / "file")
    with pytest.raises(files.FileError, match="^exists and is not an earlier output of this command$"):
        files.claim_output(tmp_path / "file", lambda path: path.read_text() == "y")
    assert files.claim_output(tmp_path / "file", lambda path: path.read_text() == "x") is True
    for special, what in ((fifo, "a FIFO"), (tmp_path / "new", "a folder")):
        with pytest.raises(files.FileError, match=f"^exists and cannot be read back \\({what}, not a regular file\\)$"):
            files.claim_output(special, lambda path: True)


def test_same_file():
    assert files.same_file("/tmp", "/tmp/") and files.same_file("/tmp/../tmp", "/tmp")
    assert not files.same_file("/tmp/a-missing-file", "/tmp/another")


def test_write_atomic_replaces_whole_keeps_the_mode_and_leaves_nothing_on_failure(tmp_path, monkeypatch):
    path = tmp_path / "out.bin"
    files.write_atomic(path, (b"a", b"b"))
    assert path.read_bytes() == b"ab" and path.stat().st_mode & 0o777 == 0o666 & ~files._umask()
    path.chmod(0o600)
    files.write_atomic(path, b"new")
    assert path.read_bytes() == b"new" and path.stat().st_mode & 0o777 == 0o600

    def crash(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        files.write_atomic(path, b"newer")
    assert path.read_bytes() == b"new" and os.listdir(tmp_path) == ["out.bin"]
    with pytest.raises(files.FileError, match="no such file"):
        files.write_atomic(tmp_path / "missing" / "x", b"")


def test_write_atomic_writes_through_a_link_and_creates_without_replacing(tmp_path):
    target = tmp_path / "disk" / "ck.npz"
    target.parent.mkdir()
    target.write_bytes(b"old")
    (tmp_path / "ck.npz").symlink_to(target)
    files.write_atomic(tmp_path / "ck.npz", b"new")
    assert (tmp_path / "ck.npz").is_symlink() and target.read_bytes() == b"new"
    files.write_atomic(tmp_path / "fresh", b"1", replace=False)
    with pytest.raises(files.FileError, match="file exists"):               # made by someone else meanwhile
        files.write_atomic(tmp_path / "fresh", b"2", replace=False)
    assert (tmp_path / "fresh").read_bytes() == b"1" and sorted(os.listdir(tmp_path)) == ["ck.npz", "disk", "fresh"]
