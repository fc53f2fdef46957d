"""autogemm.files: only regular files are read (a FIFO or a device fails at once, never blocks),
with a size cap; atomic writes; and the check that a path can be written before it is needed."""
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
    assert files.status(loop) == "a symlink loop" and files.status(tmp_path / "none") == "no such file"
    with pytest.raises(files.FileError, match="^no such file$"):
        files.read_regular(tmp_path / "none", 100)
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


def test_check_writable(tmp_path, fifo):
    files.check_writable(tmp_path / "new" / "deeper" / "log.json")        # folders are created
    assert (tmp_path / "new" / "deeper").is_dir() and os.listdir(tmp_path / "new" / "deeper") == []
    (tmp_path / "file").write_text("x")
    with pytest.raises(files.FileError, match=f"^{tmp_path / 'file'} is not a folder$"):
        files.check_writable(tmp_path / "file" / "log.json")
    with pytest.raises(files.FileError, match="^not a directory$"):
        files.check_writable(tmp_path / "file" / "deeper" / "log.json")
    with pytest.raises(files.FileError, match="a FIFO, not a regular file"):
        files.check_writable(fifo)
    with pytest.raises(files.FileError, match="a folder, not a regular file"):
        files.check_writable(tmp_path / "new")


def test_write_atomic_replaces_whole_keeps_the_mode_and_leaves_nothing_on_failure(tmp_path, monkeypatch):
    path = tmp_path / "out.bin"
    files.write_atomic(path, (b"a", b"b"))
    assert path.read_bytes() == b"ab" and path.stat().st_mode & 0o777 == 0o644
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
