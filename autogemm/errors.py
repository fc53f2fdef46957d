"""Errors autogemm shows to users: each message is one line saying what, where, and what to do."""


class AutogemmError(Exception):
    """Base class; the CLI prints ``error: <message>`` and exits with status 2."""


class InvalidConfig(AutogemmError):
    """A config with unknown keys, out-of-space values, or one that cannot run on this problem."""


class CompileError(AutogemmError):
    """NVRTC rejected a rendered kernel; the message quotes the offending source lines."""


class BadArguments(AutogemmError):
    """Arrays or scalars that do not fit the call (shapes, dtypes, layouts, aliasing)."""


class StoreError(AutogemmError):
    """A tuned/ file that cannot be read or written: corrupted, hand-edited out of the space, ..."""


def reason(exc: BaseException) -> str:
    """An exception as one line: its type's name and its text, whitespace collapsed, cut to 300."""
    text = " ".join(str(exc).split())
    name = type(exc).__name__
    return (f"{name}: {text}" if text else name)[:300]


def first_line(exc: BaseException) -> str:
    """The first line of what an exception says (of code not ours: a plugin's, a user's model), or ''."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def brief(value, limit: int = 40) -> str:
    """repr of a value from a file or the command line, cut short: messages stay one readable line."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."
