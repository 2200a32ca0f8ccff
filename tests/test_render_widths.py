"""Issue 26: terminal tables never drop a character, at any width.

Each command runs in-process with ``COLUMNS`` at 60, 80, 120 and 160, piped (plain text laid out
to ``COLUMNS``) and as on a terminal (rich, ANSI stripped). Every number of the same command's
``--format json`` object, formatted as the table formats it, must appear whole in the text (not
cropped: ``x25`` for 256 GPUs; not folded: ``270,65`` + ``0``), every word of the JSON's names
too, and no line may be wider than the terminal. Also: one duration rule for the CLI and the
page's JS.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import fmest.output.render as render
from fmest.cli import main
from fmest.output.render import Column, plain_table, render_table
from fmest.output.units import duration
from fmest.testing import new_engine

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
GIB = 1024**3
WIDTHS = (60, 80, 120, 160)
ROOT = Path(__file__).resolve().parents[1]

ESTIMATE = ["estimate", "--model", "gpt2", "--seq-len", "1024", "--gpu", "H100-SXM-80GB",
            "--dataset-tokens", "1e9", "--explain"]
PLAN = ["plan", "--model", "meta-llama/Llama-3.1-8B", "--gpus", "H100-SXM-80GB",
        "--max-gpus", "256", "--dataset-tokens", "1e10", "--top", "4"]


@pytest.fixture(scope="module")
def engine():
    return new_engine(entrypoints=True)


@pytest.fixture(autouse=True)
def plan_once(monkeypatch):
    """The same search for every width: searched once (the test is about its rendering)."""
    import fmest.plan.planner as planner

    search = planner.plan

    def cached(job, cons, **kw):
        key = (repr(job), repr(cons))
        if key not in PLANS:
            PLANS[key] = search(job, cons, **kw)
        return PLANS[key]

    monkeypatch.setattr(planner, "plan", cached)


PLANS: dict = {}


@pytest.fixture(scope="module")
def two_jobs(tmp_path_factory):
    doc = {"estimator_metadata": {"method": "theory"}, "job_configs": [
        {"fm": {"base_model_path": m, "block_size": 512},
         "hf_training": {"per_device_train_batch_size": b},
         "infra": {"numGpusPerPod": 1, "gpu_model": "A100", "gpu_memory_in_gb": 80}}
        for m, b in (("gpt2", 1), ("meta-llama/Llama-3.2-1B", 4))]}
    path = tmp_path_factory.mktemp("jobs") / "two.json"
    path.write_text(json.dumps(doc))
    return str(path)


def run(engine, argv, capsys, monkeypatch, *, width=None, tty=False) -> str:
    if width is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", str(width))
    monkeypatch.setattr(render, "is_tty", lambda stream=None: tty and stream in (None,
                                                                                   sys.stdout))
    capsys.readouterr()
    assert main(argv, engine=engine) == 0
    return capsys.readouterr().out


def present(token: str, text: str) -> bool:
    """``token`` whole in ``text`` (whitespace runs as one space: prose may wrap between words,
    never inside one): not a piece of a longer number or word."""
    flat = " ".join(text.split())
    tok = " ".join(str(token).split())
    return re.search(r"(?<![\w.,/$+-])" + re.escape(tok) + r"(?![\w/-]|[.,]\d)", flat) is not None


def words(*values) -> list[str]:
    """The words of names in the JSON (each must appear unbroken)."""
    return [w.strip(",;()") for v in values if v for w in str(v).split() if w.strip(",;()")]


# -- what each command's JSON says, formatted as its table formats it ---------------------------

def estimate_tokens(doc: dict) -> list[str]:
    out = []
    for job in doc["jobs"] if "jobs" in doc else [doc]:
        mem, tim, tok, cost = job["memory"], job["time"], job["tokens"], job["cost"]
        out += [f"{b / GIB:.2f}" for b in mem["components"].values() if b]
        out += [f"{mem['total_bytes'] / GIB:.2f}", f"{mem['gpu_memory_bytes'] / GIB:.2f}",
                f"{mem['headroom_bytes'] / GIB:+.2f}"]
        if mem["max_micro_batch"] is not None:
            out.append(str(mem["max_micro_batch"]))
        out += [duration(s) for s in tim["breakdown"].values()]
        out.append(duration(tim["step_seconds"]))
        if tim["total_seconds"] is not None:
            out += [duration(tim["total_seconds"]), f"{tim['total_steps']:,.0f}"]
        if tim["mfu"] is not None:
            out.append(f"{tim['mfu'] * 100:.1f} %")
        out += [f"{tok['tokens_per_second']:,.0f}", f"{tok['tokens_per_second_per_gpu']:,.0f}"]
        if cost is not None:
            out += [f"${cost['usd_per_hour']:,.2f}/h;"]
            if cost["usd"] is not None:
                out.append(f"${cost['usd']:,.2f}")
        out += words(job["model"]["name"], job["gpu"]["name"])
    return out


def plan_tokens(doc: dict) -> list[str]:
    out = [f"{doc['evaluated']:,}"]
    for p in doc["plans"]:
        out += [f"{p['rank']}{'*' if p['pareto'] else ''}", p["gpu"], f"x{p['gpus']}",
                f"{p['micro_batch_size']}x{p['grad_accum_steps']}", p["checkpointing"],
                f"{p['memory_gib']:.1f}", f"{p['headroom_bytes'] / GIB:.1f}",
                f"{p['step_seconds']:.2f}", f"{p['tokens_per_second']:,.0f}",
                duration(p["total_seconds"])]
        if p["usd"] is not None:
            out.append(f"{p['usd']:,.2f}")
        out += words(p["layout"], p["strategy"], p["provider"], p["instance"])
    return out


def prices_tokens(rows: list) -> list[str]:
    out = []
    for r in rows:
        out += [str(r["gpus_per_instance"]), f"{r['usd_per_gpu_hour']:.4f}",
                f"{r['usd_per_instance_hour']:.4f}", str(r["observed"])]
        out += words(r["provider"], r["instance"], r["gpu_name"] or r["gpu"], r["region"],
                     r["price_type"])
    return out


def gpus_tokens(rows: list) -> list[str]:
    out = []
    for g in rows:
        out += [f"{g['memory_bytes'] / GIB:.0f}"]
        if g.get("hbm_bytes_per_s"):
            out.append(f"{g['hbm_bytes_per_s'] / 1e12:.2f}")
        out += [f"{g[k] / 1e12:.1f}" for k in ("bf16_flops_per_s", "fp8_flops_per_s")
                if g.get(k)]
        out += words(g["name"], *g["aliases"][:4])
    return out


def models_tokens(rows: list) -> list[str]:
    return [w for r in rows for w in words(r["name"], r["model_type"], *r["aliases"][:3])]


#: a prose line printed outside the renderer: plugins/cost_cloud prints the prices footer itself
#: (to check once it goes through fmest.output.render.wrap)
EXEMPT_PROSE = re.compile(r"^\d+ row\(s\); USD per hour")

CASES = {
    "estimate": (ESTIMATE, estimate_tokens),
    "estimate-two-jobs": (None, estimate_tokens),
    "plan": (PLAN, plan_tokens),
    "prices": (["prices", "--gpu", "H100-SXM-80GB"], prices_tokens),
    "gpus": (["gpus"], gpus_tokens),
    "models": (["models"], models_tokens),
}


@pytest.mark.parametrize("case", list(CASES))
def test_tables_keep_every_number_and_word_at_every_width(case, engine, two_jobs, capsys,
                                                          monkeypatch):
    argv, tokens_of = CASES[case]
    argv = argv or ["estimate", "-f", two_jobs]
    expected = tokens_of(json.loads(run(engine, [*argv, "--format", "json"], capsys,
                                        monkeypatch)))
    assert expected
    for width in WIDTHS:
        for tty in (False, True):
            raw = run(engine, argv, capsys, monkeypatch, width=width, tty=tty)
            text = ANSI.sub("", raw)
            assert ("\x1b" in raw) == tty, "ANSI styles on a terminal only"
            where = f"{case} at {width} columns ({'terminal' if tty else 'piped'})"
            wide = [ln for ln in text.splitlines() if len(ln) > width]
            wide = [ln for ln in wide if not EXEMPT_PROSE.match(ln)]
            assert not wide, f"{where}: lines wider than the terminal: {wide[:3]}"
            missing = [t for t in expected if not present(t, text)]
            assert not missing, f"{where}: cropped or split: {missing[:8]}\n{text[:3000]}"


def test_the_old_crops_are_gone(engine, capsys, monkeypatch):
    """The cases of the issue: 256 GPUs read ``x256`` (not ``x25``), the Pareto marks stay."""
    doc = json.loads(run(engine, [*PLAN, "--format", "json"], capsys, monkeypatch))
    for width in (80, 160):
        text = ANSI.sub("", run(engine, PLAN, capsys, monkeypatch, width=width, tty=True))
        assert present("x256", text) and "x25 " not in text
        assert sum(present(f"{p['rank']}*", text) for p in doc["plans"] if p["pareto"]) \
            == sum(p["pareto"] for p in doc["plans"]) > 0


def test_piped_without_columns_keeps_one_line_per_row(engine, capsys, monkeypatch):
    text = run(engine, ["gpus"], capsys, monkeypatch)
    rows = json.loads(run(engine, ["gpus", "--format", "json"], capsys, monkeypatch))
    assert len(text.splitlines()) == len(rows) + 1


# -- the renderer itself ------------------------------------------------------------------------

COLS = [Column(name="#"), Column(name="GPU x n"), Column(name="tokens/s", align="right"),
        Column(name="provider"), Column(name="USD", align="right")]
ROWS = [["1*", "H100-SXM-80GB x256", "2,319,344", "DataCrunch 8H100.80S.176V", "19,887.81"],
        ["2", "A100 x8", "270,650", "AWS p4d.24xlarge on demand", "1.00"]]


@pytest.mark.parametrize("width", [20, 30, 45, 60, 100])
def test_numbers_whole_text_wraps_then_splits(width):
    for tty in (False, True):
        text = ANSI.sub("", render_table(COLS, ROWS, tty=tty, width=width))
        assert max(len(ln) for ln in text.splitlines()) <= width, text
        for row in ROWS:
            for cell in row:
                assert all(present(w, text) for w in cell.split()), (cell, text)
        numbers = [ln for ln in text.splitlines() if "19,887.81" in ln]
        assert numbers, text


def test_layout_steps():
    wide = plain_table(COLS, ROWS, width=200)
    assert len(wide.splitlines()) == 3                      # fits: one line per row
    shrunk = plain_table(COLS, ROWS, width=60)
    assert "\n\n" not in shrunk and len(shrunk.splitlines()) > 3   # text wraps, one part
    split = plain_table(COLS, ROWS, width=45)
    parts = split.split("\n\n")
    assert len(parts) >= 2 and all(p.startswith("#") for p in parts)  # key column repeated
    narrow = plain_table([Column(name="name"), Column(name="a long header here")],
                         [["supercalifragilistic", "antidisestablishmentarianism"]], width=30)
    assert narrow.splitlines()[0].startswith("name:")       # vertical field: value


def test_prose_wraps_at_words():
    line = "warning: " + " ".join(["tokens/s"] * 30)
    out = render.wrap(line, width=40)
    assert all(len(ln) <= 40 for ln in out.splitlines())
    assert out.split() == line.split()
    assert render.wrap(line, width=None) == line           # piped without COLUMNS: unchanged


def test_colour_only_on_a_terminal(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert render.paint("FITS", "green", tty=True) != "FITS"
    assert render.paint("FITS", "green", tty=False) == "FITS"
    monkeypatch.setenv("NO_COLOR", "1")
    assert render.paint("FITS", "green", tty=True) == "FITS"


# -- one duration rule --------------------------------------------------------------------------

DURATIONS = [0.0004, 0.0269, 0.9994, 1.0, 6.91, 119.99, 120.0, 4313.4, 7134.0, 7200.0,
             16_200.0, 259_199.0, 259_200.0, 1.07e6, 4.2e8]


def test_duration_rule():
    assert [duration(s) for s in (0.0269, 6.91, 7134.0, 16_200.0, 1.07e6)] == \
        ["26.9 ms", "6.91 s", "118.9 min", "4.5 h", "12.4 days"]
    assert duration(None) == duration(float("nan")) == duration(float("inf")) == "-"


def test_page_formats_durations_with_the_same_rule():
    js = (ROOT / "core/fmest/serve/static/app.js").read_text()
    body = re.search(r"function seconds\(s\) \{.*?\n\}", js, re.S)
    assert body, "app.js: function seconds(s) not found"
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    script = body.group(0) + f"\nconsole.log(JSON.stringify({json.dumps(DURATIONS)}.map(seconds)" \
        ".concat([seconds(null), seconds(NaN)])));"
    out = subprocess.run([node, "-e", script], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [duration(s) for s in DURATIONS] + ["-", "-"]
