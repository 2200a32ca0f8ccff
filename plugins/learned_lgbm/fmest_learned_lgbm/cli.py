"""``fmest learn`` and ``fmest learned-models``."""

from __future__ import annotations

import json
from typing import Any


def add_learn_arguments(p) -> None:
    p.add_argument("data", nargs="+", metavar="DATA",
                   help="probe datasets (CSV/Parquet with job_json) or fm-training-estimator "
                        "CSVs")
    p.add_argument("--out", required=True, metavar="BUNDLE_DIR",
                   help="directory to write: new, empty, or a bundle to replace (replaced "
                   "whole once training is done; interrupted, the old bundle stays)")
    p.add_argument("--targets", default="memory,time", metavar="memory,time",
                   help="what to learn (targets without enough rows are skipped)")
    p.add_argument("--name", help="bundle name recorded in metadata.json (default: the "
                   "directory name)")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("--features", default="auto", metavar="auto|probes|evidence",
                   help="feature set: evidence (published GPU runs: stack, GPU, model, "
                   "technique, layout ...), probes (fmest probe rows); auto: evidence when "
                   "every row has a source column")
    p.add_argument("--no-loso", action="store_true",
                   help="skip the nested leave-one-source-out evaluation")


def require_lightgbm() -> None:
    """``fmest learn`` fails at the door, in one line, when lightgbm cannot be imported (not
    installed, or its shared library cannot load) instead of deep inside training."""
    try:
        import lightgbm  # noqa: F401
    except (ImportError, OSError) as exc:
        from fmest.errors import PluginError

        raise PluginError("learned_lgbm", f"fmest learn needs lightgbm, which cannot be "
                          f"imported ({type(exc).__name__}: {exc}); pip install lightgbm "
                          "(a dependency of fmest-learned-lgbm)") from None


def run_learn(args, engine) -> int:
    from fmest_learned_lgbm.train import cv_table, train_bundle

    require_lightgbm()
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    meta = train_bundle(args.data, engine, args.out, targets=targets, name=args.name,
                        features=args.features, loso=False if args.no_loso else None)
    if args.format == "json":
        print(json.dumps(meta, indent=2))
        return 0
    print(f"wrote bundle {meta['name']!r} to {args.out} "
          f"({meta['training_data']['description']})")
    print(cv_table(meta))
    return 0


def add_list_arguments(p) -> None:
    p.add_argument("--format", choices=("table", "json"), default="table")


def _row(name: str, directory, source: str) -> dict:
    """One bundle as ``learned-models`` lists it."""
    from fmest.errors import FmestError
    from fmest_learned_lgbm.bundle import load_bundle

    row: dict[str, Any] = {"name": name, "path": str(directory) if directory else None,
                           "source": source}
    if directory is None:
        return dict(row, status="broken")
    try:
        b = load_bundle(directory)
    except FmestError as exc:
        return dict(row, status=f"broken: {exc}")
    data = b.meta.get("training_data", {})
    row.update(status="ok", targets=sorted(b.targets),
               trained_on=data.get("description"), created=b.meta.get("created"),
               trained_rows=data.get("trained_rows", data.get("rows")),
               sources=data.get("sources"),
               gpu_rows=data.get("gpu_rows", sum(
                   m.meta.get("devices", {}).get("cuda", 0) for m in b.targets.values())),
               loso=b.meta.get("evaluation") or {},
               cv_median_abs_error={t: m.meta.get("cv", {}).get(
                   "median_abs_error_learned") for t, m in b.targets.items()})
    return row


def run_list(args, engine) -> int:
    from fmest_learned_lgbm.bundle import available_bundles

    rows = [_row(name, directory, source)
            for name, (directory, source) in sorted(available_bundles().items())]
    if args.format == "json":
        print(json.dumps(rows, indent=2))
        return 0
    from fmest.output.render import Column, render_table

    def held_out(r: dict, q: str) -> str:
        e = r.get("loso", {}).get(q)
        if not e:
            return "-"
        return (f"{e['median_abs_error_theory']:.1%} -> {e['median_abs_error_hybrid']:.1%} "
                f"({e['rows']} rows, {e.get('sources') or '?'} sources; "
                f"{e['interval_level']} covers {e['interval_coverage']:.0%})")

    def cv(r: dict) -> str:
        return ", ".join(f"{t} {e:.1%}" for t, e in r.get("cv_median_abs_error", {}).items()
                         if e is not None) or "-"

    right = {"rows", "GPU rows", "sources"}
    head = [Column(name=n, align="right" if n in right else "left")
            for n in ("name", "targets", "rows", "GPU rows", "sources",
                      "memory held-out |err| theory -> hybrid",
                      "throughput held-out |err| theory -> hybrid", "CV |err|")]
    print(render_table(head, [
        (r["name"], r["status"]) + ("",) * 6 if r["status"] != "ok" else
        (r["name"], "+".join(r["targets"]), r["trained_rows"], r["gpu_rows"],
         r["sources"] or "no", held_out(r, "memory"), held_out(r, "throughput"),
         cv(r) if not r["loso"] else "-") for r in rows]))
    for r in rows:
        trained = f"trained on {r['trained_on']}; " if r.get("trained_on") else ""
        print(f"{r['name']}: {trained}{r['path']} ({r['source']})")
    return 0
