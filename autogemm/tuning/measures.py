"""Each family's measure: the `Measure` of `measure.py` in its folder (kernels/<family>/, or a
plugin family's package), else of its call's folder (kernels.call_of: gemm_wgmma is timed by the
GEMM call's, kernels/gemm/)."""
import functools
import importlib
import importlib.util

from autogemm.errors import AutogemmError, first_line
from autogemm.runtime import plugins
from autogemm.runtime.device import DeviceInfo
from autogemm.store.keys import Key
from autogemm.tuning.measure import KernelMeasure
from kernels import REGISTRY, call_of


@functools.cache
def measure_class(family: str) -> type[KernelMeasure]:
    """The measure of `family`'s calls."""
    for name in dict.fromkeys((family, call_of(family))):
        module = f"{REGISTRY[name].__name__}.measure"
        if importlib.util.find_spec(module) is not None:
            try:
                measure = importlib.import_module(module)
            except Exception as exc:        # a plugin's code (ours imports)
                if family in plugins.BUILT_IN:
                    raise
                raise AutogemmError(f"family {family}: importing {module} failed: {type(exc).__name__}: "
                                    f"{first_line(exc)}") from None
            if not isinstance(getattr(measure, "Measure", None), type) or not issubclass(measure.Measure, KernelMeasure):
                raise AutogemmError(f"family {family}: {module} has no Measure class (a subclass of "
                                    f"autogemm.tuning.measure.KernelMeasure)")
            return measure.Measure
    raise AutogemmError(f"family {family} has no measure: add measure.py (its Measure class) to its folder")


def measure_for(key: Key, device: DeviceInfo, seed: int = 0) -> KernelMeasure:
    """The GPU measure of `key`'s family, its operands and reference built now (a plugin's Measure
    that fails: one AutogemmError line naming it)."""
    measure = measure_class(key.family)
    try:
        return measure(key, device, seed)
    except (AutogemmError, MemoryError):
        raise
    except Exception as exc:
        if key.family in plugins.BUILT_IN:
            raise
        raise AutogemmError(f"family {key.family}: its Measure raised {type(exc).__name__}: "
                            f"{first_line(exc)}") from None
