"""Dataset files (``--dataset FILE``, :mod:`fmest.datasets`): the formats and the token rule, the
errors on ``workload.dataset_path``, and that the file is read once, at the input door
(:func:`fmest.inputs.build_job`), never inside an estimate or a plan."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from pathlib import Path

import pytest

import fmest_cost_cloud.plugin as cost_cloud_plugin
import fmest_memory_theory.plugin as memory_theory_plugin
import fmest_time_roofline.plugin as time_roofline_plugin
from fmest import datasets
from fmest.api import export_files, job_dict
from fmest.cli import main
from fmest.convert import job_from_dict
from fmest.datasets import ProgressBar, TokenCount, count_dataset_tokens, resolve_dataset
from fmest.errors import InputError
from fmest.inputs import read_input
from fmest.testing import new_engine, new_pm

TINY = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 688,
        "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
        "vocab_size": 1000, "max_position_embeddings": 512, "tie_word_embeddings": False}
#: 10 records of 400 characters: 4,000 characters, 1,000 tokens at 4 characters per token
RECORDS, CHARS = 10, 4000
ESTIMATE = ["estimate", "--model", "meta-llama/Llama-2-7b-hf", "--gpu", "H100",
            "--seq-len", "2048", "--per-device-batch", "1"]


@pytest.fixture(scope="module")
def engine():
    """The estimators (no torch_runner: a trace per input takes seconds) and the plan
    command."""
    from fmest.default_plugins import plan as plan_plugin
    from fmest.engine import Engine

    pm = new_pm((memory_theory_plugin, "memory_theory"), (time_roofline_plugin, "time_roofline"),
                (cost_cloud_plugin, "cost_cloud"))
    if not pm.has_plugin("plan") and not pm.is_registered(plan_plugin):
        pm.register(plan_plugin, name="plan")
    return Engine(pm)


@pytest.fixture
def data(tmp_path) -> Path:
    f = tmp_path / "d.jsonl"
    f.write_text("\n".join(json.dumps({"text": "x" * 400}) for _ in range(RECORDS)) + "\n")
    return f


def _cli(engine, argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv, engine=engine)
    return rc, out.getvalue(), err.getvalue()


# -- counting opens: every open() of a watched path, by whatever code (an audit hook sees
# builtins.open, io.open and io.FileIO alike) -------------------------------------------------

_WATCHED: dict[str, int] = {}
_HOOKED: list[bool] = []


def _audit(event: str, args: tuple) -> None:
    if event != "open" or not _WATCHED or not args:
        return
    path = args[0]
    if isinstance(path, (str, bytes, os.PathLike)):
        key = os.fsdecode(path)
        if key in _WATCHED:
            _WATCHED[key] += 1


@pytest.fixture
def opens():
    """``opens(path)`` starts counting the opens of ``path``; the fixture's value reads them."""
    if not _HOOKED:
        sys.addaudithook(_audit)   # hooks cannot be removed: it counts only watched paths
        _HOOKED.append(True)

    class Opens:
        def watch(self, path: Path) -> None:
            _WATCHED[str(path)] = 0

        def __getitem__(self, path: Path) -> int:
            return _WATCHED[str(path)]

    yield Opens()
    _WATCHED.clear()


# -- formats and the token rule ------------------------------------------------------------------

def test_jsonl_approximation(data):
    c = count_dataset_tokens(str(data), progress=False)
    assert (c.tokens, c.records, c.characters) == (1000, RECORDS, CHARS)
    assert "characters per token" in c.method


def test_csv_and_text(tmp_path):
    f = tmp_path / "d.csv"
    f.write_text("prompt,response\n" + "aaaa,bbbb\n" * 5)
    assert count_dataset_tokens(str(f), progress=False).tokens == 2 * 5 + round(5 / 4)  # + "\n"
    t = tmp_path / "d.txt"
    t.write_text("abcd" * 100)
    assert count_dataset_tokens(str(t), progress=False).tokens == 100


def test_local_tokenizer_counts_exactly_at_the_door(tmp_path):
    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"hello": 0, "world": 1, "[UNK]": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    f = tmp_path / "d.jsonl"
    f.write_text(json.dumps({"text": "hello world hello"}) + "\n")
    c = count_dataset_tokens(str(f), model_ref=str(tmp_path), progress=False)
    assert c.tokens == 3 and "tokenizer.json" in c.method
    job, origin = resolve_dataset(job_from_dict({"model": str(tmp_path),
                                                 "workload": {"dataset_path": str(f)}}))
    assert job.workload.dataset_tokens == 3.0 and "tokenizer.json" in str(origin)


def test_parquet(tmp_path, monkeypatch):
    f = tmp_path / "d.parquet"
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        f.write_bytes(b"PAR1")
    else:
        pq.write_table(pa.table({"text": ["x" * 400] * 3, "id": [1, 2, 3]}), f)
        assert count_dataset_tokens(str(f), progress=False).tokens == 300
    # without pyarrow the error names the core's extra
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(InputError) as err:
        count_dataset_tokens(str(f), progress=False)
    assert err.value.field == "workload.dataset_path" and "fmest[parquet]" in str(err.value)


def test_progress_bar_writes_to_stream():
    buf = io.StringIO()
    bar = ProgressBar(100, enabled=True, stream=buf)
    bar.update(50, force=True)
    bar.close()
    assert "50.0%" in buf.getvalue() and "100.0%" in buf.getvalue()


@pytest.mark.parametrize("name,content,needle", [
    ("bad.jsonl", '{"text": "ok"}\n{not json\n', "line 2"),
    ("bad.xyz", "hello", "unsupported"),
    ("empty.jsonl", "\n\n", "no text"),
    ("missing.jsonl", None, "no such file"),
])
def test_bad_dataset_names_the_field_at_the_door(tmp_path, engine, name, content, needle):
    f = tmp_path / name
    if content is not None:
        f.write_text(content)
    with pytest.raises(InputError) as err:
        read_input({"model": "gpt2", "workload": {"dataset_path": str(f)}})
    assert err.value.field == "workload.dataset_path"
    assert needle in str(err.value)
    rc, out, _err = _cli(engine, [*ESTIMATE, "--dataset", str(f), "--format", "json"])
    assert rc == 2 and json.loads(out)["error"]["field"] == "workload.dataset_path"


# -- resolve_dataset: the precedence of the workload fields ---------------------------------------

def test_resolve_dataset_counts_and_keeps_the_path(data):
    job, origin = resolve_dataset(job_from_dict({"model": "gpt2",
                                                 "workload": {"dataset_path": str(data),
                                                              "epochs": 2}}))
    assert job.workload.dataset_tokens == 1000.0 and job.workload.dataset_path == str(data)
    assert job.workload.epochs == 2
    assert origin == (f"d.jsonl: {RECORDS} records, {CHARS:,} characters, ~4 characters per "
                      "token (no local tokenizer)")


@pytest.mark.parametrize("sized", [{"max_steps": 10}, {"dataset_tokens": 5e8},
                                   {"num_samples": 1000}])
def test_other_sizes_win_and_the_file_is_not_read(tmp_path, sized):
    job = job_from_dict({"model": "gpt2", "workload": {
        "dataset_path": str(tmp_path / "missing.jsonl"), **sized}})
    assert resolve_dataset(job) == (job, None)
    (job2, report), = read_input(job)
    assert job2.workload == job.workload
    assert "records" not in report.origins.get("workload.dataset_tokens", "")


def test_a_count_over_the_bound_is_refused_naming_the_count(data, monkeypatch):
    monkeypatch.setattr(datasets, "count_dataset_tokens", lambda *a, **k: TokenCount(
        tokens=int(2e15), records=1, characters=int(8e15), method="test"))
    with pytest.raises(InputError) as err:
        read_input({"model": "gpt2", "workload": {"dataset_path": str(data)}})
    assert err.value.field.startswith("d.jsonl: 1 records")
    assert err.value.field.endswith("(-> workload.dataset_tokens)")


# -- the door: counted once, reported with the other origins -------------------------------------

def test_estimate_counts_the_dataset_once_and_reports_its_origin(engine, data, opens):
    opens.watch(data)
    rc, out, err = _cli(engine, [*ESTIMATE, "--dataset", str(data), "--format", "json"])
    assert rc == 0, err
    assert opens[data] == 1
    d = json.loads(out)
    assert d["input"]["origins"]["workload.dataset_tokens"].startswith(
        f"d.jsonl: {RECORDS} records, {CHARS:,} characters")
    assert d["input"]["origins"]["workload.dataset_path"] == "--dataset"
    assert d["job"]["workload"]["dataset_tokens"] == 1000.0
    assert d["job"]["workload"]["dataset_path"] == str(data)
    assert d["time"]["total_steps"] == 1      # 1,000 tokens, 2,048 tokens per step


def test_explain_shows_where_the_count_came_from(engine, data, tmp_path):
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1,
                              "zero_optimization": {"stage": 2}}))
    rc, out, err = _cli(engine, [*ESTIMATE, "--dataset", str(data), "--config", str(ds),
                                 "--explain"])
    assert rc == 0, err
    row = next(ln for ln in out.splitlines() if "workload.dataset_tokens" in ln)
    assert f"d.jsonl: {RECORDS} records" in row
    # with flags only, --explain shows the count's origin too
    rc, out, err = _cli(engine, [*ESTIMATE, "--dataset", str(data), "--explain"])
    assert rc == 0, err
    row = next(ln for ln in out.splitlines() if "workload.dataset_tokens" in ln)
    assert f"d.jsonl: {RECORDS} records" in row


def test_plan_counts_the_dataset_once(engine, data, opens):
    opens.watch(data)
    rc, out, err = _cli(engine, ["plan", "--model", "meta-llama/Llama-3.2-1B", "--dataset",
                                 str(data), "--gpus", "H100-SXM", "--max-gpus", "8",
                                 "--top", "2", "--format", "json"])
    assert rc == 0, err
    assert opens[data] == 1
    d = json.loads(out)
    assert d["total_tokens"] == 1000 and d["plans"]
    assert d["plans"][0]["total_seconds"] is not None


def test_doors_that_do_not_estimate_never_read_the_file(engine, data, tmp_path, opens):
    opens.watch(data)
    rc, out, err = _cli(engine, ["export", "--model", "meta-llama/Llama-2-7b-hf", "--dataset",
                                 str(data), "--to", "deepspeed", "--output-dir",
                                 str(tmp_path / "out")])
    assert rc == 0, err
    assert export_files({"model": "meta-llama/Llama-2-7b-hf", "dataset": str(data),
                         "to": "deepspeed"}, engine)
    # fmest probe's door (the flags' dests, as its parser gives them)
    d = job_dict({"model": "meta-llama/Llama-2-7b-hf", "dataset": str(data)})
    assert d["workload"]["dataset_path"] == str(data)
    assert d["workload"]["dataset_tokens"] is None
    assert opens[data] == 0
    # a missing file is no error where nothing is counted
    missing = str(tmp_path / "missing.jsonl")
    assert job_dict({"model": "gpt2", "dataset": missing})["workload"]["dataset_path"] == missing
    # ... and the estimating door reads it
    assert job_dict({"model": "gpt2", "dataset": str(data)},
                    count_dataset=True)["workload"]["dataset_tokens"] == 1000.0
    assert opens[data] == 1


def test_a_job_that_skipped_the_door_gets_a_note_not_a_read(engine, data, opens):
    opens.watch(data)
    bare = job_from_dict({"model": "meta-llama/Llama-2-7b-hf",
                          "training": {"seq_len": 2048, "micro_batch_size": 1},
                          "hardware": {"gpu": "H100-SXM-80GB"},
                          "workload": {"dataset_path": str(data)}})
    t = new_engine((time_roofline_plugin, "time_roofline")).estimate(
        bare, quantities=("time",)).time
    assert opens[data] == 0
    assert t is not None and t.step_seconds > 0 and t.total_steps is None
    note = next(n for n in t.notes if "not counted" in n)
    assert "input door" in note and "resolve_dataset" in note
    counted, _origin = resolve_dataset(bare)
    t2 = new_engine((time_roofline_plugin, "time_roofline")).estimate(
        counted, quantities=("time",)).time
    assert t2.total_steps == 1 and not any("not counted" in n for n in t2.notes)
