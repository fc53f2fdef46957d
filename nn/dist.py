"""MPI data parallelism: who am I, rank-0 output, row splits, gradient all-reduce, ranks that agree.

One process is rank 0 of 1 and never imports mpi4py; under `mpirun` every rank runs the same script
(gpt-fast's maybe_init_dist). All-reduces go through mpi4py's buffer interface, never pickles; only
the small agreements of start-up and epoch ends (`agree`) are pickled.

How ranks end together, never hanging: a failure that every rank can know of goes through `agree`,
a collective after which every rank raises the same RanksFailed and exits (rank 0 alone prints). A
failure on one rank in the middle of a step, where the others wait in a collective, ends the job:
the rank prints its line and exits at once, and the launcher stops the others (`fail`).
Ctrl-C, SIGTERM and SIGHUP are a request (`Interrupt`) that every rank honours at the same step
boundary.
"""
import contextlib
import ctypes
import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass

import numpy as np

from autogemm import signals
from nn.errors import NNError

# Set by the launchers: MPICH/Hydra (PMI_*), PMIx, Open MPI.
_LAUNCHER_ENV = ("PMI_SIZE", "PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE")
EXIT_GRACE_S = 0.5   # a failing rank's wait between its message and its exit (see Dist.exit_all)
_rank = 0
_local_rank = None   # this rank's place among its host's ranks, as MPI computed it (maybe_init_dist, several ranks)


class RanksFailed(NNError):
    """Raised on every rank alike (by Dist.agree): each exits with status 2 and rank 0 prints it."""


class Interrupted(Exception):
    """Raised on every rank alike when a stop signal was honoured; the message says what was kept,
    `status` is the signal's exit status (130 for Ctrl-C)."""

    def __init__(self, message: str, status: int = 130):
        super().__init__(message)
        self.status = status


def _shown(value) -> str:
    """A setting in a message: a list of sizes as [8, 16], whether a tuple or a list holds it."""
    return repr(list(value) if isinstance(value, tuple) else value)


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    size: int = 1
    comm: object = None  # mpi4py.MPI.Comm when size > 1
    local_rank: int = 0  # this rank among the ranks on its host (node), and how many there are: MPI's
    local_size: int = 1  # shared-memory split of the world, so several hosts are never taken for one

    def allreduce_sum(self, backend, buf):
        """buf (a backend array) <- its sum over ranks, staged through the host when it lives elsewhere."""
        if self.size == 1:
            return buf
        from mpi4py import MPI

        host = np.ascontiguousarray(backend.to_numpy(buf))
        self.comm.Allreduce(MPI.IN_PLACE, host, op=MPI.SUM)
        if host is not buf:  # a device (or non-contiguous) buffer: copy the sum back
            buf[...] = backend.asarray(host)
        return buf

    def sum(self, values) -> np.ndarray:
        """Sum of a small host float64 vector over ranks (epoch statistics)."""
        out = np.array(values, dtype=np.float64)  # (k,) float64
        if self.size > 1:
            from mpi4py import MPI

            self.comm.Allreduce(MPI.IN_PLACE, out, op=MPI.SUM)
        return out

    def gather(self, value) -> list | None:
        """Every rank's `value` (pickled: a model's slices once an epoch), in rank order, on rank 0;
        None on the others."""
        return [value] if self.size == 1 else self.comm.gather(value, root=0)

    def barrier(self):
        if self.size > 1:
            self.comm.Barrier()

    def agree(self, error: str | None = None, stop: bool = False) -> bool:
        """Collective: whether any rank asks to `stop`; RanksFailed on every rank if any rank has
        an `error` (the first such rank's, named when the ranks differ)."""
        if self.size == 1:
            if error is not None:
                raise RanksFailed(error)
            return stop
        said = self.comm.allgather((error, stop))
        failed = [(rank, e) for rank, (e, _) in enumerate(said) if e is not None]
        if failed:
            rank, first = failed[0]
            alike = len(failed) == self.size and all(e == first for _, e in failed)
            raise RanksFailed(first if alike else f"rank {rank} of {self.size}: {first}")
        return any(s for _, s in said)

    def same_everywhere(self, values: dict, advice: str):
        """Collective: RanksFailed on every rank unless each rank's `values` equal rank 0's; the
        message names the first rank and setting that differ, and ends with `advice`."""
        if self.size == 1:
            return
        every = self.comm.allgather(values)
        for rank, theirs in enumerate(every):
            for name in dict.fromkeys([*every[0], *theirs]):
                if theirs.get(name) != every[0].get(name):
                    raise RanksFailed(f"rank {rank} of {self.size} has {name} {_shown(theirs.get(name))} where "
                                      f"rank 0 has {_shown(every[0].get(name))}; {advice}")

    def any_rank(self, flag: bool) -> bool:
        """Collective: whether `flag` is set on any rank (a one-integer all-reduce)."""
        if self.size == 1:
            return flag
        from mpi4py import MPI

        buf = np.array([int(flag)], dtype=np.int32)
        self.comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.MAX)
        return bool(buf[0])

    def fail(self, message, status: int = 2):
        """This rank alone failed: print `error: <message>` on one line; under MPI name the rank and
        end every rank at once (the others may be waiting in a collective)."""
        prefix = "error: " if self.size == 1 else f"error: rank {self.rank} of {self.size}: "
        print(prefix + " ".join(str(message).split()), file=sys.stderr, flush=True)
        if self.size > 1:
            self.exit_all(status)

    def crash(self, exc: BaseException):
        """An unexpected exception: the traceback with the rank, then every rank ends; re-raised with one rank."""
        if self.size == 1:
            raise exc
        # One write, summary first: the end of the job can cut the launcher's forwarding of later output.
        summary = "".join(traceback.format_exception_only(exc)).strip()
        sys.stderr.write(f"rank {self.rank} of {self.size} failed: {summary}\n"
                         + "".join(traceback.format_exception(exc)))
        self.exit_all(1)

    def leave(self, status: int):
        """Under MPI, after every rank has agreed to stop: finalise MPI and exit this rank with
        `status` at once. The interpreter's teardown takes 0.1-0.2 s, and a second Ctrl-C within it
        reaches mpirun (MPICH's Hydra), which then kills every rank and exits with a status of its
        own (0, 1 or 255, not 130). The exit is C's exit(), not os._exit: MPICH ends its link to the
        launcher in an exit hook, without which the launcher kills the ranks still finalising. A
        no-op for one process."""
        if self.size == 1:
            return
        from mpi4py import MPI

        sys.stdout.flush()
        sys.stderr.flush()
        MPI.Finalize()
        ctypes.CDLL(None).exit(status)

    def exit_all(self, status: int):
        """Under MPI, exit this rank with `status` without finalising MPI: the launcher (MPICH's
        Hydra, Open MPI's mpirun) then stops every other rank and exits with this status, printing
        nothing of its own (MPI_Abort would add its own line). A moment first lets the launcher
        forward what this rank just wrote: under load, an immediate exit could tear the forwarding
        down first. A no-op for one process."""
        if self.size == 1:
            return
        sys.stdout.flush()
        sys.stderr.flush()
        time.sleep(EXIT_GRACE_S)
        os._exit(status)


class Interrupt:
    """A stop signal (Ctrl-C, SIGTERM, SIGHUP: autogemm.signals) as a request to stop at a step
    boundary. Inside `deferred()` (the epochs), and always under MPI, the first one sets `requested`
    (and `signum`), which the trainer reads at step boundaries through Dist.any_rank, so that every
    rank stops at the same one (a rank leaving on its own would leave the others waiting in an
    all-reduce); outside it, and at a second signal, signals.Stop is raised at once. A context
    manager: the previous handlers are back on exit."""

    def __init__(self, always_deferred: bool = False):
        self.requested = False
        self.signum = signal.SIGINT      # the signal requested by, once it is
        self._deferring = always_deferred
        self._handling = signals.stoppable(self._handle)

    def __enter__(self):
        self._handling.__enter__()
        return self

    def __exit__(self, *exc):
        return self._handling.__exit__(*exc)

    @contextlib.contextmanager
    def deferred(self):
        before, self._deferring = self._deferring, True
        try:
            yield
        finally:
            self._deferring = before

    def _handle(self, signum, frame):
        if self.requested or not self._deferring:
            raise signals.Stop(signum)
        self.requested, self.signum = True, signum


def maybe_init_dist() -> Dist:
    """The MPI world when launched by mpirun with mpi4py installed, else rank 0 of 1. With several
    ranks, each one's node-local rank and size too (node_local), for local_rank()."""
    global _rank, _local_rank
    if not any(k in os.environ for k in _LAUNCHER_ENV):
        return Dist()
    try:
        from mpi4py import MPI
    except ImportError:
        size = int(os.environ.get("PMI_SIZE") or os.environ.get("OMPI_COMM_WORLD_SIZE") or 1)
        if size > 1:
            raise NNError("launched by mpirun but mpi4py is not installed; pip install 'autogemm[mpi]'") from None
        return Dist()
    comm = MPI.COMM_WORLD
    _rank = comm.Get_rank()
    if comm.Get_size() == 1:
        return Dist()
    _local_rank, local_size = node_local(comm)
    return Dist(_rank, comm.Get_size(), comm, _local_rank, local_size)


def node_local(comm) -> tuple[int, int]:
    """Collective: (this rank's place, the number of ranks) among the ranks of `comm` that share its
    host's memory (MPI_Comm_split_type, COMM_TYPE_SHARED), ordered as in `comm`; the split
    communicator is freed before returning."""
    from mpi4py import MPI

    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    try:
        return node.Get_rank(), node.Get_size()
    finally:
        node.Free()


def local_rank() -> int | None:
    """This process's rank on its host as MPI computed it (maybe_init_dist, several ranks); None
    for one process, or before maybe_init_dist: then only a launcher's variables can say."""
    return _local_rank


def print0(*args, **kwargs):
    """print() on rank 0 only."""
    if _rank == 0:
        print(*args, **kwargs)


def split_sizes(n, parts) -> list[int]:
    """np.array_split's sizes: n rows in `parts` pieces differing by at most one, larger ones first."""
    base, extra = divmod(n, parts)
    return [base + (i < extra) for i in range(parts)]


def rank_rows(n, batch, rank, size):
    """This rank's rows of every global batch of the n rows taken in order.

    Returns (index, spans): `index` (m,) int64 lists the rows in order, and spans[k] = (start, count)
    locates batch k's share within `index` (count may be 0 when size > batch rows).
    """
    index, spans, pos = [], [], 0
    for start in range(0, n, batch):
        rows = min(batch, n - start)
        sizes = split_sizes(rows, size)
        first = start + sum(sizes[:rank])
        index.append(np.arange(first, first + sizes[rank], dtype=np.int64))
        spans.append((pos, sizes[rank]))
        pos += sizes[rank]
    return np.concatenate(index) if index else np.zeros(0, np.int64), spans
