"""What the issue 18 bench scripts share: this GPU's gemm_wgmma records, and a config's launch checked
against float64 before it is timed."""


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
