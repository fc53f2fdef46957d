"""Rendering kernel templates with Jinja (StrictUndefined: a missing value is an error, not ''), and
the hashes that tell a tuned record whether the code it was measured on has changed."""
import functools
import hashlib
import re
from pathlib import Path

import jinja2

from kernels.contract import TEMPLATE_DIR


# Plugin families' folders (autogemm/runtime/plugins.py): a template "<name>/<file>" of such a
# family is <folder>/<file>; every other name is under kernels/ (the shared includes too).
_family_folders: dict[str, Path] = {}


def add_family_folder(name: str, folder: Path):
    """Templates named "<name>/..." are read from `folder` (a plugin family's)."""
    _family_folders[name] = Path(folder)
    clear_caches()


def remove_family_folder(name: str):
    """Templates named "<name>/..." are no longer a plugin family's."""
    if _family_folders.pop(name, None) is not None:
        clear_caches()


def template_path(template: str) -> Path:
    """The file of template `template` ("<family>/<file>" or a shared include)."""
    family, _, rest = template.partition("/")
    return _family_folders[family] / rest if rest and family in _family_folders else TEMPLATE_DIR / template


@functools.cache
def _environment() -> jinja2.Environment:
    plugins = jinja2.PrefixLoader({name: jinja2.FileSystemLoader(folder) for name, folder in _family_folders.items()})
    return jinja2.Environment(
        loader=jinja2.ChoiceLoader([plugins, jinja2.FileSystemLoader(TEMPLATE_DIR)]),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def render(template: str, **values) -> str:
    """CUDA source of `template` with `values`; callers pass only values checked against a space."""
    return _environment().get_template(template).render(**values)


# The kernel's name in the source a record's hash covers: the name spells the config, not its code.
HASHED_NAME = "kernel"


@functools.cache
def source_hash(template: str, args: tuple, options: tuple[str, ...] = (), helpers: tuple[str, ...] = ()) -> str:
    """SHA-256 (16 hex digits) of what the compiler sees of one kernel (but the wait for the grid
    before it that every kernel begins with, runtime/dependent_launch.py): `template` rendered with
    `args` ((name, value) pairs; the kernel named HASHED_NAME), normalised (`normalised`), its
    NVRTC `options`, and the code of the `helpers`, templates of kernels launched with it. A tuned
    record is current while this is unchanged: code moved between files, comments and layout
    leave it; a change to what this config renders does not. Cached; `clear_caches` after an edit."""
    digest = hashlib.sha256(normalised(render(template, **dict(args, name=HASHED_NAME))).encode())
    digest.update(repr(options).encode())
    for name in helpers:
        digest.update(code_of(template_path(name).read_text()).encode())
    return digest.hexdigest()[:16]


def clear_caches():
    """Forget loaded templates and hashes (a test that edits templates)."""
    _environment.cache_clear()
    source_hash.cache_clear()
    code_hash.cache_clear()


# A string or character literal (kept whole), a // comment or a /* */ comment.
LITERAL_OR_COMMENT = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|//[^\n]*|/\*.*?\*/', re.S)


def normalised(source: str) -> str:
    """CUDA `source` as its tokens: lines spliced at a trailing backslash, comments dropped, each
    preprocessor directive a line of its own, and every other run of whitespace one space."""
    source = LITERAL_OR_COMMENT.sub(lambda m: m[0] if m[0][0] in "\"'" else " ", source.replace("\\\n", " "))
    lines, code = [], []
    for line in source.splitlines():
        words = line.split()
        if words and words[0].startswith("#"):
            lines += [" ".join(code), " ".join(words)] if code else [" ".join(words)]
            code = []
        else:
            code += words
    return "\n".join(lines + [" ".join(code)] if code else lines)


@functools.cache
def code_hash(templates: tuple[str, ...]) -> str:
    """SHA-256 (16 hex digits) of the code of template files in order, comments and blank lines
    aside: a family's template as a store's meta records it, a helper kernel's in `source_hash`."""
    digest = hashlib.sha256()
    for name in templates:
        digest.update(code_of(template_path(name).read_text()).encode())
    return digest.hexdigest()[:16]


def code_of(text: str) -> str:
    """`text` without Jinja comments, C++ // comments (outside string literals and Jinja tags, where
    // is a division), trailing blanks and blank lines."""
    text = re.sub(r"\{#.*?#\}", "", text, flags=re.S)
    lines = (_without_line_comment(line) for line in text.splitlines())
    return "\n".join(line for line in lines if line)


def _without_line_comment(line: str) -> str:
    at = line.find("//")
    while at != -1:
        head = line[:at]
        if head.count('"') % 2 == 0 and head.count("{{") == head.count("}}") and head.count("{%") == head.count("%}"):
            return head.rstrip()
        at = line.find("//", at + 2)
    return line.rstrip()
