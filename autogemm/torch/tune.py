"""Tune a PyTorch model from Python, as `autogemm tune --torch` does from the shell: every launch of
one forward and backward pass of it converted, each config searched on this GPU and merged into the
tuned file that autogemm's calls look up."""
import torch

from autogemm.errors import AutogemmError
from autogemm.files import same_file
from autogemm.runtime.device import software, this_device
from autogemm.store import locations
from autogemm.store.records import Meta, file_for
from autogemm.torch.functional import PRECISIONS
from autogemm.torch.targets import launches
from autogemm.tuning.search import Settings
from autogemm.tuning.tune import at_precision, runnable_targets, tune_targets


def tune(model: torch.nn.Module, example_input: torch.Tensor, batch: int | None = None, precision: str = "fp32",
         trials: int = 40, timeout: float = 20.0) -> list[str]:
    """Tune `model`'s launches on batches of `batch` inputs shaped like example_input's rows (its
    first dimension the batch, and the batch size where `batch` is None), at `precision` (fp32:
    FP32-accurate records; tf32, bf16: the kernels of that precision); returns a line a launch: its
    best time, or why it failed. Each result is saved as it is found ($AUTOGEMM_TUNED, the
    checkout's tuned/, or the user store)."""
    if precision not in PRECISIONS:
        raise AutogemmError(f"precision {precision!r}: give one of {', '.join(PRECISIONS)}")
    if example_input.ndim < 2:
        raise AutogemmError(f"example_input {tuple(example_input.shape)}: give a batch of inputs (its first "
                            f"dimension the batch)")
    launched = launches(model, tuple(example_input.shape[1:]), batch or example_input.shape[0],
                        PRECISIONS if precision == "fp32" else (precision,))
    targets = at_precision(launched, precision)
    arithmetic = "float32" if precision == "fp32" else precision
    device = this_device()
    targets, _ = runnable_targets(targets, arithmetic, device)
    if not targets:
        raise AutogemmError(f"no launch of this model has {precision} kernels on {device.name}")
    out, shipped = locations.tune_dir(), file_for(locations.shipped_dir(), device)
    also = () if same_file(shipped, file_for(out, device)) else (shipped,)
    lines = []
    for o in tune_targets(targets, arithmetic, device, out, Settings(trials=trials, timeout=timeout),
                          meta=Meta.here(device, software()), command="autogemm.torch.tune", also=also):
        lines.append(f"{o.target}: " + (f"{o.result.median_us:.1f} µs ({o.stored})" if o.result is not None
                                         else f"failed: {o.error}"))
    return lines
