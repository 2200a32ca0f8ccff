"""The sealed part of the accuracy benchmark (benchmarks/sealed.py, benchmarks/accuracy.py):
the draw's rule and reproducibility, the split, and that --sealed never prints a row."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import accuracy  # noqa: E402  benchmarks/accuracy.py
import measured  # noqa: E402  benchmarks/measured.py
import sealed  # noqa: E402  benchmarks/sealed.py

# a synthetic evidence set: source -> stacks; dev-a is a development source
STACKS = {"dev-a": {"s1"}, "b": {"s1"}, "c": {"s1"}, "d": {"s2"}, "e": {"s2", "s1"},
          "f": {"s3"}, "g": {"s4"}, "h": {"s4"}, "i": {"s1"}, "j": {"s2"}}
DEV = {"dev-a"}


@pytest.fixture(scope="module")
def real():
    rows = measured.load_rows()
    return rows, sealed.source_stacks(rows), sealed.development_sources(rows)


def test_draw_is_reproducible_and_follows_the_rule_on_synthetic_sources():
    first = sealed.draw(STACKS, DEV, seed=7, share=0.2)
    assert first == sealed.draw(STACKS, DEV, seed=7, share=0.2)
    assert sealed.problems(first, STACKS, DEV, share=0.2) == []
    assert "dev-a" not in first and "f" not in first  # dev, and a one-source stack's only one
    for stack in ("s1", "s2", "s4"):  # every stack with >= 2 pool sources is represented
        assert any(stack in STACKS[s] for s in first)
    assert len(first) >= 2  # ceil(0.2 x 9 pool sources)


def test_problems_flags_a_draw_that_breaks_the_rule():
    found = sealed.problems(["dev-a", "f", "zz"], STACKS, DEV, share=0.2)
    text = "\n".join(found)
    assert "dev-a: a development source" in text
    assert "zz: not a source" in text
    assert "stack s3: every pool source sealed" in text
    assert "stack s4: 2 pool sources, none sealed" in text


def test_recorded_draw_is_the_seeded_draw_and_holds(real):
    rows, stacks_of, dev = real
    recorded = json.loads(sealed.SEALED_FILE.read_text())
    assert recorded["seed"] == sealed.SEED and recorded["share"] == sealed.SHARE
    assert recorded["method"] and recorded["sources"] == sealed.load_first()
    drawn_from = sealed.at_draw(stacks_of, dev)
    assert sealed.draw(drawn_from, dev) == sealed.draw(drawn_from, dev) == sealed.load_first()
    # the rule holds over the pool the draw was made from: sources added later stay open
    assert sealed.problems(sealed.load_first(), drawn_from, dev) == []
    # a source added after the draw stays open and leaves the recorded draw as it was
    pool = sealed.load_pool()
    assert pool is None or set(pool) <= set(stacks_of)
    later = dict(stacks_of, **{"zz-added-later": {"pytorch"}})
    assert sealed.draw(sealed.at_draw(later, dev), dev) == sealed.load_first()
    # a later draw seals a whole batch with its own rule: every source of it in the set, none in
    # the first draw's pool, and load() is the union
    extra = sealed.later_sources()
    assert extra and set(extra) <= set(stacks_of) and not set(extra) & set(pool or [])
    assert sealed.load() == sorted(set(sealed.load_first()) | set(extra))


def test_split_keeps_sealed_sources_out_of_the_open_rows(real):
    rows = real[0]
    keep = set(sealed.load())
    open_rows, sealed_rows = accuracy.split_sealed(rows, keep)
    assert not {r["source"] for r in open_rows} & keep
    assert {r["source"] for r in sealed_rows} == keep
    assert len(open_rows) + len(sealed_rows) == len(rows)
    assert accuracy.sealed_header(sealed_rows).startswith(
        f"sealed: {len(keep)} sources, {len(sealed_rows)} rows kept out")


def _row(rid, source):
    return {"id": rid, "source": source, "kind": "memory", "unit": "GiB"}


def test_main_filters_a_fake_sealed_list(monkeypatch, capsys):
    rows = [_row("x1", "open-1"), _row("x2", "open-2"), _row("y1", "shut"), _row("y2", "shut")]
    seen = []
    monkeypatch.setattr(measured, "load_rows", lambda: rows)
    monkeypatch.setattr(sealed, "load", lambda: ["shut"])
    monkeypatch.setattr(accuracy, "evaluate",
                        lambda rs, progress=True: seen.extend(rs) or [])
    assert accuracy.main(["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in seen] == ["x1", "x2"]
    assert (out["rows"], out["sources"]) == (2, 2)
    assert out["sealed"] == {"sources": 1, "rows": 2}


@pytest.mark.parametrize("flag", ["--rows", "--markdown", "--unsupported", "--fitters=x"])
def test_sealed_refuses_per_row_and_what_if_modes(flag, capsys):
    with pytest.raises(SystemExit) as exc:
        accuracy.main([flag, "--sealed"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--sealed" in err and flag.split("=")[0] in err and "--json" in err


def _result(rid, source, stack, kind, measured_value, predicted, base, status="scored"):
    unit = "GiB" if kind == "memory" else "tokens_per_sec_per_gpu"
    bname = accuracy.BASE_16 if kind == "memory" else accuracy.BASE_6N
    return {"id": rid, "source": source, "stack": stack, "kind": kind, "unit": unit,
            "row": {"unit": unit}, "job": None, "status": status, "measured": measured_value,
            "predicted": predicted, "baselines": {bname: base}, "passed": True}


def test_sealed_aggregate_names_no_row(capsys):
    open_results = [_result("open-m", "o", "st", "memory", 10.0, 11.0, 20.0)]
    shut = [_result("secret-m1", "s1", "st", "memory", 10.0, 12.0, 30.0),
            _result("secret-m2", "s2", "other", "memory", 10.0, 9.0, 12.0),
            _result("secret-t1", "s1", "st", "throughput", 100.0, 110.0, 150.0),
            _result("secret-o1", "s2", "other", "memory", 80.0, 90.0, 1.0, "oom-check")]
    agg = accuracy.sealed_aggregate(open_results, shut, fitters=[])
    mem = agg["memory"]
    assert mem["fmest"]["rows"] == 2 and mem["fmest"]["median_abs_pct"] == 15.0
    assert mem["baselines"][accuracy.BASE_16]["median_abs_pct"] == 110.0
    assert mem["checks"]["oom"] == {"rows": 1, "passed": 1}
    assert agg["throughput"]["fmest"]["median_abs_pct"] == 10.0
    assert agg["per_stack"]["st"] == {"sources": 1, "memory": 1, "throughput": 1, "checks": 0,
                                      "unanswered": 0, "other": 0}
    accuracy.print_sealed(agg)
    printed = capsys.readouterr().out + json.dumps(agg)
    assert "secret" not in printed and "worst" not in printed
    assert "s1" not in printed.replace("sources", "")
