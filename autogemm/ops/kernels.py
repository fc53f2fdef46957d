"""The kernel of a call: its config (given, the family's default, or the store's choice), rendered
once per problem and kept, so that a repeated call costs one dict lookup."""
from collections.abc import Mapping

from autogemm.runtime.device import DeviceInfo
from autogemm.runtime.family import Config, Instance, family
from autogemm.store import lookup

_instances: dict[tuple, Instance] = {}
_generation = lookup.generation


def kernel(family_name: str, problem, config: Mapping | str | None, device: DeviceInfo) -> Instance:
    """The rendered kernel for `problem`: `config` checked against the space; "default": the
    family's untuned default; None: the config autogemm.store.lookup chooses for this shape and GPU.

    Kept per (family, problem, config, device) until the store is reloaded (lookup.reload)."""
    global _generation
    if _generation != lookup.generation:
        _instances.clear()
        _generation = lookup.generation
    key = (family_name, problem, config if config is None or config == "default" else Config(config), device)
    inst = _instances.get(key)
    if inst is None:
        fam = family(family_name)
        if config == "default":
            cfg = fam.default(problem, device)
        elif config is not None:
            cfg = fam.validate(config, problem, device)
        else:
            cfg = lookup.choose(family_name, problem, device).config
        inst = _instances[key] = fam.instance(cfg, problem)
    return inst
