"""A NumPy backend that runs side-branch work only at join_branch, after the main work enqueued
meanwhile: a step whose results depend on when a branch runs (a race on a GPU) fails against it."""
import contextlib

from nn.backends.numpy_backend import NumpyBackend


class LateBranchBackend(NumpyBackend):
    """Side branches of every lane run together at the join, in the order enqueued."""

    def __init__(self, dtype):
        super().__init__(dtype)
        self.inside, self.deferred = False, []

    @contextlib.contextmanager
    def side_branch(self, lane=0):
        self.inside = True
        yield
        self.inside = False

    def join_branch(self):
        for op in self.deferred:
            op()
        self.deferred.clear()

    def _run_or_defer(self, op, *args, **kw):
        if self.inside:
            self.deferred.append(lambda: op(*args, **kw))
        else:
            return op(*args, **kw)

    # the operations the steps put on side branches
    def gemm(self, *args, **kw):
        return self._run_or_defer(super().gemm, *args, **kw)

    def column_sums(self, *args, **kw):
        return self._run_or_defer(super().column_sums, *args, **kw)

    def conv2d_backward_weights(self, *args, **kw):
        return self._run_or_defer(super().conv2d_backward_weights, *args, **kw)
