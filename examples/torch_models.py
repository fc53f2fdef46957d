"""Two networks in plain PyTorch, as a PyTorch user writes them: the CME 213 MLP and the LeNet-like
CNN of nn.layers.LENET. `autogemm tune --torch examples/torch_models.py:lenet --input 1x28x28
--batch 1000` tunes every launch of one training step of either, converted by autogemm.torch."""
import torch
from torch import nn


def mlp() -> nn.Module:
    """784-1000-10, sigmoid hidden layer (CME 213's network; SGD, batch 800)."""
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 1000), nn.Sigmoid(), nn.Linear(1000, 10))


def lenet() -> nn.Module:
    """conv 6@3x3, pool, conv 10@3x3, pool, dense 128-100-80-10, ReLU (Adam, batch 1000)."""
    return nn.Sequential(nn.Conv2d(1, 6, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 10, 3), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(250, 128), nn.ReLU(), nn.Linear(128, 100),
                         nn.ReLU(), nn.Linear(100, 80), nn.ReLU(), nn.Linear(80, 10))


if __name__ == "__main__":
    torch.manual_seed(0)
    for factory in (mlp, lenet):
        print(factory.__name__, sum(p.numel() for p in factory().parameters()), "parameters")
