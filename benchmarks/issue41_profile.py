"""Issue 41: the kernels that Nsight Compute profiles: the first tensor-core candidate (two stages)
of each convolution direction of one layer at one precision, launched twice each (warm-up, then
the profiled launch), with cuDNN's forward beside them.

    ncu --launch-skip-before-match 0 ... python benchmarks/issue41_profile.py 1000x32x12x12x64x5 tf32
"""
import sys

import cupy

from autogemm.runtime.device import this_device
from autogemm.runtime.family import family
from autogemm.store.keys import make_key
from autogemm.tuning.measures import measure_for
from kernels.conv2d.measure import cudnn_convolution

sizes = tuple(int(s) for s in sys.argv[1].split("x"))
precision = sys.argv[2]
device = this_device()
for name in ("conv2d", "conv2d_dgrad", "conv2d_wgrad"):
    measure = measure_for(make_key(name, sizes, "-", "float32" if precision == "fp32" else precision), device)
    cfg = family(name).candidates(measure.problem, device)[0]
    print(name, family(name).instance_name(cfg, measure.problem), flush=True)
    run = measure.launcher(cfg)
    measure.verify(run)
    run()
    if name == "conv2d":
        cudnn, _ = cudnn_convolution(measure)
        cudnn()
        cudnn()
cupy.cuda.Device().synchronize()
