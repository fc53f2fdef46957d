"""Rendering kernel templates with Jinja (StrictUndefined: a missing value is an error, not '')."""
import functools
import hashlib
import re

import jinja2

from kernels.contract import TEMPLATE_DIR


@functools.cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATE_DIR),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def render(template: str, **values) -> str:
    """CUDA source of `template` with `values`; callers pass only values checked against a space."""
    return _environment().get_template(template).render(**values)


@functools.cache
def code_hash(templates: tuple[str, ...]) -> str:
    """SHA-256 (16 hex digits) of the code of `templates` in order, to mark stale tuned records: a
    comment edited or a blank line added leaves the records current. Cached: a test that edits
    templates clears it (code_hash.cache_clear())."""
    digest = hashlib.sha256()
    for name in templates:
        digest.update(code_of((TEMPLATE_DIR / name).read_text()).encode())
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
