"""Testing kernels without a GPU: `emulator` runs rendered kernels on the CPU (cuda_emu.h, built
with g++), as autogemm's own tests run every built-in family against float64, and as a plugin
family's tests run its own; `loaded_family` registers a family folder for a test's duration."""
import contextlib


@contextlib.contextmanager
def loaded_family(path):
    """The family package at folder `path` registered while the block runs (autogemm.load_family),
    then forgotten, unless it was registered before (an installed plugin): yields its Family."""
    from autogemm.runtime import plugins
    from autogemm.runtime.family import family

    before = set(plugins.plugins())
    name = plugins.load_folder(path, f"loaded_family({str(path)!r})")
    try:
        yield family(name)
    finally:
        if name not in before:
            plugins.unregister(name)
            family.cache_clear()
