"""Where autogemm keeps things: the tuned results it ships, the user's own, and its cache.

    shipped_dir()   tuned results that come with autogemm, read-only: the package's tuned/ folder
                    (in a checkout, autogemm/tuned links to the repository's tuned/)
    user_dir()      results tuned on this machine: $AUTOGEMM_TUNED, else <cache>/tuned
    tune_dir()      where `autogemm tune` writes by default: $AUTOGEMM_TUNED if set, else the
                    repository's tuned/ in a checkout (whose files are committed), else user_dir()
    cache_dir()     $AUTOGEMM_CACHE, else ~/.cache/autogemm: data sets, Optuna studies, user_dir()

Lookup reads the user's results before the shipped ones (autogemm.lookup).
"""
import os
from pathlib import Path

TUNED_ENV = "AUTOGEMM_TUNED"
CACHE_ENV = "AUTOGEMM_CACHE"
PACKAGE = Path(__file__).resolve().parent
SHIPPED = PACKAGE / "tuned"


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or "~/.cache/autogemm").expanduser()


def shipped_dir() -> Path:
    return SHIPPED


def user_dir() -> Path:
    env = os.environ.get(TUNED_ENV)
    return Path(env).expanduser() if env else cache_dir() / "tuned"


def checkout() -> Path | None:
    """The repository root when autogemm runs from a checkout (not an installed wheel), else None."""
    root = PACKAGE.parent
    return root if (root / "pyproject.toml").is_file() and (root / "tuned").is_dir() else None


def tune_dir() -> Path:
    if os.environ.get(TUNED_ENV) or checkout() is None:
        return user_dir()
    return checkout() / "tuned"


def lookup_dirs() -> list[tuple[str, Path]]:
    """(role, folder) in the order lookup reads them: "user", then "shipped" (one entry if both
    are the same folder)."""
    dirs = [("user", user_dir()), ("shipped", shipped_dir())]
    if same_place(dirs[0][1], dirs[1][1]):
        return dirs[1:]
    return dirs


def same_place(a: Path, b: Path) -> bool:
    """Whether two paths name one file or folder (a symlink loop names none)."""
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False
