"""The stop signals as every command takes them: Ctrl-C (SIGINT), SIGTERM (`kill`, a batch
scheduler) and SIGHUP (a closed terminal) each end a command with one line, the resume hint it has,
and the conventional status 128 + the signal's number (130, 143, 129).

- `starting()`, first thing in a command's main module: until the command takes the signals, one
  ends the process at once with one line (modules still loading: a traceback of the import
  machinery helps no one, and under mpirun two ranks' tracebacks ended in a segmentation fault).
  A rank of several keeps it for `stoppable()` instead: a rank ending alone before MPI is up
  left the others waiting in MPI's start-up for ever.
- `stoppable()`, around the command's work: each signal raises `Stop`, a KeyboardInterrupt, so
  that every `except KeyboardInterrupt` says what was kept, and every `finally` and `except
  BaseException` cleans up as it unwinds (`files.write_atomic` removes its temporary file);
  `deferred()` holds it back over a write that must be whole.
"""
import contextlib
import os
import signal
import threading

SIGNALS = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP"}
# Where a launcher (mpirun) starts ranks, each gets the signal: rank 0 alone speaks before MPI is up.
_RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK")
_SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE")
_before_starting = {}   # signal -> its handler before starting(), which stoppable() gives back
_pending = []           # a signal a rank of several got while starting, for stoppable() to hand on
_deferring = 0          # deferred() blocks the main thread is in
_deferred = []          # the signals that came meanwhile


class Stop(KeyboardInterrupt):
    """A stop signal, raised where the main thread was; `signum` says which."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(SIGNALS.get(signum, signum))
        self.signum = signum


def signum_of(exc: BaseException) -> int:
    """The signal behind a KeyboardInterrupt: a Stop's own, else SIGINT (Python's default handler)."""
    return getattr(exc, "signum", signal.SIGINT)


def status(exc: BaseException) -> int:
    """The conventional exit status of a process stopped by `exc`'s signal: 128 + its number."""
    return 128 + signum_of(exc)


def interrupted(signum: int = signal.SIGINT) -> str:
    """A message's first word(s): "interrupted" for Ctrl-C, "interrupted by SIGTERM" for the others."""
    return "interrupted" if signum == signal.SIGINT else f"interrupted by {SIGNALS.get(signum, signum)}"


def raise_stop(signum, frame):
    """A handler: raise Stop where the main thread is (at the end of a `deferred()` block in it)."""
    if _deferring:
        _deferred.append(signum)
        return
    raise Stop(signum)


@contextlib.contextmanager
def deferred():
    """Within (the main thread): a stop signal waits for the block to end, where it raises Stop. For
    writes that must be whole: an Optuna journal entry and its file lock (a Stop inside the lock's
    release left the lock behind and raised FileNotFoundError), a message between processes."""
    global _deferring
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1
        if not _deferring and _deferred:
            signum = _deferred[0]
            _deferred.clear()
            raise Stop(signum)


def _one_of_ranks() -> bool:
    """Whether a launcher started this process as one rank of several."""
    size = next((os.environ[name] for name in _SIZE_VARIABLES if name in os.environ), "1")
    return size.isascii() and size.isdigit() and len(size) < 10 and int(size) > 1   # else not a count: ignored


def _end_now(signum, frame):
    if _one_of_ranks() and not _pending:
        _pending.append(signum)
        return
    if all(os.environ.get(name, "0") == "0" for name in _RANK_VARIABLES):
        os.write(2, f"{interrupted(signum)} while starting; nothing was done\n".encode())
    os._exit(128 + signum)


def _taken() -> list[int]:
    """The stop signals not ignored: one that whoever started the process ignores (nohup's SIGHUP,
    a shell's SIGINT for a job in the background) stays ignored."""
    return [sig for sig in SIGNALS if signal.getsignal(sig) is not signal.SIG_IGN]


def starting():
    """Until `stoppable()` takes over, a stop signal ends the process at once: one line, 128 + N."""
    for sig in _taken():
        previous = signal.signal(sig, _end_now)
        if previous is not _end_now:
            _before_starting[sig] = previous


@contextlib.contextmanager
def stoppable(handler=raise_stop):
    """Within: every stop signal goes to `handler` (by default it raises Stop), one kept while
    starting first. After: the handlers from before, those from before `starting()` where it had
    been called."""
    if threading.current_thread() is not threading.main_thread():   # only the main thread takes signals
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in _taken()}
    try:
        while _pending:
            handler(_pending.pop(), None)
        yield
    finally:
        for sig, was in previous.items():
            signal.signal(sig, _before_starting.pop(sig, was) if was is _end_now else was)
