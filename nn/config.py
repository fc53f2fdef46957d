"""A training run's configuration, typed: `Config` (the network, data and optimisation: what a
checkpoint's fingerprint holds) inside `RunConfig` (how the run executes and what it writes).

nn.train builds one RunConfig from its command line; the library below it (nn.trainer) reads this
and nothing of argparse. The defaults and presets live here too: the command line's help says them.
"""
from dataclasses import asdict, dataclass

DEFAULTS = dict(model="mlp", layers=None, hidden=(1000,), activation="sigmoid", optimizer="sgd", batch=800,
                epochs=30, lr=1.0, reg=1e-4, dtype="float32", dataset="fashion-mnist", data_dir=None, seed=0,
                scale="unit", init="cme213", train_size=None, backend="numpy", precision="fp32")
# A CNN's defaults (--model lenet, or --layers): the reports' Keras recipe.
CNN_DEFAULTS = dict(activation="relu", optimizer="adam", batch=1000, epochs=20, lr=1e-3, reg=0.0, init="he")
MODELS = ("mlp", "lenet")
# What ranks split: chosen by nn.cost_model (auto), a batch's rows, the hidden units (nn.model_parallel),
# or nothing (each rank trains the whole batch: one GPU's speed, where no split pays).
PARALLEL = ("auto", "data", "model", "none")
PRESETS = {"cme213": dict(hidden=(1000,), reg=1e-4, lr=0.001, epochs=20, batch=800, scale="raw", dtype="float64")}
_GRADING = dict(hidden=(100,), batch=800, reg=1e-4, scale="raw", dtype="float64")
GRADING_MODES = {1: dict(_GRADING, lr=0.001, epochs=40), 2: dict(_GRADING, lr=0.01, epochs=10),
                 3: dict(_GRADING, lr=0.025, epochs=1)}
# Left out of a checkpoint's fingerprint: settings that do not change the weights (a checkpoint may be
# resumed across them), and hidden, which the fingerprint holds as sizes = [inputs, *hidden, classes].
_NOT_FINGERPRINTED = ("epochs", "data_dir", "backend", "hidden", "precision")


@dataclass(frozen=True)
class Config:
    model: str              # "mlp", or "cnn" (of `layers`)
    layers: str | None      # a CNN's --layers spec (nn.layers)
    hidden: tuple
    activation: str
    optimizer: str
    batch: int
    epochs: int
    lr: float
    reg: float
    dtype: str
    dataset: str
    data_dir: str | None
    seed: int
    scale: str
    init: str
    train_size: int | None
    backend: str
    precision: str          # the GEMMs' on a GPU backend: "fp32" (FP32-accurate), "tf32" or "bf16"

    def fingerprint(self, sizes) -> dict:
        """What a checkpoint (or run log) must agree with to be resumed by this run."""
        return fingerprint(asdict(self), sizes)


def fingerprint(config: dict, sizes) -> dict:
    """The settings of `config` (a Config as a dict) that determine the weights, with the network's
    sizes [inputs, *hidden, classes]."""
    return dict({k: v for k, v in config.items() if k not in _NOT_FINGERPRINTED}, sizes=list(sizes))


@dataclass(frozen=True)
class RunConfig:
    """One training run: `config` and how it runs (GPU, ranks) and what it writes."""

    config: Config
    use_tuned: bool = False         # the cupy backend's kernels tuned (else the families' defaults)
    graph: bool = True              # replay each epoch as one CUDA graph where the backend can
    parallel: str = "auto"          # what ranks split: PARALLEL
    allreduce: str = "auto"         # how: nn.allreduce.KINDS
    overlap: bool = True            # a data split's all-reduces during the backward pass (else after it)
    checkpoint: str | None = None   # the checkpoint's path, written after every epoch
    resume: bool = False            # continue `checkpoint`
    log: str | None = None          # the JSON run log's path, rewritten every epoch
    quiet: bool = False             # the result alone: no progress bar, no per-epoch lines
    argv: tuple = ()                # the command line's arguments, for the command that resumes the run
