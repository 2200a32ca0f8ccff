"""benchmarks/uncertainty.py's per-source view (issue 22): a stack's coverage says how many
sources it rests on, each source's own out-of-source coverage is kept, their spread is what a
single-source stack's coverage is a draw from, and the P(fit) scores count the answers that sit
at the device exactly (the reserve squeezed to the room left: P(fit) 0.5)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import uncertainty as bench  # benchmarks/uncertainty.py

    return bench


def test_coverage_counts_each_stacks_sources_and_keeps_each_source(bench):
    entries = [{"ratio": 1.0 + 0.02 * (i % 5), "source": f"s{i % 6}", "group": "x",
                "keys": ["all"]} for i in range(60)]
    entries += [{"ratio": 3.0, "source": "lone", "group": "y", "keys": ["all"]}] * 12
    cov = bench.coverage(entries, lambda s: bench.table(entries, exclude=s))
    assert cov["stack:x"]["sources"] == 6 and cov["stack:y"]["sources"] == 1
    assert cov["source:lone"] == {"rows": 12, "coverage": 0.0}
    spread = bench.source_spread(cov)
    assert spread["sources"] == 7
    assert spread["p10"] == 0.0 <= spread["p50"] <= spread["p90"] <= 1.0
    # sources under the row floor are left out of the spread
    assert bench.source_spread(cov, min_rows=11)["sources"] == 1
    assert bench.source_spread({"all": {"rows": 1, "coverage": 1.0}}) is None


def test_fit_scores_count_answers_at_the_device(bench):
    gib = 2.0 ** 30
    tab = {"all": {"p10": 0.8, "p50": 1.0, "p90": 1.3, "rows": 9, "sources": 6},
           "counter:peak": {"p10": 0.8, "p50": 1.0, "p90": 1.3, "rows": 9, "sources": 6}}
    rows = [{"id": "a", "source": "s", "stack": "x", "status": "scored", "kind": "memory",
             "total_bytes": 80 * gib, "capacity_bytes": 80 * gib},
            {"id": "b", "source": "s", "stack": "x", "status": "oom-check", "kind": "memory",
             "total_bytes": 80 * gib, "capacity_bytes": 80 * gib},
            {"id": "c", "source": "s", "stack": "x", "status": "scored", "kind": "memory",
             "total_bytes": 40 * gib, "capacity_bytes": 80 * gib},
            {"id": "d", "source": "s", "stack": "x", "status": "oom-check", "kind": "memory",
             "total_bytes": 160 * gib, "capacity_bytes": 80 * gib}]
    f = bench.fit_scores(rows, lambda s: tab, {"s"})
    assert (f["ran"], f["oom"]) == (2, 2)
    assert (f["ran_at_capacity"], f["oom_at_capacity"]) == (1, 1)
    # at the device exactly the point estimate is a coin flip, counted as fitting at 0.5
    assert f["ran_p_ge_half"] == 1.0 and f["oom_p_lt_half"] == 0.5
    assert [m["id"] for m in f["oom_judged_to_fit"]] == ["b"]
