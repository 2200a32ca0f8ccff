"""Intervals on the analytic answers (fmest.uncertainty, issue 22's machinery): every training
answer of memory and step time carries P10-P90 from the shipped residual table, the memory
verdict a probability; learned answers keep their own interval; the table is the benchmark's
output (benchmarks/uncertainty.py) and its quantiles are ordered; an answer takes the first
group of its chain the table holds (memory: counter:peak; time: stack, GPU family, all) and
says when it widened to a parent."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import fmest
from fmest import uncertainty

ROOT = Path(__file__).resolve().parent.parent
JOB = {"model": "llama-3-8b", "hardware": {"gpu": "A100-80GB"},
       "training": {"seq_len": 4096, "activation_checkpointing": "full"}}


@pytest.fixture(scope="module")
def engine():
    from fmest.testing import new_engine

    return new_engine(entrypoints=True)


def test_the_shipped_table_is_ordered_and_says_where_it_comes_from():
    t = uncertainty.table()
    assert "benchmarks/uncertainty.py --write" in t["about"]
    for quantity in uncertainty.QUANTITIES:
        assert "all" in t[quantity]
        for name, q in t[quantity].items():
            assert 0 < q["p10"] <= q["p50"] <= q["p90"], (quantity, name)
            assert q["sources"] >= (1 if name == "all" else t["min_sources"])


def test_analytic_training_answers_carry_their_groups_interval(engine):
    report = fmest.estimate(JOB, engine=engine)
    m, t = report.memory, report.time
    name, q = uncertainty.group("memory", None)
    # a memory answer is the device peak: the counters that see the allocator's cache
    assert name == uncertainty.table()["answer_groups"]["memory"][0] == "counter:peak"
    assert m.provenance.interval == pytest.approx((m.total_bytes * q["p10"],
                                                   m.total_bytes * q["p90"]))
    assert "(counter:peak: " in m.provenance.detail
    tname, qt = uncertainty.group("time", None, "A100-80GB")
    assert tname in ("gpu:A100", "all")
    assert t.provenance.interval == pytest.approx((t.step_seconds * qt["p10"],
                                                   t.step_seconds * qt["p90"]))
    out = report.to_dict()
    assert 0.0 <= out["memory"]["fits_probability"] <= 1.0


def test_a_stack_with_its_own_group_uses_it(engine):
    stacks = [k.split(":", 1)[1] for k in uncertainty.table()["time"] if k.startswith("stack:")]
    if not stacks:
        pytest.skip("no stack has a time group of its own in the shipped table")
    report = fmest.estimate({**JOB, "training": {**JOB["training"], "stack": stacks[0]}},
                            engine=engine)
    assert f"(stack:{stacks[0]}: " in report.time.provenance.detail


def test_a_stack_without_a_group_widens_to_its_gpu_family_and_says_so(engine):
    tab = uncertainty.table()
    assert "stack:torchtune" not in tab["time"] and "gpu:A100" in tab["time"]
    report = fmest.estimate({**JOB, "training": {**JOB["training"], "stack": "torchtune"}},
                            engine=engine)
    detail = report.time.provenance.detail
    assert "(gpu:A100, widened from stack:torchtune (too few sources): " in detail
    q = tab["time"]["gpu:A100"]
    assert report.time.provenance.interval == pytest.approx(
        (report.time.step_seconds * q["p10"], report.time.step_seconds * q["p90"]))
    # a GPU family without a group of its own widens to all rows
    assert uncertainty.group("time", "torchtune", "TPU-v5p")[0] == "all"
    assert uncertainty.group("time", None, "L40S-48GB")[0] == "all"


@pytest.mark.parametrize("gpu,family", [
    ("A100-SXM-80GB", "A100"), ("A100-80GB", "A100"), ("H100-SXM-80GB", "H100"),
    ("H800-SXM-80GB", "H100"), ("H200-SXM-141GB", "H200"), ("B200-SXM-180GB", "B200"),
    ("GB200-186GB", "B200"), ("RTX4090-24GB", "RTX/workstation"),
    ("RTX-A6000-48GB", "RTX/workstation"), ("L40S-48GB", "L40S"), ("L4-24GB", "L4"),
    ("TPU-v5p", None), (None, None)])
def test_gpu_families(gpu, family):
    assert uncertainty.gpu_family(gpu) == family


def test_a_table_without_answer_groups_reads_as_before(monkeypatch):
    """Tables written before the groups (stack, else all) keep working."""
    old = {"memory": {"all": {"p10": 0.9, "p50": 1.0, "p90": 1.2, "rows": 9, "sources": 3}},
           "time": {"all": {"p10": 0.8, "p50": 1.0, "p90": 1.4, "rows": 9, "sources": 3},
                    "stack:hf-trainer": {"p10": 0.9, "p50": 1.1, "p90": 1.5, "rows": 9,
                                         "sources": 5}}}
    monkeypatch.setattr(uncertainty, "table", lambda: old)
    uncertainty._chain.cache_clear()
    try:
        assert uncertainty.group("memory", "hf-trainer")[0] == "all"
        assert uncertainty.group("time", "hf-trainer", "A100-80GB")[0] == "stack:hf-trainer"
        assert uncertainty.group("time", "pytorch", "A100-80GB")[0] == "all"
    finally:
        monkeypatch.undo()
        uncertainty._chain.cache_clear()


def test_no_interval_where_the_evidence_says_nothing(engine):
    inference = fmest.estimate({"model": "llama-3-8b", "hardware": {"gpu": "A100-80GB"},
                                "mode": "inference"}, engine=engine)
    assert inference.memory.provenance.interval is None
    calibrated = fmest.estimate({**JOB, "calibration": {"activation_factor": 1.3}},
                                engine=engine)
    assert calibrated.memory.provenance.interval is None
    assert calibrated.time.provenance.interval is not None


def test_the_benchmark_scores_out_of_source_coverage():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import uncertainty as bench  # benchmarks/uncertainty.py

    entries = [{"ratio": r, "source": f"s{i % 6}", "group": "x"}
               for i, r in enumerate([0.8, 0.9, 1.0, 1.1, 1.2, 1.3] * 5)]
    tab = bench.table(entries)
    assert tab["all"]["p10"] <= tab["all"]["p50"] <= tab["all"]["p90"]
    cov = bench.coverage(entries, lambda s: bench.table(entries, exclude=s))
    assert 0.0 <= cov["all"]["coverage"] <= 1.0 and cov["all"]["rows"] == 30
    assert bench.choose_tail(entries) in bench.TAILS


def test_the_benchmarks_groups_follow_the_chain_and_leave_the_source_out():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import uncertainty as bench  # benchmarks/uncertainty.py

    assert bench.row_groups("memory", {"compared_as": "allocated"}) == \
        ["counter:allocated", "all"]
    for counter in ("reserved", "whole"):
        assert bench.row_groups("memory", {"compared_as": counter}) == ["counter:peak", "all"]
    assert bench.row_groups("time", {"stack": "pytorch",
                                     "job": {"hardware": {"gpu": "A100-SXM-80GB"}}}) == \
        ["stack:pytorch", "gpu:A100", "all"]
    assert bench.row_groups("time", {"stack": None, "job": {"hardware": {"gpu": "TPU-v5p"}}}) \
        == ["all"]
    # group g has 6 sources, 5 without any one: out of source every g row uses g; a source of
    # its own with ratios far off must not move its own interval
    entries = [{"ratio": 1.0 + 0.01 * (i % 7), "source": f"s{i % 6}", "group": "x",
                "keys": ["g", "all"]} for i in range(60)]
    entries += [{"ratio": 5.0, "source": "odd", "group": "y", "keys": ["g", "all"]}] * 20
    full = bench.table(entries, min_sources=bench.SHIPPED_MIN_SOURCES)
    assert "g" in full
    cov = bench.coverage(entries, lambda s: bench.table(entries, exclude=s))
    assert cov["used:g"]["rows"] == 80
    assert cov["stack:y"]["coverage"] == 0.0       # built without "odd", it cannot cover it
    # a group of exactly MIN_SOURCES sources is not shipped: its rows never used it
    five = [e for e in entries if e["source"] not in ("s5", "odd")]
    assert "g" in bench.table(five) and "g" not in bench.table(
        five, min_sources=bench.SHIPPED_MIN_SOURCES)
