"""What the GPU backends share: one GPU, its streams, CUDA graphs and timing, and autogemm's kernels
for every operation but the GEMM and the output layer (elementwise, column sums, SGD, the CNN's).

All work goes to one non-blocking stream of the backend's own (graphs cannot capture the legacy
default stream). Ranks under MPI take GPUs round-robin by their node-local rank (MPI's, nn.dist).
"""
import contextlib
import os

import numpy as np

import autogemm
from nn import dist
from nn.backends.base import Backend
from nn.errors import NNError

# Node-local rank as the MPI launchers export it: MPICH/Hydra, Open MPI, PMIx, Slurm.
_LOCAL_RANK_ENV = ("MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "PMIX_LOCAL_RANK", "SLURM_LOCALID")


def local_rank() -> int:
    """This process's rank among those on its host: MPI's (nn.dist.local_rank, computed by
    maybe_init_dist for several ranks), else the launcher's variable (one process), else 0."""
    computed = dist.local_rank()
    if computed is not None:
        return computed
    return next((int(os.environ[k]) for k in _LOCAL_RANK_ENV if k in os.environ), 0)


def gpu_for_rank(rank: int, gpus: int) -> int:
    """Round-robin: several ranks may share a GPU when there are more ranks than GPUs."""
    return rank % gpus


def this_ranks_gpu(gpus: int) -> int:
    """The GPU of this process among its host's `gpus`: round-robin by its node-local rank."""
    return gpu_for_rank(local_rank(), gpus)


class GpuBackend(Backend):
    """A backend on this rank's GPU: `tuned` picks autogemm's configs from tuned/ (else the family
    defaults); `precision` is its GEMMs'. A GPU backend adds its GEMM and output layer."""

    def __init__(self, dtype, tuned: bool = True, precision: str = "fp32"):
        super().__init__(dtype)
        try:
            import cupy

            gpus = cupy.cuda.runtime.getDeviceCount()
        except Exception as exc:  # ImportError, or CuPy's CUDA errors without a driver or device
            raise NNError(f"the {self.name} backend needs CuPy and a CUDA device: {exc}") from None
        self.xp = cupy
        self.device = cupy.cuda.Device(this_ranks_gpu(gpus))
        self.device.use()
        self.device_name = cupy.cuda.runtime.getDeviceProperties(self.device.id)["name"].decode()  # its tuned file's
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.stream.use()
        self._lanes = []           # the side branches of a step: (stream, its join event), made as asked for
        self._forked = set()       # the lanes used since the last join
        self._fork = cupy.cuda.Event(disable_timing=True)
        self.config = None if tuned else "default"  # None: autogemm's tuned lookup
        self.precision = precision

    # ---- storage --------------------------------------------------------------------------

    def asarray(self, a):
        a = np.asarray(a)
        dtype = self.dtype if np.issubdtype(a.dtype, np.floating) else np.int32  # labels: int32 for the kernels
        return self.xp.asarray(np.ascontiguousarray(a, dtype=dtype))

    def to_numpy(self, a):
        return self.xp.asnumpy(a, stream=self.stream)

    def empty(self, shape):
        return self.xp.empty(shape, self.dtype)

    def zeros(self, shape):
        return self.xp.zeros(shape, self.dtype)

    def free_bytes(self):
        """The device's free memory and what CuPy's pool holds free."""
        return self.xp.cuda.runtime.memGetInfo()[0] + self.xp.get_default_memory_pool().free_bytes()

    # ---- the step's operations but the GEMM ------------------------------------------------

    def softmax_xent(self, z, labels, grad_out, scale, loss_acc):
        if z.size:
            autogemm.softmax_xent(z, labels, grad_out, scale, loss_acc, config=self.config)

    def column_sums(self, g, out, scale=1.0, accumulate=False):
        if g.shape[0] == 0:  # no rows: the sums are zero
            if not accumulate:
                out.fill(0)
            return out
        return autogemm.column_sums(g, out, alpha=scale, beta=1.0 if accumulate else 0.0, config=self.config)

    def sgd_update(self, w, grad, lr, reg):
        autogemm.sgd_update(w.reshape(1, -1) if w.ndim == 1 else w,
                            grad.reshape(1, -1) if grad.ndim == 1 else grad, lr, reg, config=self.config)
        return w

    # ---- the CNN's operations: autogemm's convolution, pooling and Adam kernels ---------------

    def conv2d(self, x, w, b, out, activation=None, where=None, unpooled=None):
        if out.size:
            autogemm.conv2d(x, w, b, out, activation, config=self.config, precision=self.precision, where=where,
                            unpooled=unpooled)
        return out

    def conv2d_backward_data(self, g, w, out, aux=None, activation=None, where=None, unpooled=None):
        if out.size:
            autogemm.conv2d_backward_data(g, w, out, aux, activation, config=self.config, precision=self.precision,
                                          where=where, unpooled=unpooled)
        return out

    def conv2d_backward_weights(self, g, x, dw, db):
        if x.shape[0] == 0:  # no rows: the sums are zero
            dw.fill(0)
            db.fill(0)
        else:
            autogemm.conv2d_backward_weights(g, x, dw, db, config=self.config, precision=self.precision)

    def maxpool2x2(self, x, out, where):
        if out.size:
            autogemm.maxpool2x2(x, out, where, config=self.config)
        return out

    def maxpool2x2_backward(self, g, where, out, y=None, activation=None):
        if out.size:
            autogemm.maxpool2x2_backward(g, where, out, y, activation, config=self.config)
        return out

    def adam_update(self, w, g, m, v, steps, lr, beta1, beta2, eps):
        return autogemm.adam_update(w, g, m, v, steps, lr, beta1, beta2, eps, config=self.config)

    def synchronize(self):
        self.stream.synchronize()

    # ---- concurrency inside a step ----------------------------------------------------------

    @contextlib.contextmanager
    def side_branch(self, lane: int = 0):
        cupy = self.xp
        while len(self._lanes) <= lane:
            self._lanes.append((cupy.cuda.Stream(non_blocking=True), cupy.cuda.Event(disable_timing=True)))
        side = self._lanes[lane][0]
        self._fork.record(self.stream)
        side.wait_event(self._fork)
        self._forked.add(lane)
        # use(), not `with side`: leaving that context need not make self.stream current again
        # (it restores what its own stack saw), and work on any other stream escapes the graph.
        side.use()
        try:
            yield
        finally:
            self.stream.use()

    def join_branch(self):
        for lane in sorted(self._forked):
            side, joined = self._lanes[lane]
            joined.record(side)
            self.stream.wait_event(joined)
        self._forked.clear()

    # ---- CUDA graphs ----------------------------------------------------------------------

    def capture(self, fn):
        """A CUDA graph of the work `fn()` enqueues (nothing runs now); call `.launch()` to replay it.

        Every array `fn` touches must outlive the graph: it holds raw pointers, not references.
        """
        self.stream.begin_capture()
        try:
            fn()
        finally:
            graph = self.stream.end_capture()
        graph.upload(self.stream)
        return graph

    # ---- timing ---------------------------------------------------------------------------

    def mark(self):
        event = self.xp.cuda.Event()
        event.record(self.stream)
        return event

    def elapsed_ms(self, start, end):
        end.synchronize()
        return self.xp.cuda.get_elapsed_time(start, end)
