"""The `autogemm` command without a GPU: bad input and a missing CuPy are one `error:` line, status 2."""
import importlib.util
import subprocess
import sys

import pytest


def autogemm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autogemm.cli", *args], capture_output=True, text=True)


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="CuPy is installed: bench would run")
def test_bench_without_cupy_is_a_one_line_error():
    proc = autogemm("bench")
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: no CUDA: CuPy is not installed") and proc.stderr.count("\n") == 1
    assert "Traceback" not in proc.stderr + proc.stdout


@pytest.mark.parametrize("args, message", [
    (["--config", "[1]"], "error: --config: expected a JSON object"),
    (["--config", "{bm: 128"], "error: --config: not JSON"),
    (["--shapes", "3x4"], "error: --shapes: '3x4' is not MxNxK[:op]"),
])
def test_bench_bad_arguments_are_one_line_errors(args, message):
    proc = autogemm("bench", *args)
    assert proc.returncode == 2
    assert proc.stderr.startswith(message) and proc.stderr.count("\n") == 1
    assert "Traceback" not in proc.stderr + proc.stdout


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="CuPy is installed: bench would run")
@pytest.mark.parametrize("command", [["bench"], ["sweep", "--shapes", "64x64x64"]])
def test_a_run_that_cannot_start_creates_no_output_folder(tmp_path, command):
    """`autogemm bench --json a/b/x.json` made a/b, then said "no CUDA"."""
    proc = autogemm(*command, "--json", str(tmp_path / "a" / "b" / "x.json"))
    assert proc.returncode == 2 and proc.stderr.startswith("error: no CUDA"), proc.stderr
    assert list(tmp_path.iterdir()) == []
