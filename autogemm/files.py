"""The user's files, read and written so that a bad one fails fast and nothing is lost or half-written.

Reads take regular files only: a FIFO would block the reader for ever and a device never end, so
both are refused before a byte is read, as are symlink loops. Writes go to a temporary file beside
the target, flushed to disk and renamed over it (a reader sees the old file or the new one, never a
part); an output is claimed before the work that makes it, and never replaces a file of another
kind. Every failure is a FileError whose message is a short reason ("a FIFO, not a regular file");
callers prefix the path and say what the file was for.
"""
import contextlib
import errno
import json
import os
import stat as stat_module
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO

_KINDS = ((stat_module.S_ISDIR, "a folder"), (stat_module.S_ISFIFO, "a FIFO"),
          (stat_module.S_ISCHR, "a character device"), (stat_module.S_ISBLK, "a block device"),
          (stat_module.S_ISSOCK, "a socket"))


class FileError(Exception):
    """A file that cannot be used as asked; str() is a short reason without the path, `errno` the
    system's code where there is one (errno.ENOENT: nothing there)."""

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        self.errno = code


def failure(exc: OSError) -> FileError:
    """An OSError as a FileError with a short, plain reason ("permission denied", "a symlink loop")."""
    if exc.errno == errno.ELOOP:
        return FileError("a symlink loop", exc.errno)
    if exc.errno == errno.ENOENT:
        return FileError("no such file", exc.errno)
    return FileError(exc.strerror.lower() if exc.strerror else str(exc), exc.errno)


def expand(text: str) -> Path:
    """`text` with a leading ~ or ~user expanded as a shell does: to a home folder where there is
    one, else left as written (a relative path named ~user)."""
    try:
        return Path(text).expanduser()
    except RuntimeError:        # no home folder for that user
        return Path(text)


def stat(path) -> os.stat_result:
    """os.stat, failing as a FileError."""
    try:
        return os.stat(path)
    except OSError as exc:
        raise failure(exc) from None


def kind(mode: int) -> str | None:
    """None for a regular file, else what it is instead ("a FIFO", "a folder", ...)."""
    if stat_module.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def regular(path) -> os.stat_result:
    """os.stat of `path`, a FileError unless it is a regular file (nothing is opened)."""
    st = stat(path)
    what = kind(st.st_mode)
    if what is not None:
        raise FileError(f"{what}, not a regular file")
    return st


def open_regular(path) -> BinaryIO:
    """`path` opened for binary reading, if it is a regular file (checked on the open descriptor,
    which O_NONBLOCK keeps a FIFO from blocking)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise failure(exc) from None
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
            raise failure(exc) from None
    if len(data) > limit:
        raise FileError(f"larger than {limit / 2**20:g} MiB, too large for this kind of file")
    return data


def parse_json(text: str | bytes, **options):
    """json.loads, with nesting too deep to parse (a hostile file) as a ValueError like any other."""
    try:
        return json.loads(text, **options)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def same_file(a, b) -> bool:
    """Whether two paths name one file or folder: the same path once links are followed, or two
    names of one inode. A symlink loop or a missing path is only itself."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def claim_output(path, ours: Callable[[Path], bool] | None = None) -> bool:
    """Check, before the work that produces it, that an output can be written at `path`: its
    folder is created if missing and takes a temporary file, and an existing `path` is a regular
    file that `ours(path)` recognises as an earlier output of the same kind (without `ours`, no
    existing file may be replaced). Returns whether `path` exists (to be replaced)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise FileError(f"{path.parent} is not a folder", errno.ENOTDIR) from None
    except OSError as exc:
        raise failure(exc) from None
    exists = os.path.lexists(path)
    if exists:
        if ours is None:
            raise FileError("exists", errno.EEXIST)
        try:
            regular(path)
            mine = ours(path)
        except FileError as exc:
            raise FileError(f"exists and cannot be read back ({exc})", exc.errno) from None
        if not mine:
            raise FileError("exists and is not an earlier output of this command", errno.EEXIST)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise failure(exc) from None
    return exists


def output_of(command: str) -> Callable[[Path], bool]:
    """A recogniser for claim_output: a JSON document whose "command" begins with `command`, an
    earlier output of that command."""
    def ours(path: Path) -> bool:
        try:
            doc = parse_json(read_regular(path, 64 << 20))
        except ValueError:
            return False
        return isinstance(doc, dict) and str(doc.get("command", "")).startswith(command)
    return ours


def write_atomic(path, pieces: bytes | Iterable[bytes], replace: bool = True) -> None:
    """Write `pieces` to a temporary file beside `path`, flush it to disk, then rename it over
    `path` (or, without `replace`, link it there, failing if `path` exists by now: another
    process's file is never replaced). A symlink at `path` is written through, to its target. The
    file keeps the mode of the one it replaces; a new one gets what open() would give it. An error
    leaves neither a temporary file nor a changed `path`."""
    path = Path(os.path.realpath(path))
    if isinstance(pieces, bytes):
        pieces = (pieces,)
    try:
        mode = os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
    except OSError as exc:
        raise failure(exc) from None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise failure(exc) from None
    try:
        with os.fdopen(fd, "wb") as f:
            for piece in pieces:
                f.write(piece)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
            os.unlink(tmp)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise failure(exc) from None
        raise
    with contextlib.suppress(OSError):      # make the rename itself durable
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _umask() -> int:
    """The process's umask (read from /proc where it is there, so the umask is never changed)."""
    try:
        with open("/proc/self/status") as f:
            return int(next(line for line in f if line.startswith("Umask:")).split()[1], 8)
    except (OSError, StopIteration, ValueError, IndexError):
        mask = os.umask(0o022)
        os.umask(mask)
        return mask
