"""Rendering kernel templates with Jinja (StrictUndefined: a missing value is an error, not '')."""
import functools
import hashlib

import jinja2

from kernels import TEMPLATE_DIR


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
def template_hash(template: str) -> str:
    """SHA-256 (16 hex digits) of a template and the files it includes, to mark stale tuned records."""
    digest = hashlib.sha256()
    for path in sorted(TEMPLATE_DIR.glob("*.j2")):
        if path.name == template or path.name.startswith("_"):
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]
