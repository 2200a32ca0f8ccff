"""Accuracy of the memory_theory plugin against published peak-memory measurements.

Run: ``python benchmarks/accuracy_memory.py`` (``FMEST_MEASURED_CSV`` overrides the CSV path).

What is compared with what (the estimate is made comparable to the measure):

* ``max_memory_reserved`` -> estimate total minus ``cuda_context`` (the caching allocator's
  reserve is inside ``max_memory_reserved``; the CUDA context is not).
* ``max_memory_allocated`` / active -> total minus ``cuda_context`` minus
  ``allocator_reserve``.
* ``nvidia-smi`` -> the whole total.
* ``unknown`` -> treated as active for torchtune rows (their column is "Peak Memory Active
  (GiB)", torch ``active_bytes.all.peak``); boundary rows are pass/fail checks of
  "estimate <= capacity" and get no % error.

Units: ``GiB`` rows are 2^30 bytes; ``GB`` rows are read as GiB too (the CSV notes the 10^9 vs
2^30 ambiguity, +-7.4 %).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import measured  # noqa: E402

GIB = 2**30


def _engine():
    from fmest.testing import new_engine
    import fmest_memory_theory.plugin as plugin

    return new_engine((plugin, "memory_theory"))


def comparable_bytes(estimate, measure_type: str, row_id: str) -> tuple[float, str]:
    """The part of ``estimate`` that a measurement of ``measure_type`` sees."""
    c = estimate.components
    total = estimate.total_bytes
    mt = (measure_type or "unknown").strip()
    if mt == "max_memory_reserved":
        return total - c["cuda_context"], "reserved"
    if mt == "nvidia-smi":
        return total, "nvidia-smi"
    # allocated / active / unknown (torchtune's "Peak Memory Active")
    return total - c["cuda_context"] - c["allocator_reserve"], "active"


def evaluate():
    from fmest.convert import job_from_dict

    eng = _engine()
    results = []
    for row, job_dict, why in measured.jobs("memory"):
        rid = row["id"]
        bound = rid.startswith("unsloth") or "BOUNDARY" in row.get("other", "")
        meas = float(row["measured_value"])
        if job_dict is None:
            results.append(dict(id=rid, supported=False, reason=why))
            continue
        try:
            job = job_from_dict(job_dict)
            est = eng.estimate_memory(job).chosen
        except Exception as exc:
            results.append(dict(id=rid, supported=False, reason=f"{type(exc).__name__}: {exc}"))
            continue
        if bound:
            results.append(dict(id=rid, supported=True, bound=True, measured=meas,
                                mtype="bound<=", est=est.total_bytes / GIB,
                                ok=est.total_bytes <= meas * GIB, phase=est.phase))
            continue
        comp, label = comparable_bytes(est, row["measure_type"], rid)
        err = (comp / GIB - meas) / meas * 100
        results.append(dict(id=rid, supported=True, bound=False, measured=meas,
                            mtype=label, est=comp / GIB, err=err, phase=est.phase))
    return results


def main() -> int:
    res = evaluate()
    print(f"{'id':40s} {'measured':>9s} {'type':>10s} {'estimate':>9s} {'error':>8s}  phase")
    for r in res:
        if not r["supported"]:
            continue
        if r["bound"]:
            verdict = "PASS" if r["ok"] else "FAIL"
            print(f"{r['id']:40s} {r['measured']:9.1f} {r['mtype']:>10s} {r['est']:9.1f} "
                  f"{verdict:>8s}  {r['phase']}")
        else:
            print(f"{r['id']:40s} {r['measured']:9.1f} {r['mtype']:>10s} {r['est']:9.1f} "
                  f"{r['err']:+7.1f}%  {r['phase']}")
    errs = [r for r in res if r["supported"] and not r["bound"]]
    bounds = [r for r in res if r["supported"] and r["bound"]]
    uns = [r for r in res if not r["supported"]]
    if errs:
        abs_e = [abs(r["err"]) for r in errs]
        worst = max(errs, key=lambda r: abs(r["err"]))
        within = sum(e <= 10 for e in abs_e) / len(abs_e)
        print(f"\nsummary: {len(errs)} rows with % error: median |error| "
              f"{statistics.median(abs_e):.1f}%, within 10%: {within:.0%}, "
              f"worst {worst['id']} {worst['err']:+.1f}%; "
              f"bounds passed {sum(r['ok'] for r in bounds)}/{len(bounds)}; "
              f"supported {len(errs) + len(bounds)}, unsupported {len(uns)}")
    for r in uns:
        print(f"  unsupported {r['id']}: {r['reason']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
