"""The time model's GEMM rate against the GEMMs fmest measured on GPUs.

    python benchmarks/gemm_check.py [--results benchmarks/gpu/results]

For every ``microbench_*.csv`` under ``--results`` (written by ``benchmarks/gpu/microbench.py``
on a GPU), each measured ``gemm``, ``mamf`` and ``sustained`` row (bf16 ``torch.mm``, fp8
``torch._scaled_mm``) is set beside ``fmest_time_roofline.formulas.gemm_seconds`` for the same
(m, k, n) on that GPU, at two rates: the burst rate (the MAMF fraction, the fastest iteration of
a shape sweep) and the sustained rate a training step's GEMMs run at (``gemm_fraction``: the
clock the power limit holds under back-to-back GEMMs; formulas.SUSTAINED_GEMM_FRACTION_*).

Rows are grouped by how long the case kept the GPU busy without a pause (its timed iterations
x their median time): under 20 ms the GPU runs at its burst clock, from about 100 ms on at the
power-limited one (the 12288^3 case's fastest iteration ran at 822 TFLOP/s, its median at 712).
A training step runs its GEMMs back to back for far longer than 100 ms, so the last group is
the one the sustained rate must match. Prints, per group, the median and P10-P90 of measured /
modelled time under each rate (1.00 = the model's time). Asserts nothing.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: continuous busy time of a case (ms): below the first bound, burst clocks; above the second,
#: the power-limited clock (module doc)
GROUPS = ((0.0, 20.0, "< 20 ms busy"), (20.0, 100.0, "20-100 ms busy"),
          (100.0, float("inf"), ">= 100 ms busy"))


def _quantile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))]


def rows_of(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        return [r for r in csv.DictReader(fh)
                if r["kind"] in ("gemm", "mamf", "sustained") and r["status"] == "ok"
                and r["dtype"] in ("bf16", "fp8") and r["m"] and r["median_ms"]]


def compare(path: Path) -> list[dict]:
    """One dict per measured GEMM: ``busy_ms``, ``burst`` and ``sustained`` (measured /
    modelled time), ``dtype``, ``case``."""
    from fmest.gpus import shipped_gpus
    from fmest_time_roofline import formulas as F

    gpus = {g.name: g for g in shipped_gpus()}
    out = []
    for r in rows_of(path):
        gpu = gpus.get(r.get("gpu_table") or "")
        if gpu is None:
            continue
        m, n, k = float(r["m"]), float(r["n"]), float(r["k"])
        dtype = r["dtype"]
        peak = gpu.peak_flops_per_s(dtype) * F.power_cap_derate(gpu.name)
        elem = 1.0 if dtype == "fp8" else 2.0

        burst, sustained = (
            F.gemm_seconds(m, k, n, peak_flops_per_s=peak, max_fraction=fraction,
                           hbm_bytes_per_s=gpu.hbm_bytes_per_s, bytes_per_element=elem,
                           sms=F.sm_count(gpu.name))
            for fraction in (F.mamf_fraction(gpu.name, dtype), F.gemm_fraction(gpu.name, dtype)))
        measured = float(r["median_ms"]) / 1e3
        out.append({"gpu": gpu.name, "dtype": dtype, "case": f"{r['case']} {r['shape']}",
                    "busy_ms": float(r["median_ms"]) * int(r["n_iter"] or 1),
                    "burst": measured / burst, "sustained": measured / sustained})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "gpu" / "results")
    args = ap.parse_args(argv)
    files = sorted(args.results.glob("*/microbench_*.csv"))
    if not files:
        print(f"no microbench_*.csv under {args.results}")
        return 1
    for path in files:
        items = compare(path)
        print(f"\n{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
        print(f"  {'group':<16} {'dtype':<5} {'rows':>4}   {'measured / model, burst (MAMF)':>31}"
              f"   {'measured / model, sustained':>28}")
        for lo, hi, label in GROUPS:
            for dtype in ("bf16", "fp8"):
                sel = [x for x in items if x["dtype"] == dtype and lo <= x["busy_ms"] < hi]
                if not sel:
                    continue
                cells = []
                for key in ("burst", "sustained"):
                    v = [x[key] for x in sel]
                    cells.append(f"{statistics.median(v):5.2f} (P10-P90 {_quantile(v, 0.1):4.2f}-"
                                 f"{_quantile(v, 0.9):4.2f})")
                print(f"  {label:<16} {dtype:<5} {len(sel):>4}   {cells[0]:>31}   {cells[1]:>28}")
    print("\n1.00 = the model's time; a training step keeps its GEMMs busy far beyond 100 ms, "
          "where the sustained rate applies")
    return 0


if __name__ == "__main__":
    sys.exit(main())
