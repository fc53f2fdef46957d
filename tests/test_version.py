"""autogemm's version from one place, pyproject.toml: `autogemm.__version__` and `autogemm --version`,
in a checkout and (as .ci/wheel checks it) from an installed wheel's metadata."""
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import autogemm
from autogemm import version

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = pytest.importorskip("tomllib").loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_the_module_and_the_command_say_pyprojects_version():
    assert autogemm.__version__ == PYPROJECT
    proc = subprocess.run([sys.executable, "-m", "autogemm.cli", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout == f"autogemm {PYPROJECT}\n" and proc.stderr == ""


def test_a_checkouts_pyproject_is_read_and_no_other_projects(tmp_path):
    assert version._from_checkout(ROOT / "pyproject.toml") == PYPROJECT
    other = tmp_path / "pyproject.toml"
    other.write_text('[project]\nname = "other"\nversion = "9.9"\n')
    assert version._from_checkout(other) is None
    other.write_text('[tool.x]\nname = "autogemm"\n\n[project]\nname = "autogemm"\nversion = "2.0.1"\n\n[x]\nversion = "3"\n')
    assert version._from_checkout(other) == "2.0.1"
    assert version._from_checkout(tmp_path / "missing.toml") is None
    other.write_bytes(b"\xff\xfe")
    assert version._from_checkout(other) is None


def test_without_a_checkout_the_installed_metadata_says_it(monkeypatch):
    """An installed wheel has no pyproject.toml beside the package: its metadata, written from it."""
    monkeypatch.setattr(version, "_from_checkout", lambda path: None)
    assert version._version() == metadata.version("autogemm")

    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    assert version._version() == version.UNKNOWN
