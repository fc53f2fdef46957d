"""autogemm.store.records: round trip, merge, atomic writes, and files that are corrupted or hostile."""
import json
import os
from pathlib import Path

import pytest

from autogemm.errors import StoreError
from autogemm.runtime.device import H100
from autogemm.runtime.family import Config, family
from autogemm.store import records as store
from autogemm.store.keys import problem_of
from autogemm.store.records import file_for, load, save
from fake_tuned import GEMM, TF32X3, edit, meta, record, write_store


def test_round_trip(tmp_path):
    records = [record(), record((800, 10, 1000), median_us=14.0),
               record((800, 10), "-", fam="softmax_xent", config=dict(block=128, tpr=16), cublas_us=None),
               record((1, 1000), "sgd", fam="elementwise", config=dict(block=64, ept=1, vec=2), cublas_us=None)]
    path = write_store(tmp_path, records)
    assert path.name == "nvidia-h100-80gb-hbm3.json"
    loaded = load(path)
    assert loaded.meta.gpu == H100.name and loaded.meta.sm_count == 132 and loaded.meta.cupy == "14.2.0"
    assert loaded.meta.templates["gemm"] == family("gemm").template_hash
    assert records[0].template_hash == family("gemm").code_hash(records[0].config, problem_of(records[0].key))
    assert loaded.records == {r.key: r for r in records}
    assert all(not r.stale for r in loaded.records.values())
    assert loaded.records[records[0].key].speedup == pytest.approx(60 / 50)


def test_a_record_keeps_cublass_error_where_measured_and_loads_without_it(tmp_path):
    measured, older = record(cublas_error=4e-7), record((800, 10, 1000))
    path = write_store(tmp_path, [measured, older])
    text = path.read_text()
    assert text.count('"cublas_error"') == 1                  # written only where measured
    loaded = load(path).records
    assert loaded[measured.key].cublas_error == 4e-7 and loaded[measured.key].error_ratio == pytest.approx(0.25)
    assert loaded[older.key].cublas_error is None and loaded[older.key].error_ratio is None


def test_file_is_one_record_a_line(tmp_path):
    path = write_store(tmp_path, [record(), record((400, 1000, 784))])
    lines = path.read_text().splitlines()
    assert sum('"family": "gemm"' in line for line in lines) == 2
    assert json.loads(path.read_text())["meta"]["schema"] == store.SCHEMA


def test_merge_keeps_the_faster_and_every_other_record(tmp_path):
    path = write_store(tmp_path, [record(median_us=50.0), record((800, 10, 1000), median_us=14.0)])
    faster = record(median_us=40.0, config=dict(GEMM, split_k=2))
    slower = record((800, 10, 1000), median_us=20.0, config=dict(GEMM, bm=32))
    new = record((400, 1000, 784), median_us=30.0)
    outcomes = save(path, [faster, slower, new], meta())
    assert [o for _, o in outcomes] == ["replaced", "kept", "added"]
    loaded = load(path).records
    assert loaded[faster.key] == faster
    assert loaded[slower.key].median_us == 14.0 and loaded[slower.key].config == record().config
    assert loaded[new.key] == new and len(loaded) == 3


def test_a_record_of_a_family_not_loaded_here_is_kept_as_it_was(tmp_path):
    """A plugin family's records, read where its package is not installed: kept, never looked up,
    written back unchanged (with its family's meta) when this process saves its own results."""
    path = write_store(tmp_path, [record()])
    doc = json.loads(path.read_text())
    theirs = dict(doc["records"][0], family="someones_softmax", shape="4096x1024", op="-", config={"threads": 256})
    doc["records"].append(theirs)
    doc["meta"]["templates"]["someones_softmax"] = "ab" * 8
    doc["meta"]["params"]["someones_softmax"] = ["threads"]
    path.write_text(json.dumps(doc))
    loaded = load(path)
    assert list(loaded.records) == [record().key] and loaded.foreign == (theirs,)
    save(path, [record((400, 1000, 784))], meta())
    again = json.loads(path.read_text())
    assert theirs in again["records"] and len(again["records"]) == 3
    assert again["meta"]["templates"]["someones_softmax"] == "ab" * 8
    assert again["meta"]["params"]["someones_softmax"] == ["threads"]


def test_a_stale_record_is_replaced_even_by_a_slower_one(tmp_path):
    path = write_store(tmp_path, [record(median_us=10.0, template_hash="0" * 16)])
    assert load(path).records[record().key].stale
    (_, outcome), = save(path, [record(median_us=50.0)], meta())
    assert outcome == "replaced" and not load(path).records[record().key].stale


def test_merge_reads_the_file_as_it_is_at_write_time(tmp_path):
    """Another process wrote meanwhile: its record survives our save."""
    path = write_store(tmp_path, [record()])
    other = record((123, 456, 789), median_us=5.0)
    save(path, [other], meta())                     # "another process"
    save(path, [record((400, 10, 1000))], meta())
    assert other.key in load(path).records and len(load(path).records) == 3


@pytest.mark.parametrize("where", ["dumps", "replace", "interrupt"])
def test_an_interrupted_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch, where):
    path = write_store(tmp_path, [record()])
    before = path.read_bytes()
    calls = []

    def broken_dumps(value, **kw):
        calls.append(value)
        if len(calls) == 3:                          # mid-file: the meta block is already written
            raise RuntimeError("disk on fire")
        return json.dumps(value, **kw)

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device") if where == "replace" else KeyboardInterrupt()

    if where == "dumps":
        monkeypatch.setattr(store.json, "dumps", broken_dumps)
    else:
        monkeypatch.setattr(store.os, "replace", broken_replace)
    error = {"dumps": RuntimeError, "replace": StoreError, "interrupt": KeyboardInterrupt}[where]
    with pytest.raises(error):
        save(path, [record(median_us=1.0), record((1, 2, 3)), record((4, 5, 6))], meta())
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == [path.name]


def test_a_new_file_keeps_usual_permissions(tmp_path):
    path = write_store(tmp_path, [record()])
    assert path.stat().st_mode & 0o777 == 0o644


def test_save_refuses_another_gpus_file_and_a_corrupted_file(tmp_path):
    path = write_store(tmp_path, [record()])
    edit(path, lambda d: d["meta"].update(gpu="NVIDIA H200"))
    before = path.read_bytes()
    with pytest.raises(StoreError, match="holds results for NVIDIA H200"):
        save(path, [record(median_us=1.0)], meta())
    path.write_text(path.read_text()[:100])            # truncated
    before = path.read_bytes()
    with pytest.raises(StoreError, match="not valid JSON"):
        save(path, [record(median_us=1.0)], meta())
    assert path.read_bytes() == before


def _message(path) -> str:
    with pytest.raises(StoreError) as info:
        load(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    return message


@pytest.mark.parametrize("change, expected", [
    (lambda d: d.update(extra=1), "unknown key 'extra'"),
    (lambda d: d["meta"].update(colour="blue"), "meta: unknown key 'colour'"),
    (lambda d: d["meta"].update(schema=2), "schema version 2"),
    (lambda d: d["meta"].pop("cupy"), "meta: missing key 'cupy'"),
    (lambda d: d["meta"].update(sm_count=True), "sm_count=True"),
    (lambda d: d["meta"]["templates"].update({"{{ evil }}": "0" * 16}), "templates must map kernel families"),
    (lambda d: d.update(records={}), "'records' must be a list"),
    (lambda d: d["records"][0].update(note="hi"), "record 0 (gemm 800x1000x784:nt float32): unknown key 'note'"),
    (lambda d: d["records"][0].pop("median_us"), "missing key 'median_us'"),
    (lambda d: d["records"][0]["config"].update(bm="128; } evil"), "'bm': '128; } evil' is not a plain word"),
    (lambda d: d["records"][0]["config"].update(bm="{{ cycler.__init__ }}"), "is not a plain word"),
    (lambda d: d["records"][0]["config"].update(bm=128.0), "'bm': 128.0 is not a plain word"),
    (lambda d: d["records"][0].update(config=[1, 2]), "config: expected an object"),
    (lambda d: d["records"][0].update(family="{{ 7*7 }}"), "family '{{ 7*7 }}' is not a family name"),
    (lambda d: d["records"][0].update(family="someones_softmax", evil=1),
     "someones_softmax (not loaded here) must have a record's"),
    (lambda d: d["records"][0].update(family="someones_softmax", config={"x": "{{ 7*7 }}"}),
     "someones_softmax (not loaded here) must have a shape of sizes"),
    (lambda d: d["records"][0].update(family="someones_softmax", shape="4096x-1"), "must have a shape of sizes"),
    (lambda d: d["records"].extend([dict(d["records"][0], family="someones_softmax")] * 2), "repeats record 1"),
    (lambda d: d["records"][0].update(op="nt\"); evil("), "op 'nt\"); evil(' is not one of"),
    (lambda d: d["records"][0].update(shape="800x0x784"), "shape '800x0x784' is not sizes >= 1"),
    (lambda d: d["records"][0].update(shape="800x1000"), "gemm needs 3 sizes"),
    (lambda d: d["records"][0].update(shape=800), "shape must be a string"),
    (lambda d: d["records"][0].update(dtype="float16"), "dtype 'float16' is not one of"),
    (lambda d: d["records"][0].update(family="conv2d", shape="500112x1x28x28x6x3", op="-"),
     "conv2d of 500112 images: more than 2147483647 elements"),     # was a traceback from `autogemm show --json`
    (lambda d: d["records"][0].update(median_us=-1), "median_us=-1 must be a finite number > 0"),
    (lambda d: d["records"][0].update(cublas_error=-1e-7), "cublas_error=-1e-07 must be a finite number >= 0 or null"),
    (lambda d: d["records"][0].update(cublas_error="small"), "cublas_error='small'"),
    (lambda d: d["records"][0].update(median_us="5"), "median_us='5'"),
    (lambda d: d["records"][0].update(median_us=10**400), "median_us=1" + "0" * 36 + "... must be a finite number > 0"),
    (lambda d: d["records"][0].update(gflops=-10**400), "gflops=-1" + "0" * 35 + "... must be a finite number >= 0"),
    (lambda d: d["records"][0].update(trials=2**60), "trials=1152921504606846976 must be an integer in 0..2**53"),
    (lambda d: d["meta"].update(sm_count=10**400), "meta: sm_count=1" + "0" * 36 + "..."),
    (lambda d: d["records"][0].update(trials=3.5), "trials=3.5 must be an integer"),
    (lambda d: d["records"][0].update(date="yesterday"), "date='yesterday' is not an ISO 8601 date"),
    (lambda d: d["records"][0].update(template_hash="../../etc"), "template_hash='../../etc' is not a valid template_hash"),
    (lambda d: d["records"].append(dict(d["records"][0])), "record 1 (gemm 800x1000x784:nt float32) repeats record 0"),
    (lambda d: d["records"].append("gemm"), "record 1: expected an object"),
])
def test_bad_files_are_one_line_errors_naming_file_and_record(tmp_path, change, expected):
    path = write_store(tmp_path, [record()])
    edit(path, change)
    assert expected in _message(path)


HUGE = "x" * 10_000_000


@pytest.mark.parametrize("change, expected", [
    (lambda d: d["records"][0]["config"].update(bm=HUGE), "config: 'bm': 'xxx"),
    (lambda d: d["records"][0]["config"].update({HUGE: 1}), "config: 'xxx"),
    (lambda d: d["records"][0].update(config=dict(GEMM, bm=HUGE), template_hash="0123456789abcdef"), "config: 'bm': 'xxx"),
    (lambda d: d["records"][0].update(family=HUGE), "family 'xxx"),
    (lambda d: d["meta"].update(gpu=HUGE), "meta: gpu='xxx"),
])
def test_a_huge_value_is_quoted_cut_short(tmp_path, change, expected):
    """A 10 MB config value in a tuned file made a 10 MB error line."""
    path = write_store(tmp_path, [record()])
    edit(path, change)
    message = _message(path)
    assert expected in message and len(message) < len(str(path)) + 400, message[:500]


@pytest.mark.parametrize("text, expected", [
    ("", "not valid JSON"),
    ('{"meta": {', "not valid JSON"),
    ("[1, 2]", "expected a JSON object"),
    ('{"meta": {}, "meta": {}}', "key 'meta' appears twice"),
    ('{"meta": NaN, "records": []}', "NaN is not a number JSON allows"),
    ('{"meta": ' + "9" * 5000 + ', "records": []}', "an integer of 5000 digits (999999999999...) is in no tuned file"),
    ('{"meta": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
])
def test_corrupted_json(tmp_path, text, expected):
    path = tmp_path / "x.json"
    path.write_text(text)
    assert expected in _message(path)


def test_text_that_would_drive_a_terminal_is_refused(tmp_path):
    """A GPU name with escape codes would be printed raw by `autogemm show` and in errors."""
    path = write_store(tmp_path, [record()])
    edit(path, lambda d: d["meta"].update(gpu="NVIDIA \x1b[2J\x1b[31mH100"))
    assert "meta: gpu='NVIDIA \\x1b[2J\\x1b[31mH100' is not a valid gpu" in _message(path)
    path = write_store(tmp_path / "other", [record()])
    edit(path, lambda d: d["records"][0].update(command="autogemm tune\rrm -rf ~"))
    assert "record 0 (gemm 800x1000x784:nt float32): command=" in _message(path)


def test_save_writes_nothing_that_load_would_refuse(tmp_path):
    """A command line holding a newline (the shell passes one through) once made a file that the
    next load refused, and with it every later lookup and save."""
    path = write_store(tmp_path, [record()])
    before = path.read_bytes()
    with pytest.raises(StoreError, match="writing record 0 .*command="):
        save(path, [record((1, 2, 3), command="autogemm tune --shapes 1x2x3,\n4x5x6")], meta())
    assert path.read_bytes() == before
    assert store.printable("autogemm tune --shapes 1x2x3,\n4x5x6") == "autogemm tune --shapes 1x2x3,\\n4x5x6"
    assert store.printable("x" * 3000) == "x" * 1997 + "..."
    save(path, [record((1, 2, 3), command=store.printable("a\tb\x1b[31m" * 500))], meta())
    assert len(load(path).records) == 2


def test_special_files_fail_at_once(tmp_path):
    os.mkfifo(tmp_path / "nvidia-h100-80gb-hbm3.json")
    assert "cannot read: a FIFO, not a regular file" in _message(tmp_path / "nvidia-h100-80gb-hbm3.json")
    assert "cannot read: a character device, not a regular file" in _message("/dev/zero")
    loop = tmp_path / "loop.json"
    loop.symlink_to(loop)
    assert "cannot read: a symlink loop" in _message(loop)
    with pytest.raises(StoreError, match="cannot read: a FIFO"):             # never written over either
        save(tmp_path / "nvidia-h100-80gb-hbm3.json", [record()], meta())


def test_binary_garbage_and_missing_file(tmp_path):
    path = tmp_path / "x.json"
    path.write_bytes(b"\xff\xfe\x00garbage")
    assert "not UTF-8" in _message(path)
    assert "cannot read" in _message(tmp_path / "missing.json")


def test_stale_is_a_template_hash_that_is_not_the_current_one(tmp_path):
    path = write_store(tmp_path, [record(template_hash="0123456789abcdef"), record((1, 2, 3))])
    stale = {r.key.shape: r.stale for r in load(path).records.values()}
    assert stale == {"800x1000x784": True, "1x2x3": False}


def test_editing_one_gemm_math_path_stales_only_its_records(tmp_path, edit_template):
    path = write_store(tmp_path, [record(), record((400, 1000, 784), config=TF32X3)])
    edit_template("gemm/3xtf32.cuh", "pass < 3", "pass != 3")
    stale = {r.config["math"]: r.stale for r in load(path).records.values()}
    assert stale == {"fma": False, "3xtf32": True}
    save(path, [record((400, 1000, 784), config=TF32X3, median_us=90.0)], meta())
    assert not any(r.stale for r in load(path).records.values())


def test_a_record_with_the_other_math_paths_hash_is_stale(tmp_path):
    tf32_hash = family("gemm").code_hash(family("gemm").config(TF32X3), problem_of(record().key))
    path = write_store(tmp_path, [record(template_hash=tf32_hash), record((400, 1000, 784))])
    stale = {r.key.shape: r.stale for r in load(path).records.values()}
    assert stale == {"800x1000x784": True, "400x1000x784": False}


@pytest.mark.parametrize("change", [lambda c: c.update(bm=40), lambda c: c.update(__class__=1),
                                    lambda c: c.pop("pad"), lambda c: c.update(pad=1)])
def test_a_config_outside_todays_space_is_a_stale_record_never_launched(tmp_path, change):
    """Whatever its hash: a config of another space (older, or hand-edited) is kept and shown as
    stale, and lookup never gives it to a kernel (it does not hold)."""
    path = write_store(tmp_path, [record()])
    edit(path, lambda d: change(d["records"][0]["config"]))
    old, = load(path).records.values()
    assert old.stale and family("gemm").holds(old.config) is None


def test_a_stale_record_from_an_older_space_is_kept_and_shown_not_rejected(tmp_path):
    """The template gained a parameter since tuning: the old record loads as stale, survives a
    save, and a fresh record replaces it."""
    old_config = {k: v for k, v in GEMM.items() if k != "copy"}
    path = write_store(tmp_path, [record(), record((400, 1000, 784))])
    edit(path, lambda d: d["records"][0].update(config=old_config, template_hash="0123456789abcdef"))
    old = next(r for r in load(path).records.values() if r.stale)
    assert dict(old.config) == old_config
    save(path, [record((1, 2, 3))], meta())
    assert dict(load(path).records[old.key].config) == old_config
    save(path, [record(old.key.sizes, median_us=80.0)], meta())
    assert not load(path).records[old.key].stale


@pytest.mark.parametrize("old_pad, pad", [(4, True), (0, False)])
def test_a_stale_record_from_before_pad_was_a_bool_reads_in_todays_spelling(tmp_path, old_pad, pad):
    """pad was a padding in elements (0 or 4): a record tuned then is stale and still serves its shape."""
    path = write_store(tmp_path, [record()])
    edit(path, lambda d: d["records"][0].update(config=dict(GEMM, pad=old_pad), template_hash="0123456789abcdef"))
    old, = load(path).records.values()
    assert old.stale and old.config.pad is pad
    assert family("gemm").holds(old.config) == Config(dict(GEMM, pad=pad))


CLUSTER = dict(cluster_m=1, cluster_n=1, persistent=0, reg_a=0, swap=0)


@pytest.mark.parametrize("gained", [dict(split_k=1, producer=0, tma=0, pretranspose=0, **CLUSTER),
                                    dict(producer=0, tma=0, pretranspose=0, **CLUSTER),
                                    dict(tma=0, pretranspose=0, **CLUSTER), dict(pretranspose=0, **CLUSTER), CLUSTER])
def test_a_stale_wgmma_record_from_before_split_k_producer_tma_pretranspose_clusters_persistence_computes_as_it_did(
        tmp_path, gained):
    """gemm_wgmma gained split_k, then producer, then tma, then pretranspose, then the cluster's
    shape and persistence: a record tuned before any reads with split_k = 1, producer = 0, tma = 0,
    pretranspose = 0, clusters of one block and persistent = 0 (what it ran) and still serves its
    shape."""
    wgmma = dict(bm=128, bn=128, warpgroups=2, stages=3, math="3xtf32", inflight=1, split_k=1, producer=0, tma=0,
                 pretranspose=0, **CLUSTER)
    old_config = {name: value for name, value in wgmma.items() if name not in gained}
    path = write_store(tmp_path, [record(fam="gemm_wgmma", config=wgmma)])
    edit(path, lambda d: d["records"][0].update(config=old_config, template_hash="0123456789abcdef"))
    old, = load(path).records.values()
    assert old.stale and family("gemm_wgmma").holds(old.config) == Config(wgmma)


@pytest.mark.parametrize("config", [{"bm": "{{ evil }}"}, {"bm": 1.5}, {"b m": 1}, {"bm": [1]}, [1, 2]])
def test_a_stale_record_still_holds_only_plain_words_and_integers(tmp_path, config):
    path = write_store(tmp_path, [record()])
    edit(path, lambda d: d["records"][0].update(config=config, template_hash="0123456789abcdef"))
    assert "config" in _message(path)


def test_file_for_names_the_gpu(tmp_path):
    assert file_for(tmp_path, H100) == tmp_path / "nvidia-h100-80gb-hbm3.json"


def test_a_config_checked_once_is_reused_only_for_the_same_values_and_types(tmp_path):
    """load checks each distinct config once: pad=1 after a record with pad=True is not pad=True."""
    path = write_store(tmp_path, [record(), record((400, 1000, 784))])
    edit(path, lambda d: d["records"][1]["config"].update(pad=int(d["records"][1]["config"]["pad"])))
    loaded = load(path).records
    assert loaded[record().key].stale and type(loaded[record().key].config.pad) is int
    assert not loaded[record((400, 1000, 784)).key].stale


@pytest.mark.parametrize("path", sorted((Path(__file__).parents[1] / "tuned").glob("*.json")), ids=lambda p: p.name)
def test_every_shipped_record_is_current(path):
    """The shipped records were measured on today's kernels: a change to what a record's config
    renders must come with that record tuned again (`autogemm tune --stale` on its GPU)."""
    stale = [f"{r.key} {dict(r.config)}" for r in load(path).records.values() if r.stale]
    assert not stale, f"{len(stale)} stale, e.g. {stale[:3]}"
