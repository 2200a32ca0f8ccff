"""Intervals on the analytic answers (fmest.uncertainty, issue 22's machinery): every training
answer of memory and step time carries P10-P90 from the shipped residual table, the memory
verdict a probability; learned answers keep their own interval; the table is the benchmark's
output (benchmarks/uncertainty.py) and its quantiles are ordered."""

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
    assert name == "all"
    assert m.provenance.interval == pytest.approx((m.total_bytes * q["p10"],
                                                   m.total_bytes * q["p90"]))
    _, qt = uncertainty.group("time", None)
    assert t.provenance.interval == pytest.approx((t.step_seconds * qt["p10"],
                                                   t.step_seconds * qt["p90"]))
    out = report.to_dict()
    assert 0.0 <= out["memory"]["fits_probability"] <= 1.0


def test_a_stack_with_its_own_group_uses_it(engine):
    stacks = [k.split(":", 1)[1] for k in uncertainty.table()["memory"] if k != "all"]
    if not stacks:
        pytest.skip("no stack has a memory group of its own in the shipped table")
    report = fmest.estimate({**JOB, "training": {**JOB["training"], "stack": stacks[0]}},
                            engine=engine)
    assert f"stack:{stacks[0]}" in report.memory.provenance.detail


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
