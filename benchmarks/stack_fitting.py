"""Writes the per-stack constants the product ships (issue 12):
``python benchmarks/stack_fitting.py --write`` fits them on every row of the evidence set and
writes ``core/fmest/data/stacks_fitted.json`` with the rows used and each stack's
leave-one-source-out error (without ``--write``: prints it). The procedure and the fitters are
in ``stack_constants.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import accuracy  # noqa: E402
import fitting  # noqa: E402
import measured  # noqa: E402
import stack_constants  # noqa: E402


def _scored(results, quantity, kinds):
    return [accuracy.to_scored(r, quantity) for r in results
            if r["kind"] in kinds and r["status"] == "scored"]


def fit_all(results) -> dict:
    """In-sample constants, the rows used and each stack's LOSO error (the JSON written)."""
    out: dict = {"procedure": stack_constants.__doc__.split("Keys are")[0].strip(),
                 "fitted_by": "python benchmarks/stack_fitting.py --write",
                 "evidence": "benchmarks/data/measured.csv",
                 "time_factor": {}, "reserve_fraction": {}, "rows": {}, "loso": {}}
    for fitter, quantity, key in (
            (stack_constants.StackTimeFitter(), "throughput", "time_factor"),
            (stack_constants.StackReserveFitter(), "memory", "reserve_fraction")):
        items = [i for i in _scored(results, quantity, (quantity,)) if fitter.applies(i)]
        params = fitter.fit(items)
        fitted = {k: round(v, 4) for k, v in sorted(params.items())}
        if not any(isinstance(f, type(fitter)) for f in stack_constants.stack_fitters()):
            # not shipped (stack_constants.stack_fitters: accuracy.py refits per held-out
            # source only what is shipped, so a shipped constant it does not refit would be
            # in-sample there): kept beside it for the record
            out[f"{key}_not_shipped"] = fitted
        else:
            out[key] = fitted
        loso, _ = fitting.leave_one_source_out(items, [fitter])
        by_stack: dict[str, list] = {}
        for item in items:
            by_stack.setdefault(stack_constants.job_stack(item), []).append(item)
        for stack, members in sorted(by_stack.items()):
            errs = [abs(accuracy.pct_error(m.row, loso[m.id], m.measured)) for m in members]
            out["rows"].setdefault(key, {})[stack] = sorted(m.id for m in members)
            out["loso"].setdefault(key, {})[stack] = {
                "rows": len(members), "sources": len({m.source for m in members}),
                "median_abs_pct": round(statistics.median(errs), 2),
                "within10_share": round(sum(e <= 10 for e in errs) / len(errs), 3)}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="fit the per-stack constants (issue 12)")
    ap.add_argument("--write", action="store_true",
                    help="write core/fmest/data/stacks_fitted.json (else print it)")
    args = ap.parse_args(argv)
    # predictions with physics only (no fitted constant), then the fit on every row
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump({"stacks": {}}, fh)
    os.environ["FMEST_FITTED_CONSTANTS"] = fh.name
    try:
        results = accuracy.evaluate(measured.load_rows(), progress=False)
        data = fit_all(results)
    finally:
        os.unlink(fh.name)
        os.environ.pop("FMEST_FITTED_CONSTANTS", None)
    text = json.dumps(data, indent=1, sort_keys=False) + "\n"
    if args.write:
        (REPO / "core" / "fmest" / "data" / "stacks_fitted.json").write_text(text)
    else:
        print(text)
    for key in ("time_factor_not_shipped", "reserve_fraction"):
        for stack, value in data[key].items():
            lo = data["loso"][key.replace("_not_shipped", "")][stack]
            print(f"{key:17s} {stack:20s} {value:7.4f}  rows {lo['rows']:4d} sources "
                  f"{lo['sources']:3d}  LOSO median {lo['median_abs_pct']:5.1f}%",
                  file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
