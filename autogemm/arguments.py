"""Command-line conventions that autogemm's and nn's tools share: one syntax for a list of sizes.

Every flag that takes several sizes (`--hidden`, `--ranks`) takes them comma-separated, space-separated
or both: `--hidden 100,10`, `--hidden 100 10`, `--hidden 100, 10` and `--hidden '100 10'` are one list.

    parser.add_argument("--hidden", **arguments.size_list(positive_int), default=(1000,), help=...)
"""
import argparse
import re
from collections.abc import Callable


class _Joined(argparse.Action):
    """The items of every word given to one flag, as one tuple (a flag given twice: the last one)."""

    unique = False

    def __call__(self, parser, namespace, values, option_string=None):
        items = [item for word in values for item in word]
        setattr(namespace, self.dest, tuple(dict.fromkeys(items) if self.unique else items))


class _JoinedOnce(_Joined):
    """Each item once, in the order first given."""

    unique = True


def items(text: str) -> list[str]:
    """The items of one word of a list, split at commas and spaces; ValueError for an empty item
    (`100,,10`, `,10`, `''`). A comma ending a word is no empty item: `100, 10` reaches a parser as
    the words `100,` and `10`."""
    parts = re.split(r"\s*,\s*|\s+", text.strip())
    if len(parts) > 1 and not parts[-1]:
        parts.pop()                     # `--hidden 100, 10`: the shell split after the comma
    if not all(parts):
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise ValueError(f"{shown!r}: an empty item; separate the sizes by commas or spaces")
    return parts


def size_list(item: Callable[[str], int], metavar: str = "N", unique: bool = False) -> dict:
    """add_argument's keywords for a list of sizes, each parsed by `item` (an argparse type: it raises
    ArgumentTypeError, or ValueError, on a bad one). The flag's value is a tuple. An empty item
    (`items`) is an error, as is a bad item: one line through the parser's error. With `unique`,
    each size is kept once, in the order first given (rank counts to run; hidden sizes may repeat)."""
    def words(text: str) -> tuple:
        try:
            parts = items(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return tuple(item(part) for part in parts)

    words.__name__ = getattr(item, "__name__", "size")     # argparse names a failed type by it
    return dict(nargs="+", type=words, action=_JoinedOnce if unique else _Joined, metavar=metavar)
