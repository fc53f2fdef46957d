"""Shared fixtures; tests marked ``gpu`` skip unless CuPy sees a CUDA device."""
import functools
import shutil
import signal

import pytest

import autogemm.runtime.render


@functools.cache
def cuda_available() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no CuPy, no driver, or no device: all mean "skip"
        return False


def pytest_collection_modifyitems(config, items):
    if cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device and CuPy")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def default_handlers():
    """Python's own handlers for the stop signals while a test sends them to its own process: the
    suite may run under nohup (SIGHUP ignored) or in a background job (SIGINT ignored), which the
    commands leave ignored."""
    before = {sig: signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
              for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    yield
    for sig, handler in before.items():
        signal.signal(sig, handler)


@pytest.fixture
def edit_template(tmp_path, monkeypatch):
    """edit_template(name, old, new): replace `old` (which must be there) with `new` in a copy of
    kernels/<name> (a path under kernels/); autogemm hashes the copies of every template instead of kernels/ for the test."""
    folder = tmp_path / "kernels"
    folder.mkdir()
    templates = autogemm.runtime.render.TEMPLATE_DIR
    for path in [*templates.rglob("*.j2"), *templates.rglob("*.cuh")]:
        copy = folder / path.relative_to(templates)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, copy)
    monkeypatch.setattr(autogemm.runtime.render, "TEMPLATE_DIR", folder)
    autogemm.runtime.render.clear_caches()

    def edit(name: str, old: str, new: str):
        text = (folder / name).read_text()
        assert old in text, (name, old)
        (folder / name).write_text(text.replace(old, new))
        autogemm.runtime.render.clear_caches()

    edit.folder = folder
    yield edit
    autogemm.runtime.render.clear_caches()
