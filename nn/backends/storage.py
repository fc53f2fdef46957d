"""The storage policy of a GPU step: which arrays get a bfloat16 or a column-major copy, and when.

The cupy backend stores its arrays by it; nn.targets' LaunchRecorder, which only notes the
launches, asks the same policy (its copies allocated on the host, never filled), so that the two
lay out every operand alike.

- precision bf16: a read-only array (`read_only`: the data) gets a bfloat16 copy, rounded once; the
  output layer's input gradient gets one that the kernel making it writes (`written_bf16_copy`);
  on a GPU whose GEMMs write a bfloat16 D (`bf16_outputs`: Hopper) the output layer's input is
  stored in bfloat16 alone (`empty_output_layer_input`). Any other GEMM operand is rounded into a
  copy of its own before each call (`bf16_copy`). Copies are found by address: a row slice of an
  array reads the same rows of its copy.
- precision tf32: a read-only array also gets a column-major copy, which a GEMM reading its rows
  M/N-major reads K-major instead (`k_major_operand`), and linear_backward's input gradient, which
  the first layer's weight GEMM alone reads (G^T X), is laid out column-major (`empty_input_gradient`).
"""
import numpy as np

import autogemm
from nn.errors import NNError


class Storage:
    """The copies of one backend's arrays at `precision`, kept in the array module `xp`; `filled`:
    copies hold their values (the cupy backend), else they are only allocated (the launch recorder)."""

    def __init__(self, dtype, precision: str, xp=np, *, config=None, bf16_outputs: bool = False, filled: bool = True):
        self.dtype, self.precision, self.xp = np.dtype(dtype), precision, xp
        self.config = config                # the kernels that fill copies: None (tuned lookup) or "default"
        self.bf16_outputs = bf16_outputs    # GEMMs can write a bfloat16 D (Hopper's)
        self.filled = filled
        self.column_major = []              # (read-only array, its column-major copy)
        self.bf16_copies = []               # (float32 array, its bfloat16 copy) kept current without a rounding
                                            # pass: read-only arrays' (rounded once), the output layer's input
                                            # gradient's (written beside it)
        self.bf16_only = []                 # float32 arrays whose values are written in their bfloat16 copy alone

    # ---- the decisions -------------------------------------------------------------------

    def column_major_data(self, x) -> bool:
        """Whether the read-only array `x` gets a column-major copy for the GEMMs that read it M/N-major
        (the first layer's weight GEMM G^T X reads X N-major), so that they read the copy K-major: a
        C-contiguous 2-D float32 one, at precision tf32 alone, whose products read operands K-major
        (else gemm_wgmma copies X K-major before every call: benchmarks/issue18-h100/g1-transposed)."""
        return (x.dtype == np.float32 and self.precision == "tf32" and x.ndim == 2 and x.flags.c_contiguous
                and x.size > 0)

    def column_major_input_gradient(self, classes: int) -> bool:
        """Whether linear_backward's input gradient G is laid out column-major for the weight GEMM that
        alone reads it (G^T X): G^T is then K-major, as Hopper's TF32 products read it with no staging
        copy. At precision tf32 alone: there it saves more than storing G transposed costs; at fp32 the
        3xTF32 GEMM gains about what linear_backward loses; at bf16 G is written in bfloat16 alone,
        row-major, which the BF16 products read M-major as it is (benchmarks/issue18-h100/g1-transposed/)."""
        return self.dtype == np.float32 and self.precision == "tf32" and classes <= autogemm.LINEAR_BACKWARD_MAX_CLASSES

    def reads_bf16(self, a, b) -> bool:
        """Whether a GEMM of operands `a`, `b` reads bfloat16 copies of them (where a kernel can)."""
        return self.precision == "bf16" and a.flags.c_contiguous and b.flags.c_contiguous

    # ---- the arrays and their copies -------------------------------------------------------

    def read_only(self, x):
        """Declare `x` never written again: it gets the copies its precision reads (see above); returns x."""
        if self.precision == "bf16" and x.dtype == np.float32 and x.flags.c_contiguous and x.size:
            copy = autogemm.to_bf16(x, config=self.config) if self.filled else self.xp.empty(x.shape, np.uint16)
            self.bf16_copies.append((x, copy))                          # x's bfloat16 bits
        if self.column_major_data(x):
            copy = autogemm.empty_column_major(x.shape, x.dtype, self.xp)   # (rows, cols), unit stride down columns
            if self.filled:
                autogemm.transpose(x, copy.T, config=self.config)
            self.column_major.append((x, copy))
        return x

    def empty_input_gradient(self, shape, classes: int):
        """An uninitialised (rows, n) input gradient of linear_backward, column-major where
        `column_major_input_gradient` says so."""
        if not self.column_major_input_gradient(classes):
            return self.xp.empty(shape, self.dtype)
        return autogemm.empty_column_major(shape, self.dtype, self.xp)

    def empty_output_layer_input(self, shape):
        """An uninitialised (rows, n) output layer input: stored in bfloat16 alone at precision bf16
        where GEMMs write a bfloat16 D."""
        x = self.xp.empty(shape, self.dtype)
        if self.precision == "bf16" and x.dtype == np.float32 and self.bf16_outputs:
            self.bf16_copies.append((x, self.xp.empty(shape, np.uint16)))
            self.bf16_only.append(x)
        return x

    def k_major_operand(self, x, mn_major: bool):
        """`x`, or where a GEMM reads it M/N-major (`mn_major`) and it is consecutive whole rows of a
        read-only array with a column-major copy, the same rows of the copy."""
        return k_major_operand(x, mn_major, self.column_major)

    def launched_operands(self, a, trans_a: bool, b, trans_b: bool) -> tuple:
        """(a, trans_a, b, trans_b) as the cupy backend's GEMM launches op(a) op(b) (see `launched_operands`)."""
        return launched_operands(a, trans_a, b, trans_b, self.column_major)

    def bf16_copy(self, x):
        """(x's bfloat16 copy, the call that rounds x into it before each GEMM, or None for a copy kept
        current otherwise: a read-only array's, rounded once; an input gradient's, written beside it)."""
        for source, copy in self.bf16_copies:
            offset = _address(x) - _address(source)
            if 0 <= offset < source.nbytes:
                start = offset // source.itemsize
                return copy.ravel()[start:start + x.size].reshape(x.shape), None
        copy = self.xp.empty(x.shape, np.uint16)                        # x's bfloat16 bits, rounded before each call
        return copy, lambda: autogemm.to_bf16(x, copy, config=self.config)

    def in_bf16_alone(self, x) -> bool:
        """Whether `x` lies in an array whose values are written in its bfloat16 copy alone."""
        return any(0 <= _address(x) - _address(source) < source.nbytes for source in self.bf16_only)

    def stored(self, x):
        """x as it is stored: its bfloat16 copy where it is stored in bfloat16 alone."""
        return self.bf16_copy(x)[0] if x.size and self.in_bf16_alone(x) else x

    def check_float32_values(self, x):
        """NNError where `x` has its values in bfloat16 alone (a reader the step was not meant to have:
        a bug, never silent garbage)."""
        if x.size and self.in_bf16_alone(x):
            raise NNError(f"internal error: an operation reads the float32 values of a {x.shape} array that "
                          "was written in bfloat16 alone; please report it")

    def written_bf16_copy(self, grad_in, alone: bool = False):
        """At precision bf16, the bfloat16 copy of the input gradient that the output layer's kernel
        writes, so that the GEMMs reading it find it made (no rounding pass); else None. `alone`: the
        copy is all the kernel writes (every reader rounds the gradient to bfloat16: the GEMMs,
        reading the copy), and reading the float32 array raises NNError."""
        if self.precision != "bf16" or grad_in is None or grad_in.dtype != np.float32 or not grad_in.flags.c_contiguous:
            return None
        base = grad_in.base       # the whole buffer where grad_in is its first rows: a step's on fewer rows share it
        source = (base if base is not None and base.flags.c_contiguous and _address(base) == _address(grad_in)
                  else grad_in)
        copy, round_into = self.bf16_copy(source)
        if round_into is not None:     # a new copy: from now on written by the output layer's kernel
            self.bf16_copies.append((source, copy))
        if alone and not any(x is source for x in self.bf16_only):
            self.bf16_only.append(source)
        return self.bf16_copy(grad_in)[0]


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


def launched_operands(a, trans_a: bool, b, trans_b: bool, copies=()) -> tuple:
    """(a, trans_a, b, trans_b) as the cupy backend's GEMM launches op(a) op(b): rows of read-only
    data read M/N-major taken from their column-major copy (k_major_operand), then column-major
    arrays as their row-major transposes (autogemm.row_major_operand): what its key's op names."""
    a, b = k_major_operand(a, trans_a, copies), k_major_operand(b, not trans_b, copies)
    return (*autogemm.row_major_operand(a, trans_a), *autogemm.row_major_operand(b, trans_b))


def _address(x) -> int:
    """The first byte of a CuPy or NumPy array."""
    return x.data.ptr if hasattr(x.data, "ptr") else x.__array_interface__["data"][0]
