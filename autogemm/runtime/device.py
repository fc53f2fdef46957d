"""What autogemm needs to know about a GPU, read from CuPy, with the H100 as the offline default."""
import functools
import re
from dataclasses import dataclass

from autogemm.errors import AutogemmError


@dataclass(frozen=True)
class DeviceInfo:
    name: str
    compute_capability: str        # "9.0"
    sm_count: int
    smem_per_block: int            # bytes a block may opt in to
    regs_per_block: int
    max_threads_per_block: int
    l2_bytes: int

    @property
    def slug(self) -> str:
        return slug(self.name)


def slug(name: str) -> str:
    """File-name form of a GPU model: 'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3'."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


# Used where no GPU is present (constraint checks and compile tests on the CPU).
H100 = DeviceInfo("NVIDIA H100 80GB HBM3", "9.0", 132, 232448, 65536, 1024, 52428800)


def info(device_id: int) -> DeviceInfo:
    """CUDA device `device_id`, read from its properties (it is not made current)."""
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(device_id)
    return DeviceInfo(
        name=props["name"].decode(),
        compute_capability=f"{props['major']}.{props['minor']}",
        sm_count=props["multiProcessorCount"],
        smem_per_block=props["sharedMemPerBlockOptin"],
        regs_per_block=props["regsPerBlock"],
        max_threads_per_block=props["maxThreadsPerBlock"],
        l2_bytes=props["l2CacheSize"],
    )


@functools.cache
def _info(device_id: int) -> DeviceInfo:
    return info(device_id)


def require_cupy():
    """The cupy module, or an AutogemmError that says what to install."""
    try:
        import cupy
    except ImportError:
        raise AutogemmError("no CUDA: CuPy is not installed, and autogemm's kernels run on CuPy arrays; on a "
                            "machine with an NVIDIA GPU, pip install 'autogemm[cuda13]' (or [cuda12])") from None
    return cupy


def this_device() -> DeviceInfo:
    """DeviceInfo of the current CuPy device, read once per device; AutogemmError without one."""
    cupy = require_cupy()
    try:
        return _info(cupy.cuda.Device().id)
    except Exception as exc:  # CUDARuntimeError and friends: no driver or no device
        if type(exc).__module__.startswith("cupy"):
            raise AutogemmError(f"no CUDA device usable by CuPy: {exc}") from None
        raise


def _cuda_version(number: int) -> str:
    """CUDA's integer versions as text: 13020 -> '13.2'."""
    return f"{number // 1000}.{number % 1000 // 10}"


def software() -> dict[str, str]:
    """Versions that a tuned result depends on: the driver, the CUDA runtime, and CuPy."""
    import cupy

    return dict(driver=_cuda_version(cupy.cuda.runtime.driverGetVersion()),
                cuda_runtime=_cuda_version(cupy.cuda.runtime.runtimeGetVersion()),
                cupy=cupy.__version__)
