"""Kernel families from outside autogemm (autogemm/runtime/plugins.py): a folder or an installed
entry point registers a family that tune, lookup and the store treat as a built-in one; a family
that breaks the contract is refused in one line, and a broken installed one never stops the rest."""
import json
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

import autogemm
from autogemm.errors import AutogemmError
from autogemm.runtime import plugins
from autogemm.runtime.device import H100
from autogemm.runtime.family import family, families
from kernels import REGISTRY

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "rowsoftmax" / "rowsoftmax"


@pytest.fixture(autouse=True)
def registry_as_it_was():
    """Each test's families forgotten after it, and any installed plugin left out: the rest of the
    suite sees the built-in families and the installed ones alone."""
    before, broken = dict(REGISTRY), dict(plugins.broken)
    yield
    for name in set(REGISTRY) - set(before):
        plugins.unregister(name)
    plugins.broken.clear()
    plugins.broken.update(broken)
    family.cache_clear()


def family_folder(tmp_path: Path, name: str, change=lambda text: text, template="x.cu.j2") -> Path:
    """A copy of the example family renamed `name`, its module's text passed through `change`."""
    folder = tmp_path / name
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "rowsoftmax.cu.j2").rename(folder / template)
    module = (folder / "__init__.py").read_text().replace('NAME = "rowsoftmax"', f'NAME = "{name}"').replace(
        'TEMPLATE = "rowsoftmax/rowsoftmax.cu.j2"', f'TEMPLATE = "{name}/{template}"')
    (folder / "__init__.py").write_text(change(module))
    return folder


def test_the_example_family_loads_from_its_folder_renders_and_has_a_measure():
    from autogemm.tuning.measures import measure_class

    name = autogemm.load_family(EXAMPLE)
    assert name == "rowsoftmax" and name in families() and autogemm.load_family(EXAMPLE) == name   # once
    fam = family(name)
    problem = fam.Problem(4096, 1024)
    inst = fam.instance(fam.default(problem, H100), problem)
    assert inst.name in inst.source and "__shfl_xor_sync" in inst.source
    assert measure_class(name).__module__.endswith(".measure")
    assert plugins.folder_of(name) == EXAMPLE and plugins.folder_of("gemm") is None


def test_a_plugins_template_resolves_in_its_own_folder_and_its_hash_follows_its_code(tmp_path):
    folder = family_folder(tmp_path, "hashed_softmax")
    name = autogemm.load_family(folder)
    before = family(name).template_hash
    template = folder / "x.cu.j2"
    template.write_text(template.read_text() + "\n// a comment: the code is the same\n")
    from autogemm.runtime.render import clear_caches

    clear_caches()
    assert family(name).template_hash == before
    template.write_text(template.read_text().replace("T(1) / s", "T(1.0) / s"))
    clear_caches()
    assert family(name).template_hash != before


@pytest.mark.parametrize("name, change, message", [
    ("no_reference", lambda t: t.replace("def reference(", "def _reference("), "has no reference"),
    ("gemm", lambda t: t, "NAME gemm is a built-in family's"),
    ("has_call", lambda t: t + '\nCALL = "gemm"\n', "a plugin family computes a call of its own"),
    ("bad_params", lambda t: t.replace('"vec": (1, 2, 4),', '"vec": (),'), "a tuple of 1 to 1024 choices"),
    ("float_params", lambda t: t.replace('"vec": (1, 2, 4),', '"vec": (1.5,),'), "32-bit ints, booleans or words"),
    ("huge_params", lambda t: t.replace('"vec": (1, 2, 4),', '"vec": (10**400,),'), "32-bit ints, booleans or words"),
    ("far_template", lambda t: t.replace('TEMPLATE = "far_template/x.cu.j2"', 'TEMPLATE = "far_template/../../x.cu.j2"'),
     "must be .far_template/<file>., a file in"),
    ("unhashable", lambda t: t.replace("@dataclass(frozen=True)", "@dataclass"), "Problem must be hashable"),
    ("wordy_ops", lambda t: t.replace("KEY_OPS = (NO_OP,)", 'KEY_OPS = ("a b",)'), "KEY_OPS: the ops a key may carry"),
    ("exits", lambda t: t + "\nraise SystemExit('bye')\n", "failed: SystemExit: bye"),
    ("bad_template", lambda t: t.replace('TEMPLATE = "bad_template/x.cu.j2"', 'TEMPLATE = "other/x.cu.j2"'),
     "TEMPLATE 'other/x.cu.j2' must be"),
    ("crashes", lambda t: t + "\nraise RuntimeError('its own bug')\n", "failed: RuntimeError: its own bug"),
    ("Upper", lambda t: t, "must be a lower-case ASCII identifier"),
    ("rowsöftmax", lambda t: t, "must be a lower-case ASCII identifier"),
])
def test_a_family_that_breaks_the_contract_is_one_line(tmp_path, name, change, message):
    folder = family_folder(tmp_path, name, change)
    with pytest.raises(plugins.FamilyError, match=message) as caught:
        autogemm.load_family(folder)
    assert "\n" not in str(caught.value) and name not in REGISTRY or name == "gemm"


@pytest.mark.parametrize("function, change", [
    ("template_args", lambda t: t.replace("def template_args(c, p: Problem) -> dict:\n",
                                          "def template_args(c, p: Problem) -> dict:\n    {}['x']\n")),
    ("geometry", lambda t: t.replace("def geometry(c, p: Problem) -> Geometry:\n",
                                     "def geometry(c, p: Problem) -> Geometry:\n    1 / 0\n")),
    ("default_candidates", lambda t: t.replace("    yield dict(lanes=32, vec=1, rows=1, cached=False)",
                                               "    raise KeyError('seeds')")),
    ("constraint", lambda t: t.replace("lambda c, p, d: c.lanes * c.rows <= d.max_threads_per_block",
                                       "lambda c, p, d: c.nothing")),
])
def test_a_plugins_own_bug_is_one_line_naming_its_function(tmp_path, function, change):
    """What a plugin's code raises (not autogemm's) comes out as one FamilyError line."""
    fam = family(autogemm.load_family(family_folder(tmp_path, f"buggy_{function}", change)))
    problem = fam.Problem(8, 64)
    with pytest.raises(plugins.FamilyError, match=f"family buggy_{function}: its {function}.* raised") as caught:
        fam.instance(fam.default(problem, H100), problem)
    assert "\n" not in str(caught.value)


def test_key_of_is_checked_against_the_keys_declaration(tmp_path):
    folder = family_folder(tmp_path, "bad_keys", lambda t: t.replace("return (p.rows, p.cols), NO_OP",
                                                                      "return (p.rows, -p.cols), NO_OP"))
    fam = family(autogemm.load_family(folder))
    with pytest.raises(plugins.FamilyError, match=r"its key_of gave sizes \(8, -64\): 2 positive 32-bit ints"):
        fam.module.key_of(fam.Problem(8, 64))


def test_a_family_without_a_measure_or_init_is_refused(tmp_path):
    folder = family_folder(tmp_path, "no_measure")
    (folder / "measure.py").unlink()
    with pytest.raises(plugins.FamilyError, match="no measure.py"):
        autogemm.load_family(folder)
    with pytest.raises(plugins.FamilyError, match="not a family folder"):
        autogemm.load_family(tmp_path)
    with pytest.raises(plugins.FamilyError, match="no such folder"):
        autogemm.load_family(tmp_path / "nowhere")


def test_a_template_that_does_not_render_fails_its_configs_in_one_line(tmp_path):
    folder = family_folder(tmp_path, "unrendered")
    (folder / "x.cu.j2").write_text("{{ name }} {{ no_such_value }}\n")
    fam = family(autogemm.load_family(folder))
    problem = fam.Problem(8, 64)
    with pytest.raises(AutogemmError, match=r"unrendered/x.cu.j2 does not render .*no_such_value"):
        fam.instance(fam.default(problem, H100), problem)


def test_a_space_with_no_config_for_a_problem_says_so(tmp_path):
    folder = family_folder(tmp_path, "too_narrow", lambda t: t.replace("lambda c, p, d: c.lanes * c.rows <= d.",
                                                                         "lambda c, p, d: c.lanes * c.rows > 4 * d."))
    fam = family(autogemm.load_family(folder))
    with pytest.raises(AutogemmError, match="no default config fits"):
        fam.default(fam.Problem(8, 64), H100)


def test_installed_entry_points_load_and_a_broken_one_is_kept_aside(tmp_path, monkeypatch):
    """A distribution on sys.path whose entry points name a good family and a broken one: the good
    one registers, the broken one is left out with its reason, which `require` says."""
    site = tmp_path / "site"
    shutil.copytree(family_folder(tmp_path, "installed_softmax"), site / "installed_softmax")
    (site / "broken_family").mkdir()
    (site / "broken_family" / "__init__.py").write_text("import no_such_module_anywhere\n")
    info = site / "demo_plugins-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-plugins\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(textwrap.dedent("""\
        [autogemm.families]
        installed_softmax = installed_softmax
        broken_family = broken_family
        """))
    monkeypatch.syspath_prepend(str(site))
    plugins.load_installed()
    assert "installed_softmax" in REGISTRY and plugins.folder_of("installed_softmax") == site / "installed_softmax"
    assert "broken_family" not in REGISTRY
    assert "ModuleNotFoundError: No module named 'no_such_module_anywhere'" in plugins.broken["broken_family"]
    with pytest.raises(plugins.FamilyError, match="family broken_family: importing broken_family failed"):
        plugins.require("broken_family")
    with pytest.raises(plugins.FamilyError, match="unknown kernel family 'nothing'.*--family PATH"):
        plugins.require("nothing")
    sys.modules.pop("installed_softmax", None)


def test_launch_refuses_a_family_that_does_not_say_how_and_arrays_it_cannot_take():
    with pytest.raises(autogemm.BadArguments, match="family colsum declares no problem_for"):
        autogemm.launch("colsum", g=None)
    autogemm.load_family(EXAMPLE)
    import numpy as np

    with pytest.raises(autogemm.BadArguments, match=r"autogemm.launch\(rowsoftmax\): x must be a C-contiguous"):
        autogemm.launch("rowsoftmax", x=np.ones(3), out=np.ones(3))
    with pytest.raises(autogemm.BadArguments, match="unexpected keyword argument 'y'"):
        autogemm.launch("rowsoftmax", y=1)


@pytest.mark.parametrize("argv, message", [
    (["--family", str(EXAMPLE), "--problem", "rows=4096"], "not a problem of rowsoftmax: .*missing 1 required"),
    (["--family", str(EXAMPLE), "--problem", "rows=4096,cols=-3"], "cols=-3 must be an integer"),
    (["--family", str(EXAMPLE), "--problem", "4096x1024"], "give KEY=VALUE"),
    (["--family", str(EXAMPLE), "--problem", "rows=--64,cols=8"], "not a problem of rowsoftmax: ValueError"),
    (["--family", str(EXAMPLE), "--problem", "rows=" + "9" * 5000 + ",cols=8"], "not a problem of rowsoftmax"),
    (["--family", str(EXAMPLE), "--problem", "rows=8,cols=8,dtype=float64"], "dtype is --dtype's to give"),
    (["--family", str(EXAMPLE), "--problem", "rows=8,rows=9,cols=8"], "rows is given twice"),
    (["--family", str(EXAMPLE), "--problem", "rows=8,cols=8", "--gpus", "all"], "loads installed families only"),
    (["--family", "nothing_here", "--problem", "rows=1"], "unknown kernel family 'nothing_here'"),
    (["--family", "linear_xent", "--problem", "rows=8,classes=10,inputs=16,loss=no"], "loss is true or false, not 'no'"),
    (["--problem", "rows=1"], "--family and --problem go together"),
    (["--family", str(EXAMPLE), "--problem", "rows=1,cols=8", "--shapes", "nn"], "takes no --shapes"),
])
def test_tune_familys_flags_are_checked_in_one_line(argv, message, capsys):
    from autogemm.cli import main

    assert main(["tune", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and pytest.importorskip("re").search(message, err), err


def test_records_read_before_their_family_was_loaded_are_read_again_after(tmp_path):
    """A tuned file read while a family was not registered kept its records aside; once the family
    is loaded, lookup reads the file again and they serve their shapes."""
    from autogemm.store import lookup
    from autogemm.store.keys import make_key
    from fake_tuned import record, write_store

    folder = family_folder(tmp_path, "late_softmax")
    path = write_store(tmp_path, [record()])
    doc = json.loads(path.read_text())
    doc["records"].append(dict(doc["records"][0], family="late_softmax", shape="64x1024", op="-",
                               config={"lanes": 64, "vec": 4, "rows": 2, "cached": True}))
    path.write_text(json.dumps(doc))
    assert lookup._store(path, H100).foreign and "late_softmax" not in REGISTRY
    autogemm.load_family(folder)
    loaded = lookup._store(path, H100)
    assert not loaded.foreign and make_key("late_softmax", (64, 1024), "-", "float32") in loaded.records


def test_bench_family_times_the_default_and_the_chosen_config_of_each_problem(monkeypatch, tmp_path, capsys):
    """On a fake GPU (a measure with a time model): one row a variant, the JSON of each."""
    import autogemm.runtime.device
    import autogemm.tuning.measures
    from autogemm import cli
    from autogemm.store import locations
    from fake_tuned import SOFTWARE, FakeMeasure

    monkeypatch.setattr(autogemm.runtime.device, "this_device", lambda: H100)
    monkeypatch.setattr(autogemm.runtime.device, "software", lambda: SOFTWARE)
    monkeypatch.setattr(locations, "shipped_dir", lambda: tmp_path / "shipped")
    monkeypatch.setenv("AUTOGEMM_TUNED", str(tmp_path / "tuned"))
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr(autogemm.tuning.measures, "measure_for",
                        lambda key, device, seed=0: FakeMeasure(model=lambda cfg: 20.0 - cfg.vec))
    out = tmp_path / "bench.json"
    assert cli.main(["bench", "--family", str(EXAMPLE), "--problem", "rows=64,cols=128", "--problem",
                     "rows=8,cols=4096", "--config", '{"lanes": 64, "vec": 2, "rows": 2, "cached": false}',
                     "--json", str(out)]) == 0
    table = capsys.readouterr().out
    assert "rowsoftmax_f32_l32_v4_r4_c1" in table and "config1" in table and "1.00x" in table
    results = json.loads(out.read_text())["results"]
    assert [r["variant"] for r in results] == ["default", "default", "config1"] * 2
    assert cli.main(["bench", "--family", str(EXAMPLE), "--problem", "rows=64,cols=128", "--config",
                     '{"lanes": 3}']) == 2
    assert "--config 1: missing rowsoftmax parameter(s) vec, rows, cached" in capsys.readouterr().err


def test_a_problems_bool_fields_read_true_and_false():
    """`loss=false` once reached linear_xent's Problem as the text 'false', which is truthy: the
    launch with the loss was tuned in place of the logits alone."""
    from autogemm.cli import _family_targets

    logits, = _family_targets("linear_xent", ["rows=800,classes=10,inputs=1000,loss=false"], "float32")
    with_loss, = _family_targets("linear_xent", ["rows=800,classes=10,inputs=1000,loss=1"], "float32")
    transposed, = _family_targets("linear_backward", ["rows=8,classes=10,inputs=16,grad_in_transposed=TRUE"], "float32")
    assert (logits.key("float32").op, with_loss.key("float32").op, transposed.key("float32").op) == ("logits", "-", "sigmoid_t")
