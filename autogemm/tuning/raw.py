"""Tune a CUDA kernel of your own, with no template (autogemm/ops/raw.py makes it a family): each
config's choices compiled in as preprocessor definitions, every candidate's outputs checked against
your float64 reference, the search and the store autogemm's own.

    best = autogemm.tune_kernel(source, "scale", problem={"n": 1 << 20}, arrays={"x": x, "y": y},
                                space={"BLOCK": [64, 128, 256, 512], "ITEMS": [1, 2, 4]},
                                grid=lambda cfg, p: -(-p["n"] // (cfg["BLOCK"] * cfg["ITEMS"])),
                                block=lambda cfg, p: cfg["BLOCK"], reference=lambda x, y: {"y": 2 * x})
"""
from collections.abc import Callable, Mapping

import numpy as np

from autogemm.errors import AutogemmError, BadArguments, brief
from autogemm.ops import raw
from autogemm.runtime.device import software, this_device
from autogemm.store import locations
from autogemm.store.keys import Target
from autogemm.store.records import Meta, file_for
from autogemm.tuning.measure import KernelMeasure, Mismatch
from autogemm.tuning.search import Settings
from autogemm.tuning.tune import tune_targets
from kernels import REGISTRY


class RawMeasure(KernelMeasure):
    """The caller's arrays on the GPU (every one set back to the caller's values before each checked
    run: a kernel may work in place), their reference's outputs, the kernel launched with the arrays
    in order, then the sizes."""

    def __init__(self, key, device, seed: int, arrays: Mapping, problem: Mapping, expected: dict):
        import cupy

        super().__init__(key, device, seed)
        self.given = dict(arrays)
        self.arrays = {name: cupy.asarray(a) for name, a in arrays.items()}
        self.sizes, self.expected_outputs = problem, expected

    def launcher(self, cfg):
        from autogemm.ops.kernels import launch

        problem = raw.RawProblem(tuple(self.sizes.values()), self.key.dtype)
        return lambda: launch(self.key.family, problem, cfg, lambda g: raw.arguments(self.arrays, self.sizes))

    def verify(self, run) -> float:
        for name, array in self.arrays.items():
            array.set(self.given[name])
        run()
        errors = []
        for name, expected in self.expected_outputs.items():
            dtype = self.given[name].dtype if self.given[name].dtype.kind == "f" else np.float64
            try:
                errors.append(self.check(self.arrays[name], *expected, dtype=dtype))
            except Mismatch as exc:
                raise Mismatch(f"{name}: {exc}") from None
        return max(errors)


def tune_kernel(source, name: str, problem: Mapping, arrays: Mapping, space: Mapping, grid: Callable,
                block: Callable, reference: Callable, *, constraints=(), shared_bytes: Callable | None = None,
                accumulates: int = 1, trials: int = 40, timeout: float = 20.0, seed: int = 0) -> dict:
    """Tune kernel `name` of `source` (CUDA code, or a .cu file's path) on this GPU for `problem`
    ({size: int}) and return its best config, stored (as family kernel_<name>) in the tuned file
    that lookup reads, so that autogemm.launch_kernel runs it.

    arrays: {name: NumPy array}, the kernel's array arguments in order (its other arguments are the
    problem's sizes, as int32, after them); space: {DEFINITION: [choices]}, each config's choices
    compiled in as `#define DEFINITION value`; grid, block (and shared_bytes): functions of
    (config dict, problem dict) giving the launch; reference(**arrays) -> {output name: the float64
    values it must hold} (or (value, magnitude, k): the bound's scale and the longest sum behind an
    element; `accumulates` is that k where only values are given, the magnitude then |value|: give
    the sum of |terms| for outputs that are sums of terms of both signs); every array is set back
    to the given values before each checked run (a kernel may work in place); constraints: functions of
    (config dict, problem dict), False where a config cannot run."""
    if not isinstance(arrays, Mapping) or not arrays or not all(isinstance(a, np.ndarray) for a in arrays.values()):
        raise BadArguments("arrays: give {name: NumPy array, ...}, in the order of the kernel's array arguments")
    if not callable(reference):
        raise BadArguments("reference: give a function of the arrays returning {output name: float64 values}")
    dtype = raw.dtype_of(arrays)
    family = raw.family_of(source, name, problem, space, grid, block, dtype, constraints, shared_bytes)
    expected = _expected(reference, arrays, accumulates)
    device = this_device()
    REGISTRY[family].REFERENCE = reference
    target = Target(family, tuple(problem.values()), raw.NO_OP, f"{name} of {brief(str(source), 40)}")
    out = locations.tune_dir()

    def measure_for(key, device, seed=0):
        return RawMeasure(key, device, seed, arrays, problem, expected)

    outcomes = list(tune_targets([target], dtype, device, out, Settings(trials=trials, timeout=timeout, seed=seed),
                                 meta=Meta.here(device, software()), command=f"autogemm.tune_kernel({name})",
                                 measure_for=measure_for))
    result = outcomes[0]
    if result.result is None:
        raise AutogemmError(f"autogemm.tune_kernel({name}): {result.error}")
    return dict(result.result.config)


def _expected(reference: Callable, arrays: Mapping, accumulates: int) -> dict:
    """{output: (value, magnitude, k)} from the caller's reference, checked against the arrays."""
    try:
        got = reference(**{k: np.array(v) for k, v in arrays.items()})
    except Exception as exc:      # the caller's function
        raise BadArguments(f"reference failed: {type(exc).__name__}: {brief(str(exc), 120)}") from None
    if not isinstance(got, Mapping) or not got:
        raise BadArguments("reference: must return {output name: values}, the arrays the kernel writes")
    expected = {}
    for name, want in got.items():
        if name not in arrays:
            raise BadArguments(f"reference: output {brief(name)} is none of the arrays ({', '.join(arrays)})")
        if isinstance(want, tuple) and len(want) != 3:
            raise BadArguments(f"reference: output {name} must be its values, or (value, magnitude, k)")
        value, magnitude, k = want if isinstance(want, tuple) else (want, np.abs(want), accumulates)
        if type(k) is not int or k < 1:
            raise BadArguments(f"reference: output {name}'s k (the longest sum behind an element) must be an int >= 1")
        value, magnitude = np.asarray(value, np.float64), np.asarray(magnitude, np.float64)
        if value.shape != arrays[name].shape:
            raise BadArguments(f"reference: output {name} has shape {value.shape}, its array {arrays[name].shape}")
        expected[name] = (value, magnitude, int(k))
    return expected
