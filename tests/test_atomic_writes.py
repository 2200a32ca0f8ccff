"""A CLI that never loses a user's work: output written whole or not at all (fmest.atomic), an
output flag that cannot be written refused in one line before the work, a missing package named
in one line, and a trace cache that never uses an entry whose content changed.

Kills are simulated: the function that writes raises half-way (``KeyboardInterrupt`` as Ctrl-C
does, ``OSError(ENOSPC)`` as a full disk does); the old file or directory must be byte-for-byte
what it was and no temporary file or directory may remain.
"""

from __future__ import annotations

import csv
import errno
import json
import os
from pathlib import Path

import pytest

from fmest.atomic import (
    check_writable_dir,
    replace_dir_atomic,
    write_atomic,
    write_text_atomic,
)
from fmest.cli import main
from fmest.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
CPU_PROBES = ROOT / "plugins" / "torch_runner" / "fmest_torch_runner" / "data" / "cpu_probes.csv"


def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def leftovers(directory: Path) -> list[str]:
    """Temporary names fmest.atomic uses (``.NAME.new-*``, ``.NAME.old-*``, ``.NAME.*.tmp``)."""
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


def one_error_line(err: str, flag: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"fmest: error: {flag}: "), err
    return lines[0]


@pytest.fixture
def a_file(tmp_path) -> Path:
    """A regular file: any path under it cannot be written, also for root (ENOTDIR)."""
    f = tmp_path / "a_file"
    f.write_text("not a directory\n")
    return f


# -- fmest.atomic ------------------------------------------------------------------------------

def test_write_text_atomic_replaces_whole_or_not_at_all(tmp_path):
    path = tmp_path / "config.json"
    write_text_atomic(path, "old\n")
    os.chmod(path, 0o640)
    write_text_atomic(path, "new\n")
    assert path.read_text() == "new\n" and leftovers(tmp_path) == []
    assert path.stat().st_mode & 0o777 == 0o640  # a replacement keeps the file's permissions


    def half_written(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write("ne")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(InputError) as info:
        write_atomic(path, half_written, field="--output-dir")
    assert info.value.field == "--output-dir"
    assert "No space left on device" in str(info.value) and "\n" not in str(info.value)
    assert path.read_text() == "new\n" and leftovers(tmp_path) == []
    (tmp_path / "plain").write_text("")
    with pytest.raises(OSError):  # without a field the OSError is the caller's
        write_text_atomic(tmp_path / "plain" / "x", "x")


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt(), OSError(errno.ENOSPC, "full"),
                                       RuntimeError("bug")])
def test_replace_dir_atomic_keeps_old_directory_when_build_fails(tmp_path, interrupt):
    target = tmp_path / "bundle"
    target.mkdir()
    (target / "metadata.json").write_text('{"old": true}\n')
    (target / "memory.p50.txt").write_text("old model\n")
    before = snapshot(target)

    def build(new: Path) -> None:
        (new / "memory.p50.txt").write_text("new model, half")
        raise interrupt

    expected = InputError if isinstance(interrupt, OSError) else type(interrupt)
    with pytest.raises(expected):
        replace_dir_atomic(target, build, field="--out")
    assert snapshot(target) == before
    assert leftovers(tmp_path) == []


def test_replace_dir_atomic_swaps_and_cleans_up(tmp_path):
    target = tmp_path / "bundle"
    target.mkdir()
    (target / "stale.p10.txt").write_text("old")
    result = replace_dir_atomic(target, lambda new: (new / "metadata.json").write_text("{}"))
    assert result == 2  # what build returned
    assert snapshot(target) == {"metadata.json": b"{}"}
    assert leftovers(tmp_path) == []
    fresh = replace_dir_atomic(tmp_path / "x" / "y", lambda new: "built")  # parents made
    assert fresh == "built" and (tmp_path / "x" / "y").is_dir()


def test_replace_dir_atomic_refuses_a_file_and_an_unwritable_place(tmp_path, a_file):
    with pytest.raises(InputError) as info:
        replace_dir_atomic(a_file, lambda new: None, field="--out")
    assert info.value.field == "--out" and "Not a directory" in str(info.value)
    assert a_file.read_text() == "not a directory\n"
    with pytest.raises(InputError, match="Not a directory"):
        replace_dir_atomic(a_file / "bundle", lambda new: None, field="--out")


def test_check_writable_dir_leaves_no_trace(tmp_path, a_file):
    check_writable_dir(tmp_path / "new" / "deeper", field="--export-dir")
    assert not (tmp_path / "new").exists()  # proven writable, nothing made
    check_writable_dir(tmp_path, field="--export-dir")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]
    with pytest.raises(InputError) as info:
        check_writable_dir(a_file / "sub", field="--export-dir")
    assert info.value.field == "--export-dir" and "Not a directory" in str(info.value)


# -- fmest export --output-dir, fmest plan --export-dir ----------------------------------------

def test_export_output_dir_unwritable_is_one_line(a_file, capsys):
    assert main(["export", "--model", "llama-3.2-1b", "--to", "deepspeed",
                 "--output-dir", str(a_file / "out")]) == 2
    out = capsys.readouterr()
    line = one_error_line(out.err, "--output-dir")
    assert "Not a directory" in line and out.out == ""


def test_export_output_dir_writes_whole_files(tmp_path, capsys):
    out_dir = tmp_path / "configs"
    args = ["export", "--model", "llama-3.2-1b", "--to", "deepspeed", "--output-dir",
            str(out_dir)]
    assert main(args) == 0
    first = snapshot(out_dir)
    assert list(first) == ["ds_config.json"] and json.loads(first["ds_config.json"])
    assert main(args) == 0  # replaced in place, no temporary file left
    assert snapshot(out_dir) == first and leftovers(out_dir) == []


def test_plan_export_dir_unwritable_fails_before_planning(a_file, monkeypatch, capsys):
    import fmest.plan.planner as planner

    def no_plan(*args, **kwargs):
        raise AssertionError("planned although --export-dir cannot be written")

    monkeypatch.setattr(planner, "plan", no_plan)
    assert main(["plan", "--model", "llama-3.2-1b", "--gpus", "H100", "--export", "accelerate",
                 "--export-dir", str(a_file / "plans")]) == 2
    line = one_error_line(capsys.readouterr().err, "--export-dir")
    assert "Not a directory" in line


def test_plan_export_writes_files_atomically(tmp_path, capsys):
    out_dir = tmp_path / "plan"
    out_dir.mkdir()
    (out_dir / "accelerate_config.yaml").write_text("old\n")
    assert main(["plan", "--model", "llama-3.2-1b", "--gpus", "H100", "--max-gpus", "8",
                 "--top", "1", "--export", "accelerate", "--export-dir", str(out_dir)]) == 0
    text = (out_dir / "accelerate_config.yaml").read_text()
    assert text != "old\n" and "distributed_type" in text
    assert leftovers(out_dir) == []


# -- fmest learn --out -------------------------------------------------------------------------

@pytest.fixture
def learn_engine():
    pytest.importorskip("lightgbm")
    memory_theory = pytest.importorskip("fmest_memory_theory.plugin")
    time_roofline = pytest.importorskip("fmest_time_roofline.plugin")
    learned = pytest.importorskip("fmest_learned_lgbm.plugin")
    from fmest.testing import new_engine

    return lambda: new_engine((memory_theory, "memory_theory"),
                              (time_roofline, "time_roofline"), (learned, "learned_lgbm"))


@pytest.fixture
def probes_csv(tmp_path) -> Path:
    """24 shipped CPU probe rows (enough for a memory model in about a second)."""
    path = tmp_path / "probes.csv"
    with open(CPU_PROBES, encoding="utf-8") as fh:
        path.write_text("".join(fh.readlines()[:25]), encoding="utf-8")
    return path


def _learn(probes_csv, out) -> list[str]:
    return ["learn", str(probes_csv), "--out", str(out), "--targets", "memory", "--no-loso"]


@pytest.mark.parametrize("kill", [KeyboardInterrupt, lambda: OSError(errno.ENOSPC,
                                                                      os.strerror(errno.ENOSPC))])
def test_learn_interrupted_while_writing_keeps_the_old_bundle(
        tmp_path, probes_csv, learn_engine, monkeypatch, capsys, kill):
    import fmest_learned_lgbm.train as train
    from fmest_learned_lgbm.bundle import load_bundle

    out = tmp_path / "bundles" / "team"
    assert main(_learn(probes_csv, out), engine=learn_engine()) == 0
    (out / "README.md").write_text("our notes\n")  # the user's own file in the bundle
    before = snapshot(out)
    real_sha = train.sha256_file
    calls = []

    def dies_on_the_second_file(path):
        calls.append(path)
        if len(calls) == 2:  # one model file written, the rest not
            raise kill()
        return real_sha(path)

    monkeypatch.setattr(train, "sha256_file", dies_on_the_second_file)
    capsys.readouterr()
    code = main(_learn(probes_csv, out), engine=learn_engine())
    assert len(calls) == 2
    if kill is KeyboardInterrupt:
        assert code == 130
    else:
        assert code == 2
        assert "No space left on device" in one_error_line(capsys.readouterr().err, "--out")
    assert snapshot(out) == before  # byte for byte
    assert leftovers(out.parent) == []
    load_bundle(out)

    monkeypatch.setattr(train, "sha256_file", real_sha)  # the retrain that completes
    assert main(_learn(probes_csv, out) + ["--name", "v2"], engine=learn_engine()) == 0
    assert (out / "README.md").read_text() == "our notes\n"  # carried into the new bundle
    assert json.loads((out / "metadata.json").read_text())["name"] == "v2"
    assert set(snapshot(out)) == set(before)
    assert leftovers(out.parent) == []
    load_bundle(out)


def test_learn_unwritable_out_fails_before_reading_data(a_file, learn_engine, capsys):
    assert main(["learn", "no-such-data.csv", "--out", str(a_file / "bundle")],
                engine=learn_engine()) == 2
    assert "Not a directory" in one_error_line(capsys.readouterr().err, "--out")


def test_learn_refuses_to_replace_a_directory_that_is_not_a_bundle(tmp_path, probes_csv,
                                                                   learn_engine, capsys):
    mine = tmp_path / "work"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of it\n")
    assert main(_learn(probes_csv, mine), engine=learn_engine()) == 2
    assert "holds no bundle" in one_error_line(capsys.readouterr().err, "--out")
    assert snapshot(mine) == {"thesis.tex": b"years of it\n"}


def test_learn_without_lightgbm_names_the_package(tmp_path, monkeypatch, capsys):
    learned = pytest.importorskip("fmest_learned_lgbm.plugin")
    from fmest.testing import new_engine

    monkeypatch.setitem(__import__("sys").modules, "lightgbm", None)
    assert main(["learn", "rows.csv", "--out", str(tmp_path / "b")],
                engine=new_engine((learned, "learned_lgbm"))) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install lightgbm" in err[0], err
    assert not (tmp_path / "b").exists()


# -- fmest probe --output ----------------------------------------------------------------------

@pytest.fixture
def probe_engine():
    plugin = pytest.importorskip("fmest_torch_runner.plugin")
    from fmest.testing import new_engine

    return lambda: new_engine((plugin, "torch_runner"))


def _no_probe(*args, **kwargs):
    raise AssertionError("a probe ran")


def _probe(output, *extra) -> list[str]:
    return ["probe", "--model", "llama-3.2-1b", "--device", "cpu", "--seq-len", "64",
            "-o", str(output), *extra]


def test_probe_unwritable_output_fails_before_any_probe(a_file, probe_engine, monkeypatch,
                                                        capsys):
    import fmest_torch_runner.probe as probe

    monkeypatch.setattr(probe, "run_in_subprocess", _no_probe)
    assert main(_probe(a_file / "rows.csv"), engine=probe_engine()) == 2
    assert "Not a directory" in one_error_line(capsys.readouterr().err, "--output")


def test_probe_without_torch_names_it_and_records_nothing(tmp_path, probe_engine, monkeypatch,
                                                          capsys):
    import sys

    import fmest_torch_runner.probe as probe

    monkeypatch.setattr(probe, "run_in_subprocess", _no_probe)
    monkeypatch.setitem(sys.modules, "torch", None)
    assert main(_probe(tmp_path / "rows.csv"), engine=probe_engine()) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "torch" in err[0] and "pip install torch" in err[0], err
    assert not (tmp_path / "rows.csv").exists()


def test_rows_failed_for_a_missing_package_are_run_again(tmp_path, probe_engine, monkeypatch,
                                                         capsys):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import fmest_torch_runner.probe as probe

    results = iter([{"status": "error", "error": "worker exited with 1: ModuleNotFoundError: "
                     "No module named 'torch'"},
                    {"status": "ok", "measured_peak_bytes": 123}])
    calls = []

    def fake_worker(job_dict, device, **kwargs):
        calls.append(job_dict)
        return {"config_hash": probe.config_hash(job_dict, device), "device": device,
                "job_json": json.dumps(job_dict), **next(results)}

    monkeypatch.setattr(probe, "run_in_subprocess", fake_worker)
    rows = tmp_path / "rows.csv"
    assert main(_probe(rows), engine=probe_engine()) == 0
    assert "No module named" in capsys.readouterr().err
    assert main(_probe(rows), engine=probe_engine()) == 0  # the error row was not "done"
    assert len(calls) == 2
    statuses = [r["status"] for r in csv.DictReader(open(rows, newline="", encoding="utf-8"))]
    assert statuses == ["error", "ok"]
    assert main(_probe(rows), engine=probe_engine()) == 0  # now it is
    assert len(calls) == 2 and "nothing to do" in capsys.readouterr().err


def test_csv_rows_are_whole_lines_and_a_partial_last_line_is_not_done(tmp_path, capsys):
    from fmest_torch_runner.probe import RowWriter

    path = tmp_path / "rows.csv"
    writer = RowWriter(str(path))
    writer.check()
    writer.append({"config_hash": "a" * 16, "status": "ok", "job_json": '{"model": "x"}'})
    writer.append({"config_hash": "b" * 16, "status": "error",
                   "error": "Traceback:\n  line 1\nValueError: no"})
    data = path.read_bytes()
    assert data.endswith(b"\n") and data.count(b"\n") == 3  # header + one line per row
    with open(path, "ab") as fh:  # a kill in the middle of the third row
        fh.write(b"c" * 16 + b',ok,,cpu,"{""model')
    assert writer.done_hashes() == {"a" * 16, "b" * 16}
    writer.check()  # the next run cuts the partial line off, and says so
    assert "incomplete last line" in capsys.readouterr().err
    assert path.read_bytes() == data
    writer.append({"config_hash": "c" * 16, "status": "ok"})
    rows = list(csv.DictReader(open(path, newline="", encoding="utf-8")))
    assert [r["config_hash"][0] for r in rows] == ["a", "b", "c"]
    assert rows[1]["error"] == "Traceback: |   line 1 | ValueError: no"


def test_parquet_rewrite_is_atomic(tmp_path, monkeypatch):
    pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from fmest_torch_runner.probe import RowWriter

    path = tmp_path / "rows.parquet"
    writer = RowWriter(str(path))
    writer.append({"config_hash": "a" * 16, "status": "ok"})
    before = path.read_bytes()
    real = pq.write_table

    def dies_half_way(table, where, *args, **kwargs):
        Path(where).write_bytes(b"PAR1 half a file")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(pq, "write_table", dies_half_way)
    with pytest.raises(InputError) as info:
        writer.append({"config_hash": "b" * 16, "status": "ok"})
    assert info.value.field == "--output" and "No space left" in str(info.value)
    assert path.read_bytes() == before and leftovers(tmp_path) == []
    monkeypatch.setattr(pq, "write_table", real)
    writer.append({"config_hash": "b" * 16, "status": "ok"})
    assert writer.done_hashes() == {"a" * 16, "b" * 16}
    path.write_bytes(before[: len(before) // 2])  # a file cut by something else
    with pytest.raises(InputError, match="not a readable Parquet file"):
        writer.done_hashes()


# -- the trace cache ---------------------------------------------------------------------------

@pytest.fixture
def tracer(tmp_path, monkeypatch):
    """traced_run over a stub runner that counts its traces."""
    pytest.importorskip("torch")
    import fmest_torch_runner.runner as runner
    from fmest_torch_runner import traced
    from fmest_torch_runner.records import RunResult, RunSpec

    monkeypatch.setenv("FMEST_CACHE_DIR", str(tmp_path / "cache"))
    traces = []

    def fake_run(spec, mode, *, round_bytes=1):
        traces.append(spec)
        return RunResult(mode=mode, peak_bytes=1000 + len(traces),
                         phase_peaks_bytes={"s2_forward": 900}, step_seconds=[0.5])

    monkeypatch.setattr(runner, "run", fake_run)
    spec = RunSpec(hf_config={"model_type": "llama", "hidden_size": 64}, model_name="tiny")

    def trace():
        notes: list[str] = []
        res, hit = traced.traced_run(spec, notes=notes)
        return res, hit, notes

    entry = traced.cache_dir() / f"{traced.trace_key(spec)}.json"
    return trace, traces, entry


def test_trace_cache_entry_carries_a_content_hash(tracer):
    trace, traces, entry = tracer
    res, hit, notes = trace()
    assert not hit and res.peak_bytes == 1001
    stored = json.loads(entry.read_text())
    assert len(stored["sha256"]) == 64 and set(stored) == {"key", "run", "result", "sha256"}
    res, hit, notes = trace()
    assert hit and res.peak_bytes == 1001 and notes == [] and len(traces) == 1
    assert leftovers(entry.parent) == []


@pytest.mark.parametrize("damage, why", [
    (lambda text: text.replace('"peak_bytes": 1001', '"peak_bytes": 9'), "sha256"),
    (lambda text: text[: len(text) // 2], "not whole"),
    (lambda text: json.dumps({k: v for k, v in json.loads(text).items() if k != "sha256"}),
     "no content hash"),
])
def test_a_damaged_trace_cache_entry_is_traced_again_with_a_note(tracer, damage, why):
    trace, traces, entry = tracer
    trace()
    entry.write_text(damage(entry.read_text()))
    res, hit, notes = trace()
    assert not hit and len(traces) == 2 and res.peak_bytes == 1002  # never the damaged one
    assert len(notes) == 1 and "ignored" in notes[0] and why in notes[0], notes
    res, hit, notes = trace()  # the entry was rewritten whole
    assert hit and res.peak_bytes == 1002 and notes == []
