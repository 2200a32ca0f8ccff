"""benchmarks/gemm_check.py on the committed H200 microbench: the GEMMs that kept the GPU busy
past 100 ms run at the sustained rate the time model gives a step's GEMMs, the short ones at
the burst (MAMF) rate (docs/time_model.md, "GEMM")."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gemm_check  # noqa: E402

CSV = ROOT / "benchmarks/gpu/results/H200-SXM-141GB-2026-11-27/microbench_H200-SXM-141GB.csv"


def _median(items, key, lo, hi, dtype="bf16"):
    sel = [x[key] for x in items if x["dtype"] == dtype and lo <= x["busy_ms"] < hi]
    assert len(sel) >= 10
    return statistics.median(sel)


def test_long_gemms_match_the_sustained_rate_and_short_ones_the_burst_rate():
    items = gemm_check.compare(CSV)
    assert {x["gpu"] for x in items} == {"H200-SXM-141GB"}
    assert 0.97 <= _median(items, "sustained", 100.0, float("inf")) <= 1.03
    assert _median(items, "burst", 100.0, float("inf")) > 1.08     # burst is too fast there
    assert 0.97 <= _median(items, "burst", 0.0, 20.0) <= 1.08


def test_gemm_check_prints_a_table(capsys):
    assert gemm_check.main([]) == 0
    out = capsys.readouterr().out
    assert ">= 100 ms busy" in out and "sustained" in out
