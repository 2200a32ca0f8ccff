"""Calibrated uncertainty: P10/P50/P90 of fmest's memory and step-time answers, from the
leave-one-source-out residuals of the evidence set, and how well they cover sources they never saw.

    python benchmarks/uncertainty.py            # out-of-source coverage on the open sources
    python benchmarks/uncertainty.py --write    # and write core/fmest/data/uncertainty.json
    python benchmarks/uncertainty.py --sealed   # score the sealed sources, in aggregate only

A residual is the ratio true / predicted of one scored row of ``benchmarks/data/measured.csv``
(memory: measured / predicted in the row's own counter; time: measured step time / predicted, a
rate row read as its step time), taken from ``benchmarks/accuracy.py``'s leave-one-source-out
answers (its fitted constants refit without the row's source). Quantiles are taken in log space
with every source *family* weighing the same (``benchmarks/source_families.py``: the documents
of one publisher and harness), per group and for all rows; "out of source" below holds out a
source's whole family, and a group's source minimum counts families. The groups are what the
residuals depend on (:data:`ANSWER_GROUPS`, :func:`row_groups`): memory by the counter the row
was read in (``counter:allocated``: tensors only; ``counter:peak``: reserved, nvidia-smi or an
unnamed counter, which see the allocator's cache; a memory answer is the device peak and takes
``counter:peak``); step time by the stack, else the GPU family, else all rows. A group with
fewer than :data:`MIN_SOURCES` sources or :data:`MIN_ROWS` rows is left out and its rows (and
answers) widen to the next group of their chain.

**Sealed part.** :data:`SEALED_SHARE` of the non-development sources, drawn once with
:data:`SEED` and listed in ``benchmarks/data/sealed_sources.json``, are left out of the table and
of every figure below except ``--sealed``, which prints their coverage and fit-probability
scores in aggregate only (to be run once, at the end of a model change).

**Coverage out of source.** For each open source, the quantiles are rebuilt without it and its
rows are checked against them: the share inside P10-P90 is the coverage the table would have on
a source it has never seen (target 72-88 %). Each stack's line says how many sources it rests
on, and the spread of the sources' own coverage is printed beside it (:func:`source_spread`): a
stack with one source has no stack-level evidence out of source, so its coverage is one draw
from that spread whatever the group rule (docs/benchmarks.md, "Why no group rule meets the
per-stack band").

**P(fit).** Rows that record a run that fitted (every scored memory row: the job ran) and rows
that record an OOM are scored with ``fmest.estimates.fits_probability`` on the analytic total,
the GPU's memory and the interval a memory answer gets (``counter:peak``, built without the
row's source): the share of runs with P(fit) >= 0.5 (target >= 97 %), of OOMs with P(fit) < 0.5
(target >= 90 %), the same at 0.9 (``--fit-confidence``), the Brier score, the runs and OOMs
whose analytic total is the device exactly (the reserve squeezed to the room left: P(fit) 0.5),
and the OOM rows still judged to fit (``--list-oom``).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import functools
import json
import math
import sys
from pathlib import Path
from typing import Callable, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

import accuracy  # noqa: E402
import fitting  # noqa: E402
import measured  # noqa: E402
import sealed as sealed_draw  # noqa: E402  (benchmarks/sealed.py)
from source_families import family  # noqa: E402  (benchmarks/source_families.py)

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "core" / "fmest" / "data" / "uncertainty.json"
SEALED_FILE = sealed_draw.SEALED_FILE
#: The sealed draw: whole sources, random, recorded (the brief: "random with a recorded seed");
#: the rule and its check live in ``benchmarks/sealed.py``.
SEED = sealed_draw.SEED
SEALED_SHARE = sealed_draw.SHARE
#: Fewest sources and rows for a group of its own; below, the next group of the chain.
MIN_SOURCES = 5
MIN_ROWS = 20
#: ... and for a group of the shipped table: one more, so that every group an answer takes was
#: itself scored out of source (without any one of its sources it still has MIN_SOURCES)
SHIPPED_MIN_SOURCES = MIN_SOURCES + 1
#: The chain of groups an *answer* takes, most specific first (written to the table and read
#: by fmest.uncertainty): a memory answer is the device peak, read like the counters that see
#: the allocator's cache; a step time by its stack, else its GPU family (the kernel-rate tables
#: differ most by GPU generation), else all rows.
ANSWER_GROUPS = {"memory": ["counter:peak", "all"],
                 "time": ["stack:{stack}", "gpu:{gpu_family}", "all"]}
#: Counters that see tensors only (the rest see the allocator's cache too: ``counter:peak``)
ALLOCATED_COUNTERS = ("allocated",)
#: The tail share each side of the interval that is *reported* as P10/P90: the nominal 10 % when
#: the sources agree; a new source differs from the others more than rows of one source do, so
#: the tail share that gives 80 % coverage out of source is chosen among these by leave-one-
#: source-out inside the training sources (nested: the held-out source never picks its own) and
#: stored with the table. This is the table's one fitted constant per quantity.
TAILS = (0.10, 0.075, 0.05, 0.035, 0.025, 0.015, 0.01)
TARGET_COVERAGE = 0.80


def sealed_sources(all_sources: list[str]) -> list[str]:
    """The sealed sources: read from :data:`SEALED_FILE`; drawn by ``benchmarks/sealed.py``'s
    rule (whole sources per stack, :data:`SEED`) and recorded when it does not exist."""
    if not SEALED_FILE.exists():
        rows = [r for r in measured.load_rows() if r["source"] in set(all_sources)]
        sealed_draw.write(sealed_draw.draw(sealed_draw.source_stacks(rows), sealed_draw.development_sources(rows)),
                     SEALED_FILE)
    return sealed_draw.load(SEALED_FILE)


def _weighted_quantiles(values: list[float], groups: list[str],
                        qs: tuple[float, ...]) -> list[float]:
    """Quantiles of ``values`` with every group (source) weighing the same in total."""
    per: dict[str, int] = {}
    for g in groups:
        per[g] = per.get(g, 0) + 1
    pairs = sorted((v, 1.0 / per[g]) for v, g in zip(values, groups, strict=True))
    total = sum(w for _, w in pairs)
    out = []
    for q in qs:
        target, acc = q * total, 0.0
        chosen = pairs[-1][0]
        for v, w in pairs:
            acc += w
            if acc >= target:
                chosen = v
                break
        out.append(chosen)
    return out


def residuals(results: list[dict], analysis: dict) -> dict[str, list[dict]]:
    """Per quantity (``memory``, ``time``), one entry per scored row: ``ratio`` (true /
    predicted), ``source``, ``group`` (stack), and for memory the row's result."""
    out: dict[str, list[dict]] = {"memory": [], "time": []}
    by_id = {r["id"]: r for r in results}
    for quantity, key in (("memory", "memory"), ("time", "throughput")):
        for rid, err in analysis[key]["errors_loso"].items():
            r = by_id[rid]
            e = err / 100.0
            if 1.0 + e <= 0:
                continue
            # accuracy.pct_error is predicted / measured - 1 on amounts and rates (a step time
            # is compared as a rate): memory true/pred = 1/(1+e); step time true/pred = 1+e
            ratio = 1.0 / (1.0 + e) if quantity == "memory" else 1.0 + e
            out[quantity].append({"id": rid, "ratio": ratio, "source": r["source"],
                                  "family": family(r["source"]),
                                  "group": r["stack"] or "unknown",
                                  "keys": row_groups(quantity, r)})
    return out


def row_groups(quantity: str, r: dict) -> list[str]:
    """The chain of groups of one evaluated row, most specific first (see the module doc)."""
    if quantity == "memory":
        counter = ("counter:allocated" if r.get("compared_as") in ALLOCATED_COUNTERS
                   else "counter:peak")
        return [counter, "all"]
    from fmest.uncertainty import gpu_family

    gpu = ((r.get("job") or {}).get("hardware") or {}).get("gpu")
    fields = {"stack": r.get("stack"), "gpu_family": gpu_family(gpu)}
    return [t.format(**fields) for t in ANSWER_GROUPS[quantity]
            if all(v for f, v in fields.items() if "{" + f + "}" in t)]


def _keys(entry: dict) -> list[str]:
    return entry.get("keys") or [f"stack:{entry['group']}", "all"]


def table(entries: list[dict], exclude: Optional[str] = None, tail: float = 0.10,
          min_sources: int = MIN_SOURCES) -> dict[str, dict]:
    """Quantiles per group and for ``all`` from ``entries`` (leaving out source ``exclude``):
    ``p10``/``p90`` at ``tail`` and ``1 - tail``, ``p50`` the median. The shipped table asks
    for one source to spare (:data:`SHIPPED_MIN_SOURCES`): a group with exactly
    :data:`MIN_SOURCES` sources never holds its own rows out of source, so its coverage would
    be unmeasured."""
    use = [e for e in entries if _family(e) != exclude]
    out: dict[str, dict] = {}
    groups: dict[str, list[dict]] = {"all": use}
    for e in use:
        for key in _keys(e):
            if key != "all":
                groups.setdefault(key, []).append(e)
    for name, members in groups.items():
        sources = {m["source"] for m in members}
        families = {_family(m) for m in members}
        if name != "all" and (len(families) < min_sources or len(members) < MIN_ROWS):
            continue
        logs = [math.log(m["ratio"]) for m in members]
        q10, q50, q90 = _weighted_quantiles(logs, [_family(m) for m in members],
                                            (tail, 0.5, 1.0 - tail))
        out[name] = {"p10": round(math.exp(q10), 4), "p50": round(math.exp(q50), 4),
                     "p90": round(math.exp(q90), 4), "rows": len(members),
                     "sources": len(sources), "families": len(families)}
    return out


def lookup(tab: dict[str, dict], keys: list[str]) -> tuple[str, dict]:
    """The first group of ``keys`` that ``tab`` holds, else ``all``."""
    for key in keys:
        if key in tab:
            return key, tab[key]
    return "all", tab["all"]


def _family(entry: dict) -> str:
    """The family of an entry's source (benchmarks/source_families.py)."""
    return entry.get("family") or family(entry["source"])


def _table_without(entries: list[dict], tail: float, fam: str) -> dict[str, dict]:
    return table(entries, exclude=fam, tail=tail)


def choose_tail(entries: list[dict]) -> float:
    """The widest nominal tail (narrowest interval) whose leave-one-source-out coverage within
    ``entries`` reaches :data:`TARGET_COVERAGE`; the smallest tail when none does."""
    for tail in TAILS:
        cov = coverage(entries, functools.partial(_table_without, entries, tail))
        if cov["all"]["coverage"] >= TARGET_COVERAGE:
            return tail
    return TAILS[-1]


def nested_coverage(entries: list[dict]) -> dict:
    """Coverage out of source with the tail itself chosen without the held-out source."""
    def against(fam: str) -> dict[str, dict]:
        rest = [e for e in entries if _family(e) != fam]
        return table(rest, tail=choose_tail(rest))
    return coverage(entries, against)


def coverage(entries: list[dict], against: Callable[[str], dict[str, dict]]) -> dict:
    """Share of each source's rows inside P10-P90 of the table built without that source: for
    all rows, per stack (``stack:<name>``, with its number of ``sources``), per group the rows
    used (``used:<group>``) and per source (``source:<name>``)."""
    inside: dict[str, list[bool]] = {"all": []}
    stack_sources: dict[str, set[str]] = {}
    for fam in sorted({_family(e) for e in entries}):
        tab = against(fam)
        for e in (x for x in entries if _family(x) == fam):
            source = e["source"]
            used, q = lookup(tab, _keys(e))
            ok = q["p10"] <= e["ratio"] <= q["p90"]
            inside["all"].append(ok)
            inside.setdefault(f"stack:{e['group']}", []).append(ok)
            inside.setdefault(f"used:{used}", []).append(ok)
            inside.setdefault(f"source:{source}", []).append(ok)
            stack_sources.setdefault(f"stack:{e['group']}", set()).add(source)
    out = {k: {"rows": len(v), "coverage": sum(v) / len(v)} for k, v in inside.items() if v}
    for k, srcs in stack_sources.items():
        out[k]["sources"] = len(srcs)
    return out


#: Fewest rows for a stack's or a source's coverage to be printed (issue 22: stacks >= 10 rows)
MIN_COVERAGE_ROWS = 10


def source_spread(cov: dict, min_rows: int = MIN_COVERAGE_ROWS) -> Optional[dict]:
    """P10 / P50 / P90 over sources (each with >= ``min_rows`` rows) of their own out-of-source
    coverage. A stack with one source has no stack-level evidence out of source: its coverage
    is that source's draw from this spread (sources differ by a bias of their own that the
    others cannot predict), so a single-source stack outside 72-88 % inside this spread says
    nothing against the intervals' calibration."""
    values = sorted(v["coverage"] for k, v in cov.items()
                    if k.startswith("source:") and v["rows"] >= min_rows)
    if not values:
        return None

    def at(q: float) -> float:
        return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]
    return {"sources": len(values), "p10": at(0.10), "p50": at(0.50), "p90": at(0.90)}


def _fixed(tab: dict[str, dict], source: str) -> dict[str, dict]:
    """``tab`` whatever the source (the sealed sources: the table never saw them)."""
    return tab


def fit_scores(results: list[dict], mem_table_without: Callable[[str], dict[str, dict]],
               sources: set[str]) -> dict:
    """P(fit) on rows that ran (scored memory rows) and rows that recorded an OOM, with the
    interval a memory answer gets (:data:`ANSWER_GROUPS`), built by ``mem_table_without``."""
    from fmest.estimates import fits_probability

    ran: list[float] = []
    ooms: list[float] = []
    missed: list[dict] = []
    # answers at the device exactly: the reserve squeezed to the room left (memory_theory's
    # estimator.assemble: the caching allocator frees its cache before an OOM), P(fit) 0.5
    at_capacity = {"ran": 0, "oom": 0}
    for r in results:
        if r["source"] not in sources or r.get("total_bytes") is None:
            continue
        if r["status"] == "scored" and r["kind"] == "memory":
            outcome = 1
        elif r["status"] == "oom-check":
            outcome = 0
        else:
            continue
        _, q = lookup(mem_table_without(family(r["source"])), ANSWER_GROUPS["memory"])
        total = r["total_bytes"]
        p = fits_probability(total, (total * q["p10"], total * q["p90"]), r["capacity_bytes"])
        p = p if p is not None else float(total <= r["capacity_bytes"])
        (ran if outcome else ooms).append(p)
        if abs(total - r["capacity_bytes"]) <= 1e-3 * r["capacity_bytes"]:
            at_capacity["ran" if outcome else "oom"] += 1
        if not outcome and p >= 0.5:
            missed.append({"id": r["id"], "source": r["source"], "stack": r["stack"],
                           "p_fit": p, "total_over_capacity": total / r["capacity_bytes"]})
    brier = [(p - 1) ** 2 for p in ran] + [p ** 2 for p in ooms]

    def share(values: list[float], test: Callable[[float], bool]) -> Optional[float]:
        return sum(map(test, values)) / len(values) if values else None

    return {"ran": len(ran), "ran_p_ge_half": share(ran, lambda p: p >= 0.5),
            "ran_p_ge_090": share(ran, lambda p: p >= 0.9),
            "oom": len(ooms), "oom_p_lt_half": share(ooms, lambda p: p < 0.5),
            "oom_p_lt_090": share(ooms, lambda p: p < 0.9),
            "brier": sum(brier) / len(brier) if brier else None,
            "ran_at_capacity": at_capacity["ran"], "oom_at_capacity": at_capacity["oom"],
            "oom_judged_to_fit": sorted(missed, key=lambda m: m["total_over_capacity"])}


def held_out_residuals(held: list[dict], open_results: list[dict], fitters) -> dict:
    """:func:`residuals` of rows no table saw (the sealed part, a file kept outside the repo),
    each scored with the fitters fitted on the open sources only."""
    errors: dict = {}
    for quantity in ("memory", "throughput"):
        train = [accuracy.to_scored(r, quantity) for r in open_results
                 if r["kind"] == quantity and r["status"] == "scored"]
        scored = [r for r in held if r["kind"] == quantity and r["status"] == "scored"]
        preds = accuracy.fit_and_apply(train, [accuracy.to_scored(r, quantity)
                                               for r in scored], fitters)
        errors[quantity] = {"errors_loso": {
            r["id"]: accuracy.pct_error(r["row"], preds[r["id"]], r["measured"])
            for r in scored}}
    return residuals(held, errors)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"write {OUT.relative_to(ROOT)}")
    ap.add_argument("--sealed", action="store_true",
                    help="score the sealed sources (aggregate only; once per model change)")
    ap.add_argument("--extra", metavar="CSV", type=Path,
                    help="also score the rows of CSV (measured.csv's format, kept outside the "
                         "repo): coverage and P(fit) in aggregate only")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--list-oom", action="store_true",
                    help="list the recorded OOM rows still given P(fit) >= 0.5")
    args = ap.parse_args(argv)
    if args.extra is not None and (args.list_oom or args.write):
        ap.error("--extra prints aggregate lines only: not with --list-oom or --write")

    rows = measured.load_rows()
    sealed = set(sealed_sources(sorted({r["source"] for r in rows})))
    # the sealed sources are never evaluated unless asked for, and never fitted on
    results = accuracy.evaluate([r for r in rows if args.sealed or r["source"] not in sealed],
                                progress=True)
    fitters = list(fitting.FITTERS)
    open_results = [r for r in results if r["source"] not in sealed]
    analysis = accuracy.analyse(open_results, fitters)
    open_res = residuals(open_results, analysis)
    sealed_res: dict = {"memory": [], "time": []}
    if args.sealed:   # scored with the fitters fitted on the open sources only
        sealed_res = held_out_residuals([r for r in results if r["source"] in sealed],
                                        open_results, fitters)
    extra_res: dict = {"memory": [], "time": []}
    extra_results: list = []
    if args.extra is not None:   # scored like the sealed part, with the open sources' fitters
        extra_results = accuracy.evaluate(accuracy.load_extra(args.extra), progress=False)
        extra_res = held_out_residuals(extra_results, open_results, fitters)
    tails = {q: choose_tail(v) for q, v in open_res.items()}
    tables = {q: table(v, tail=tails[q], min_sources=SHIPPED_MIN_SOURCES)
              for q, v in open_res.items()}
    report: dict = {"tables": tables, "tails": tails, "sealed_sources": len(sealed)}
    for q in ("memory", "time"):
        report[f"coverage_{q}"] = nested_coverage(open_res[q])
    open_sources = {r["source"] for r in rows} - sealed
    mem_open = open_res["memory"]
    report["fit"] = fit_scores(results, lambda s: table(mem_open, exclude=s,
                                                        tail=tails["memory"]), open_sources)
    if args.sealed:
        report["sealed"] = {
            f"coverage_{q}": coverage(sealed_res[q], functools.partial(_fixed, tables[q]))["all"]
            for q in ("memory", "time") if sealed_res[q]}
        report["sealed"]["fit"] = fit_scores(results, lambda s: tables["memory"], sealed)
    if args.extra is not None:
        extra_sources = {r["source"] for r in extra_results}
        report["extra"] = {
            f"coverage_{q}": coverage(extra_res[q], functools.partial(_fixed, tables[q]))["all"]
            for q in ("memory", "time") if extra_res[q]}
        report["extra"]["sources"] = len(extra_sources)
        report["extra"]["fit"] = fit_scores(extra_results, lambda s: tables["memory"],
                                            extra_sources)
    if args.write:
        OUT.write_text(json.dumps({
            "about": "P10/P50/P90 of true / predicted for fmest's analytic memory and step-time "
                     "answers, per group and for all rows (groups with fewer than "
                     f"{SHIPPED_MIN_SOURCES} sources or {MIN_ROWS} rows widen to the next group of "
                     "their chain), from the "
                     "leave-one-source-out residuals of benchmarks/data/measured.csv without its "
                     "sealed sources. Produced by `python benchmarks/uncertainty.py --write`; "
                     "refit whenever the estimators change (docs/benchmarks.md).",
            "produced": _dt.date.today().isoformat(),
            "min_sources": SHIPPED_MIN_SOURCES, "min_rows": MIN_ROWS,
            "answer_groups": ANSWER_GROUPS,
            "groups_note": "an answer takes the first group of its answer_groups chain the "
                           "table holds ({stack}: the job's training stack, {gpu_family}: "
                           "fmest.uncertainty.gpu_family of its GPU); memory groups are the "
                           "counter the evidence row was read in: counter:allocated "
                           "(max_memory_allocated, active_bytes), counter:peak (reserved, "
                           "nvidia-smi, unnamed)",
            "tails": tails, "tails_note": "the tail share each side chosen so that leave-one-"
                     "source-out coverage reaches 80 % (benchmarks/uncertainty.py TAILS)",
            "memory": tables["memory"], "time": tables["time"]}, indent=2) + "\n")
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    _print(report, list_oom=args.list_oom)
    return 0


def _print(report: dict, list_oom: bool = False) -> None:
    for q in ("memory", "time"):
        print(f"\n== {q.upper()}: true / predicted, P10-P50-P90 (open sources; tails "
              f"{report['tails'][q] * 100:g}% each side) ==")
        print(f"  {'group':<34} {'rows':>5} {'srcs':>5} {'P10':>7} {'P50':>7} {'P90':>7} "
              f"{'coverage out of source':>24}")
        cov = report[f"coverage_{q}"]
        for name, t in sorted(report["tables"][q].items(), key=lambda kv: kv[0] != "all"):
            c = cov.get(name if name == "all" else f"used:{name}")
            shown = f"{c['coverage'] * 100:5.1f}% of {c['rows']}" if c else "-"
            print(f"  {name:<34} {t['rows']:>5} {t['sources']:>5} {t['p10']:>7.3f} "
                  f"{t['p50']:>7.3f} {t['p90']:>7.3f} {shown:>24}")
        print(f"  answers take: {' > '.join(ANSWER_GROUPS[q])}")
        stacks = {k: v for k, v in cov.items()
                  if k.startswith("stack:") and v["rows"] >= MIN_COVERAGE_ROWS}
        for name, c in sorted(stacks.items()):
            n = c.get("sources", 0)
            label = f"{name} ({n} source{'s' if n != 1 else ''})"
            print(f"  {label:<58} {c['coverage'] * 100:5.1f}% of {c['rows']:>4}")
        spread = source_spread(cov)
        if spread:
            print(f"  per source ({spread['sources']} with >= {MIN_COVERAGE_ROWS} rows): P10 "
                  f"{spread['p10'] * 100:.0f}%, median {spread['p50'] * 100:.0f}%, P90 "
                  f"{spread['p90'] * 100:.0f}% (a 1-source stack's coverage is one such draw)")
    f = report["fit"]
    print("\n== P(fit) on the open sources (interval built without the row's source) ==")
    print(f"  runs that fitted: {f['ran']}, P(fit) >= 0.5 for "
          f"{(f['ran_p_ge_half'] or 0) * 100:.1f}% (target >= 97%); >= 0.9 for "
          f"{(f['ran_p_ge_090'] or 0) * 100:.1f}%")
    print(f"  recorded OOMs:    {f['oom']}, P(fit) < 0.5 for "
          f"{(f['oom_p_lt_half'] or 0) * 100:.1f}% (target >= 90%); < 0.9 for "
          f"{(f['oom_p_lt_090'] or 0) * 100:.1f}%")
    print(f"  Brier score: {f['brier']:.3f}" if f["brier"] is not None else "  Brier: -")
    print(f"  answers at the device exactly (reserve squeezed, P(fit) 0.5): "
          f"{f['ran_at_capacity']} runs, {f['oom_at_capacity']} OOMs")
    if list_oom:
        print("  recorded OOMs given P(fit) >= 0.5 (analytic total / device, P(fit)):")
        for m in f["oom_judged_to_fit"]:
            print(f"    {m['id']:<66} {m['total_over_capacity']:6.3f} {m['p_fit']:5.2f}")
    for key, title in (("sealed", f"SEALED ({report['sealed_sources']} sources"),
                       ("extra", f"EXTRA ({report.get('extra', {}).get('sources')} sources "
                                 "kept outside the repo")):
        if key not in report:
            continue
        s = report[key]
        print(f"\n== {title}, aggregate only) ==")
        for q in ("memory", "time"):
            c = s.get(f"coverage_{q}")
            if c:
                print(f"  {q}: P10-P90 coverage {c['coverage'] * 100:.1f}% of {c['rows']} rows")
        fs = s["fit"]
        print(f"  P(fit): runs >= 0.5 {(fs['ran_p_ge_half'] or 0) * 100:.1f}% of {fs['ran']}; "
              f"OOMs < 0.5 {(fs['oom_p_lt_half'] or 0) * 100:.1f}% of {fs['oom']}; "
              f"Brier {fs['brier']:.3f}" if fs["brier"] is not None else "  P(fit): -")


if __name__ == "__main__":
    sys.exit(main())
