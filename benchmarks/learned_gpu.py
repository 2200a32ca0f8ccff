"""The learned plugin's default bundle on published GPU runs: build, retrain, and judge it
leave-one-source-out (issue 13).

    python benchmarks/learned_gpu.py              # evaluate the shipped bundle's data (LOSO)
    python benchmarks/learned_gpu.py --retrain    # rebuild the data, retrain the bundle
    python benchmarks/learned_gpu.py --traced 40  # also traced vs theory vs hybrid, 40 rows

**Data.** Every scored row of the evidence set's open part (``benchmarks/data/measured.csv``
without the sealed sources of ``benchmarks/data/sealed_sources.json``, mapped to a
job by ``benchmarks/measured.py`` and scored by ``benchmarks/accuracy.py``'s rules: rows
``suspect``, OOM/boundary checks and unsupported rows are left out) becomes one row of a probe
dataset, ``plugins/learned_lgbm/fmest_learned_lgbm/data/gpu_evidence.csv``:

* ``job_json``: the mapped job; ``source``: the row's source (CV group, never a feature);
* memory rows: ``measured_peak_bytes`` in bytes and ``memory_counter`` = the part of the
  estimate ``accuracy.py`` compares the row's counter with (``allocated`` for
  ``max_memory_allocated``/active bytes, ``reserved`` for ``max_memory_reserved``/unknown,
  ``whole`` for nvidia-smi): like is compared with like;
* throughput rows: ``measured_step_seconds`` = the analytic step time x (predicted rate /
  measured rate) for rate units (tokens/s, samples/s, TFLOP/s, MFU: the rate is inversely
  proportional to the step time of the same job) and x (measured / predicted) for seconds per
  step, so every unit becomes a step time of the job as fmest defines it.

**Training** (``--retrain``): ``fmest_learned_lgbm.train.train_bundle`` with the ``evidence``
feature set, sources weighed equally, grouped CV one source out, then the nested LOSO
evaluation (each source's rows answered by a whole training run without that source) stored
in the bundle's ``metadata.json``. One command; it takes about a minute.

**Report.** Per quantity: theory alone, learned, and hybrid (learned inside its domain, else
theory), median and P90 |error|, source-weighted median, share within 10 %, and the P10-P90
interval coverage on held-out sources; then per source. ``--traced N`` adds up to N memory
rows (one per source in turn) run through the fake-tensor tracer (method ``traced``) beside
theory and hybrid, leave-one-source-out (each row's hybrid from a memory bundle trained without
its source; hybrid's order: in-domain learned > executed trace > theory > scaled trace).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

DATA = ROOT / "plugins/learned_lgbm/fmest_learned_lgbm/data/gpu_evidence.csv"
BUNDLE = ROOT / "plugins/learned_lgbm/fmest_learned_lgbm/bundles/default"
COLUMNS = ("id", "source", "stack", "job_json", "status", "device", "measured_peak_bytes",
           "memory_counter", "measured_step_seconds")
RATE_UNITS = ("tokens_per_sec_per_gpu", "tokens_per_sec", "TFLOPs_per_gpu", "MFU_pct",
              "samples_per_sec")
COUNTER = {"allocated": "allocated", "reserved": "reserved", "whole": "whole"}


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _resolvable(job_dict: dict) -> dict:
    """The job as fmest accepts it: a stack name this fmest does not know is dropped (as
    ``accuracy.py`` does; the stack is then the default profile)."""
    from fmest.convert import job_from_dict
    from fmest.errors import InputError

    try:
        job_from_dict(job_dict)
        return job_dict
    except InputError as exc:
        if "stack" not in job_dict.get("training", {}) or "stack" not in str(exc):
            raise
        return {**job_dict, "training": {k: v for k, v in job_dict["training"].items()
                                         if k != "stack"}}


def evidence_rows() -> list[dict]:
    """One probe-dataset row per scored evidence row (module doc)."""
    import accuracy
    import measured
    import sealed

    from fmest.convert import job_from_dict
    from fmest.engine import Engine

    engine = Engine()
    # the sealed sources (benchmarks/data/sealed_sources.json) never train anything: they are
    # scored in aggregate only, once per model change (accuracy.py --sealed)
    kept = set(sealed.load())
    rows = [r for r in measured.load_rows() if r["source"] not in kept]
    results = accuracy.evaluate(rows, engine=engine, progress=False)
    out = []
    for res in results:
        if res["status"] != "scored" or res["job"] is None:
            continue
        row = res["row"]
        job = _resolvable(res["job"])
        rec = {"id": res["id"], "source": res["source"], "stack": res["stack"],
               "job_json": json.dumps(job, sort_keys=True), "status": "ok", "device": "cuda",
               "measured_peak_bytes": "", "memory_counter": "", "measured_step_seconds": ""}
        if res["kind"] == "memory":
            rec["measured_peak_bytes"] = repr(res["measured"]
                                              * accuracy._memory_bytes_per_unit(row))
            rec["memory_counter"] = COUNTER[res["compared_as"]]
        else:
            report = engine.estimate(job_from_dict(job), quantities=("memory", "time"))
            step = report.time.step_seconds
            ratio = res["predicted"] / res["measured"]
            rec["measured_step_seconds"] = repr(step * (ratio if row["unit"] in RATE_UNITS
                                                        else 1.0 / ratio))
        out.append(rec)
    return out


def write_dataset(path: Path = DATA) -> list[dict]:
    rows = evidence_rows()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    return rows


def retrain(out: Path = BUNDLE) -> dict:
    """Rebuild the data set from the evidence and retrain the default bundle (one command)."""
    from fmest.engine import Engine
    from fmest_learned_lgbm.train import cv_table, train_bundle

    started = time.time()
    rows = write_dataset()
    sources = len({r["source"] for r in rows})
    _log(f"data: {len(rows)} rows from {sources} sources -> {DATA.relative_to(ROOT)} "
         f"({time.time() - started:.0f} s)")
    meta = train_bundle([str(DATA)], Engine(), out, name="default", features="evidence",
                        description=f"published GPU measurements ({len(rows)} rows, {sources} "
                        "sources; benchmarks/data/measured.csv)", progress=None)
    print(cv_table(meta))
    _log(f"retrained {out.relative_to(ROOT)} in {time.time() - started:.0f} s")
    return meta


def _pct(x) -> str:
    return "    -" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:5.1%}"


def print_evaluation(meta: dict) -> None:
    ev = meta["evaluation"]
    print(f"\nBundle {meta['name']!r}: {meta['training_data']['description']}; "
          f"created {meta['created']}")
    print("Held-out sources (nested leave-one-source-out); |error| of estimate vs measured, "
          "throughput as rates\n")
    head = ("quantity", "rows", "src", "theory med", "learned med", "hybrid med", "theory p90",
            "hybrid p90", "src-wtd theory", "src-wtd hybrid", "<=10% th", "<=10% hy",
            "in domain", "P10-P90 cover", "src-wtd cover")
    lines = [head]
    for q in ("memory", "throughput"):
        e = ev.get(q)
        if not e:
            continue
        lines.append((q, str(e["rows"]), str(e["sources"]), _pct(e["median_abs_error_theory"]),
                      _pct(e["median_abs_error_learned"]), _pct(e["median_abs_error_hybrid"]),
                      _pct(e["p90_abs_error_theory"]), _pct(e["p90_abs_error_hybrid"]),
                      _pct(e["source_weighted_median_abs_error_theory"]),
                      _pct(e["source_weighted_median_abs_error_hybrid"]),
                      _pct(e["within10_share_theory"]), _pct(e["within10_share_hybrid"]),
                      _pct(e["in_domain_share"]), _pct(e["interval_coverage"]),
                      _pct(e["interval_coverage_source_weighted"])))
    widths = [max(len(r[i]) for r in lines) for i in range(len(head))]
    for r in lines:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(r, widths, strict=True))))
    verdict = "hybrid beats theory on both" if ev.get("hybrid_beats_theory") else \
        "hybrid does NOT beat theory on both memory and throughput"
    print(f"\n{verdict} (rule for making hybrid the default method)")
    for target, t in meta["targets"].items():
        lo = t.get("loso")
        if not lo:
            continue
        print(f"\n{target}: per held-out source (theory -> hybrid median |error|, coverage, "
              f"in-domain share)")
        for g in sorted(lo["per_group"], key=lambda g: -g["rows"]):
            print(f"  {g['group']:<46} {g['rows']:>4}  {g['median_abs_error_theory']:6.1%} -> "
                  f"{g['median_abs_error_hybrid']:6.1%}  cover {g['interval_coverage']:4.0%}  "
                  f"in domain {g['in_domain_share']:4.0%}")


def _held_out_bundles(sources, tmp: Path) -> dict[str, Path]:
    """A memory bundle per source, trained on every other source's rows (no nested
    evaluation): what hybrid would have answered had the source never been published."""
    from fmest.engine import Engine
    from fmest_learned_lgbm.data import read_dataset
    from fmest_learned_lgbm.train import train_bundle

    f, samples = read_dataset(str(DATA))
    out = {}
    for src in sorted(sources):
        out[src] = tmp / src
        train_bundle([], Engine(), out[src], targets=("memory",), features="evidence",
                     samples=[x for x in samples if x.group != src], files=[f], loso=False)
    return out


def traced_side_by_side(limit: int) -> None:
    """Traced, theory and hybrid on up to ``limit`` memory rows (one per source in turn),
    leave-one-source-out: each row's hybrid answer comes from a bundle trained without its
    source, and hybrid ranks as it does for users (in-domain learned > executed trace >
    theory > scaled trace)."""
    import tempfile

    from fmest.convert import job_from_dict
    from fmest.engine import Engine
    from fmest_learned_lgbm.baseline import comparable_bytes

    engine = Engine()
    rows = [r for r in csv.DictReader(open(DATA, encoding="utf-8")) if r["measured_peak_bytes"]]
    by_source: dict[str, list] = {}
    for r in rows:
        by_source.setdefault(r["source"], []).append(r)
    picked = []
    while len(picked) < limit and any(by_source.values()):
        for s in sorted(by_source):
            if by_source[s] and len(picked) < limit:
                picked.append(by_source[s].pop(0))
    tmp = Path(tempfile.mkdtemp(prefix="fmest-loso-"))
    bundles = _held_out_bundles({r["source"] for r in picked}, tmp)
    print(f"\nTraced vs theory vs hybrid on {len(picked)} memory rows (one per source in "
          "turn), leave-one-source-out; error = estimate / measured - 1 on the counter's "
          "comparable part")
    errs: dict[str, list] = {"traced": [], "theory": [], "hybrid": []}
    for r in picked:
        job = json.loads(r["job_json"])
        truth = float(r["measured_peak_bytes"])
        line = {}
        for method in ("theory", "traced", "hybrid"):
            options = {**job.get("options", {}), "method": method}
            if method == "hybrid":
                options["learned_model"] = str(bundles[r["source"]])
            try:
                report = engine.estimate(job_from_dict({**job, "options": options}),
                                         quantities=("memory",))
                m = report.memory
                if method == "traced" and m.provenance.basis != "traced":
                    line[method] = None
                    continue
                how = m.provenance.basis + (" (scaled)" if m.provenance.scaled else "")
                line[method] = (comparable_bytes(m, r["memory_counter"]) / truth - 1, how)
            except Exception as exc:  # a row the tracer cannot run is a dash, not a crash
                line[method] = None
                _log(f"{r['id']}: {method}: {type(exc).__name__}: {str(exc)[:80]}")
        for method, v in line.items():
            if v is not None and line["traced"] is not None:
                errs[method].append(abs(v[0]))
        cells = "  ".join(f"{m} {'-':>7}" if line[m] is None else
                          f"{m} {line[m][0]:+7.1%}" for m in ("traced", "theory", "hybrid"))
        chose = line["hybrid"][1] if line["hybrid"] else "-"
        traced_how = ("" if not line["traced"] else " (trace scaled)"
                      if "scaled" in line["traced"][1] else " (trace executed)")
        print(f"  {r['id'][:44]:<44} {cells}  hybrid chose {chose}{traced_how}")
    n = len(errs["traced"])
    if n:
        med = {m: sorted(v)[len(v) // 2] for m, v in errs.items() if v}
        print(f"  rows with a trace: {n}; median |error| traced {med['traced']:.1%}, theory "
              f"{med['theory']:.1%}, hybrid {med['hybrid']:.1%}")


def markdown(meta: dict) -> str:
    """The README's "Default method" section, from the bundle's metadata."""
    ev = meta["evaluation"]
    data = meta["training_data"]
    wins = ev.get("hybrid_beats_theory")
    lines = [f"Leave-one-source-out (nested: each source's rows answered by a bundle trained "
             f"without it) on the learned bundle's {data['trained_rows']} GPU rows from "
             f"{data['sources']} sources, trained {meta['created'][:10]} "
             "(`python benchmarks/learned_gpu.py`):", "",
             "| | rows (sources) | theory: median | hybrid: median | theory: source-weighted "
             "| hybrid: source-weighted | hybrid answered learned | P10-P90 interval coverage |",
             "|---|---|---|---|---|---|---|---|"]
    for q, label in (("memory", "per-GPU peak memory"), ("throughput", "throughput / step time")):
        e = ev[q]
        lines.append(f"| {label} | {e['rows']} ({e['sources']}) | "
                     f"{e['median_abs_error_theory']:.1%} | {e['median_abs_error_hybrid']:.1%} | "
                     f"{e['source_weighted_median_abs_error_theory']:.1%} | "
                     f"{e['source_weighted_median_abs_error_hybrid']:.1%} | "
                     f"{e['in_domain_share']:.0%} | {e['interval_coverage']:.0%} |")
    lines.append("")
    if wins:
        lines.append("Hybrid's median error is lower than theory's for both memory and "
                     "throughput, so `hybrid` is the rule's choice for the default method.")
    else:
        lost = [q for q in ("memory", "throughput")
                if ev[q]["median_abs_error_hybrid"] >= ev[q]["median_abs_error_theory"]]
        lines.append("**The default method is `theory`**: hybrid becomes the default only when "
                     "its leave-one-source-out median is lower than theory's for both memory "
                     f"and throughput, and it is not for {' and '.join(lost)}.")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--retrain", action="store_true",
                   help="rebuild the evidence data set and retrain the default bundle")
    p.add_argument("--traced", type=int, default=0, metavar="N",
                   help="also run N memory rows through the tracer (slow: ~8 s per row)")
    p.add_argument("--json", action="store_true", help="print the evaluation as JSON")
    p.add_argument("--markdown", action="store_true",
                   help="print the README's default-method section")
    args = p.parse_args(argv)
    if args.retrain:
        meta = retrain()
    else:
        meta = json.loads((BUNDLE / "metadata.json").read_text(encoding="utf-8"))
    if args.json:
        print(json.dumps(meta["evaluation"], indent=2))
        return 0
    if args.markdown:
        print(markdown(meta))
        return 0
    print_evaluation(meta)
    if args.traced:
        traced_side_by_side(args.traced)
    return 0


if __name__ == "__main__":
    sys.exit(main())
