"""The user's files, read and written so that a bad one fails fast and nothing is half-written.

Reads open regular files only: a FIFO would block the reader for ever and a device never end, so
both are refused before a byte is read, as are symlink loops. Writes go to a temporary file beside
the target, flushed to disk and renamed over it: a reader sees the old file or the new one, never a
part. Every failure is a FileError whose message is a short reason ("a FIFO, not a regular file");
callers prefix the path and say what the file was for.
"""
import contextlib
import errno
import json
import os
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class FileError(Exception):
    """A file that cannot be used as asked; str() is a short reason without the path."""


def reason(exc: OSError) -> str:
    """A short, plain reason for an OSError ("permission denied", "a symlink loop")."""
    if exc.errno == errno.ELOOP:
        return "a symlink loop"
    if exc.errno == errno.ENOENT:
        return "no such file"
    return exc.strerror.lower() if exc.strerror else str(exc)


def kind(mode: int) -> str | None:
    """None for a regular file, else what it is instead ("a FIFO", "a folder", ...)."""
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def open_regular(path) -> "os.FileIO":
    """`path` opened for binary reading, if it is a regular file (checked on the open descriptor,
    which O_NONBLOCK keeps a FIFO from blocking)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise FileError(reason(exc)) from None
    try:
        what = kind(os.fstat(fd).st_mode)
        if what is not None:
            raise FileError(f"{what}, not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path, limit: int) -> bytes:
    """The bytes of the regular file `path`, if at most `limit` of them."""
    with open_regular(path) as f:
        try:
            data = f.read(limit + 1)
        except OSError as exc:
            raise FileError(reason(exc)) from None
    if len(data) > limit:
        raise FileError(f"larger than {limit >> 20} MiB, too large for this kind of file")
    return data


def parse_json(text: str | bytes, **options):
    """json.loads, with nesting too deep to parse (a hostile file) as a ValueError like any other."""
    try:
        return json.loads(text, **options)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def status(path) -> str | None:
    """None if `path` exists, else why it cannot be seen ("no such file", "a symlink loop", ...)."""
    try:
        os.stat(path)
    except OSError as exc:
        return reason(exc)
    return None


def check_writable(path) -> None:
    """Prove that `path` can be written the way write_atomic writes it, before anything depends on
    it: its folder is created if missing and takes a temporary file, and the path itself, if it
    exists, is a regular file."""
    path = Path(path)
    try:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise FileError(f"{path.parent} is not a folder") from None
        mode = os.lstat(path).st_mode if os.path.lexists(path) else None
        if mode is not None and stat.S_ISLNK(mode):
            mode = os.stat(path).st_mode
        if mode is not None and kind(mode) is not None:
            raise FileError(f"{kind(mode)}, not a regular file")
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise FileError(reason(exc)) from None


def write_atomic(path, pieces: bytes | Iterable[bytes]) -> None:
    """Write `pieces` to a temporary file beside `path`, flush it to disk, rename it over `path`.

    The file keeps the mode of the one it replaces (a new one gets 0o644); an error leaves neither
    a temporary file nor a changed `path`.
    """
    path = Path(path)
    if isinstance(pieces, bytes):
        pieces = (pieces,)
    try:
        old = os.stat(path).st_mode & 0o777 if path.exists() else None
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise FileError(reason(exc)) from None
    try:
        with os.fdopen(fd, "wb") as f:
            for piece in pieces:
                f.write(piece)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, old if old is not None else 0o644)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise FileError(reason(exc)) from None
        raise
    with contextlib.suppress(OSError):      # make the rename itself durable
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

