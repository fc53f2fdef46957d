"""What the issue 18 bench scripts share: their common arguments, this GPU's gemm_wgmma records, a config's launch checked
against float64 before it is timed, the launches timed beside cuBLAS, and their results' JSON."""


def add_arguments(parser, shapes: bool = True):
    """The arguments every issue 18 bench script takes: --shapes (which records, where it reads them),
    --reps and --json."""
    if shapes:
        parser.add_argument("--shapes", help="SIZES:OP of the records to take (default: all gemm_wgmma records)")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--json")


def records(device, shapes: str | None) -> list:
    """The gemm_wgmma records of this GPU's tuned file, those of `shapes` ("SIZES:OP,...") alone if given."""
    from autogemm.store.locations import tune_dir
    from autogemm.store.records import file_for, load

    wanted = set(shapes.split(",")) if shapes else None
    return [r for r in load(file_for(tune_dir(), device)).records.values() if r.key.family == "gemm_wgmma"
            and (wanted is None or f"{'x'.join(map(str, r.key.sizes))}:{r.key.op}" in wanted)]


def verified(measure, cfg):
    """cfg's launch on `measure`'s arrays, or None (said) where it fails its check against float64."""
    run = measure.launcher(cfg)
    try:
        measure.verify(run)
    except Exception as exc:
        print(f"{measure.key}: {run.instance.name}: FAILED {str(exc)[:300]}", flush=True)
        return None
    return run


def with_cublas_us(measure, runs: dict, reps: int) -> dict:
    """{label: median µs} of `runs` and "cublas" (the call's cuBLAS baseline: with an epilogue, then
    the elementwise pass), timed interleaved with autogemm's timer."""
    from autogemm.tuning.timing import time_interleaved

    runs = {**runs, "cublas": measure.cublas_launcher()}
    timings = time_interleaved(runs, reps=reps)
    return {name: timings[name].median_us for name in runs}


def write_results(path: str | None, device, results: list):
    """The results as JSON at `path` (nothing without one), with the GPU's name."""
    import json

    if path:
        with open(path, "w") as f:
            json.dump({"gpu": device.name, "results": results}, f, indent=1)
