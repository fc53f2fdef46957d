"""The one error type the trainer's commands show to users, their argument parser (and its type of an
output's path), and how a command shows it."""
import argparse
import sys


class NNError(Exception):
    """A bad input or environment; the message is one line: what, where, what to do.

    `python -m nn.train` prints it as ``error: <message>`` and exits with status 2, no traceback.
    """


def shown(path) -> str:
    """`path` for a one-line message: as it is, or quoted with its control characters escaped
    (a newline in a path split the message)."""
    text = str(path)
    return text if text.isprintable() else repr(text)


def one_line(message) -> str:
    """`message` with any control character escaped (\\n, \\t, \\x1b): what a command prints is one line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(message))


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors are NNErrors: one line, as every other bad input (no usage block)."""

    def error(self, message):
        raise NNError(message)


def output_path(text: str) -> str:
    """The argument type of an output's path: an empty one is an error, not the output left out."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path; give a file name")
    return text


def exit_status(command) -> int:
    """Run `command()`, a command's body: 0, or one line on stderr and 2 for a bad input
    (``error: ...``: NNError, autogemm's errors, a file that cannot be written, memory that cannot
    be had) or 128 + N for a stop
    signal (Ctrl-C: 130, SIGTERM: 143, SIGHUP: 129)."""
    from autogemm import AutogemmError, signals

    try:
        with signals.stoppable():
            command()
    except (NNError, AutogemmError) as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"error: cannot write {shown(e.filename)}: {e.strerror}", file=sys.stderr)
        return 2
    except MemoryError as e:             # NumPy's and CuPy's: the network or batch is too large here
        print(f"error: out of memory: {one_line(e) or 'an allocation failed'}; choose a smaller network or batch",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt as stop:
        print(signals.interrupted(signals.signum_of(stop)), file=sys.stderr)
        return signals.status(stop)
    return 0
