"""Where autogemm keeps things: the tuned results it ships, the user's own, and its cache.

    shipped_dir()   tuned results that come with autogemm, read-only: the package's tuned/ folder
                    (in a checkout, autogemm/tuned links to the repository's tuned/)
    tune_dir()      where `autogemm tune` writes by default, and lookup reads first:
                    $AUTOGEMM_TUNED if set; else, in a checkout, the repository's tuned/ (whose
                    files are committed); else the user store, <cache>/tuned
    cache_dir()     $AUTOGEMM_CACHE, else ~/.cache/autogemm: data sets, Optuna studies, the user store
"""
import os
from pathlib import Path

from autogemm import files

TUNED_ENV = "AUTOGEMM_TUNED"
CACHE_ENV = "AUTOGEMM_CACHE"
PACKAGE = Path(__file__).resolve().parents[1]     # the autogemm package


def cache_dir() -> Path:
    return files.expand(os.environ.get(CACHE_ENV) or "~/.cache/autogemm")


def shipped_dir() -> Path:
    return PACKAGE / "tuned"


def checkout() -> Path | None:
    """The repository root when autogemm runs from a checkout (not an installed wheel), else None."""
    root = PACKAGE.parent
    return root if (root / "pyproject.toml").is_file() and (root / "tuned").is_dir() else None


def tune_dir() -> Path:
    env = os.environ.get(TUNED_ENV)
    if env:
        return files.expand(env)
    root = checkout()
    return root / "tuned" if root is not None else cache_dir() / "tuned"


def tune_dir_named() -> str:
    """How the user would name tune_dir() in a message: "$AUTOGEMM_TUNED" where it came from there."""
    return f"${TUNED_ENV}" if os.environ.get(TUNED_ENV) else "the store"


def lookup_dirs() -> list[tuple[str, Path]]:
    """(role, folder) in the order lookup reads them: "user" (where tune writes), then "shipped";
    one entry where both are the same folder (a checkout's tuned/)."""
    user, shipped = tune_dir(), shipped_dir()
    return [("shipped", shipped)] if files.same_file(user, shipped) else [("user", user), ("shipped", shipped)]
