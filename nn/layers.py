"""A network's layers from a short spec, and their shapes on the 28 x 28 input.

    conv16x5,pool2,conv32x3,pool2,dense256     (the classes' dense layer is always added last)

`convCxK`: C filters of K x K, stride 1, no padding (a valid convolution), then the activation;
`pool2`: 2 x 2 max-pooling, stride 2 (an odd side drops its last row or column);
`denseN`: N units, then the activation. A spec that does not fit its input is one line naming the layer.
"""
import re
from dataclasses import dataclass

from nn.errors import NNError

LENET = "conv6x3,pool2,conv10x3,pool2,dense128,dense100,dense80"   # the LeNet-like CNN of the reports
MAX_LAYERS = 32
MAX_WIDTH = 65536                # channels or units of one layer
_LAYER = re.compile(r"^(conv)([0-9]+)x([0-9]+)$|^(pool)([0-9]+)$|^(dense)([0-9]+)$")


@dataclass(frozen=True)
class Layer:
    """One layer and the shape (channels, height, width) it maps: dense layers see (features, 1, 1)."""

    kind: str                    # "conv", "pool" or "dense"
    width: int                   # filters (conv) or units (dense); the pooling window (pool)
    kernel: int = 0              # conv: K of K x K
    shape_in: tuple[int, int, int] = (0, 0, 0)
    shape_out: tuple[int, int, int] = (0, 0, 0)

    @property
    def params(self) -> int:
        """Weights and biases: conv C_out x C_in x K x K + C_out, dense N x F + N, pool none."""
        c_in = self.shape_in[0] * self.shape_in[1] * self.shape_in[2] if self.kind == "dense" else self.shape_in[0]
        if self.kind == "conv":
            return self.width * c_in * self.kernel ** 2 + self.width
        return self.width * c_in + self.width if self.kind == "dense" else 0

    def __str__(self) -> str:
        return {"conv": f"conv{self.width}x{self.kernel}", "pool": f"pool{self.width}",
                "dense": f"dense{self.width}"}[self.kind]


def canonical(spec: str) -> str:
    """`spec` as nn.train stores and compares it: each layer as `Layer` names it, no spaces or
    leading zeros (' conv2x3 , dense08 ' is 'conv2x3,dense8'); NNError where a layer is not one."""
    return ",".join(f"{kind}{'x'.join(map(str, numbers))}" for _, kind, numbers in _items(spec))


def _items(spec: str) -> list[tuple[str, str, list[int]]]:
    """(item, kind, sizes) of each layer of `spec`, checked for form and range alone."""
    items = [item.strip() for item in spec.split(",")]
    if not spec.strip() or any(not item for item in items):
        raise NNError(f"--layers {spec!r}: empty layer; give e.g. {LENET}")
    if len(items) >= MAX_LAYERS:
        raise NNError(f"--layers: {len(items)} layers; give at most {MAX_LAYERS - 1}")
    parsed = []
    for position, item in enumerate(items, start=1):
        where = f"--layers: layer {position} ({item if len(item) <= 40 else item[:37] + '...'!r})"
        match = _LAYER.match(item)
        if not match:
            raise NNError(f"{where} is not convCxK, poolP or denseN (e.g. conv16x5, pool2, dense128)")
        kind = match[1] or match[4] or match[6]
        digits = [n.lstrip("0") or "0" for n in match.groups() if n is not None and n.isdigit()]
        # a size of more digits than MAX_WIDTH is out of range: int() of 4,300 digits or more raises
        numbers = [int(n) if len(n) <= len(str(MAX_WIDTH)) else MAX_WIDTH + 1 for n in digits]
        if min(numbers) < 1 or max(numbers) > MAX_WIDTH:
            raise NNError(f"{where}: every size must be in 1..{MAX_WIDTH}")
        parsed.append((item, kind, numbers))
    return parsed


def parse_layers(spec: str, classes: int = 10, image: tuple[int, int, int] = (1, 28, 28)) -> list[Layer]:
    """The layers of `spec` on images of `image` = (channels, height, width), ending with the
    `classes`-unit output layer; NNError (one line, naming the layer) where the spec cannot run."""
    layers, shape, flat = [], tuple(image), False
    for position, (item, kind, numbers) in enumerate(_items(spec), start=1):
        where = f"--layers: layer {position} ({item!r})"
        if kind != "dense" and flat:
            raise NNError(f"{where}: a {kind} layer cannot follow a dense layer (its input is flat)")
        c, h, w = shape
        if kind == "conv":
            filters, k = numbers
            if k > h or k > w:
                raise NNError(f"{where}: a {k}x{k} filter does not fit its {h}x{w} input; "
                              "use a smaller kernel or fewer pooling layers before it")
            out = (filters, h - k + 1, w - k + 1)
            layers.append(Layer("conv", filters, k, shape, out))
        elif kind == "pool":
            p, = numbers
            if p != 2:
                raise NNError(f"{where}: only 2x2 max-pooling (pool2) is supported")
            if h < 2 or w < 2:
                raise NNError(f"{where}: its {h}x{w} input is smaller than the 2x2 window; "
                              "remove a pooling layer or use smaller kernels")
            out = (c, h // 2, w // 2)
            layers.append(Layer("pool", 2, 0, shape, out))
        else:
            units, = numbers
            out = (units, 1, 1)
            layers.append(Layer("dense", units, 0, shape, out))
            flat = True
        shape = out
    layers.append(Layer("dense", classes, 0, shape, (classes, 1, 1)))
    return layers


def describe(layers: list[Layer]) -> str:
    """One line: each layer and the shape it makes, e.g. 1x28x28 conv6x3 6x26x26 pool2 6x13x13 ..."""
    parts = ["x".join(map(str, layers[0].shape_in))]
    for layer in layers:
        parts += [str(layer), "x".join(map(str, layer.shape_out)) if layer.kind != "dense" else str(layer.width)]
    return " ".join(parts)
