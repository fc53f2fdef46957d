"""The "cupy" backend: every operation on autogemm's generated kernels (fused GEMM epilogues, the
output layer's forward and backward passes each one kernel), a whole epoch capturable as one CUDA
graph. Its arrays are stored as the storage policy says (nn/backends/storage.py): bfloat16 copies at
precision bf16, column-major ones at tf32.
"""
import dataclasses
import functools

import autogemm
from nn.backends.base import EPILOGUES
from nn.backends.gpu import GpuBackend
from nn.backends.storage import Storage


class CupyBackend(GpuBackend):
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
    rows of a read-only array M/N-major reads them K-major from its column-major copy. Which arrays
    get which copy, and when, is `storage`'s (Storage) to say."""

    name = "cupy"
    can_capture = True

    def __init__(self, dtype, tuned: bool = True, precision: str = "fp32"):
        super().__init__(dtype, tuned, precision)
        self.storage = Storage(self.dtype, precision, self.xp, config=self.config,
                               bf16_outputs=self.device.compute_capability == "90")
        self._plans = {}
        self._widen = self.xp.ElementwiseKernel("uint16 bits", "float32 value",     # bfloat16 bits back to float32
                                                "value = __uint_as_float((unsigned int)bits << 16)", "widen_bf16")

    # ---- storage: the policy's --------------------------------------------------------------

    def read_only(self, x):
        return self.storage.read_only(x)

    def empty_input_gradient(self, shape, classes):
        return self.storage.empty_input_gradient(shape, classes)

    def empty_output_layer_input(self, shape):
        x = self.storage.empty_output_layer_input(shape)
        if self.storage.in_bf16_alone(x):
            self._plans.clear()     # a plan cached for an earlier array at x's address would write float32
        return x

    # ---- the GEMM and the output layer -------------------------------------------------------

    def gemm(self, a, b, out, *, alpha=1.0, beta=0.0, trans_a=False, trans_b=False, c=None,
             epilogue=None, bias=None, aux=None, precision=None):
        if epilogue not in EPILOGUES:
            raise ValueError(f"unknown epilogue {epilogue!r}")
        if out.size == 0:  # a rank with no rows of this batch
            return out
        if a.shape[1 - trans_a] == 0:  # K = 0 (no rows): the weight gradient of an empty share is zero
            if beta != 0 or epilogue is not None:
                raise ValueError("gemm with K = 0 is only supported as a zero product on the GPU backends")
            out.fill(0)
            if self.storage.in_bf16_alone(out):
                self.storage.bf16_copy(out)[0].fill(0)
            return out
        precision = precision or self.precision
        key = (_layout(a), _layout(b), _layout(out), _layout(c), _layout(bias), _layout(aux),
               alpha, beta, trans_a, trans_b, epilogue, precision)
        plan = self._plans.get(key)
        if plan is None:
            a, b = self.storage.k_major_operand(a, trans_a), self.storage.k_major_operand(b, not trans_b)
            c = out if beta != 0 and c is None else c
            plan = self._widened(self._plan(a, b, out, alpha, beta, trans_a, trans_b, c, epilogue, bias, aux,
                                            precision=precision), c, aux)
            self._plans[key] = plan
        plan()
        return out

    def _plan(self, a, b, out, *args, precision):
        """The GEMM as one call, into `out`'s bfloat16 copy where out is stored in bfloat16 alone (by a
        kernel that writes it so, else the float32 result rounded into it)."""
        out16 = self.storage.stored(out)
        if out16 is out:
            return self._plan_into(a, b, out, *args, precision=precision)
        try:
            return self._plan_into(a, b, out16, *args, precision=precision)
        except autogemm.InvalidConfig:            # no kernel writes bfloat16 here
            return RoundedGemm(self._plan_into(a, b, out, *args, precision=precision), [],
                               [functools.partial(autogemm.to_bf16, out, out16, config=self.config)])

    def _plan_into(self, a, b, *args, precision):
        """The GEMM as one call: at precision bf16 (the backend's), on the bfloat16 copies of its
        operands where a kernel can read them (their rounding first), else on the float32 arrays."""
        plan = lambda x, y: autogemm.plan_gemm(x, y, *args, config=self.config, precision=precision)  # noqa: E731
        if precision != self.precision or not self.storage.reads_bf16(a, b):
            return self._widened(plan(a, b), a, b)
        (a16, round_a), (b16, round_b) = self.storage.bf16_copy(a), self.storage.bf16_copy(b)
        try:
            gemm = plan(a16, b16)
        except autogemm.InvalidConfig:            # no kernel reads these bfloat16 operands here
            return self._widened(plan(a, b), a, b)
        return RoundedGemm(gemm, [r for r in (round_a, round_b) if r is not None])

    def _widened(self, gemm, *inputs):
        """`gemm` reading float32 `inputs` (None: none), those written in bfloat16 alone widened back
        into their float32 arrays first (their values as a GEMM at bf16 would read them)."""
        widen = [functools.partial(self._widen, self.storage.bf16_copy(x)[0], x) for x in inputs
                 if x is not None and x.size and self.storage.in_bf16_alone(x)]
        return RoundedGemm(gemm, widen) if widen else gemm

    def linear_xent(self, a, w, bias, labels, logits, grad_out, scale, loss_acc, grad_in=None, activation=None):
        if a.shape[0] == 0:
            return
        if w.shape[0] > autogemm.LINEAR_XENT_MAX_CLASSES:
            super().linear_xent(a, w, bias, labels, logits, grad_out, scale, loss_acc, grad_in, activation)
            return
        autogemm.linear_xent(self.storage.stored(a), w, bias, labels, logits, grad_out, scale, loss_acc, grad_in,
                             activation, config=self.config, grad_in_bf16=self.storage.written_bf16_copy(grad_in))

    def linear_backward(self, g, w, a, grad_in, activation, dw, db, alpha=1.0, beta=0.0, accumulate_db=False):
        if a.shape[0] == 0 or w.shape[0] > autogemm.LINEAR_BACKWARD_MAX_CLASSES:
            super().linear_backward(g, w, a, grad_in, activation, dw, db, alpha, beta, accumulate_db)
            return
        copy = self.storage.written_bf16_copy(grad_in, alone=True)
        autogemm.linear_backward(g, w, self.storage.stored(a), grad_in if copy is None else None, activation, dw, db, alpha,
                                 beta, 1.0 if accumulate_db else 0.0, grad_in_bf16=copy, config=self.config)

    def fuses_dense_stack(self, widths):
        return autogemm.dense_stack_runs(widths)

    def dense_stack(self, x, weights, biases, labels, outs, grads, scale, loss_acc, activation, grad_in=None,
                    where=None):
        if x.shape[0] == 0:
            return
        for a in (x, *outs):
            self.storage.check_float32_values(a)
        autogemm.dense_stack(x, weights, biases, labels, outs, grads, scale, loss_acc, activation, grad_in, where,
                             config=self.config)

    def column_sums(self, g, out, scale=1.0, accumulate=False):
        self.storage.check_float32_values(g)
        return super().column_sums(g, out, scale, accumulate)


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
