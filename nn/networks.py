"""The named networks that nn's tools benchmark, profile, scale and model: MLPs 784-hidden-10 with
SGD, the LeNet-like CNN (nn.layers.LENET) with Adam at batch 1000 and 128, and any CNN of an
nn.train --layers spec (`cnn_of`)."""
from dataclasses import dataclass

from nn.errors import NNError
from nn.layers import LENET, canonical, parse_layers

CNN_BATCH = 1000    # a --layers CNN's batch unless given


@dataclass(frozen=True)
class Network:
    """An MLP 784-hidden-10 trained with SGD (L2 1e-4)."""
    name: str
    hidden: int
    batch: int
    images: int
    activation: str = "sigmoid"
    lr: float = 0.1


@dataclass(frozen=True)
class ConvNetwork:
    """A CNN of nn.layers' spec `layers` with relu, trained with Adam at its defaults, as
    `python -m nn.train --layers` trains it."""
    name: str
    layers: str
    batch: int
    images: int = 54000


def networks() -> dict[str, Network]:
    """The MLPs (nn.scaling runs these too)."""
    nets = [Network("cme213", 1000, 800, 54000), Network("grading", 100, 800, 54000)]
    nets += [Network(f"relu-h{h}-b{b}", h, b, 37800, "relu", 0.05) for h in (32, 64, 128, 256) for b in (32, 64, 128)]
    nets.append(Network("large", 4096, 8192, 54000))
    return {n.name: n for n in nets}


def cnn_networks() -> dict[str, ConvNetwork]:
    return {n.name: n for n in (ConvNetwork("lenet", LENET, CNN_BATCH), ConvNetwork("lenet-b128", LENET, 128))}


def cnn_of(spec: str | None, batch: int | None = None) -> ConvNetwork | None:
    """The CNN of `spec` (a command's --layers) at `batch` (its --batch), named by its canonical
    spec, or None without a spec; NNError (one line) for a batch without a spec, a spec that cannot
    run on 28 x 28 images or a batch not 1..images."""
    if spec is None:
        if batch is not None:
            raise NNError("--batch is the --layers CNN's; a named network has its own")
        return None
    layers = canonical(spec)
    parse_layers(layers)
    net = ConvNetwork(layers, layers, CNN_BATCH if batch is None else batch)
    if not 1 <= net.batch <= net.images:
        raise NNError(f"--batch {net.batch}: give 1 to {net.images}")
    return net
