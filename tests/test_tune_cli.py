"""`autogemm tune` and `autogemm show`: one-line errors (status 2), tables, JSON, and a tuning run
with the GPU replaced by a fake measure."""
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from autogemm import cli
from autogemm.runtime.device import H100
from autogemm.runtime.family import Config
from autogemm.store import locations
from autogemm.store.records import file_for, load
from fake_tuned import GEMM, SOFTWARE, FakeMeasure, edit, record, write_store


def autogemm(*args: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autogemm.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **env})


def one_line_error(proc, start: str):
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"error: {start}") and proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="CuPy is installed: tune would run")
def test_tune_without_a_gpu_is_a_one_line_error(tmp_path):
    one_line_error(autogemm("tune", "--out", str(tmp_path)), "no CUDA: CuPy is not installed")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, message", [
    (["--trials", "0"], "argument --trials: 0 must be >= 1"),
    (["--trials", "many"], "argument --trials: 'many' is not an integer"),
    (["--timeout", "-5"], "argument --timeout: -5 must be a number > 0"),
    (["--patience", "-1"], "argument --patience: -1 must be >= 0"),
    (["--families", "gemm,fft"], "argument --families: 'gemm,fft': unknown 'fft'; families are"),
    (["--fix", "bk=17"], "restricting bk: bk=17 is not in the gemm space"),
    (["--shapes", "3x4"], "--shapes: '3x4' is not MxNxK[:op]"),
    (["--shapes", "800x0x784"], "--shapes: '800x0x784' has a zero size"),
    (["--shapes", "800x10x1000:xx"], "--shapes: '800x10x1000:xx' is not MxNxK[:op]"),
    (["--shapes", "10x10x10", "--families", "colsum"], "--shapes '10x10x10' with --families colsum: nothing to tune"),
    (["--ranks", "0"], "argument --ranks: 0 must be >= 1"),
    (["--hidden", "100,x"], "argument --hidden: 'x' is not an integer"),
    (["--dtype", "float16"], "argument --dtype: invalid choice"),
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--shapes", "2147483648x1x1"], "--shapes: '2147483648x1x1' has a size over 2147483647, more than the kernels'"),
    (["--hidden", "99999999999"], "argument --hidden: 99999999999 is over 2147483647"),
    (["--fix", "bm=²"], "restricting bm: bm='²' is not in the gemm space"),     # '²'.isdigit(), but no integer
    (["--seed", "99999999999999999999999"], "argument --seed: 99999999999999999999999 is over"),
    (["--seed", "-1"], "argument --seed: -1 must be >= 0"),
    (["--ranks", "1,100000"], "argument --ranks: 100000 is over 1024"),
    (["--shapes", "٦٤x64x64"], "--shapes: '٦٤x64x64' is not MxNxK[:op]"),
    (["--fix", "bm=64", "--fix", "bm=32"], "--fix bm is given twice"),
    (["--stale", "--shapes", "64x64x64"], "--stale tunes the stale records of the tuned file; it takes no --shapes"),
    (["--model", "lenet", "--parallel", "model"], "--shapes lenet: --parallel model splits the MLP's hidden layer"),
    (["--hidden", "100,50", "--ranks", "2", "--parallel", "model"], "--shapes nn: --parallel model splits one hidden layer"),
    (["--shapes", ""], "--shapes: nothing given; use 'nn' or MxNxK[:op],..."),
    (["--model", " , "], "--model: nothing given"),
    (["--shapes", "nn", "--layers", "conv6x3"], "--shapes nn: the network takes no --layers"),
])
def test_tune_argument_errors(args, message):
    one_line_error(autogemm("tune", *args), message)


@pytest.mark.parametrize("args, message", [
    (["--shapes", "1" * 5000 + "x1x1"], "--shapes: '1111"),       # was int()'s ValueError, a traceback
    (["--shapes", "x" * 100_000], "--shapes: 'xxx"),
    (["--trials", "9" * 5000], "argument --trials: 999"),
    (["--trials", "-" + "9" * 5000], "argument --trials: -999"),
    (["--seed", "9" * 100], "argument --seed: 999"),
    (["--timeout", "9" * 5000], "argument --timeout: '999"),
    (["--timeout", "-0." + "0" * 5000 + "1"], "argument --timeout: -0.000"),
    (["--families", "x" * 100_000], "argument --families: 'xxx"),
    (["--fix", "x" * 100_000], "argument --fix: 'xxx"),
    (["--fix", "bm=" + "x" * 100_000], "restricting bm: bm='xxx"),
])
def test_a_huge_argument_is_quoted_cut_short(args, message):
    proc = autogemm("tune", *args)
    one_line_error(proc, message)
    assert len(proc.stderr) < 400, proc.stderr[:500]


@pytest.mark.parametrize("args, message", [
    (["tune", "--layers", ""], "--layers: empty"),          # was "--shapes nn: the network takes no --layers"
    (["tune", "--layers", " "], "--layers: empty"),
    (["tune", "--out", ""], "--out: empty"),                # was the default folder
    (["bench", "--json", ""], "--json: empty"),             # was no JSON at all
    (["sweep", "--shapes", "64x64x64", "--json", ""], "--json: empty"),
    (["show", ""], "path: empty"),                          # was the default folders
    (["tune", "--shapes", ""], "--shapes: nothing given"),
    (["bench", "--shapes", ""], "--shapes: no shapes given"),
])
def test_an_empty_string_is_not_an_absent_flag(args, message):
    one_line_error(autogemm(*args), message)


@pytest.mark.parametrize("args, message", [
    (["show", "/tmp/no\nsuch"], "/tmp/no\\nsuch: no such file or folder"),
    (["tune", "--layers", "x" * 100_000], "--shapes lenet: --layers: "),     # quoted whole by nn's spec parser
])
def test_every_error_is_one_line_of_readable_length(args, message):
    proc = autogemm(*args)
    one_line_error(proc, message)
    assert len(proc.stderr) <= len("error: \n") + 1000


@pytest.mark.parametrize("command", ["bench", "sweep"])
def test_json_outputs_never_replace_a_file_of_another_kind(tmp_path, command):
    (tmp_path / "notes.json").write_text('{"command": "python -m nn.train"}')
    args = ["--shapes", "64x64x64"] if command == "sweep" else []
    one_line_error(autogemm(command, *args, "--json", str(tmp_path / "notes.json")),
                   f"--json {tmp_path / 'notes.json'}: cannot be written: exists and is not an earlier output")
    assert (tmp_path / "notes.json").read_text() == '{"command": "python -m nn.train"}'


def test_tune_out_must_be_a_folder(tmp_path):
    (tmp_path / "f").write_text("x")
    one_line_error(autogemm("tune", "--out", str(tmp_path / "f")), f"--out {tmp_path / 'f'}: not a folder")


def test_tune_names_autogemm_tuned_when_the_folder_came_from_it(tmp_path):
    """No --out given: the message named one all the same."""
    os.mkfifo(tmp_path / "fifo")
    for command in ("tune", "show"):
        one_line_error(autogemm(command, AUTOGEMM_TUNED=str(tmp_path / "fifo")),
                       f"$AUTOGEMM_TUNED {tmp_path / 'fifo'}: not a folder")


# ---- show ---------------------------------------------------------------------------------------
@pytest.fixture
def store(tmp_path):
    return write_store(tmp_path, [
        record(median_us=50.0, cublas_us=60.0, cublas_error=4e-7),
        record((400, 1000, 784), median_us=30.0, template_hash="0" * 16),
        record((800, 10), "-", fam="softmax_xent", config=dict(block=128, tpr=16), cublas_us=None)])


def test_show_by_default_summarises_each_gpu_per_family(store):
    proc = autogemm("show", str(store.parent))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "NVIDIA H100 80GB HBM3 (132 SMs, compute 9.0)" and lines[2] == f"    {store}"
    assert lines[1].startswith("  file: 3 records, updated ") and lines[1].endswith(" ago:")
    rows = {line.split()[0]: line.split()[1:] for line in lines[3:] if line.strip()}
    assert rows["vs"] == [] and rows["family"] == ["records", "stale", "overridden", "cuBLAS"]
    assert rows["gemm"] == ["2", "1", "0", "1.60x"]     # the median of 60/50 and 60/30 (a stale record serves its shape)
    assert rows["softmax_xent"] == ["1", "0", "0"] and rows["all"] == ["3", "1", "0"]
    assert "1 stale record: tuned on kernel code that has changed since" in proc.stdout
    assert lines[-1] == "every record: autogemm show --all; for scripts: autogemm show --json"
    assert "800x1000x784" not in proc.stdout and "bm=64" not in proc.stdout      # no record: --all has them


def test_show_all_a_folder_as_a_table(store):
    proc = autogemm("show", "--all", str(store.parent))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "NVIDIA H100 80GB HBM3 (132 SMs, compute 9.0; driver 13.0, CUDA 13.2, CuPy 14.2.0)" in out
    row = next(line for line in out.splitlines() if "800x1000x784" in line)
    for cell in ("gemm", "nt", "float32", "bm=64 bn=64 bk=16", "split_k=1 pad=True", "50.0", "1000", "1.20x",
                 "1.0e-07 (0.25x)"):              # the record's error against float64, and over cuBLAS's
        assert cell in row, (cell, row)
    assert "1.0e-07 (" not in next(line for line in out.splitlines() if "400x1000x784" in line)   # not measured
    assert "stale" not in row
    assert "stale" in next(line for line in out.splitlines() if "400x1000x784" in line)
    assert "block=128 tpr=16" in out


def test_show_json(store):
    proc = autogemm("show", "--json", str(store))
    assert proc.returncode == 0, proc.stderr
    (shown,) = json.loads(proc.stdout)
    assert shown["file"] == str(store) and shown["meta"]["gpu"] == H100.name
    by_shape = {r["shape"]: r for r in shown["records"]}
    assert by_shape["800x1000x784"]["speedup"] == pytest.approx(1.2) and not by_shape["800x1000x784"]["stale"]
    assert by_shape["400x1000x784"]["stale"] and by_shape["800x10"]["speedup"] is None
    assert by_shape["800x1000x784"]["kernel"].startswith("gemm_f32_nt_bm64_bn64_bk16")
    assert by_shape["800x1000x784"]["config"]["bm"] == 64


def test_show_by_default_shows_the_user_store_then_the_shipped_results(store):
    """What lookup reads, in its order; the shipped record of a key the user has tuned is overridden."""
    proc = autogemm("show", "--json", AUTOGEMM_TUNED=str(store.parent))
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout)
    assert [s["role"] for s in shown] == ["user", "shipped", "shipped"] and shown[0]["file"] == str(store)
    h100 = next(s for s in shown[1:] if s["meta"]["gpu"] == H100.name)
    z1 = next(r for r in h100["records"] if (r["family"], r["shape"], r["op"]) == ("gemm", "800x1000x784", "nt"))
    assert not z1["used"] and all(r["used"] for r in shown[0]["records"] if not r["stale"])
    out = autogemm("show", "--all", AUTOGEMM_TUNED=str(store.parent)).stdout
    assert f"user store: {store}" in out and "shipped with autogemm: " in out
    assert "overridden" in next(line for line in out.splitlines() if "800x1000x784" in line and "nt" in line
                                and "overridden" in line)
    out = autogemm("show", AUTOGEMM_TUNED=str(store.parent)).stdout           # the summary: user beside shipped
    h100 = out[out.index("NVIDIA H100"):]
    assert h100.index("  user store: 3 records") < h100.index(f"    {store}\n") < h100.index("  shipped with autogemm: ")
    header = next(line for line in h100.splitlines() if line.split()[:1] == ["family"])
    assert header.split()[:5] == ["family", "user", "shipped", "stale", "overridden"]
    gemm = next(line.split() for line in h100.splitlines() if line.split()[:1] == ["gemm"])
    assert gemm[1] == "2" and int(gemm[2]) > 1 and int(gemm[4]) >= 1        # the shipped 800x1000x784 overridden
    h200 = out[out.index("NVIDIA H200"):]
    assert "  user store: none; `autogemm tune` on this GPU writes:" in h200 and f"{store.parent}/nvidia-h200.json" in h200


def test_show_without_any_tuned_file_says_how_to_tune(tmp_path):
    proc = subprocess.run([sys.executable, "-c", "import sys, autogemm.store.locations as l, autogemm.cli as c; "
                           f"l.shipped_dir = lambda: l.Path({str(tmp_path / 'none')!r}); sys.exit(c.main(['show']))"],
                          capture_output=True, text=True, env={**os.environ, "AUTOGEMM_TUNED": str(tmp_path / "mine")})
    one_line_error(proc, f"no tuned files in {tmp_path / 'mine'} or {tmp_path / 'none'}: tune with `autogemm tune`")


@pytest.mark.parametrize("columns", [60, 100])
def test_show_fits_the_terminals_width(store, monkeypatch, capsys, columns):
    """It printed 735 lines at 200 columns whatever the terminal. The paths alone are printed whole."""
    monkeypatch.setenv("AUTOGEMM_TUNED", str(store.parent))
    monkeypatch.setenv("COLUMNS", str(columns))
    assert cli.main(["show"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines if not line.startswith("    /")) <= columns
    assert sum(line.startswith("gemm_wgmma ") for line in lines) == 2 and len(lines) < 70     # both GPUs, summed


def test_show_is_80_columns_wide_where_the_output_is_no_terminal(store):
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "AUTOGEMM_TUNED")}
    proc = subprocess.run([sys.executable, "-m", "autogemm.cli", "show"], capture_output=True, text=True,
                          env={**env, "AUTOGEMM_TUNED": str(store.parent)})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert 60 < max(len(line) for line in lines if not line.startswith("    /")) <= 80


def test_show_reports_a_bad_file_in_one_line_and_still_shows_the_others(store, tmp_path):
    bad = tmp_path / "other-gpu.json"
    bad.write_text(store.read_text())
    edit(bad, lambda d: d["records"][0]["config"].update(bm="128; } evil"))
    proc = autogemm("show", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: {bad}: record 0 (") and proc.stderr.count("\n") == 1
    assert f"    {store}\n" in proc.stdout and "\ngemm " in proc.stdout      # the good file's summary


def test_show_refuses_a_huge_integer_in_one_line_also_from_the_user_store(store):
    """1 and 400 zeros made float() overflow: a traceback from `autogemm show` and from lookup."""
    store.write_text(store.read_text().replace('"median_us": 50.0', '"median_us": 1' + "0" * 400, 1))
    message = f"{store}: record 1 (gemm 800x1000x784:nt float32): median_us=1{'0' * 36}..."
    one_line_error(autogemm("show", str(store)), message)
    proc = autogemm("show", AUTOGEMM_TUNED=str(store.parent))
    assert proc.returncode == 2 and proc.stderr == f"error: {message} must be a finite number > 0\n"


@pytest.mark.parametrize("name, message", [("missing", "no such file or folder"), ("empty", "no tuned files"),
                                           ("loop", "a symlink loop"),
                                           ("fifo.json", "cannot read: a FIFO, not a regular file")])
def test_show_nothing_to_show(tmp_path, name, message):
    (tmp_path / "empty").mkdir()
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    os.mkfifo(tmp_path / "fifo.json")
    one_line_error(autogemm("show", str(tmp_path / name)), f"{tmp_path / name}: {message}")


def many_records(tmp_path, count: int):
    """A tuned file of `count` GEMM records, one shape each, the larger the slower (as a hand edit:
    save checks each record twice)."""
    path = write_store(tmp_path, [record()])
    edit(path, lambda d: d.update(records=[dict(d["records"][0], shape=f"{i + 1}x1000x784", median_us=10 + i / 100)
                                           for i in range(count)]))
    return path


def test_show_summarises_a_large_file_in_a_few_seconds_and_json_keeps_every_record(tmp_path, capsys):
    """A file of 100,000 records took 189 s to show as one table of every row (--json 26 s)."""
    path = many_records(tmp_path, 20_000)
    start = time.monotonic()
    assert cli.main(["show", str(path)]) == 0
    seconds = time.monotonic() - start
    out = capsys.readouterr().out
    assert "file: 20000 records" in out and "autogemm show --all" in out and len(out.splitlines()) < 20
    assert f"    {path}\n" in out and " 20000x1000x784 " not in out
    assert seconds < 8, seconds
    assert cli.main(["show", "--json", str(path)]) == 0
    (shown,) = json.loads(capsys.readouterr().out)
    assert len(shown["records"]) == 20_000


def test_show_all_prints_every_record_of_a_large_file_as_plain_lines(tmp_path, capsys):
    path = many_records(tmp_path, 600)
    assert cli.main(["show", "--all", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 + 600 and lines[2].split()[:3] == ["family", "shape", "op"]
    assert lines[-1].split()[:6] == ["gemm", "600x1000x784", "nt", "float32", "bm=64", "bn=64"]


def test_show_prints_what_a_file_says_as_text_not_markup(store):
    edit(store, lambda d: d["meta"].update(gpu="[bold red]NVIDIA H100 80GB HBM3[/bold red]"))
    out = autogemm("show", str(store.parent)).stdout
    assert "[bold red]NVIDIA H100 80GB HBM3[/bold red] (132 SMs" in out


# ---- tune with a fake GPU -------------------------------------------------------------------------
@pytest.fixture
def fake_gpu(monkeypatch, tmp_path):
    import autogemm.runtime.device
    import autogemm.tuning.measures

    monkeypatch.setattr(autogemm.runtime.device, "this_device", lambda: H100)
    monkeypatch.setattr(autogemm.runtime.device, "software", lambda: SOFTWARE)
    monkeypatch.setenv("AUTOGEMM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(locations, "shipped_dir", lambda: tmp_path / "shipped")
    measures = []

    def measure_for(key, device, seed=0):
        measures.append(FakeMeasure())
        return measures[-1]

    monkeypatch.setattr(autogemm.tuning.measures, "measure_for", measure_for)
    return measures


def test_tune_stores_results_and_prints_a_summary(fake_gpu, tmp_path, capsys):
    out = tmp_path / "tuned"
    status = cli.main(["tune", "--shapes", "nn", "--hidden", "100", "--families", "gemm,linear_xent",
                       "--trials", "6", "--out", str(out)])
    printed = capsys.readouterr()
    assert status == 0, printed.err
    records = load(file_for(out, H100)).records
    assert len(records) == 8 == len(fake_gpu)                 # 3 GEMMs + the output layer, 2 batch sizes
    assert "autogemm tune: best of each shape" in printed.out
    row = next(line for line in printed.out.splitlines() if "gemm 800x100x784:nt+bias_sigmoid" in line and "A1 = " in line)
    assert "added" in row
    assert all(r.command == "autogemm tune --shapes nn --hidden 100 --families gemm,linear_xent --trials 6 "
                            f"--out {out}" for r in records.values())


@pytest.mark.parametrize("patience", [None, "0"])
def test_patience_0_measures_every_trial_where_the_default_search_ends_early(fake_gpu, tmp_path, patience):
    out = tmp_path / "tuned"
    args = ["tune", "--shapes", "800x1000x784:nt", "--families", "gemm", "--trials", "60", "--timeout", "600",
            "--out", str(out)] + (["--patience", patience] if patience else [])
    assert cli.main(args) == 0
    (record,) = load(file_for(out, H100)).records.values()
    assert (record.trials == 60) == (patience == "0")


def test_tunes_default_patience_is_the_searchs():
    from autogemm.tuning.search import Settings

    assert cli.SEARCH_PATIENCE == Settings().patience


def test_tune_into_a_log_prints_a_line_as_each_target_finishes(fake_gpu, tmp_path, capsys):
    """Output that is not a terminal gets no progress bars but one line a finished target, in order:
    its shape, arithmetic, best time, trials and seconds (of which waiting for compiles and
    re-timing, where the wait was measurable), and what the store did."""
    status = cli.main(["tune", "--shapes", "nn", "--hidden", "100", "--families", "linear_xent", "--trials", "4",
                       "--out", str(tmp_path / "tuned")])
    printed = capsys.readouterr()
    assert status == 0, printed.err
    lines = [line for line in printed.out.splitlines() if line.startswith("autogemm tune: [")]
    assert [line.split("]")[0] for line in lines] == ["autogemm tune: [1/2", "autogemm tune: [2/2"]
    assert all(re.search(r"\] linear_xent \d+x10x100:sigmoid float32: best [\d.]+ µs, 4 trials, [\d.]+ s"
                         r"( \([\d.]+ s waiting for compiles, [\d.]+ s re-timing\))?, added$", line)
               for line in lines), lines
    assert printed.out.index(lines[-1]) < printed.out.index("autogemm tune: best of each shape")


def test_tune_stale_retunes_only_the_stale_records_starting_from_their_configs(fake_gpu, tmp_path, capsys):
    out = tmp_path / "tuned"
    old = dict(GEMM, bk=8)
    write_store(out, [record(median_us=50.0), record((400, 1000, 784), config=old, median_us=30.0,
                                                     template_hash="0" * 16)])
    status = cli.main(["tune", "--stale", "--trials", "4", "--out", str(out)])
    assert status == 0, capsys.readouterr().err
    (measure,) = fake_gpu                                        # one target: the stale record's key
    assert Config(old) in measure.measured()[:2]                 # its old config is tried first, after the default
    records = {r.key.shape: r for r in load(file_for(out, H100)).records.values()}
    assert not any(r.stale for r in records.values()) and records["800x1000x784"].median_us == 50.0
    assert cli.main(["tune", "--stale", "--out", str(out)]) == 0
    assert "no stale float32 records" in capsys.readouterr().out and len(fake_gpu) == 1


def test_tune_stale_names_the_stale_records_of_other_arithmetics_it_leaves(fake_gpu, tmp_path, capsys):
    """--stale tunes one arithmetic's records; it says how many of the others' are stale and how to tune them."""
    out = tmp_path / "tuned"
    write_store(out, [record((400, 1000, 784), median_us=30.0, template_hash="0" * 16),
                      record((400, 1000, 784), dtype="tf32", median_us=20.0, template_hash="0" * 16),
                      record((800, 1000, 784), dtype="tf32", median_us=20.0, template_hash="0" * 16)])
    assert cli.main(["tune", "--stale", "--trials", "4", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "2 stale tf32 record(s) too, which this run leaves: autogemm tune --stale --precision tf32 tunes them" in printed
    assert len(fake_gpu) == 1                                     # the float32 one alone
    assert cli.main(["tune", "--stale", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "2 stale tf32 record(s) too" in printed and "no stale float32 records" in printed


def test_an_installed_autogemm_tunes_into_the_user_store_and_never_the_shipped_file(fake_gpu, tmp_path, capsys,
                                                                                    monkeypatch):
    """Stale shipped records are re-tuned into the user store, which lookup then reads first."""
    monkeypatch.delenv("AUTOGEMM_TUNED", raising=False)
    monkeypatch.setattr(locations, "PACKAGE", tmp_path / "site-packages" / "autogemm")
    shipped = write_store(locations.shipped_dir(), [record(median_us=50.0),
                                                    record((400, 1000, 784), median_us=30.0, template_hash="0" * 16)])
    before = shipped.read_bytes()
    assert cli.main(["tune", "--stale", "--trials", "4"]) == 0, capsys.readouterr().err
    assert cli.main(["tune", "--shapes", "10x10x10", "--trials", "4"]) == 0, capsys.readouterr().err
    mine = load(file_for(tmp_path / "cache" / "tuned", H100)).records
    assert sorted(k.shape for k in mine) == ["10x10x10", "400x1000x784"] and shipped.read_bytes() == before
    assert cli.main(["tune", "--stale"]) == 0 and "no stale float32 records" in capsys.readouterr().out


def test_a_target_whose_operands_cannot_be_made_fails_alone(fake_gpu, tmp_path, capsys, monkeypatch):
    import autogemm.tuning.measures

    def measure_for(key, device, seed=0):
        if key.shape == "800x10x1002":
            raise MemoryError("Out of memory allocating 8,589,934,592 bytes")
        return FakeMeasure()

    monkeypatch.setattr(autogemm.tuning.measures, "measure_for", measure_for)
    status = cli.main(["tune", "--shapes", "800x10x1002,800x1000x10", "--trials", "4", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert status == 1 and err.count("\n") == 1
    assert err.startswith("error: gemm 800x10x1002:nn: cannot set up its operands: Out of memory allocating")
    assert [k.shape for k in load(file_for(tmp_path, H100)).records] == ["800x1000x10"]


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="CuPy is installed")
def test_the_python_api_without_cupy_says_what_to_install():
    import numpy as np

    import autogemm as ag

    x = np.ones((4, 4), np.float32)
    for call in (lambda: ag.gemm(x, x), lambda: ag.column_sums(x), lambda: ag.sgd_update(x, x, 0.1),
                 lambda: ag.bias_activation(x, x[0], "relu")):
        with pytest.raises(ag.AutogemmError, match=r"^no CUDA: CuPy is not installed.*pip install 'autogemm\[cuda13\]'"):
            call()


def test_a_tuned_file_of_another_gpu_is_refused_before_tuning(fake_gpu, tmp_path, capsys):
    path = write_store(tmp_path, [record()])
    edit(path, lambda d: d["meta"].update(gpu="NVIDIA H200"))
    assert cli.main(["tune", "--shapes", "64x64x64", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"error: {path}: holds results for NVIDIA H200, not this GPU "
                                       f"({H100.name}); choose another --out\n")
    assert not fake_gpu                                          # nothing was measured


def test_tune_fix_searches_only_those_choices(fake_gpu, tmp_path, capsys):
    out = tmp_path / "tuned"
    status = cli.main(["tune", "--shapes", "800x1000x784:nt", "--fix", "copy=async", "--fix", "bk=16,32",
                       "--fix", "pad=true", "--trials", "8", "--out", str(out)])
    assert status == 0, capsys.readouterr().err
    measured = [cfg for m in fake_gpu for cfg in m.measured()]
    assert len(measured) >= 8 and all(c.copy == "async" and c.bk in (16, 32) and c.pad is True for c in measured)
    record, = load(file_for(out, H100)).records.values()
    assert record.config.copy == "async" and "--fix copy=async" in record.command


def test_tune_ctrl_c_exits_130_with_what_was_saved(fake_gpu, tmp_path, capsys, monkeypatch):
    import autogemm.tuning.measures

    calls = []

    def measure_for(key, device, seed=0):
        calls.append(key)
        if len(calls) == 2:
            return FakeMeasure(script=lambda cfg, call: (_ for _ in ()).throw(KeyboardInterrupt))
        return FakeMeasure()

    monkeypatch.setattr(autogemm.tuning.measures, "measure_for", measure_for)
    status = cli.main(["tune", "--shapes", "800x10x1002,800x1000x10", "--trials", "4", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert status == 130
    assert err.startswith("interrupted: 1 of 2 shapes finished and saved in") and "--resume" in err
    assert len(load(file_for(tmp_path, H100)).records) == 1


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
@pytest.mark.usefixtures("default_handlers")
def test_tune_sigterm_and_sighup_keep_what_was_saved_as_ctrl_c_does(fake_gpu, tmp_path, capsys, monkeypatch, sig):
    """They ended tune with 143/129 and no line; the --out path is said on one line (a newline in
    it was printed raw)."""
    import autogemm.tuning.measures

    calls = []

    def measure_for(key, device, seed=0):
        calls.append(key)
        if len(calls) == 2:
            return FakeMeasure(script=lambda cfg, call: os.kill(os.getpid(), sig))
        return FakeMeasure()

    monkeypatch.setattr(autogemm.tuning.measures, "measure_for", measure_for)
    out = tmp_path / "a\nb"
    status = cli.main(["tune", "--shapes", "800x10x1002,800x1000x10", "--trials", "4", "--out", str(out)])
    err = capsys.readouterr().err
    assert status == 128 + sig and err.count("\n") == 1, err
    saved_in = str(file_for(out, H100)).replace("\n", "\\n")
    assert err == (f"interrupted by {signal.Signals(sig).name}: 1 of 2 shapes finished and saved in {saved_in}; "
                   "run the same command with --resume to go on\n")
    assert len(load(file_for(out, H100)).records) == 1


@pytest.mark.usefixtures("default_handlers")
def test_tune_a_signal_while_a_result_is_saved_leaves_the_file_before_it(fake_gpu, tmp_path, capsys, monkeypatch):
    """A SIGTERM as the second shape's result is flushed to disk: the tuned file keeps the first
    shape's, and no temporary file stays."""
    fsync, writes = os.fsync, []

    def signalled_fsync(fd):
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".tmp"):
            writes.append(fd)
            if len(writes) == 2:
                os.kill(os.getpid(), signal.SIGTERM)
        fsync(fd)

    monkeypatch.setattr(os, "fsync", signalled_fsync)
    status = cli.main(["tune", "--shapes", "800x10x1002,800x1000x10", "--trials", "4", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert status == 143 and err.startswith("interrupted by SIGTERM: 1 of 2 shapes finished and saved in"), err
    assert len(load(file_for(tmp_path, H100)).records) == 1 and not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize("precision, shape, families", [
    ("tf32", "800x1000x784:nt", {"gemm", "gemm_wgmma"}), ("bf16", "1000x784x800:tn", {"gemm_wgmma"}),
    ("tf32", "1000x784x802:nt", {"gemm"}),              # K % 4: rows that gemm_wgmma's 16-byte copies cannot read
])
def test_tune_precision_tunes_the_kernels_at_it_into_its_records(fake_gpu, tmp_path, capsys, precision, shape,
                                                                 families):
    out = tmp_path / "tuned"
    status = cli.main(["tune", "--shapes", shape, "--precision", precision, "--trials", "6", "--out", str(out)])
    assert status == 0, capsys.readouterr().err
    records = load(file_for(out, H100)).records.values()
    assert {r.key.family for r in records} == families and {r.key.dtype for r in records} == {precision}


def test_tune_dtype_bfloat16_tunes_the_wgmma_gemm_of_bfloat16_operands(fake_gpu, tmp_path, capsys):
    out = tmp_path / "tuned"
    status = cli.main(["tune", "--shapes", "1000x784x800:tn", "--dtype", "bfloat16", "--trials", "6", "--out", str(out)])
    assert status == 0, capsys.readouterr().err
    assert "gemm cannot run them" in capsys.readouterr().out
    (record,) = load(file_for(out, H100)).records.values()
    assert (record.key.family, record.key.dtype, record.config.math) == ("gemm_wgmma", "bfloat16", "bf16")


@pytest.mark.parametrize("argv, words", [
    (["--shapes", "800x1000x784:nt", "--dtype", "bfloat16", "--precision", "tf32"],
     "--dtype bfloat16 multiplies at precision bf16; --precision is tf32"),
    (["--shapes", "800x1000x784:nt", "--precision", "tf32", "--dtype", "float64"],
     "--precision tf32 rounds float32 operands; --dtype is float64"),
    (["--shapes", "nn", "--precision", "tf32", "--families", "colsum"],
     "--precision tf32: no family of these shapes has tf32 kernels (those that do: gemm, gemm_wgmma"),
    (["--shapes", "1000x784x802:nt", "--precision", "bf16"],      # K % 4
     "no config can run these shapes at bf16 on NVIDIA H100 80GB HBM3 (gemm_wgmma: 16-byte copies need A and B"),
    (["--shapes", "1002x784x801:tn", "--dtype", "bfloat16"],
     "(gemm: bfloat16 operands are read by gemm_wgmma alone; gemm_wgmma: 16-byte copies"),
    (["--shapes", "800x1000x784:nt", "--precision", "bf16", "--fix", "bm=64"],
     "--fix confines the tiled gemm family, which has no bf16 kernels"),
    (["--shapes", "800x1000x784:nt", "--dtype", "bfloat16", "--fix", "bm=64"],
     "--fix confines the tiled gemm family, which has no bfloat16 kernels"),
])
def test_tune_precision_tf32_where_nothing_computes_it_is_one_line(fake_gpu, tmp_path, capsys, argv, words):
    assert cli.main(["tune", *argv, "--out", str(tmp_path / "tuned")]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1, err
