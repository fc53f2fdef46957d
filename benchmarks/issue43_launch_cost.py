"""Host time of a repeated autogemm.launch_kernel call against CuPy's own RawKernel call of the same
compiled kernel, on this GPU.

    python benchmarks/issue43_launch_cost.py --calls 5000

The raw-kernel example's transpose, tiny (64 x 64), launched --calls times back to back: the wall
time a call, after a synchronize, is the host's cost (the kernel runs in ~2 µs, under the issue time).
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

import cupy

import autogemm
from autogemm.ops.kernels import kernel
from autogemm.ops import raw
from autogemm.runtime import compile as compiler
from autogemm.runtime.device import this_device

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "raw_kernel"))
from tune_transpose import KERNEL  # noqa: E402


def per_call_us(call, calls: int) -> float:
    """The median over 5 rounds of the host's wall time a call, in µs."""
    rounds = []
    for _ in range(5):
        cupy.cuda.runtime.deviceSynchronize()
        start = time.perf_counter()
        for _ in range(calls):
            call()
        rounds.append((time.perf_counter() - start) / calls * 1e6)
        cupy.cuda.runtime.deviceSynchronize()
    return statistics.median(rounds)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=5000)
    args = p.parse_args()
    problem = {"rows": 64, "cols": 64}
    x, out = cupy.random.standard_normal((64, 64), dtype=cupy.float32), cupy.empty((64, 64), cupy.float32)
    source = KERNEL["source"].read_text()
    kw = {**KERNEL, "source": source}
    inst = autogemm.launch_kernel(**kw, problem=problem, arrays={"x": x, "out": out}, config="default")
    assert cupy.array_equal(out, x.T)
    fam = raw.family_of(source, KERNEL["name"], problem, KERNEL["space"], KERNEL["grid"], KERNEL["block"],
                        "float32", KERNEL["constraints"])
    inst = kernel(fam, raw.RawProblem((64, 64), "float32"), "default", this_device())
    function, g = compiler.load(inst), inst.geometry
    args_ = (x, out, cupy.int32(64), cupy.int32(64))
    rows = {
        "cupy RawKernel call": lambda: function(g.grid, g.block, args_, shared_mem=g.smem_bytes),
        "launch_kernel (source string)": lambda: autogemm.launch_kernel(**kw, problem=problem,
                                                                        arrays={"x": x, "out": out}),
        "launch_kernel (source path)": lambda: autogemm.launch_kernel(**KERNEL, problem=problem,
                                                                      arrays={"x": x, "out": out}),
    }
    print(f"{this_device().name}: host µs a call, median of 5 rounds of {args.calls}")
    for name, call in rows.items():
        print(f"{name:>30}: {per_call_us(call, args.calls):7.1f}")


if __name__ == "__main__":
    main()
