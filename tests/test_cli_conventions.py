"""Issue 15's CLI conventions: one renderer (rich on a terminal, plain when piped),
``--format csv``, JSON errors on stdout with exit 2, ``--fail-if-no-fit`` (exit 3), ``-f -``,
``Report.to_dict``/``to_json``/``repr``/``_repr_html_`` and ``py.typed``."""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
from importlib import resources

import pytest

from fmest.cli import EXIT_NO_FIT
from fmest.output.render import Column, Progress, csv_text, render_table
from fmest.testing import new_engine, run_cli

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
#: a job that fits (GPT-2 on an H100) and one that does not (Llama-2-70B unsharded on one)
FITS = ["--model", "gpt2", "--seq-len", "1024", "--gpu", "H100-SXM-80GB"]
NO_FIT = ["--model", "meta-llama/Llama-2-70b-hf", "--gpu", "H100-SXM-80GB"]


@pytest.fixture(scope="module")
def engine():
    return new_engine(entrypoints=True)


def run(engine, argv, capsys) -> tuple[int, str, str]:
    return run_cli(engine, argv, capsys)


def as_number(text: str):
    if text in ("", "None"):
        return None
    if text in ("True", "False"):
        return text == "True"
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


# -- --format csv ------------------------------------------------------------------------------

def test_estimate_csv_holds_the_json_numbers(engine, capsys):
    argv = ["estimate", *FITS, "--dataset-tokens", "1e8", "--provider", "cheapest"]
    _, out, _ = run(engine, [*argv, "--format", "json"], capsys)
    doc = json.loads(out)
    rc, text, err = run(engine, [*argv, "--format", "csv"], capsys)
    assert rc == 0, err
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == 1
    row = {k: as_number(v) for k, v in rows[0].items()}
    mem, tim = doc["memory"], doc["time"]
    assert row["memory_bytes"] == mem["total_bytes"] and row["fits"] is mem["fits"]
    assert row["gpu_memory_bytes"] == mem["gpu_memory_bytes"]
    assert row["headroom_bytes"] == mem["headroom_bytes"]
    assert row["max_micro_batch"] == mem["max_micro_batch"]
    assert row["step_seconds"] == pytest.approx(tim["step_seconds"], rel=1e-12)
    assert row["total_seconds"] == pytest.approx(tim["total_seconds"], rel=1e-12)
    assert row["tokens_per_second"] == pytest.approx(doc["tokens"]["tokens_per_second"],
                                                     rel=1e-12)
    assert row["usd"] == pytest.approx(doc["cost"]["usd"], rel=1e-12)
    assert row["provider"] == doc["cost"]["provider"] and row["gpu"] == doc["gpu"]["name"]
    for name, b in mem["components"].items():
        assert row[f"component_{name}_bytes"] == b
    assert sum(b for k, b in row.items() if k.startswith("component_")) == mem["total_bytes"]


def test_multi_job_csv_has_a_row_per_job(engine, capsys, tmp_path):
    doc = {"estimator_metadata": {"method": "theory"}, "job_configs": [
        {"fm": {"base_model_path": "gpt2", "block_size": 512},
         "hf_training": {"per_device_train_batch_size": b},
         "infra": {"numGpusPerPod": 1, "gpu_model": "A100", "gpu_memory_in_gb": 80}}
        for b in (1, 4)]}
    path = tmp_path / "two.json"
    path.write_text(json.dumps(doc))
    _, out, _ = run(engine, ["estimate", "-f", str(path), "--format", "json"], capsys)
    jobs = json.loads(out)["jobs"]
    rc, text, err = run(engine, ["estimate", "-f", str(path), "--format", "csv"], capsys)
    assert rc == 0, err
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [int(r["job"]) for r in rows] == [1, 2]
    assert [int(r["memory_bytes"]) for r in rows] == [j["memory"]["total_bytes"] for j in jobs]
    assert int(rows[0]["memory_bytes"]) < int(rows[1]["memory_bytes"])  # batch 1 < batch 4


@pytest.mark.parametrize("command,key", [("models", "name"), ("gpus", "name"),
                                         ("prices", "instance")])
def test_listing_csv_matches_json(engine, capsys, command, key):
    _, out, _ = run(engine, [command, "--format", "json"], capsys)
    rows = json.loads(out)
    rc, text, err = run(engine, [command, "--format", "csv"], capsys)
    assert rc == 0, err
    got = list(csv.DictReader(io.StringIO(text)))
    assert len(got) == len(rows) > 0
    for want, have in zip(rows, got, strict=True):
        assert have[key] == want[key]
        for field, value in want.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                assert as_number(have[field]) == pytest.approx(value), (field, have[field])
            elif isinstance(value, list):
                assert have[field] == ";".join(map(str, value))


def test_csv_text_quotes_commas_and_joins_lists():
    text = csv_text(["a", "b", "d"], [{"a": "x, y", "b": [1, 2], "c": "left out",
                                       "d": {"k": 1}}])
    assert list(csv.reader(io.StringIO(text))) == [["a", "b", "d"], ["x, y", "1;2", '{"k": 1}']]


# -- errors with --format json -----------------------------------------------------------------

def test_bad_flag_value_is_a_json_error_on_stdout(engine, capsys):
    rc, out, err = run(engine, ["estimate", "--model", "gpt2", "--zero", "7",
                                "--format", "json"], capsys)
    assert rc == 2
    doc = json.loads(out)
    assert doc == {"error": {"field": "zero", "message": doc["error"]["message"],
                             "accepted": [0, 1, 2, 3]}}
    assert "invalid choice" in doc["error"]["message"]
    assert err.startswith("fmest: error: ")  # people still read one line


def test_bad_flag_type_names_the_flag(engine, capsys):
    rc, out, _ = run(engine, ["estimate", "--model", "gpt2", "--seq-len", "abc",
                              "--format", "json"], capsys)
    assert rc == 2
    error = json.loads(out)["error"]
    assert error["field"] == "seq_len" and "'abc'" in error["message"]


def test_bad_input_file_is_a_json_error(engine, capsys, tmp_path):
    bad = tmp_path / "job.json"
    bad.write_text('{"model": "gpt2", "training": {')
    rc, out, _ = run(engine, ["estimate", "-f", str(bad), "--format", "json"], capsys)
    assert rc == 2
    error = json.loads(out)["error"]
    assert error["field"] == "input" and "malformed JSON" in error["message"]
    rc, out, _ = run(engine, ["estimate", "-f", str(tmp_path / "none.json"),
                              "--format", "json"], capsys)
    assert rc == 2 and json.loads(out)["error"]["field"] == "input"


def test_unknown_name_lists_accepted_values(engine, capsys):
    rc, out, _ = run(engine, ["estimate", "--model", "gpt2", "--gpu", "H100-SMX",
                              "--format", "json"], capsys)
    assert rc == 2
    error = json.loads(out)["error"]
    assert error["field"] == "hardware.gpu" and error["accepted"]
    assert any("h100" in str(a).lower() for a in error["accepted"])


def test_table_format_errors_stay_on_stderr(engine, capsys):
    rc, out, err = run(engine, ["estimate", "--model", "gpt2", "--zero", "7"], capsys)
    assert rc == 2 and out == "" and "--zero" in err


def test_cli_and_service_share_the_error_shape():
    from fmest.errors import InputError, error_object

    exc = InputError("--tp", "must divide the heads", value=3, accepted=[1, 2, 4])
    assert error_object(exc) == {"error": {"field": "tp", "message": "must divide the heads "
                                           "(got 3); accepted: 1, 2, 4", "accepted": [1, 2, 4]}}


# -- --fail-if-no-fit ---------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["table", "json", "csv"])
def test_fail_if_no_fit_exits_3(engine, capsys, fmt):
    rc, out, err = run(engine, ["estimate", *NO_FIT, "--fail-if-no-fit", "--format", fmt],
                       capsys)
    assert rc == EXIT_NO_FIT == 3 and out  # the answer is still printed
    assert "does not fit" in err
    if fmt == "json":
        assert json.loads(out)["memory"]["fits"] is False


def test_fail_if_no_fit_exits_0_when_it_fits(engine, capsys):
    rc, _, err = run(engine, ["estimate", *FITS, "--fail-if-no-fit"], capsys)
    assert rc == 0, err


def test_default_exit_stays_0_when_it_does_not_fit(engine, capsys):
    rc, out, _ = run(engine, ["estimate", *NO_FIT], capsys)
    assert rc == 0 and "DOES NOT FIT" in out


# -- -f - ---------------------------------------------------------------------------------------

def test_input_file_dash_reads_stdin(engine, capsys, monkeypatch, tmp_path):
    job = {"model": "gpt2", "training": {"seq_len": 512, "micro_batch_size": 3},
           "hardware": {"gpu": "A100-SXM-80GB"}}
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job))
    _, from_file, _ = run(engine, ["estimate", "-f", str(path), "--format", "json"], capsys)
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(job)))
    rc, from_stdin, err = run(engine, ["estimate", "-f", "-", "--format", "json"], capsys)
    assert rc == 0, err
    a, b = json.loads(from_file), json.loads(from_stdin)
    assert b["job"]["training"]["micro_batch_size"] == 3
    assert a["memory"] == b["memory"] and a["time"] == b["time"]


# -- Report in Python ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def report(engine):
    import fmest

    return fmest.estimate({"model": "gpt2", "training": {"seq_len": 512},
                           "hardware": {"gpu": "H100-SXM-80GB"}}, engine=engine)


def test_report_to_dict_and_json_are_the_cli_object(engine, report, capsys):
    rc, out, _ = run(engine, ["estimate", "--model", "gpt2", "--seq-len", "512", "--gpu",
                              "H100-SXM-80GB", "--format", "json"], capsys)
    cli = json.loads(out)
    from_json = json.loads(report.to_json())
    assert from_json == json.loads(json.dumps(report.to_dict(), default=str))
    # the input report says where each value came from (flags here, a dict there)
    assert from_json.pop("input")["origins"]["training.seq_len"].startswith("input")
    assert cli.pop("input")["origins"]["training.seq_len"] == "--seq-len"
    assert from_json == cli


def test_report_repr_is_one_short_line(report):
    text = repr(report)
    assert "\n" not in text and len(text) < 200
    assert text.startswith("<Report openai-community/gpt2 on 1 x H100-SXM-80GB")
    assert f"{report.memory.total_bytes / 1024**3:.2f} GiB/GPU" in text and "fits" in text


def test_repr_html_shows_the_total(report):
    page = report._repr_html_()
    total = f"{report.memory.total_bytes / 1024**3:.2f}"
    assert page.startswith("<div>") and total in page and "FITS" in page
    for name, b in report.memory.components.items():
        if b:
            assert f"<td>{name}</td>" in page


def test_fmest_is_typed():
    assert resources.files("fmest").joinpath("py.typed").is_file()


# -- the renderer --------------------------------------------------------------------------------

def test_piped_output_has_no_ansi_escapes():
    for argv in (["gpus"], ["estimate", *FITS]):
        r = subprocess.run([sys.executable, "-m", "fmest", *argv], capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert "\x1b" not in r.stdout and "\x1b" not in r.stderr
    # the plain table is aligned: every line's second column starts where its header does
    lines = r.stdout.split("Per-GPU peak memory")[1].splitlines()[1:]
    head = lines[0]
    assert head.split() == ["component", "GiB"]
    end = len(head)
    rows = [ln for ln in lines[1:] if ln.strip() and not ln.lstrip().startswith("verdict")]
    assert all(len(ln) == end for ln in rows[:3]), rows


def columns_of(text: str) -> list[str]:
    """Lines of a rendered table without ANSI styles."""
    return [ANSI.sub("", ln) for ln in text.splitlines() if ANSI.sub("", ln).strip()]


def test_rich_rendering_on_a_terminal_has_aligned_columns():
    cols = [Column(name="name"), Column(name="GiB", align="right"), Column(name="note")]
    rows = [("weights", "12.55", "bf16"), ("optimizer_states", "125.10", ""),
            ("x", "0.50", "a longer note")]
    text = render_table(cols, rows, tty=True)
    assert ANSI.search(text), "a terminal gets styles"
    lines = [ln for ln in columns_of(text) if not set(ln.strip()) <= set("─ ")]
    assert len(lines) == 4
    # left-aligned columns start at one offset, right-aligned ones end at one offset
    starts = {ln.index(cell) for ln, (cell, _, _) in zip(lines[1:], rows, strict=False)}
    assert starts == {lines[0].index("name")}
    ends = {ln.index(num) + len(num) for ln, (_, num, _) in zip(lines[1:], rows, strict=False)}
    assert ends == {lines[0].index("GiB") + 3}
    notes = {ln.index(note) for ln, (_, _, note) in zip(lines[1:], rows, strict=False) if note}
    assert notes == {lines[0].index("note")}


def test_plain_rendering_when_not_a_terminal():
    text = render_table(["a", Column(name="bb", align="right")], [("xyz", 1), ("q", 100)],
                        tty=False)
    assert text.splitlines() == ["a     bb", "xyz    1", "q    100"]


def test_report_table_on_a_terminal(report):
    from fmest.output.report import report_table

    text = report_table(report, tty=True)
    assert ANSI.search(text)
    plain = "\n".join(columns_of(text))
    assert "verdict: FITS" in plain and "weights" in plain and "step" in plain


def test_progress_goes_to_its_stream_only(capsys):
    log = io.StringIO()
    with Progress("sweep", 3, enabled=True, stream=log) as bar:
        for i in range(3):
            bar.update(advance=1, detail=f"ok={i + 1}")
    assert log.getvalue().splitlines() == ["sweep: 1/3 ok=1", "sweep: 2/3 ok=2",
                                           "sweep: 3/3 ok=3"]
    quiet = io.StringIO()  # a quick run under the interval prints nothing
    with Progress("plan", 10, enabled=True, stream=quiet, min_interval_s=60) as bar:
        for i in range(10):
            bar.update(i + 1)
    assert quiet.getvalue() == "" and capsys.readouterr().out == ""


def test_status_of_a_traced_run_goes_to_the_log_only_when_slow(monkeypatch):
    import fmest.output.render as render

    quick = io.StringIO()
    with render.status("tracing gpt2", stream=quick):
        pass
    assert quick.getvalue() == ""
    monkeypatch.setattr(render, "STATUS_LOG_MIN_SECONDS", 0.0)
    slow = io.StringIO()
    with render.status("tracing gpt2", stream=slow):
        pass
    assert re.fullmatch(r"tracing gpt2: \d+\.\d s\n", slow.getvalue())
