"""The tuning tools: measure configs on the GPU and search the space, for `autogemm tune`,
`autogemm bench` and `autogemm sweep`.

    targets.py  the shapes to tune: MxNxK[:op] from the command line, or every launch of an MLP step
    measure.py  one config on the GPU: compile, check against float64 (verify.py), time (timing.py)
    search.py   Optuna over a family's space for one shape, failures recorded, finalists re-timed
    tune.py     a run over many targets, each result merged into the store as soon as it is found
    sweep.py    every config of a restricted space, against the search on the same space
    bench.py    tuned, default, naive and cuBLAS on one shape, one timer
"""
