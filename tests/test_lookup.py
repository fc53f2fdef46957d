"""autogemm.store.lookup: exact record, nearest usable record, default; stale and corrupted files."""
import dataclasses
import logging
import os
from pathlib import Path

import pytest

from autogemm.errors import StoreError
from autogemm.ops.kernels import kernel
from autogemm.runtime.device import H100
from autogemm.runtime.family import Config, family
from autogemm.store import locations, lookup
from autogemm.store.keys import distance, key_of, make_key, problem_of, serving_keys
from autogemm.store.records import file_for
from fake_tuned import GEMM, edit, record, write_store
from kernels.gemm.call import Problem


@pytest.fixture
def tuned(tmp_path, monkeypatch):
    """An empty user store that lookup reads first ($AUTOGEMM_TUNED), no shipped results (an empty
    folder stands in for them), and fresh caches."""
    monkeypatch.setenv(locations.TUNED_ENV, str(tmp_path / "user"))
    monkeypatch.setattr(locations, "shipped_dir", lambda: tmp_path / "shipped")
    lookup.reload()
    yield tmp_path / "user"
    lookup.reload()


@pytest.fixture
def shipped(tuned):
    """The folder of the (stand-in) shipped results."""
    return locations.shipped_dir()


def gemm_problem(m, n, k, op="nt", **kw):
    return Problem.contiguous(m, n, k, "float32", op[0] == "t", op[1] == "t", **kw)


def test_the_folders_lookup_reads_and_tune_writes(monkeypatch, tmp_path):
    """Lookup reads where tune writes, then the shipped results. In a checkout tune writes the
    repository's tuned/, which is also what ships: one folder. $AUTOGEMM_TUNED is read first."""
    monkeypatch.delenv(locations.TUNED_ENV, raising=False)
    repo = Path(__file__).resolve().parents[1]
    assert locations.checkout() == repo
    assert locations.shipped_dir().resolve() == repo / "tuned" and locations.tune_dir() == repo / "tuned"
    assert locations.lookup_dirs() == [("shipped", locations.shipped_dir())]
    monkeypatch.setenv(locations.TUNED_ENV, str(tmp_path / "mine"))
    assert locations.lookup_dirs() == [("user", tmp_path / "mine"), ("shipped", locations.shipped_dir())]
    assert locations.tune_dir() == tmp_path / "mine"
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    monkeypatch.setenv(locations.TUNED_ENV, str(loop))         # a symlink loop is only itself
    assert [role for role, _ in locations.lookup_dirs()] == ["user", "shipped"]


def test_an_installed_autogemm_tunes_into_the_user_store(monkeypatch, tmp_path):
    monkeypatch.delenv(locations.TUNED_ENV, raising=False)
    monkeypatch.setenv(locations.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(locations, "PACKAGE", tmp_path / "site-packages" / "autogemm")
    assert locations.checkout() is None and locations.tune_dir() == tmp_path / "cache" / "tuned"
    assert locations.lookup_dirs() == [("user", tmp_path / "cache" / "tuned"),
                                       ("shipped", tmp_path / "site-packages" / "autogemm" / "tuned")]


def test_the_user_store_comes_before_the_shipped_results(tuned, shipped):
    """Per key: a current record beats a stale one; between two alike, the user's wins."""
    write_store(shipped, [record(config=dict(GEMM, split_k=2)), record((400, 1000, 784), config=dict(GEMM, split_k=4)),
                          record((200, 1000, 784), config=dict(GEMM, split_k=6))])
    write_store(tuned, [record(config=dict(GEMM, split_k=3)),
                        record((200, 1000, 784), config=dict(GEMM, split_k=8), template_hash="0" * 16)])
    mine = lookup.choose("gemm", gemm_problem(800, 1000, 784), H100)
    theirs = lookup.choose("gemm", gemm_problem(400, 1000, 784), H100)
    stale_mine = lookup.choose("gemm", gemm_problem(200, 1000, 784), H100)
    assert (mine.source, mine.config["split_k"]) == ("exact", 3)
    assert (theirs.source, theirs.config["split_k"]) == ("exact", 4)
    assert (stale_mine.source, stale_mine.config["split_k"]) == ("exact", 6)    # the shipped one is current
    index = lookup.index_for(H100)
    assert index.origin[mine.record] == file_for(tuned, H100) and index.origin[theirs.record] == file_for(shipped, H100)


def test_no_file_gives_the_default(tuned):
    problem = gemm_problem(800, 1000, 784)
    choice = lookup.choose("gemm", problem, H100)
    assert choice.source == "default" and choice.config == family("gemm").default(problem, H100)


def test_exact_record(tuned):
    cfg = dict(GEMM, split_k=3)
    write_store(tuned, [record(config=cfg), record((400, 1000, 784))])
    choice = lookup.choose("gemm", gemm_problem(800, 1000, 784), H100)
    assert choice.source == "exact" and dict(choice.config) == cfg


def test_untuned_reads_no_tuned_file_until_it_ends(tuned):
    """`autogemm bench --untuned`: inside lookup.untuned() every call gets its family's default, as a
    shape no one tuned does; after it, the records serve again."""
    cfg = dict(GEMM, split_k=3)
    write_store(tuned, [record(config=cfg)])
    problem = gemm_problem(800, 1000, 784)
    with lookup.untuned():
        assert lookup.choose("gemm", problem, H100).source == "default"
        assert lookup.choose("gemm", gemm_problem(810, 1000, 784), H100).source == "default"   # no nearest either
    assert dict(lookup.choose("gemm", problem, H100).config) == cfg


def test_exact_record_serves_every_epilogue_of_its_shape(tuned):
    cfg = dict(GEMM, split_k=3)
    write_store(tuned, [record(config=cfg)])
    choice = lookup.choose("gemm", gemm_problem(800, 1000, 784, epilogue="bias_sigmoid", use_c=True), H100)
    assert choice.source == "exact" and dict(choice.config) == cfg


def test_nearest_shape_of_the_same_family_op_and_dtype(tuned):
    near, far = dict(GEMM, split_k=2), dict(GEMM, split_k=4)
    write_store(tuned, [record((400, 1000, 784), config=near), record((100, 1000, 784), config=far),
                        record((790, 1000, 784), "tn", config=dict(GEMM, split_k=8)),      # other op
                        record((790, 1000, 784), "nt", "float64", config=dict(GEMM, vec=2))])  # other dtype
    choice = lookup.choose("gemm", gemm_problem(800, 1000, 784), H100)
    assert choice.source == "nearest" and dict(choice.config) == near
    assert choice.record.key.shape == "400x1000x784"
    assert choice.distance == pytest.approx(distance(make_key("gemm", (800, 1000, 784), "nt", "float32"),
                                                     choice.record.key))


def test_nearest_skips_a_record_whose_config_cannot_run_the_new_shape(tuned):
    """The nearest record splits K 16 ways: too many slices for K = 64; the next one is used."""
    split16 = dict(GEMM, split_k=16)
    fits = dict(GEMM, split_k=2)
    write_store(tuned, [record((64, 64, 128), config=split16), record((64, 64, 256), config=fits)])
    problem = gemm_problem(64, 64, 64)
    assert family("gemm").violations(family("gemm").config(split16), problem, H100)
    choice = lookup.choose("gemm", problem, H100)
    assert choice.source == "nearest" and dict(choice.config) == fits


def test_nearest_ignores_shapes_more_than_4x_away(tuned):
    """4096^3 on a config tuned for 1000x784x800 ran 2x slower than the default on the H100."""
    write_store(tuned, [record((1000, 784, 800), config=dict(GEMM, split_k=2))])
    assert lookup.choose("gemm", gemm_problem(4096, 4096, 4096), H100).source == "default"
    assert lookup.choose("gemm", gemm_problem(250, 1000, 784), H100).source == "nearest"


def test_an_exact_record_that_cannot_run_this_call_falls_back(tuned):
    """Tuned on aligned operands (vec 4); this call's A has odd leading dimension (vec 1)."""
    write_store(tuned, [record(config=GEMM)])
    problem = Problem(800, 1000, 784, "float32", False, True, vec_a=1, vec_b=4, vec_out=4)
    choice = lookup.choose("gemm", problem, H100)
    assert choice.source == "default" and not family("gemm").violations(choice.config, problem, H100)


def test_a_stale_record_serves_its_own_shape_only(tuned, caplog):
    """Tuned on older templates: its config still beats another shape's for its own shape (and a
    current record beats it); for other shapes the nearest current record serves."""
    write_store(tuned, [record(config=dict(GEMM, split_k=3), template_hash="0" * 16),
                        record((400, 1000, 784), config=dict(GEMM, split_k=2))])
    with caplog.at_level(logging.INFO, logger="autogemm"):
        choice = lookup.choose("gemm", gemm_problem(800, 1000, 784), H100)
        nearest = lookup.choose("gemm", gemm_problem(790, 1000, 784), H100)
    assert choice.source == "stale" and choice.config["split_k"] == 3
    assert nearest.source == "nearest" and nearest.record.key.shape == "400x1000x784"
    assert "1 stale record" in caplog.text and "autogemm tune --stale" in caplog.text
    write_store(tuned, [record(config=dict(GEMM, split_k=4))])               # re-tuned: the current one wins
    lookup.reload()
    assert lookup.choose("gemm", gemm_problem(800, 1000, 784), H100).source == "exact"


def test_a_stale_config_outside_todays_space_or_unable_to_run_is_passed_over(tuned):
    write_store(tuned, [record(config=dict(GEMM, bm=40), template_hash="0" * 16),
                        record((800, 1000, 64), config=dict(GEMM, split_k=16), template_hash="0" * 16),
                        record((400, 1000, 784), config=dict(GEMM, split_k=2))])
    assert lookup.choose("gemm", gemm_problem(800, 1000, 784), H100).source == "nearest"
    assert lookup.choose("gemm", gemm_problem(800, 1000, 64), H100).source == "default"


H200 = dataclasses.replace(H100, name="NVIDIA H200")     # one chip with other memory: a twin of the H100
H100_PCIE = dataclasses.replace(H100, name="NVIDIA H100 PCIe", sm_count=114)


def test_a_call_no_record_of_this_gpu_serves_takes_its_twins(tuned, shipped, caplog):
    """A twin (same compute capability and SM count) shipped with autogemm serves what this GPU's
    own records do not, exact or nearest, before the default; any own record comes first."""
    write_store(shipped, [record(config=dict(GEMM, split_k=3)), record((400, 1000, 784), config=dict(GEMM, split_k=2))],
                device=H200)
    write_store(tuned, [record((200, 100, 784), config=dict(GEMM, split_k=6))])
    with caplog.at_level(logging.INFO, logger="autogemm"):
        twins = lookup.choose("gemm", gemm_problem(800, 1000, 784), H100)
        nearest = lookup.choose("gemm", gemm_problem(410, 1000, 784), H100)
    own = lookup.choose("gemm", gemm_problem(210, 100, 784), H100)
    assert (twins.source, twins.twin, twins.config["split_k"]) == ("exact", "NVIDIA H200", 3)
    assert (nearest.source, nearest.twin, nearest.record.key.shape) == ("nearest", "NVIDIA H200", "400x1000x784")
    assert (own.source, own.twin, own.config["split_k"]) == ("nearest", "", 6)
    assert "tuned on NVIDIA H200 (this GPU's twin" in caplog.text and str(file_for(shipped, H200)) in caplog.text
    mine = lookup.choose("gemm", gemm_problem(400, 1000, 784), H200)        # the H200 reads its own file
    assert (mine.source, mine.twin) == ("exact", "")


def test_twins_are_shipped_current_results_of_the_same_chip(tuned, shipped):
    """Not a GPU of another SM count, not a twin's stale record, not another GPU's file in the user's
    store (named for that GPU, it is not read for this one), and none inside untuned()."""
    write_store(shipped, [record(config=dict(GEMM, split_k=3)),
                          record((400, 1000, 784), config=dict(GEMM, split_k=2), template_hash="0" * 16)], device=H200)
    write_store(tuned, [record((200, 1000, 784), config=dict(GEMM, split_k=4))], device=H200)
    assert lookup.choose("gemm", gemm_problem(800, 1000, 784), H100_PCIE).source == "default"
    assert lookup.choose("gemm", gemm_problem(400, 1000, 784), H100).config["split_k"] == 3   # nearest, not stale
    assert lookup.choose("gemm", gemm_problem(200, 1000, 784), H100).record.key.shape == "800x1000x784"
    with lookup.untuned():
        assert lookup.choose("gemm", gemm_problem(800, 1000, 784), H100).source == "default"


def test_a_file_of_another_gpu_that_does_not_load_is_passed_over_with_a_warning(tuned, shipped, caplog):
    write_store(shipped, [record(config=dict(GEMM, split_k=3))], device=H200)
    (shipped / "nvidia-a100.json").write_text("{")
    with caplog.at_level(logging.WARNING, logger="autogemm"):
        choice = lookup.choose("gemm", gemm_problem(800, 1000, 784), H100)
    assert (choice.source, choice.twin) == ("exact", "NVIDIA H200")
    assert "nvidia-a100.json" in caplog.text and "passed over" in caplog.text
    path = write_store(shipped, [record()])              # this GPU's own file stays a hard error
    path.write_text("{")
    with pytest.raises(StoreError, match="nvidia-h100-80gb-hbm3.json"):
        lookup.choose("gemm", gemm_problem(400, 1000, 784), H100)


def test_a_gpus_own_index_and_its_index_as_a_twin_are_apart(tuned, shipped, caplog):
    """One file read both ways (the H200's: its own, with its stale records; the H100's twin's,
    without them): neither gets the other's."""
    write_store(shipped, [record(config=dict(GEMM, split_k=3), template_hash="0" * 16),
                          record((400, 1000, 784), config=dict(GEMM, split_k=2))], device=H200)
    assert lookup.has_records(H200)
    assert lookup.choose("gemm", gemm_problem(800, 1000, 784), H100).record.key.shape == "400x1000x784"
    lookup.reload()
    assert lookup.choose("gemm", gemm_problem(800, 1000, 784), H100).record.key.shape == "400x1000x784"
    with caplog.at_level(logging.WARNING, logger="autogemm"):
        assert lookup.choose("gemm", gemm_problem(800, 1000, 784), H200).source == "stale"
    assert "1 stale record" in caplog.text


def test_another_gpus_file_that_does_not_load_is_read_once_while_it_stays_as_it_is(tuned, shipped, monkeypatch):
    bad = shipped / "nvidia-a100.json"
    write_store(shipped, [record()], device=H200)
    bad.write_text("{")
    reads = []
    real_load = lookup.load
    monkeypatch.setattr(lookup, "load", lambda path: (reads.append(Path(path).name), real_load(path))[1])
    for m in (100, 200, 300):
        lookup.choose("gemm", gemm_problem(m, 1000, 784), H100)
    assert reads.count("nvidia-a100.json") == 1
    bad.write_text("{ }")
    lookup.choose("gemm", gemm_problem(400, 1000, 784), H100)
    assert reads.count("nvidia-a100.json") == 2


def test_the_cost_models_times_come_from_a_twin_where_this_gpu_has_no_file(tuned, shipped, monkeypatch):
    """nn's trainer names its own GPU: a name without a file of its own has twins where it is this
    GPU's (no GPU here: none)."""
    write_store(shipped, [record(median_us=42.0)], device=H200)
    assert lookup.has_records(H100) and lookup.measured("gemm", (800, 1000, 784), "nt", "float32", H100).median_us == 42.0
    assert not lookup.has_records(H100.name) and not lookup.has_records(H100_PCIE)
    monkeypatch.setattr(lookup, "this_device", lambda: H100)
    assert lookup.has_records(H100.name) and not lookup.has_records(H100_PCIE.name)
    assert lookup.measured("gemm", (800, 1000, 784), "nt", "float32", H100.name).median_us == 42.0


def test_between_families_this_gpus_record_ranks_before_a_twins_of_the_same_kind():
    own = lookup.Choice(Config(GEMM), "exact", record(median_us=50.0))
    twin = lookup.Choice(Config(GEMM), "exact", record(median_us=10.0), twin="NVIDIA H200")
    near = lookup.Choice(Config(GEMM), "nearest", record(median_us=1.0), distance=0.1)
    assert sorted([near, twin, own], key=lambda c: c.rank) == [own, twin, near]


def test_a_twins_config_this_gpu_cannot_run_is_passed_over(tuned, shipped):
    small = dataclasses.replace(H100, name="NVIDIA H100 48 KB", smem_per_block=48 * 1024)
    write_store(shipped, [record(config=dict(GEMM, bm=128, bn=128, bk=32, stages=4))], device=H100)
    assert lookup.choose("gemm", gemm_problem(800, 1000, 784), small).source == "default"
    write_store(shipped, [record(config=dict(GEMM, bm=128, bn=128, bk=32, stages=4)),
                          record((400, 1000, 784), config=dict(GEMM, split_k=2))], device=H100)
    lookup.reload()
    choice = lookup.choose("gemm", gemm_problem(800, 1000, 784), small)
    assert (choice.source, choice.twin, choice.record.key.shape) == ("nearest", H100.name, "400x1000x784")


def test_elementwise_families(tuned):
    write_store(tuned, [
        record((800, 10), "-", fam="softmax_xent", config=dict(block=64, tpr=8), cublas_us=None),
        record((1, 1000), "sgd", fam="elementwise", config=dict(block=64, ept=1, vec=2), cublas_us=None),
        record((800, 1000), "-", fam="colsum", config=dict(tx=16, ty=32), cublas_us=None)])
    sx = problem_of(make_key("softmax_xent", (400, 10), "-", "float32"))
    assert dict(lookup.choose("softmax_xent", sx, H100).config) == dict(block=64, tpr=8)
    sgd = problem_of(make_key("elementwise", (1, 1000), "sgd", "float32"))
    assert lookup.choose("elementwise", sgd, H100).source == "exact"
    bias = problem_of(make_key("elementwise", (1, 1000), "bias", "float32"))
    assert lookup.choose("elementwise", bias, H100).source == "default"      # another op
    assert lookup.choose("colsum", problem_of(make_key("colsum", (800, 1000), "-", "float32")), H100).source == "exact"


def test_the_choice_is_logged_once_per_shape(tuned, caplog):
    write_store(tuned, [record()])
    with caplog.at_level(logging.INFO, logger="autogemm"):
        for epilogue in (None, "bias", None):
            lookup.choose("gemm", gemm_problem(800, 1000, 784, epilogue=epilogue), H100)
        lookup.choose("gemm", gemm_problem(800, 1000, 400), H100)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3
    assert "gemm 800x1000x784:nt float32: tuned gemm_f32_nt_bm64" in lines[0]
    assert "gemm 800x1000x784:nt+bias float32: tuned as nt gemm_f32_nt_bm64" in lines[1]
    assert "800x1000x400:nt float32: tuned for 800x1000x784 (nearest" in lines[2]


def test_kernel_uses_the_store_and_caches_the_choice(tuned):
    write_store(tuned, [record(config=dict(GEMM, split_k=3))])
    problem = gemm_problem(800, 1000, 784)
    inst = kernel("gemm", problem, None, H100)
    assert inst.config["split_k"] == 3 and "_sk3_" in inst.name
    assert kernel("gemm", problem, None, H100) is inst                  # one dict lookup
    assert kernel("gemm", problem, dict(GEMM), H100).config["split_k"] == 1   # config= wins


def test_a_changed_file_is_read_again_for_new_shapes(tuned):
    path = write_store(tuned, [record(config=dict(GEMM, split_k=3))])
    assert lookup.choose("gemm", gemm_problem(800, 1000, 784), H100).config["split_k"] == 3
    write_store(tuned, [record(config=dict(GEMM, split_k=6), median_us=1.0)])
    os.utime(path, ns=(1, 1))          # a different mtime, whatever the clock's resolution
    assert lookup.choose("gemm", gemm_problem(800, 1000, 784), H100).config["split_k"] == 6


@pytest.mark.parametrize("change, expected", [
    (lambda d: d["records"][0]["config"].update(bm="128; } evil"), "record 0 (gemm 800x1000x784:nt float32)"),
    (lambda d: d["meta"].update(gpu="NVIDIA H200"), "holds results for NVIDIA H200, not this GPU"),
])
def test_a_bad_store_raises_from_gemm_planning_not_a_silent_default(tuned, change, expected):
    path = write_store(tuned, [record()])
    edit(path, change)
    with pytest.raises(StoreError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        kernel("gemm", gemm_problem(800, 1000, 784), None, H100)
    path.write_text("{")
    lookup.reload()
    with pytest.raises(StoreError, match="not valid JSON"):
        lookup.choose("gemm", gemm_problem(800, 1000, 784), H100)


def test_keys_of_problems():
    assert key_of("gemm", gemm_problem(800, 10, 1000, "tn")) == ("gemm", "800x10x1000", "tn", "float32")
    bias = gemm_problem(800, 10, 1000, "tn", epilogue="bias")
    assert key_of("gemm", bias) == ("gemm", "800x10x1000", "tn+bias", "float32") and problem_of(key_of("gemm", bias)) == bias
    with pytest.raises(ValueError, match="op 'tn\\+softmax' is not one of nn, nt"):
        make_key("gemm", (800, 10, 1000), "tn+softmax", "float32")
    sgd = problem_of(make_key("elementwise", (1, 10), "sgd", "float64"))
    assert key_of("elementwise", sgd) == ("elementwise", "1x10", "sgd", "float64")
    assert str(make_key("colsum", (800, 10), "-", "float32")) == "colsum 800x10 float32"
    assert distance(make_key("gemm", (800, 1000, 784), "nt", "float32"),
                    make_key("gemm", (400, 1000, 784), "nt", "float32")) == pytest.approx(0.6931, abs=1e-4)
    with pytest.raises(ValueError, match="gemm needs 3 sizes"):
        make_key("gemm", (800, 0, 1), "nn", "float32")
    assert file_for(locations.tune_dir(), H100).name == "nvidia-h100-80gb-hbm3.json"


def test_the_family_a_call_runs_is_the_best_known_and_follows_a_reloaded_store(monkeypatch):
    """Of a call's two convolution algorithms, the one tuned exactly runs; after lookup.reload the
    choice is made again, even when another kernel was looked up first."""
    from types import SimpleNamespace

    from autogemm.ops.kernels import implementation
    from kernels import conv2d

    problem = conv2d.Problem(1000, 1, 28, 28, 6, 3)
    known = {"conv2d_direct": "default", "conv2d": "exact"}
    monkeypatch.setattr(lookup, "choose", lambda name, p, device: lookup.Choice(
        None, known[name], SimpleNamespace(median_us=1.0) if known[name] == "exact" else None))
    lookup.reload()
    assert implementation("conv2d", problem, None, H100) == "conv2d"
    assert implementation("conv2d", problem, "default", H100) == "conv2d_direct"
    known.update(conv2d_direct="exact", conv2d="nearest")
    lookup.reload()
    kernel("conv2d_direct", problem, "default", H100)          # a kernel looked up first after the reload
    assert implementation("conv2d", problem, None, H100) == "conv2d_direct"


def test_a_stale_record_competes_on_time_with_an_exact_one(monkeypatch):
    """A template change must not hand a call to a slower algorithm: a stale record's time counts."""
    from types import SimpleNamespace

    from autogemm.ops.kernels import implementation
    from kernels import conv2d

    problem = conv2d.Problem(1000, 1, 28, 28, 6, 3)
    known = {"conv2d_direct": ("stale", 8.0), "conv2d": ("exact", 25.0)}
    monkeypatch.setattr(lookup, "choose", lambda name, p, device: lookup.Choice(
        None, known[name][0], SimpleNamespace(median_us=known[name][1])))
    lookup.reload()
    assert implementation("conv2d", problem, None, H100) == "conv2d_direct"
    known.update(conv2d_direct=("stale", 30.0))
    lookup.reload()
    assert implementation("conv2d", problem, None, H100) == "conv2d"


def test_a_nearest_record_chooses_between_families_only_against_one_of_the_same_shape(monkeypatch):
    """A nearest record's time is another shape's: it beats another family's default no more than a
    default does (the untuned order decides: on an H100 an untuned layer near LeNet's ran the implicit
    GEMM's nearest config at 147 µs where the direct kernel's default takes 33); between two
    families' nearest records of one shape, the faster there runs."""
    from types import SimpleNamespace

    from autogemm.ops.kernels import implementation
    from kernels import conv2d_wgrad

    problem = conv2d_wgrad.Problem(1000, 1, 28, 28, 6, 5)      # untuned: the direct kernel first
    known = {}
    monkeypatch.setattr(lookup, "choose", lambda name, p, device: lookup.Choice(
        None, known[name][0], SimpleNamespace(median_us=known[name][2], key=SimpleNamespace(shape=known[name][1]))
        if known[name][0] != "default" else None, 0.3))
    cases = [({"conv2d_wgrad_direct": ("default", None, 0), "conv2d_wgrad": ("nearest", "1000x1x28x28x6x3", 9.0)},
              "conv2d_wgrad_direct"),
             ({"conv2d_wgrad_direct": ("nearest", "1000x1x28x28x6x3", 30.0),
               "conv2d_wgrad": ("nearest", "1000x1x28x28x6x3", 9.0)}, "conv2d_wgrad"),
             ({"conv2d_wgrad_direct": ("nearest", "1000x1x28x28x6x3", 30.0),
               "conv2d_wgrad": ("nearest", "1000x6x13x13x10x3", 9.0)}, "conv2d_wgrad_direct"),
             ({"conv2d_wgrad_direct": ("nearest", "1000x1x28x28x6x3", 30.0),
               "conv2d_wgrad": ("exact", "1000x1x28x28x6x5", 40.0)}, "conv2d_wgrad")]
    for choices, want in cases:
        known.clear()
        known.update(choices)
        lookup.reload()
        assert implementation("conv2d_wgrad", problem, None, H100) == want, choices


# Issue 40's public shapes at fp32, untuned on an H100: the family that runs each. gemm_wgmma's
# 3xTF32 where the output has 2^18 elements or more and its rows are 16-byte aligned.
FIRST_CALLS_FP32 = {"1024x1024x1024:nn": "gemm_wgmma", "2048x2048x2048:nt": "gemm_wgmma",
                    "4096x4096x4096:nn": "gemm_wgmma", "512x4096x1024:tn": "gemm_wgmma",
                    "4096x512x1024:nt": "gemm_wgmma", "8192x8192x256:nn": "gemm_wgmma",
                    "1000x1000x1000:tt": "gemm_wgmma", "96x3072x768:nt": "gemm_wgmma", "3072x96x768:tn": "gemm_wgmma",
                    "256x256x8192:tn": "gemm",                                # a small output: the tiled FMAs
                    "777x555x333:nt": "gemm", "1023x1025x1027:nn": "gemm"}    # rows gemm_wgmma cannot read


def test_an_untuned_gemm_runs_on_hopper_tensor_cores(tuned):
    """With no record for either family, a tf32 or bf16 call runs gemm_wgmma at its precision where
    it can (FP32 FMAs took 1.0x-8.5x cuBLAS TF32's time, benchmarks/issue39-h100/first-calls), an
    fp32 call its 3xTF32 where the output is large; the rest, and rows wgmma cannot copy (not
    16-byte aligned), the tiled family."""
    from autogemm.ops.kernels import implementation

    lookup.reload()
    for precision in ("tf32", "bf16"):
        problem = gemm_problem(1024, 1024, 1024, "nn", precision=precision)
        assert implementation("gemm", problem, None, H100) == "gemm_wgmma"
        assert family("gemm_wgmma").default(problem, H100).math == "tf32"
        assert implementation("gemm", problem, "default", H100) == "gemm"
        assert implementation("gemm", gemm_problem(777, 555, 333, "nt", precision=precision), None, H100) == "gemm"
    for shape, want in FIRST_CALLS_FP32.items():
        sizes, op = shape.split(":")
        problem = gemm_problem(*map(int, sizes.split("x")), op)
        assert implementation("gemm", problem, None, H100) == want, shape
        assert family(want).default(problem, H100).math in (("3xtf32",) if want == "gemm_wgmma" else ("3xtf32", "fma"))


def test_an_untuned_wide_convolution_runs_on_tensor_cores(tuned):
    """With no record of its shape, a float32 convolution of 512 taps and 32 filters or more runs the
    implicit GEMM (its default on tensor cores: 3xTF32, or TF32 at tf32), in every direction; LeNet's
    and the 16-32-channel 3 x 3 layers the direct kernels (benchmarks/issue41-h100)."""
    from autogemm.ops.kernels import implementation
    from kernels import conv2d, conv2d_dgrad, conv2d_wgrad

    lookup.reload()
    directions = (("conv2d", conv2d.Problem), ("conv2d_dgrad", conv2d_dgrad.Problem), ("conv2d_wgrad", conv2d_wgrad.Problem))
    for sizes, wide in (((1000, 32, 12, 12, 64, 5), True), ((1000, 64, 13, 13, 128, 3), True),
                        ((1000, 32, 10, 10, 32, 3), False), ((1000, 16, 26, 26, 16, 3), False),
                        ((1000, 6, 13, 13, 10, 3), False)):
        for precision, math in (("fp32", "3xtf32"), ("tf32", "tf32")):
            for call, problem_class in directions:
                problem = problem_class(*sizes, "float32", precision=precision)
                chosen = implementation(call, problem, None, H100)
                assert chosen == (call if wide else f"{call}_direct"), (call, sizes)
                if wide:
                    assert family(chosen).default(problem, H100).math == math
    assert implementation("conv2d", conv2d.Problem(1000, 32, 12, 12, 64, 5, "float64"), None, H100) == "conv2d_direct"
    # 12 channels of 7 x 7: forward on tensor cores; backward data, whose N is the channels, too narrow for them
    assert implementation("conv2d", conv2d.Problem(1000, 12, 20, 20, 64, 7), None, H100) == "conv2d"
    assert implementation("conv2d_dgrad", conv2d_dgrad.Problem(1000, 12, 20, 20, 64, 7), None, H100) == "conv2d_dgrad_direct"
    turing = dataclasses.replace(H100, name="Turing", compute_capability="7.5")      # no TF32 MMAs: FMA seeds
    assert implementation("conv2d", conv2d.Problem(1000, 32, 12, 12, 64, 5), None, turing) == "conv2d_direct"


# How gemm_wgmma's untuned default reads each M/N-major float32 operand of the public shapes on an
# H100 (kernels/gemm_wgmma/seeds.py): (pretranspose, reg_a, swap) at tf32 and at fp32. An M-major
# op(A) goes into registers; an N-major op(B) too, the kernel computing D^T (swap), but under TF32 on
# outputs past 2^22 elements, where it is copied K-major first (pretranspose); with both M/N-major,
# the larger operand goes into registers.
OPERAND_PATHS = {"1024x1024x1024:nn": ((0, 1, 1), (0, 1, 1)), "4096x4096x4096:nn": ((1, 0, 0), (0, 1, 1)),
                 "8192x8192x256:nn": ((1, 0, 0), (0, 1, 1)), "512x4096x1024:tn": ((1, 1, 1), (0, 1, 1)),
                 "256x256x8192:tn": ((1, 1, 0), (0, 1, 0)), "3072x96x768:tn": ((1, 1, 0), (0, 1, 0)),
                 "1000x1000x1000:tt": ((0, 1, 0), (0, 1, 0)), "2048x2048x2048:nt": ((0, 0, 0), (0, 0, 0))}


def test_untuned_wgmma_reads_m_and_n_major_operands_as_measured_best():
    for shape, paths in OPERAND_PATHS.items():
        sizes, op = shape.split(":")
        for precision, want in zip(("tf32", "fp32"), paths):
            c = family("gemm_wgmma").default(gemm_problem(*map(int, sizes.split("x")), op, precision=precision), H100)
            assert (c.pretranspose, c.reg_a, c.swap) == want, (shape, precision)


def test_a_record_beats_an_untuned_preference(tuned):
    """A tf32 call served by the tiled family's record (a float32 one of its shape) keeps it: a record's
    rank comes before any untuned preference."""
    from autogemm.ops.kernels import implementation

    write_store(tuned, [record((1024, 1024, 1024), op="nn")])
    lookup.reload()
    assert implementation("gemm", gemm_problem(1024, 1024, 1024, "nn", precision="tf32"), None, H100) == "gemm"


def test_a_tf32_call_runs_a_float32_records_tensor_core_tiles_with_tf32_products(tuned):
    """The tiled family's float32 records serve tf32 and bf16 calls: a 3xTF32 one with TF32 products
    on its tiles (a nearest one too), an FMA one as it is; an fp32 call keeps 3xTF32."""
    tiles = dict(GEMM, copy="async", stages=3, tm=1, tn=2, ty=16, tx=8, bk=32)
    write_store(tuned, [record((1024, 1024, 1024), op="nn", config=dict(tiles, math="3xtf32")),
                        record((2048, 2048, 2048), op="nn", config=dict(GEMM, math="fma"))])
    lookup.reload()
    for precision in ("tf32", "bf16"):
        for sizes, source in (((1024, 1024, 1024), "exact"), ((1100, 1000, 1024), "nearest")):
            served = lookup.choose("gemm", gemm_problem(*sizes, "nn", precision=precision), H100)
            assert (served.source, served.config) == (source, Config(dict(tiles, math="tf32"))), sizes
        assert lookup.choose("gemm", gemm_problem(2048, 2048, 2048, "nn", precision=precision), H100).config.math == "fma"
    assert lookup.choose("gemm", gemm_problem(1024, 1024, 1024, "nn"), H100).config.math == "3xtf32"


# ---- precision tf32 -----------------------------------------------------------------------------
WGMMA = dict(bm=128, bn=128, warpgroups=2, stages=3, inflight=0, split_k=1, producer=0, tma=0, pretranspose=0, cluster_m=1,
             cluster_n=1, persistent=0, reg_a=0, swap=0)


def test_a_tf32_call_takes_tf32_records_then_fp32_ones_and_an_fp32_call_never_a_tf32_one(tuned):
    fp32, tf32 = gemm_problem(800, 1000, 784), gemm_problem(800, 1000, 784, precision="tf32")
    assert key_of("gemm_wgmma", tf32).dtype == "tf32" and problem_of(key_of("gemm_wgmma", tf32)) == tf32
    write_store(tuned, [record(fam="gemm_wgmma", config=dict(WGMMA, math="3xtf32"), median_us=40.0)])
    lookup.reload()
    served = lookup.choose("gemm_wgmma", tf32, H100)      # no tf32 record yet: the FP32-accurate one's tiles
    assert (served.source, served.record.key.dtype, served.config) == ("exact", "float32", Config(dict(WGMMA, math="tf32")))
    write_store(tuned, [record(fam="gemm_wgmma", dtype="tf32", config=dict(WGMMA, math="tf32"), median_us=15.0)])
    lookup.reload()
    assert lookup.choose("gemm_wgmma", tf32, H100).config.math == "tf32"
    assert lookup.choose("gemm_wgmma", fp32, H100).config.math == "3xtf32"
    assert lookup.choose("gemm", tf32, H100).source == "default"      # gemm has no record at all here


def test_a_record_whose_config_runs_only_at_the_lower_precision_serves_that_precision_alone(tuned):
    """A float32 gemm_wgmma record from before 3xTF32 summed stages apart (wgmmas in flight, which
    3xTF32 no longer allows) still serves a tf32 call with its tiles as TF32 runs them; an fp32 call
    gets the default."""
    fp32, tf32 = gemm_problem(800, 1000, 784), gemm_problem(800, 1000, 784, precision="tf32")
    old = dict(WGMMA, math="3xtf32", inflight=1)
    write_store(tuned, [record(fam="gemm_wgmma", config=old, median_us=40.0)])
    lookup.reload()
    served = lookup.choose("gemm_wgmma", tf32, H100)
    assert (served.source, served.config) == ("exact", Config(dict(old, math="tf32")))
    assert lookup.choose("gemm_wgmma", fp32, H100).source == "default"


def test_a_bf16_call_takes_bf16_then_tf32_then_fp32_records_and_no_other_call_a_bf16_one(tuned):
    fp32, tf32, bf16 = (gemm_problem(800, 1000, 784, precision=p) for p in ("fp32", "tf32", "bf16"))
    assert key_of("gemm_wgmma", bf16).dtype == "bf16" and problem_of(key_of("gemm_wgmma", bf16)) == bf16
    write_store(tuned, [record(fam="gemm_wgmma", config=dict(WGMMA, math="3xtf32"), median_us=40.0)])
    lookup.reload()
    assert lookup.choose("gemm_wgmma", bf16, H100).config.math == "tf32"      # the FP32-accurate record's tiles
    assert lookup.choose("gemm_wgmma", bf16, H100).record.key.dtype == "float32"
    write_store(tuned, [record(fam="gemm_wgmma", dtype="tf32", config=dict(WGMMA, math="tf32"), median_us=15.0)])
    lookup.reload()
    assert lookup.choose("gemm_wgmma", bf16, H100).config.math == "tf32"
    write_store(tuned, [record(fam="gemm_wgmma", dtype="bf16", config=dict(WGMMA, math="bf16"), median_us=9.0)])
    lookup.reload()
    assert [lookup.choose("gemm_wgmma", p, H100).config.math for p in (fp32, tf32, bf16)] == ["3xtf32", "tf32", "bf16"]


def test_a_bf16_call_takes_the_fastest_record_of_its_shape_across_the_precisions_that_serve_it(tuned):
    """A bf16 record slower than the tf32 one of its shape (the bf16 path's conversion pass costs
    more than its products save) loses to it; a record of the shape beats a nearest faster one."""
    bf16 = gemm_problem(800, 1000, 784, precision="bf16")
    write_store(tuned, [record(fam="gemm_wgmma", dtype="bf16", config=dict(WGMMA, math="bf16"), median_us=30.2),
                        record(fam="gemm_wgmma", dtype="tf32", config=dict(WGMMA, math="tf32"), median_us=18.8),
                        record(fam="gemm_wgmma", config=dict(WGMMA, math="3xtf32"), median_us=35.0)])
    lookup.reload()
    assert lookup.choose("gemm_wgmma", bf16, H100).config.math == "tf32"
    write_store(tuned, [record((300, 1000, 784), fam="gemm_wgmma", dtype="bf16", config=dict(WGMMA, math="bf16"),
                               median_us=5.0),
                        record((400, 1000, 784), fam="gemm_wgmma", dtype="tf32", config=dict(WGMMA, math="tf32"),
                               median_us=12.0)])
    lookup.reload()
    choice = lookup.choose("gemm_wgmma", gemm_problem(400, 1000, 784, precision="bf16"), H100)
    assert (choice.source, choice.config.math) == ("exact", "tf32")
    # between two nearest records, the closer shape's, however fast the farther one ran
    choice = lookup.choose("gemm_wgmma", gemm_problem(360, 1000, 784, precision="bf16"), H100)
    assert (choice.source, choice.record.key.shape, choice.config.math) == ("nearest", "400x1000x784", "tf32")


def test_a_call_with_an_epilogue_takes_its_own_records_then_its_layouts_without_one(tuned):
    """A layer's GEMM is tuned with its epilogue, which changes the fastest config; a record of the
    shape without it still serves (faster on paper, but of the other op), before a nearest shape's."""
    forward = gemm_problem(800, 1000, 784, epilogue="bias_sigmoid", precision="tf32")
    key = key_of("gemm_wgmma", forward)
    assert [(k.op, k.dtype) for k in serving_keys(key)] == [
        ("nt+bias_sigmoid", "tf32"), ("nt+bias_sigmoid", "float32"), ("nt", "tf32"), ("nt", "float32")]
    bare = record(fam="gemm_wgmma", dtype="tf32", config=dict(WGMMA, math="tf32"), median_us=12.0)
    persistent = dict(WGMMA, math="tf32", producer=1, persistent=1)
    write_store(tuned, [bare])
    lookup.reload()
    choice = lookup.choose("gemm_wgmma", forward, H100)
    assert (choice.source, choice.other_op, choice.record.key.op) == ("exact", True, "nt")
    # another shape's record with the epilogue: the call's own shape without it wins
    write_store(tuned, [record((400, 1000, 784), op="nt+bias_sigmoid", fam="gemm_wgmma", dtype="tf32",
                               config=persistent)])
    lookup.reload()
    assert lookup.choose("gemm_wgmma", forward, H100).record.key.op == "nt"
    choice = lookup.choose("gemm_wgmma", gemm_problem(360, 1000, 784, epilogue="bias_sigmoid", precision="tf32"), H100)
    assert (choice.source, choice.record.key.shape, choice.other_op) == ("nearest", "400x1000x784", False)
    # its own shape with the epilogue wins, though slower than the record without
    write_store(tuned, [record(op="nt+bias_sigmoid", fam="gemm_wgmma", dtype="tf32", config=persistent, median_us=14.0)])
    lookup.reload()
    choice = lookup.choose("gemm_wgmma", forward, H100)
    assert (choice.source, choice.other_op, choice.config.persistent) == ("exact", False, 1)
    assert lookup.choose("gemm_wgmma", gemm_problem(800, 1000, 784, precision="tf32"), H100).config.persistent == 0


def test_the_epilogue_decides_within_an_arithmetic_and_time_across_them(tuned):
    """A tf32 call with an epilogue whose tf32 records lack it still takes its tf32 layout record
    over a 3x slower FP32-accurate one tuned with the epilogue: the op decides only between
    records of one arithmetic."""
    forward = gemm_problem(8192, 4096, 784, epilogue="bias_sigmoid", precision="tf32")
    write_store(tuned, [record((8192, 4096, 784), fam="gemm_wgmma", dtype="tf32", config=dict(WGMMA, math="tf32"),
                               median_us=196.9),
                        record((8192, 4096, 784), op="nt+bias_sigmoid", fam="gemm_wgmma",
                               config=dict(WGMMA, math="3xtf32"), median_us=628.3)])
    lookup.reload()
    choice = lookup.choose("gemm_wgmma", forward, H100)
    assert (choice.config.math, choice.other_op) == ("tf32", True)


def test_bfloat16_operands_have_their_own_records():
    """A kernel reading bfloat16 operands serves those alone, and only its records serve them."""
    bf16_ops = gemm_problem(800, 1000, 784, precision="bf16", bf16_operands=True)
    key = key_of("gemm_wgmma", bf16_ops)
    assert key.dtype == "bfloat16" and problem_of(key) == bf16_ops
    assert [k.dtype for k in serving_keys(key)] == ["bfloat16"]
    assert [k.dtype for k in serving_keys(key._replace(dtype="bf16"))] == ["bf16", "tf32", "float32"]


def test_only_gemm_calls_have_a_tf32_arithmetic():
    with pytest.raises(ValueError, match="dtype 'tf32' is not one of float32, float64 for colsum"):
        make_key("colsum", (800, 10), "-", "tf32")
    with pytest.raises(ValueError, match="precision tf32 multiplies float32 data"):
        Problem(8, 8, 8, "float64", precision="tf32")
    with pytest.raises(ValueError, match="precision bf16 multiplies float32 data"):
        Problem(8, 8, 8, "float64", precision="bf16")
    with pytest.raises(ValueError, match="bfloat16 operands are multiplied at precision bf16, not tf32"):
        Problem(8, 8, 8, precision="tf32", bf16_operands=True)
    with pytest.raises(ValueError, match="precision 'bf8' is not one of fp32, tf32, bf16"):
        Problem(8, 8, 8, precision="bf8")


# ---- float64 output layer of the large network --------------------------------------------------
# nn.train --hidden 4096 --batch 8192 --dtype float64: the full batch, the last partial one (54,000
# rows: 4848), each rank's share on 2 and 4 ranks, and evaluation's 1000-row chunks. Its W (10 x 4096
# float64, 320 KiB) does not fit shared memory, so the kernel reads it through the caches.
F64_ROWS = (8192, 4848, 4096, 2424, 2048, 1212, 1000)


@pytest.mark.parametrize("store", ["shipped", "none"])
def test_the_float64_large_output_layer_gets_a_config_that_fits(store, tmp_path, monkeypatch):
    """With the shipped results (what --use-tuned reads) and with none, every float64 call of the
    784-4096-10 network's output layer gets a config that its family's constraints accept: its
    forward pass with and without the input gradient (linear_xent), and its backward pass apart
    (linear_backward, both layouts of G_in)."""
    from kernels import linear_backward, linear_xent

    monkeypatch.setenv(locations.TUNED_ENV, str(tmp_path / "user"))
    if store == "none":
        monkeypatch.setattr(locations, "shipped_dir", lambda: tmp_path / "shipped")
    lookup.reload()
    try:
        problems = [("linear_xent", linear_xent.Problem(rows, 10, 4096, "float64", activation))
                    for rows in F64_ROWS for activation in (None, "sigmoid")]
        problems += [("linear_backward", linear_backward.Problem(rows, 10, 4096, "float64", "sigmoid",
                                                                 grad_in_transposed=transposed))
                     for rows in F64_ROWS for transposed in (False, True)]
        for name, problem in problems:
            fam = family(name)
            choice = lookup.choose(name, problem, H100)
            assert not fam.violations(choice.config, problem, H100), (name, problem, choice)
            fam.validate(choice.config, problem, H100)          # the check that raised before
            assert fam.default(problem, H100) == fam.candidates(problem, H100)[0]
        assert not family("linear_xent").default(problems[0][1], H100).w_smem   # 320 KiB: through the caches
    finally:
        lookup.reload()


def test_every_launch_of_the_float64_large_step_gets_a_config_that_fits(tmp_path, monkeypatch):
    """Every launch that nn.train's float64 step of 784-4096-10 makes (nn.targets records it: one rank,
    and the shares of 2 and 4 ranks, of the full and the last partial batch) has a family that can
    run it, and lookup (the shipped results) gives that family a config its constraints accept."""
    from kernels import IMPLEMENTATIONS
    from nn.recorder import LaunchRecorder, record_step
    from nn.targets import step_rows

    monkeypatch.setenv(locations.TUNED_ENV, str(tmp_path / "user"))
    lookup.reload()
    try:
        launches = {}
        for ranks in (1, 2, 4):
            for rows in step_rows(8192, 54_000, ranks):
                recorder = LaunchRecorder(dtype="float64")
                for t in record_step(rows, 8192, (784, 4096, 10), "sigmoid", ranks, recorder=recorder):
                    launches.setdefault((t.family, t.sizes, t.op), t)
        assert {(f, s[0]) for f, s, _ in launches if f == "linear_xent"} == {
            ("linear_xent", rows) for rows in (8192, 4848, 4096, 2424, 2048, 1212)}
        calls = {}
        for name, sizes, op in launches:
            problem = family(name).module.problem_of(sizes, op, "float64")
            call = next((c for c, names in IMPLEMENTATIONS.items() if name in names), name)
            runs = family(name).can_run(problem, H100)
            calls[call, sizes, op] = calls.get((call, sizes, op), False) or runs
            if runs:
                choice = lookup.choose(name, problem, H100)
                assert not family(name).violations(choice.config, problem, H100), (name, sizes, op)
        assert all(calls.values()), [c for c, ok in calls.items() if not ok]
    finally:
        lookup.reload()


def test_bench_names_a_twins_record_with_its_gpu():
    from autogemm.tuning.bench import _variant

    twin = lookup.Choice(Config(GEMM), "exact", record(), twin="NVIDIA H200")
    assert (_variant(twin), _variant(dataclasses.replace(twin, twin=""))) == ("tuned on NVIDIA H200", "tuned")
