"""The `autogemm` command without a GPU: bad input and a missing CuPy are one `error:` line, status 2."""
import importlib.util
import re
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


# ---- --help: a description, what needs a GPU, defaults said one way --------------------------------
def help_text(main, argv, capsys) -> tuple[str, str]:
    """What `--help` prints, and its description (the paragraphs between the usage and the flags),
    each with whitespace made single (argparse wraps at the terminal's width)."""
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    paragraphs = text.split("\n\n")[1:]
    flags = next(i for i, p in enumerate(paragraphs) if p.startswith(("options:", "positional arguments:")))
    return " ".join(text.split()), " ".join(" ".join(paragraphs[:flags]).split())


def tools():
    from autogemm import cli
    from nn import bench, cost_model, data, profile, scaling, train

    parse = lambda build: lambda argv: build().parse_args(argv)      # noqa: E731
    return {  # command: (main, argv, what its description says of the GPU)
        "autogemm": (cli.main, [], "bench, tune and sweep run kernels: they need a CUDA GPU"),
        "autogemm bench": (cli.main, ["bench"], "Needs a CUDA GPU and CuPy."),
        "autogemm tune": (cli.main, ["tune"], "Needs a CUDA GPU and CuPy."),
        "autogemm sweep": (cli.main, ["sweep"], "Needs a CUDA GPU and CuPy."),
        "autogemm show": (cli.main, ["show"], "Needs no GPU."),
        "nn.train": (parse(train.build_parser), [], 'The flags under "GPU" need a CUDA GPU and CuPy'),
        "nn.bench": (bench.main, [], "the others need a CUDA GPU and CuPy"),
        "nn.profile": (profile.main, [], "On a CUDA GPU with CuPy where there is one"),
        "nn.scaling": (parse(scaling.build_parser), [], "Needs R CUDA GPUs (one a rank), CuPy and mpirun"),
        "nn.data": (data.main, [], "Needs no GPU."),
        "nn.cost_model": (cost_model.main, [], "Needs no GPU."),
    }


@pytest.mark.parametrize("command", list(tools()))
def test_every_command_has_a_description_that_says_what_needs_a_gpu(capsys, command):
    main, argv, gpu = tools()[command]
    text, description = help_text(main, argv, capsys)
    assert len(description) > 60, text[:300]
    assert gpu in description


def test_autogemm_says_its_defaults_as_default_colon(capsys):
    """`autogemm tune --help` said "(40)" for a default."""
    from autogemm import cli

    for command in ("bench", "tune", "sweep"):
        text, _ = help_text(cli.main, [command], capsys)
        bare = re.findall(r"\((?:[0-9][0-9.]*|fp32|float32|sigmoid|data|nn|flush)\)", text)
        assert not bare, (command, bare)
    text, _ = help_text(cli.main, ["tune"], capsys)
    for default in ("(default: 40)", "(default: 20)", "(default: 1000)", "(default: fp32)", "(default: 54000)",
                    "(default: all: "):
        assert default in text, default
