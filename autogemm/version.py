"""autogemm's version, from one place: the `version` of pyproject.toml.

In a checkout (the package beside its pyproject.toml, installed editable or not) it is read from that
file, so an edit shows at once; in an installed wheel, from the package's metadata, which the build
wrote from the same field. `autogemm.__version__` and `autogemm --version` both show it.
"""
import re
from importlib import metadata
from pathlib import Path

UNKNOWN = "0+unknown"       # neither a checkout nor an installed distribution (a copied folder)


def _from_checkout(pyproject: Path) -> str | None:
    """The [project] version of `pyproject` if it is autogemm's; None if there is no such file or it
    is another project's."""
    try:
        text = pyproject.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    project = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)   # tomllib is 3.11+
    if not project or not re.search(r'^name\s*=\s*"autogemm"\s*$', project[1], re.M):
        return None
    version = re.search(r'^version\s*=\s*"([^"]+)"\s*$', project[1], re.M)
    return version[1] if version else None


def _version() -> str:
    checkout = _from_checkout(Path(__file__).resolve().parents[1] / "pyproject.toml")
    if checkout:
        return checkout
    try:
        return metadata.version("autogemm")
    except metadata.PackageNotFoundError:
        return UNKNOWN


__version__ = _version()
