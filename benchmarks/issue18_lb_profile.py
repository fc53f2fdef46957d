"""Run linear_backward on the large network's output layer (8192 x 10 x 4096, float32, sigmoid), G_in
stored row-major and transposed, each with its tuned record's config, a few times, for Nsight Compute:

    ncu --kernel-name regex:linear_backward --launch-skip 2 --launch-count 4 --section SpeedOfLight \
        --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
        python benchmarks/issue18_lb_profile.py
"""
import cupy

import autogemm

RUNS = 3
rows, classes, inputs = 8192, 10, 4096
rng = cupy.random.default_rng(0)
a = rng.uniform(0.01, 0.99, (rows, inputs), dtype=cupy.float32)          # A: saved sigmoid output (rows, K)
g = rng.standard_normal((rows, classes), dtype=cupy.float32) / rows       # G: (rows, C)
w = rng.standard_normal((classes, inputs), dtype=cupy.float32) / 64       # W: (C, K)
db = cupy.zeros(inputs, cupy.float32)
for grad_in in (cupy.empty((rows, inputs), cupy.float32), cupy.empty((inputs, rows), cupy.float32).T):
    for _ in range(RUNS):
        autogemm.linear_backward(g, w, a, grad_in, "sigmoid", w, db, alpha=-0.1, beta=1.0, db_beta=1.0)
cupy.cuda.Device().synchronize()
