"""The one error type the trainer shows to users."""


class NNError(Exception):
    """A bad input or environment; the message is one line: what, where, what to do.

    `python -m nn.train` prints it as ``error: <message>`` and exits with status 2, no traceback.
    """
