"""Kernel families at run time: a registered family module (kernels.REGISTRY, each keeping the
kernels.contract.KernelFamily protocol), its space as autogemm checks it, and its rendering.

A tuned file or a user's `config=` is data: its values must be members of the declared choices,
of the same type, before anything reaches Jinja, so no string can inject source into a kernel.
"""
import copy
import functools
import hashlib
import itertools
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import jinja2

from autogemm.errors import InvalidConfig, brief
from autogemm.runtime import plugins
from autogemm.runtime.device import DeviceInfo
from autogemm.runtime.render import code_hash, render, source_hash
from kernels import REGISTRY
from kernels.contract import Geometry, KernelFamily

def families() -> tuple[str, ...]:
    """Every registered family's name: ours (kernels.FAMILIES), then the plugins' (runtime.plugins)."""
    return tuple(REGISTRY)


class Config(Mapping):
    """An immutable, hashable parameter assignment with attribute access (cfg.bm)."""

    __slots__ = ("_values",)

    def __init__(self, values: Mapping):
        object.__setattr__(self, "_values", dict(values))

    def __getattr__(self, name):
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None

    def __getitem__(self, key):
        return self._values[key]

    def __iter__(self):
        return iter(self._values)

    def __len__(self):
        return len(self._values)

    def __hash__(self):
        return hash(tuple(sorted(self._values.items())))

    def __repr__(self):
        return "Config(" + ", ".join(f"{k}={v!r}" for k, v in self._values.items()) + ")"

    def __reduce__(self):          # pickled by its values (to a tuning worker process and back)
        return Config, (self._values,)


@dataclass(frozen=True)
class Instance:
    """One rendered kernel: its name is the compiled symbol, the cache key and the log name."""

    family: str
    name: str
    source: str
    geometry: Geometry
    config: Config
    options: tuple[str, ...] = ()   # NVRTC options of the family's own (kernels.contract.KernelFamily)

    @functools.cached_property
    def source_hash(self) -> str:
        """Computed once: compile.load asks on every launch, and hashing a GEMM's source is not free."""
        return hashlib.sha256(self.source.encode()).hexdigest()


class Family:
    def __init__(self, name: str):
        self.name = name
        self.module: KernelFamily = REGISTRY[name]
        self.params: dict[str, tuple] = self.module.PARAMS
        self.restrictions: dict[str, tuple] = {}    # parameters limited by `restricted`
        self.constraints = self.module.CONSTRAINTS
        self.Problem = self.module.Problem

    def restricted(self, choices: Mapping[str, tuple]) -> "Family":
        """This family with some parameters limited to a subset of their declared choices (a
        sweep's space, or a search confined to part of the space)."""
        for key, values in choices.items():
            if key not in self.params:
                raise InvalidConfig(f"{self.name} has no parameter {brief(key)}; known: {', '.join(self.params)}")
            for value in values:
                self._check(key, value, f"restricting {key}")
        sub = copy.copy(self)
        sub.restrictions = {**self.restrictions, **{k: tuple(v) for k, v in choices.items()}}
        sub.params = {k: sub.restrictions.get(k, v) for k, v in self.params.items()}
        return sub

    def within(self, values: Mapping) -> bool:
        """Whether `values` keeps to the restrictions (every value of an unrestricted family does)."""
        return all(values.get(k) in v for k, v in self.restrictions.items())

    # ---- code hashes ---------------------------------------------------------------------
    def code_hash(self, cfg: Config, problem) -> str:
        """The hash of what the compiler sees of `cfg`'s kernel for `problem` (render.source_hash):
        a tuned record measured on another is stale. `cfg` must hold in the space."""
        args = tuple(sorted(self.module.template_args(cfg, problem).items()))
        return source_hash(self.module.TEMPLATE, args, getattr(self.module, "COMPILE_OPTIONS", ()),
                           self.helper_templates(cfg))

    def serves(self, problem) -> bool:
        """Whether an untold call of `problem` may run on this family: not a float32 call at fp32
        (its arithmetic "float32": FP32-accurate) where the module says FP32_ACCURATE = False."""
        return getattr(problem, "arithmetic", None) != "float32" or getattr(self.module, "FP32_ACCURATE", True)

    def untuned_first(self, problem, device: DeviceInfo) -> bool:
        """Whether, untuned, this family runs `problem`'s call on `device` before those listed before it
        (kernels.contract)."""
        return getattr(self.module, "untuned_first", lambda p, d: False)(problem, device)

    def at_precision(self, cfg: Config, problem) -> Config:
        """`cfg`, a config of a more accurate arithmetic's record, as the module would run it for
        `problem`'s precision (kernels.contract); unchanged where the module says nothing."""
        hook = getattr(self.module, "at_precision", None)
        precision = getattr(problem, "precision", None)
        return self.config(hook(dict(cfg), precision), "at_precision") if hook and precision else cfg

    def helper_templates(self, cfg: Config) -> tuple[str, ...]:
        """The templates of the kernels `cfg` launches besides its own (kernels.contract)."""
        return getattr(self.module, "helper_templates", lambda c: ())(cfg)

    @property
    def template_hash(self) -> str:
        """The hash of the code of the family's template file (a store's meta records it)."""
        return code_hash((self.module.TEMPLATE,))

    # ---- checking ------------------------------------------------------------------------
    def config(self, values: Mapping, where: str = "config") -> Config:
        """`values` as a Config, if every key is a parameter and every value one of its choices."""
        if not isinstance(values, Mapping):
            raise InvalidConfig(f"{where}: expected a mapping of {self.name} parameters, got {type(values).__name__}")
        unknown = sorted(set(values) - set(self.params), key=str)
        if unknown:
            more = f" and {len(unknown) - 3} more" if len(unknown) > 3 else ""
            raise InvalidConfig(f"{where}: unknown {self.name} parameter(s) {', '.join(map(brief, unknown[:3]))}{more}; "
                                f"known: {', '.join(self.params)}")
        missing = [k for k in self.params if k not in values]
        if missing:
            raise InvalidConfig(f"{where}: missing {self.name} parameter(s) {', '.join(missing)}")
        for key in self.params:
            self._check(key, values[key], where)
        return Config({k: values[k] for k in self.params})

    def holds(self, values: Mapping) -> Config | None:
        """`values` as a Config if this space holds them, else None (a stale record's config may be
        from an older space)."""
        try:
            return self.config(values)
        except InvalidConfig:
            return None

    def _check(self, key: str, value, where: str, choices: tuple | None = None):
        """InvalidConfig unless `value` is one of `key`'s choices (by default, those of this space)."""
        choices = self.params[key] if choices is None else choices
        # type() equality, not isinstance: True is not 1, 4.0 is not 4, "4" is not 4.
        if not any(type(value) is type(c) and value == c for c in choices):
            raise InvalidConfig(f"{where}: {key}={brief(value)} is not in the {self.name} space "
                                f"(choices: {', '.join(map(repr, choices))})")

    def violations(self, cfg: Config, problem, device: DeviceInfo) -> list[str]:
        """Messages of the constraints `cfg` breaks on this problem and device (empty: it can run)."""
        return [message for message, ok in self.constraints if not ok(cfg, problem, device)]

    def fits(self, cfg: Config, problem, device: DeviceInfo) -> bool:
        """Whether `cfg` can run this problem on this device: no violations, checked only up to the
        first (a search rejects most of a large space)."""
        return all(ok(cfg, problem, device) for _, ok in self.constraints)

    def validate(self, values: Mapping, problem, device: DeviceInfo, where: str = "config") -> Config:
        cfg = self.config(values, where)
        broken = self.violations(cfg, problem, device)
        if broken:
            raise InvalidConfig(f"{where}: {self.instance_name(cfg, problem)} cannot run: {broken[0]}")
        return cfg

    # ---- choosing ------------------------------------------------------------------------
    def default(self, problem, device: DeviceInfo) -> Config:
        """The first valid config of the family's untuned candidates."""
        for cfg in self._fitting(problem, device):
            return cfg
        raise InvalidConfig(f"{self.name}: no default config fits {problem} on {device.name}")

    def candidates(self, problem, device: DeviceInfo) -> list[Config]:
        """Every valid config of the family's untuned candidates, best guess first (the search
        starts from them); in a restricted family, those inside its space."""
        return list(dict.fromkeys(self._fitting(problem, device)))

    def can_run(self, problem, device: DeviceInfo) -> bool:
        """Whether some config can run `problem` on `device`: the untuned candidates cover every
        valid tile shape of a family whose constraints may exclude a whole problem (an op, a dtype,
        a GPU), as gemm_wgmma's do."""
        return next(self._fitting(problem, device), None) is not None

    def _fitting(self, problem, device: DeviceInfo) -> Iterator[Config]:
        """The untuned candidates that can run `problem`, in order, built only as far as asked (none
        where the module's may_run says no config could)."""
        may_run = getattr(self.module, "may_run", None)
        if may_run is not None and not may_run(problem, device):
            return iter(())
        found = (self.config(values, "default") for values in self.module.default_candidates(problem, device)
                 if self.within(values))
        return (cfg for cfg in found if self.fits(cfg, problem, device))

    def why_not(self, problem, device: DeviceInfo) -> list[str]:
        """Why no untuned candidate can run `problem`: the constraints every one breaks, else those
        the first breaks."""
        broken = [self.violations(self.config(values, "default"), problem, device)
                  for values in self.module.default_candidates(problem, device)]
        common = set.intersection(*map(set, broken)) if broken else set()
        return sorted(common) or (broken[0] if broken else [])

    def all_configs(self) -> Iterator[Config]:
        """Every point of the space, valid or not (filter with `violations`)."""
        for values in itertools.product(*self.params.values()):
            yield Config(dict(zip(self.params, values)))

    def sample(self, problem, device: DeviceInfo, count: int, seed: int = 0) -> list[Config]:
        """Up to `count` distinct valid configs drawn at random (rejection sampling)."""
        rng = random.Random(seed)
        found: dict[Config, None] = {}
        for _ in range(count * 3000):
            cfg = Config({k: rng.choice(v) for k, v in self.params.items()})
            if cfg not in found and self.fits(cfg, problem, device):
                found[cfg] = None
                if len(found) == count:
                    break
        return list(found)

    # ---- rendering -----------------------------------------------------------------------
    def instance_name(self, cfg: Config, problem) -> str:
        return self.module.instance_name(cfg, problem)

    def instance(self, cfg: Config, problem) -> Instance:
        """Render `cfg` (already checked) for `problem`."""
        name = self.instance_name(cfg, problem)
        args = self.module.template_args(cfg, problem)
        try:
            source = render(self.module.TEMPLATE, name=name, **args)
        except jinja2.TemplateError as exc:        # a plugin's template (ours render for their whole space)
            where = f" (line {exc.lineno})" if getattr(exc, "lineno", None) else ""
            raise InvalidConfig(f"{self.module.TEMPLATE}{where} does not render for {name}: "
                                f"{type(exc).__name__}: {brief(str(exc), 200)}") from None
        return Instance(self.name, name, source, self.module.geometry(cfg, problem), cfg,
                        getattr(self.module, "COMPILE_OPTIONS", ()))

    def flops(self, problem) -> int:
        return self.module.flops(problem)


@functools.cache
def family(name: str) -> Family:
    if name not in REGISTRY:
        raise InvalidConfig(f"unknown kernel family {brief(name)}; known: {', '.join(REGISTRY)}")
    return Family(name)


# Last: an installed plugin whose module imports from this one finds every name defined.
plugins.load_installed()
