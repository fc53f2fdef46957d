"""GPU backends on CuPy: "cupy" runs every operation on autogemm's generated kernels (fused GEMM
epilogues, one-kernel softmax + cross-entropy) and can capture a whole epoch as one CUDA graph;
"cublas" is the baseline: cuBLAS GEMMs plus separate elementwise kernels, run eagerly (CuPy cannot
capture cuBLAS calls into a graph).

All work goes to one non-blocking stream of the backend's own (graphs cannot capture the legacy
default stream). Ranks under MPI take GPUs round-robin by their node-local rank (MPI's, nn.dist).
"""
import contextlib
import dataclasses
import functools
import os

import numpy as np

import autogemm
from nn import dist
from nn.backends.base import EPILOGUES, Backend
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


def column_major_input_gradient(dtype, precision: str, classes: int) -> bool:
    """Whether the cupy backend lays out linear_backward's input gradient G column-major for the
    weight GEMM that alone reads it (G^T X): G^T is then K-major, as Hopper's TF32 products read it
    with no staging copy. At precision tf32 alone: there it saves more than storing G transposed
    costs; at fp32 the 3xTF32 GEMM gains about what linear_backward loses; at bf16 G is written in
    bfloat16 alone, row-major, which the BF16 products read M-major as it is
    (benchmarks/issue18-h100/g1-transposed/)."""
    return np.dtype(dtype) == np.float32 and precision == "tf32" and classes <= autogemm.LINEAR_BACKWARD_MAX_CLASSES


def column_major_data(x, precision: str) -> bool:
    """Whether the cupy backend keeps a column-major copy of the read-only array `x` (`read_only`: the
    data) for the GEMMs that read it M/N-major (the first layer's weight GEMM G^T X reads X N-major),
    so that they read the copy K-major: a C-contiguous 2-D float32 one, at precision tf32 alone, whose
    products read operands K-major (else gemm_wgmma copies X K-major before every call:
    benchmarks/issue18-h100/g1-transposed)."""
    return x.dtype == np.float32 and precision == "tf32" and x.ndim == 2 and x.flags.c_contiguous and x.size > 0


def k_major_operand(x, mn_major: bool, copies):
    """`x`, or where a GEMM reads it M/N-major (`mn_major`) and it is consecutive whole rows of a
    source of `copies` ((source, its column-major copy) pairs), the same rows of the copy."""
    if mn_major and x.ndim == 2:
        for source, copy in copies:
            row = source.strides[0]
            offset = _address(x) - _address(source)
            if (x.dtype == source.dtype and x.shape[1] == source.shape[1] and x.strides == source.strides
                    and row > 0 and 0 <= offset and offset % row == 0 and offset // row + x.shape[0] <= source.shape[0]):
                return copy[offset // row:offset // row + x.shape[0]]
    return x


def launched_operands(a, trans_a: bool, b, trans_b: bool, copies) -> tuple:
    """(a, trans_a, b, trans_b) as the cupy backend's GEMM launches op(a) op(b): rows of read-only
    data read M/N-major taken from their column-major copy (k_major_operand), then column-major
    arrays as their row-major transposes (autogemm.row_major_operand): what its key's op names."""
    a, b = k_major_operand(a, trans_a, copies), k_major_operand(b, not trans_b, copies)
    return (*autogemm.row_major_operand(a, trans_a), *autogemm.row_major_operand(b, trans_b))


def _address(x) -> int:
    """The first byte of a CuPy or NumPy array."""
    return x.data.ptr if hasattr(x.data, "ptr") else x.__array_interface__["data"][0]


class CupyBackend(Backend):
    """autogemm kernels on one GPU; `tuned` picks configs from tuned/ (else the family defaults);
    `precision` is its GEMMs' (autogemm.gemm's). At precision bf16 a GEMM whose operands a kernel
    can read in bfloat16 (Hopper's, rows of whole 16-byte vectors) reads them so: read-only arrays
    (`read_only`: the data) rounded once, the output layer's input gradient written in bfloat16 by
    the kernel that makes it (linear_xent: beside its float32 values; linear_backward: alone, as the
    GEMMs that read it round it to bfloat16; one that cannot read bfloat16 here has its values
    widened back first), the others (weights, gradients) rounded by to_bf16 before each call;
    float32 weights and sums. On Hopper, whose GEMMs write a bfloat16 D, the output layer's input
    (`empty_output_layer_input`) is stored in bfloat16 alone: its GEMM writes it so (or, for a
    shape no such kernel runs, rounds into it), and the output layer's loss, gradients and
    activation derivative are taken from those bfloat16 values. At precision tf32 a GEMM that reads
    rows of a read-only array M/N-major reads them K-major from its column-major copy
    (`column_major_data`)."""

    name = "cupy"
    can_capture = True

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
        self.side = cupy.cuda.Stream(non_blocking=True)       # the side branch of a step
        self._fork = cupy.cuda.Event(disable_timing=True)
        self._join = cupy.cuda.Event(disable_timing=True)
        self.config = None if tuned else "default"  # None: autogemm's tuned lookup
        self.precision = precision
        self._plans = {}
        self._bf16_copies = []          # (float32 array, its bfloat16 copy) kept current without a rounding
                                        # pass: read-only arrays' (rounded once), the output layer's input
                                        # gradient's (written beside it)
        self._bf16_only = []            # float32 arrays whose values are written in their bfloat16 copy alone
        self.column_major = []         # (read-only array, its column-major copy) at precision tf32
        self._widen = cupy.ElementwiseKernel("uint16 bits", "float32 value",     # bfloat16 bits back to float32
                                             "value = __uint_as_float((unsigned int)bits << 16)", "widen_bf16")

    # ---- storage --------------------------------------------------------------------------

    def asarray(self, a):
        a = np.asarray(a)
        dtype = self.dtype if np.issubdtype(a.dtype, np.floating) else np.int32  # labels: int32 for the kernels
        return self.xp.asarray(np.ascontiguousarray(a, dtype=dtype))

    def read_only(self, x):
        if self.precision == "bf16" and x.dtype == np.float32 and x.flags.c_contiguous and x.size:
            self._bf16_copies.append((x, autogemm.to_bf16(x, config=self.config)))
        if column_major_data(x, self.precision):
            copy = autogemm.empty_column_major(x.shape, x.dtype)
            autogemm.transpose(x, copy.T, config=self.config)
            self.column_major.append((x, copy))
        return x

    def to_numpy(self, a):
        return self.xp.asnumpy(a, stream=self.stream)

    def empty(self, shape):
        return self.xp.empty(shape, self.dtype)

    def zeros(self, shape):
        return self.xp.zeros(shape, self.dtype)

    def empty_input_gradient(self, shape, classes):
        if not column_major_input_gradient(self.dtype, self.precision, classes):
            return self.empty(shape)
        return autogemm.empty_column_major(shape, self.dtype)

    def empty_output_layer_input(self, shape):
        x = self.empty(shape)
        if self.precision == "bf16" and x.dtype == np.float32 and self.device.compute_capability == "90":
            self._bf16_copies.append((x, self.xp.empty(shape, np.uint16)))
            self._bf16_only.append(x)
            self._plans.clear()     # a plan cached for an earlier array at x's address would write float32
        return x

    def free_bytes(self):
        """The device's free memory and what CuPy's pool holds free."""
        return self.xp.cuda.runtime.memGetInfo()[0] + self.xp.get_default_memory_pool().free_bytes()

    # ---- the step's operations -----------------------------------------------------------

    def gemm(self, a, b, out, *, alpha=1.0, beta=0.0, trans_a=False, trans_b=False, c=None,
             epilogue=None, bias=None, aux=None):
        if epilogue not in EPILOGUES:
            raise ValueError(f"unknown epilogue {epilogue!r}")
        if out.size == 0:  # a rank with no rows of this batch
            return out
        if a.shape[1 - trans_a] == 0:  # K = 0 (no rows): the weight gradient of an empty share is zero
            if beta != 0 or epilogue is not None:
                raise ValueError("gemm with K = 0 is only supported as a zero product on the GPU backends")
            out.fill(0)
            if self._in_bf16_alone(out):
                self._bf16_copy(out)[0].fill(0)
            return out
        key = (_layout(a), _layout(b), _layout(out), _layout(c), _layout(bias), _layout(aux),
               alpha, beta, trans_a, trans_b, epilogue)
        plan = self._plans.get(key)
        if plan is None:
            a, b = k_major_operand(a, trans_a, self.column_major), k_major_operand(b, not trans_b, self.column_major)
            c = out if beta != 0 and c is None else c
            plan = self._widened(self._plan(a, b, out, alpha, beta, trans_a, trans_b, c, epilogue, bias, aux), c, aux)
            self._plans[key] = plan
        plan()
        return out

    def _plan(self, a, b, out, *args):
        """The GEMM as one call, into `out`'s bfloat16 copy where out is stored in bfloat16 alone (by a
        kernel that writes it so, else the float32 result rounded into it)."""
        out16 = self._stored(out)
        if out16 is out:
            return self._plan_into(a, b, out, *args)
        try:
            return self._plan_into(a, b, out16, *args)
        except autogemm.InvalidConfig:            # no kernel writes bfloat16 here
            return RoundedGemm(self._plan_into(a, b, out, *args), [],
                               [functools.partial(autogemm.to_bf16, out, out16, config=self.config)])

    def _plan_into(self, a, b, *args):
        """The GEMM as one call: at precision bf16, on the bfloat16 copies of its operands where a
        kernel can read them (their rounding first), else on the float32 arrays."""
        plan = lambda x, y: autogemm.plan_gemm(x, y, *args, config=self.config, precision=self.precision)  # noqa: E731
        if self.precision != "bf16" or not (a.flags.c_contiguous and b.flags.c_contiguous):
            return self._widened(plan(a, b), a, b)
        (a16, round_a), (b16, round_b) = self._bf16_copy(a), self._bf16_copy(b)
        try:
            gemm = plan(a16, b16)
        except autogemm.InvalidConfig:            # no kernel reads these bfloat16 operands here
            return self._widened(plan(a, b), a, b)
        return RoundedGemm(gemm, [r for r in (round_a, round_b) if r is not None])

    def _widened(self, gemm, *inputs):
        """`gemm` reading float32 `inputs` (None: none), those written in bfloat16 alone widened back
        into their float32 arrays first (their values as a GEMM at bf16 would read them)."""
        widen = [functools.partial(self._widen, self._bf16_copy(x)[0], x) for x in inputs
                 if x is not None and x.size and self._in_bf16_alone(x)]
        return RoundedGemm(gemm, widen) if widen else gemm

    def _in_bf16_alone(self, x) -> bool:
        return any(0 <= x.data.ptr - source.data.ptr < source.nbytes for source in self._bf16_only)

    def _check_float32_values(self, x):
        """NNError where `x` has its values in bfloat16 alone (a reader the step was not meant to
        have: a bug, never silent garbage)."""
        if x.size and self._in_bf16_alone(x):
            raise NNError(f"internal error: an operation reads the float32 values of a {x.shape} array that "
                          "was written in bfloat16 alone; please report it")

    def _bf16_copy(self, x):
        """(x's bfloat16 copy, the call that rounds x into it before each GEMM, or None for a copy
        kept current otherwise: a read-only array's, rounded once; an input gradient's, written beside
        it)."""
        for source, copy in self._bf16_copies:
            offset = x.data.ptr - source.data.ptr
            if 0 <= offset < source.nbytes:
                start = offset // source.itemsize
                return copy.ravel()[start:start + x.size].reshape(x.shape), None
        copy = self.xp.empty(x.shape, np.uint16)
        return copy, lambda: autogemm.to_bf16(x, copy, config=self.config)

    def softmax_xent(self, z, labels, grad_out, scale, loss_acc):
        if z.size:
            autogemm.softmax_xent(z, labels, grad_out, scale, loss_acc, config=self.config)

    def linear_xent(self, a, w, bias, labels, logits, grad_out, scale, loss_acc, grad_in=None, activation=None):
        if a.shape[0] == 0:
            return
        if w.shape[0] > autogemm.LINEAR_XENT_MAX_CLASSES:
            super().linear_xent(a, w, bias, labels, logits, grad_out, scale, loss_acc, grad_in, activation)
            return
        autogemm.linear_xent(self._stored(a), w, bias, labels, logits, grad_out, scale, loss_acc, grad_in, activation,
                             config=self.config, grad_in_bf16=self._written_bf16_copy(grad_in))

    def linear_backward(self, g, w, a, grad_in, activation, dw, db, alpha=1.0, beta=0.0, accumulate_db=False):
        if a.shape[0] == 0 or w.shape[0] > autogemm.LINEAR_BACKWARD_MAX_CLASSES:
            super().linear_backward(g, w, a, grad_in, activation, dw, db, alpha, beta, accumulate_db)
            return
        copy = self._written_bf16_copy(grad_in, alone=True)
        autogemm.linear_backward(g, w, self._stored(a), grad_in if copy is None else None, activation, dw, db, alpha,
                                 beta, 1.0 if accumulate_db else 0.0, grad_in_bf16=copy, config=self.config)

    def _stored(self, x):
        """x as it is stored: its bfloat16 copy where it is stored in bfloat16 alone."""
        return self._bf16_copy(x)[0] if x.size and self._in_bf16_alone(x) else x

    def _written_bf16_copy(self, grad_in, alone=False):
        """At precision bf16, the bfloat16 copy of the input gradient that the output layer's kernel
        writes, so that the GEMMs reading it find it made (no rounding pass); else None. `alone`: the
        copy is all the kernel writes (every reader rounds the gradient to bfloat16: the GEMMs,
        reading the copy), and reading the float32 array raises NNError."""
        if self.precision != "bf16" or grad_in is None or grad_in.dtype != np.float32 or not grad_in.flags.c_contiguous:
            return None
        base = grad_in.base       # the whole buffer where grad_in is its first rows: a step's on fewer rows share it
        source = base if base is not None and base.flags.c_contiguous and base.data.ptr == grad_in.data.ptr else grad_in
        copy, round_into = self._bf16_copy(source)
        if round_into is not None:     # a new copy: from now on written by the output layer's kernel
            self._bf16_copies.append((source, copy))
        if alone and not any(x is source for x in self._bf16_only):
            self._bf16_only.append(source)
        return self._bf16_copy(grad_in)[0]

    def column_sums(self, g, out, scale=1.0, accumulate=False):
        self._check_float32_values(g)
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

    def conv2d(self, x, w, b, out, activation=None):
        if out.size:
            autogemm.conv2d(x, w, b, out, activation, config=self.config)
        return out

    def conv2d_backward_data(self, g, w, out, aux=None, activation=None):
        if out.size:
            autogemm.conv2d_backward_data(g, w, out, aux, activation, config=self.config)
        return out

    def conv2d_backward_weights(self, g, x, dw, db):
        if x.shape[0] == 0:  # no rows: the sums are zero
            dw.fill(0)
            db.fill(0)
        else:
            autogemm.conv2d_backward_weights(g, x, dw, db, config=self.config)

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

    @contextlib.contextmanager
    def side_branch(self):
        self._fork.record(self.stream)
        self.side.wait_event(self._fork)
        # use(), not `with self.side`: leaving that context need not make self.stream current again
        # (it restores what its own stack saw), and work on any other stream escapes the graph.
        self.side.use()
        try:
            yield
        finally:
            self.stream.use()

    def join_branch(self):
        self._join.record(self.side)
        self.stream.wait_event(self._join)

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


class CublasBackend(CupyBackend):
    """The baseline: cuBLAS GEMMs (in the backend's precision), epilogues as separate autogemm
    elementwise kernels."""

    name = "cublas"
    can_capture = False

    def gemm(self, a, b, out, *, alpha=1.0, beta=0.0, trans_a=False, trans_b=False, c=None,
             epilogue=None, bias=None, aux=None):
        if epilogue not in EPILOGUES:
            raise ValueError(f"unknown epilogue {epilogue!r}")
        if c is not None and c is not out and beta != 0:
            out[...] = c
        autogemm.cublas_gemm(a, b, out, trans_a, trans_b, self.precision, alpha, beta)
        if epilogue in ("bias", "bias_sigmoid", "bias_relu"):
            autogemm.bias_activation(out, bias, epilogue[5:] or None, out=out, config=self.config)
        elif epilogue in ("dsigmoid", "drelu"):
            autogemm.activation_grad(out, aux, epilogue[1:], out=out, config=self.config)
        return out

    # The unfused output layer: cuBLAS's logits GEMM and input-gradient GEMM around softmax_xent, and
    # its backward pass as two cuBLAS GEMMs and column sums.
    linear_xent = Backend.linear_xent
    linear_backward = Backend.linear_backward
    read_only = Backend.read_only       # cuBLAS rounds float32 operands itself
    empty_input_gradient = Backend.empty_input_gradient
    empty_output_layer_input = Backend.empty_output_layer_input   # cuBLAS writes and reads it in float32

    def capture(self, fn):
        raise NNError("the cublas backend cannot be captured into a CUDA graph (CuPy forbids cuBLAS during capture)")


@dataclasses.dataclass
class RoundedGemm:
    """A GEMM and the calls that prepare its inputs first (float32 operands rounded into the bfloat16
    copies it reads, or bfloat16 values widened back into the float32 arrays it reads), and those
    that round its float32 output into a bfloat16 copy after."""

    gemm: object            # autogemm's GemmCall, or another RoundedGemm
    rounding: list
    after: list = dataclasses.field(default_factory=list)

    def __call__(self):
        for round_into_copy in self.rounding:
            round_into_copy()
        self.gemm()
        for round_output in self.after:
            round_output()


def _layout(x):
    """What a cached GEMM plan depends on: pointer, shape and strides (None for no array)."""
    return None if x is None else (x.data.ptr, x.shape, x.strides)
