"""What nn's commands write, and what a stopped training run says it left.

A training run's checkpoint and run log are claimed before the first epoch: they are two files, both can be written, and
neither replaces what the user has. A fresh run replaces no checkpoint and no run log; a resumed
run replaces its own checkpoint and its own run log (one of the same settings and the run
identity its checkpoint holds), never a file of another kind. A run's first write of a file
creates it, and fails if another process made one meanwhile. The JSON and PNG outputs of the
benchmarks are claimed as they start too, and replace only an earlier output of the same command.
"""
import json
import shlex

from autogemm import files
from nn import checkpoint
from nn.errors import NNError, shown

MAX_LOG_BYTES = 64 << 20


class Outputs:
    """The checkpoint and run log of one run (either may be None), written by rank 0."""

    def __init__(self, checkpoint_path, log_path, resume: bool, fingerprint_of):
        """`fingerprint_of(run_log)` gives the settings a run log was written with, comparable
        to `fingerprint`'s argument of `claim`."""
        self.checkpoint, self.log, self.resume = checkpoint_path, log_path, resume
        self._fingerprint_of = fingerprint_of
        self._replace = {}        # path -> whether the next write replaces a file (else creates it)

    def claim(self, fingerprint: dict, run: str | None = None):
        """NNError unless both files can be written as this run will write them (see above); `run`
        is the run's identity, which a run log it continues must hold (the checkpoint's, when resumed)."""
        if self.checkpoint and self.log and files.same_file(self.checkpoint, self.log):
            raise NNError(f"--log {shown(self.log)} and --checkpoint {shown(self.checkpoint)} are the same file; "
                          "give the run log a path of its own")
        if self.checkpoint:
            self._claim("--checkpoint", self.checkpoint, lambda path: self.resume)   # resumed: the one just read
        if self.log:
            self._claim("--log", self.log, lambda path: self._own_log(path, fingerprint, run))

    def _claim(self, flag, path, ours):
        self._replace[path] = claim(flag, path, ours)

    def _own_log(self, path, fingerprint: dict, run: str | None) -> bool:
        """Whether the file at `path` is this run's log, which a resumed run continues; NNError for
        any other file."""
        try:
            log = files.parse_json(files.read_regular(path, MAX_LOG_BYTES))
            settings = self._fingerprint_of(log)
        except (files.FileError, ValueError, TypeError, KeyError, AttributeError):
            raise NNError(f"--log {shown(self.log)} exists and is not a run log of nn.train; "
                          "choose another path") from None
        if not self.resume:
            raise NNError(f"--log {shown(self.log)} exists; choose another path (a run log is never overwritten), "
                          "or pass --resume to continue its run")
        if settings != json.loads(json.dumps(fingerprint)):
            raise NNError(f"--log {shown(self.log)} is the log of a run with other settings; choose another path")
        if run is None or log.get("run") != run:     # same settings, another run (or one before run identities)
            raise NNError(f"--log {shown(self.log)} is the log of another run than the one in --checkpoint "
                          f"{shown(self.checkpoint)}; choose another path (a run log is never overwritten)")
        return True

    def save_checkpoint(self, ckpt: checkpoint.Checkpoint):
        checkpoint.save(self.checkpoint, ckpt, replace=self._replace[self.checkpoint])
        self._replace[self.checkpoint] = True

    def write_log(self, log: dict):
        if not self.log:
            return
        try:
            files.write_atomic(self.log, json.dumps(log, indent=1).encode(), replace=self._replace[self.log])
        except files.FileError as e:
            raise NNError(f"cannot write the run log {shown(self.log)}: {e}") from None
        self._replace[self.log] = True


class ResumeHint:
    """What a stopped run leaves, in one clause: the epochs in its checkpoint (`epoch`: the last
    one written), and the command that resumes them."""

    def __init__(self, checkpoint_path, argv, ranks: int, epoch: int):
        self.path, self.argv, self.ranks, self.epoch = checkpoint_path, list(argv), ranks, epoch

    def say(self, command: bool = True) -> str:
        if not self.path:
            return "nothing was saved (no --checkpoint)"
        if self.epoch == 0:
            return f"no epoch had finished, {shown(self.path)} was not written"
        resume = ["python", "-m", "nn.train", *self.argv, *([] if "--resume" in self.argv else ["--resume"])]
        if self.ranks > 1:
            resume = ["mpirun", "-n", str(self.ranks), *resume]
        return (f"epochs 1..{self.epoch} are in {shown(self.path)}"
                + (f"; resume with: {' '.join(map(_shell_word, resume))}" if command else ""))


def _shell_word(arg: str) -> str:
    """`arg` as a shell word on one line: shlex.quote, or bash's $'...' where it holds a control character."""
    if arg.isprintable():
        return shlex.quote(arg)
    escaped = "".join(c if c.isprintable() and c not in "\\'" else "\\" + c if c in "\\'"
                      else f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\U{ord(c):08x}" for c in arg)
    return f"$'{escaped}'"


def claim(flag: str, path, ours=None) -> bool:
    """NNError unless `path` can take an output (autogemm.files.claim_output), said in one line;
    whether a file is there, to be replaced."""
    try:
        return files.claim_output(path, ours)
    except files.FileError as e:
        raise NNError(f"{flag} {shown(path)}: cannot be written: {e}") from None


def claim_json(flag: str, path, command: str):
    """claim: `path` is new, or an earlier JSON output of `command`."""
    claim(flag, path, files.output_of(command))


def write_json(flag: str, path, doc: dict):
    try:
        files.write_atomic(path, json.dumps(doc, indent=1).encode())
    except files.FileError as e:
        raise NNError(f"{flag} {shown(path)}: cannot be written: {e}") from None
