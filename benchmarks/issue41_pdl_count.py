"""Which launches went in dependent while a graph was captured: `python benchmarks/issue41_pdl_count.py
nn.bench ARGS...` runs the module counting, per kernel family, launches by cuLaunchKernelEx and by
CuPy, in and out of captures."""
import collections
import runpy
import sys

import cupy

from autogemm.runtime import dependent_launch

counts = collections.Counter()
real_launch, real_ex = dependent_launch.launch, dependent_launch._launch_kernel_ex()


def launch(kernel, waits, grid, block, args, shared_mem=0):
    stream = cupy.cuda.get_current_stream()
    capturing = dependent_launch._capturing(stream)
    typed = dependent_launch._parameters(args) is not None
    counts[(kernel.name.split("_f")[0][:24], waits, capturing, typed)] += 1
    return real_launch(kernel, waits, grid, block, args, shared_mem)


dependent_launch.launch = launch
ex_calls = collections.Counter()
dependent_launch._launch_kernel_ex = lambda: lambda *a: (ex_calls.update(["ex"]), real_ex(*a))[1]
module, *rest = sys.argv[1:]
sys.argv = [module, *rest]
try:
    runpy.run_module(module, run_name="__main__", alter_sys=True)
except SystemExit:
    pass
print(f"{'kernel':<26} {'waits':>5} {'captured':>8} {'typed':>5} {'launches':>8}")
for (name, waits, capturing, typed), n in sorted(counts.items()):
    print(f"{name:<26} {waits!s:>5} {capturing!s:>8} {typed!s:>5} {n:>8}")
print("cuLaunchKernelEx calls:", ex_calls["ex"])
