"""The named networks that nn's tools benchmark, profile, scale and model: MLPs 784-hidden-10 with
SGD, and the LeNet-like CNN (nn.layers.LENET) with Adam at batch 1000 and 128."""
from dataclasses import dataclass

from nn.layers import LENET


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
    return {n.name: n for n in (ConvNetwork("lenet", LENET, 1000), ConvNetwork("lenet-b128", LENET, 128))}
