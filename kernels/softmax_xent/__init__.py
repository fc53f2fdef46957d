"""Softmax + cross-entropy + gradient family (softmax_xent.cu.j2): the MLP's output layer in one kernel."""
import numpy as np

from kernels.contract import (DTYPES, NO_OP, SHORT, Geometry, RowsProblem, ceil_div,
                              rows_key_of, rows_problem_of)

NAME = "softmax_xent"
TEMPLATE = "softmax_xent/softmax_xent.cu.j2"

PARAMS = {
    "block": (32, 64, 128, 256, 512),   # threads per block
    "tpr": (1, 2, 4, 8, 16, 32),        # threads per row (a power of two within a warp)
}

Problem = RowsProblem
KEY_SIZES = ("rows", "cols")
KEY_OPS = (NO_OP,)
key_of, problem_of = rows_key_of, rows_problem_of

CONSTRAINTS = (
    ("threads per row must divide the block", lambda c, p, d: c.block % c.tpr == 0),
    ("threads per block must fit the device", lambda c, p, d: c.block <= d.max_threads_per_block),
)


def template_args(c, p: Problem) -> dict:
    return dict(c, ctype=DTYPES[p.dtype])


def instance_name(c, p: Problem) -> str:
    dt = SHORT[p.dtype]
    return f"softmax_xent_{dt}_b{c.block}_t{c.tpr}"


def geometry(c, p: Problem) -> Geometry:
    return Geometry(grid=(ceil_div(p.rows, c.block // c.tpr), 1, 1), block=(c.block, 1, 1))


def flops(p: Problem) -> int:
    return 5 * p.rows * p.cols


def default_candidates(p: Problem, d):
    tpr = 1 if p.cols <= 32 else 32
    yield dict(block=128, tpr=tpr)


def softmax(z):
    """The rows of float64 logits Z as probabilities."""
    probs = np.exp(z - z.max(1, keepdims=True))
    return probs / probs.sum(1, keepdims=True)


def xent_loss(probs, labels) -> tuple:
    """The summed cross-entropy as an output (1 x 1, value, magnitude, k): a sum of `rows` logs."""
    rows, classes = probs.shape
    loss = -np.log(probs[np.arange(rows), labels]).sum()
    return np.array([[loss]]), np.array([[abs(loss) + rows]]), rows * classes


def reference(p: Problem, z, labels, scale) -> dict:
    """{"grad": (softmax(Z) - onehot(labels)) * scale, "loss": the summed cross-entropy}."""
    probs = softmax(np.asarray(z, np.float64))                      # P: (rows, cols)
    onehot = np.eye(p.cols)[labels]
    grad = ((probs - onehot) * scale, (probs + onehot) * abs(scale), p.cols)
    return {"grad": grad, "loss": xent_loss(probs, labels)}
