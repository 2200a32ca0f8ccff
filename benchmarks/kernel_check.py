"""fmest's GPU time against the CUDA kernels a lent GPU ran in the same training step.

    python benchmarks/kernel_check.py [--rows] [--format json]

``benchmarks/gpu/memory_probe.py`` times each case's training steps and, in one more
forward+backward under ``torch.profiler``, sums the CUDA kernels' own device time
(``gpu_kernel_time_s`` in the evidence row's ``other``). That splits a measured step into the GPU's
work and the time it waited, so the time model's parts can be checked one by one instead of
only through the step they add up to:

* **kernels**: fmest's GPU time of the forward and backward (the breakdown less
  ``framework_overhead``, ``optimizer_step`` and ``offload``) over the measured kernel sum.
  1.00 = the roofline's kernels take as long as the GPU's; below 1 the model's kernels are too
  fast.
* **idle**: the measured step less the kernels and fmest's optimizer step (torch AdamW's time
  reproduces the microbench's to 1 %: ``plugins/time_roofline/tests/test_kernel_rates.py``),
  as a share of the step: the time the GPU ran no kernel, beside
  ``FRAMEWORK_OVERHEAD_FRACTION``, the share the model adds for it.

Cases are grouped by technique and by regime: GPU-bound (the kernels fill at least 75 % of the
step) or host-bound (the host's eager dispatch sets the step; the idle share there is host
time, ``formulas.host_dispatch_seconds``). Rows marked ``suspect`` (the case that recorded the
allocator history) are left out. Reads the open evidence (``benchmarks/data/measured.csv``;
the sealed sources are never read here). Prints medians and P10-P90; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from gemm_check import _quantile  # noqa: E402  the same nearest-rank quantile

#: kernels filling at least this share of the measured step: the step is GPU-bound
GPU_BOUND_SHARE = 0.75
_KERNEL = re.compile(r"gpu_kernel_time_s=([0-9.]+)")
_CLASSES = re.compile(r"gpu_kernel_classes_s=([a-z0-9_:./]+)")


def kernel_classes(other: str) -> dict[str, float]:
    """The probe's kernel time by class (``gpu_kernel_classes_s=gemm:0.1/attention:0.02``;
    probes from 2026-11-27 on the H100 and before carry none)."""
    m = _CLASSES.search(other or "")
    if not m:
        return {}
    out = {}
    for item in m.group(1).split("/"):
        name, _, sec = item.partition(":")
        try:
            out[name] = float(sec)
        except ValueError:
            continue
    return out
_NOT_GPU_WORK = ("framework_overhead", "optimizer_step", "offload")


def probe_rows() -> list[dict]:
    """The open throughput rows that carry a measured kernel time (suspect rows left out)."""
    import accuracy
    import measured
    import sealed as sealed_draw

    rows, _ = accuracy.split_sealed(measured.load_rows(), set(sealed_draw.load()))
    return [r for r in rows if r["kind"] == "throughput" and _KERNEL.search(r.get("other", ""))
            and not r.get("suspect")]


def compare(rows: list[dict]) -> list[dict]:
    """One record per row: measured step and kernels, fmest's parts, the two ratios."""
    import accuracy
    import measured

    from fmest.convert import job_from_dict
    from fmest_time_roofline import formulas as F

    engine = accuracy._engine()
    out = []
    for row in rows:
        mapped = measured.map_row(row)
        job = accuracy._job_with_known_stack(job_from_dict, mapped.job)
        time = engine.estimate(job, quantities=("memory", "time")).time
        if time is None:
            continue
        parts = time.breakdown
        fmest_fb = sum(v for k, v in parts.items() if k not in _NOT_GPU_WORK)
        tokens = int(row["seq_len"]) * int(row["micro_batch"])
        step = tokens / float(row["measured_value"])
        kernels = float(_KERNEL.search(row["other"]).group(1))
        opt = parts.get("optimizer_step", 0.0)
        out.append({
            "id": row["id"], "gpu": row["gpu"], "technique": row["technique"],
            "measured_step_s": step, "measured_kernels_s": kernels,
            "measured_kernel_classes_s": kernel_classes(row["other"]),
            "fmest_kernels_s": fmest_fb, "fmest_optimizer_s": opt,
            "fmest_step_s": time.step_seconds,
            "kernel_ratio": fmest_fb / kernels,
            "kernel_share": (kernels + opt) / step,
            "idle_share": max(0.0, step - kernels - opt) / step,
            "regime": "GPU-bound" if (kernels + opt) / step >= GPU_BOUND_SHARE else "host-bound",
            "framework_overhead_fraction": F.FRAMEWORK_OVERHEAD_FRACTION,
        })
    return out


def summarise(records: list[dict]) -> list[dict]:
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in records:
        groups.setdefault((r["regime"], r["technique"]), []).append(r)
        groups.setdefault((r["regime"], "all"), []).append(r)
    out = []
    for (regime, technique), rs in sorted(groups.items()):
        ratios = [r["kernel_ratio"] for r in rs]
        idle = [r["idle_share"] for r in rs]
        out.append({"regime": regime, "technique": technique, "rows": len(rs),
                    "kernel_ratio_p50": statistics.median(ratios),
                    "kernel_ratio_p10": _quantile(ratios, 0.1),
                    "kernel_ratio_p90": _quantile(ratios, 0.9),
                    "idle_share_p50": statistics.median(idle),
                    "idle_share_p10": _quantile(idle, 0.1),
                    "idle_share_p90": _quantile(idle, 0.9)})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", action="store_true", help="print every case too")
    ap.add_argument("--format", choices=("table", "json"), default="table")
    args = ap.parse_args(argv)
    records = compare(probe_rows())
    summary = summarise(records)
    if args.format == "json":
        print(json.dumps({"summary": summary, "rows": records if args.rows else []}, indent=1))
        return 0
    if not records:
        print("no open evidence row carries gpu_kernel_time_s (run benchmarks/gpu/memory_probe.py "
              "on a GPU and convert it with benchmarks/gpu/to_evidence.py)")
        return 0
    fo = records[0]["framework_overhead_fraction"]
    print(f"fmest's GPU time against measured CUDA kernels ({len(records)} cases; "
          f"FRAMEWORK_OVERHEAD_FRACTION = {fo:.2f})")
    print(f"  {'regime':<11} {'technique':<9} {'rows':>4}   {'fmest / measured kernels':<26}"
          f"{'idle share of the step':<24}")
    for s in summary:
        print(f"  {s['regime']:<11} {s['technique']:<9} {s['rows']:>4}   "
              f"{s['kernel_ratio_p50']:5.2f} (P10-P90 {s['kernel_ratio_p10']:.2f}-"
              f"{s['kernel_ratio_p90']:.2f})   {100 * s['idle_share_p50']:5.1f} % "
              f"({100 * s['idle_share_p10']:.1f}-{100 * s['idle_share_p90']:.1f} %)")
    print("  kernels: 1.00 = the model's forward+backward kernels take the GPU's time; idle: the "
          "step less kernels and optimizer")
    if args.rows:
        print()
        print(f"  {'case':<60} {'step s':>7} {'kern s':>7} {'fmest s':>8} {'ratio':>6} "
              f"{'idle':>6}")
        for r in records:
            print(f"  {r['id'][-60:]:<60} {r['measured_step_s']:7.3f} "
                  f"{r['measured_kernels_s']:7.3f} {r['fmest_kernels_s']:8.3f} "
                  f"{r['kernel_ratio']:6.2f} {100 * r['idle_share']:5.1f}%"
                  + ("  " + ", ".join(f"{k} {v:.3f}" for k, v in sorted(
                      r["measured_kernel_classes_s"].items(), key=lambda kv: -kv[1])[:4])
                     if r["measured_kernel_classes_s"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
