"""``fmest learn`` and ``fmest learned-models``."""

from __future__ import annotations

import json


def add_learn_arguments(p) -> None:
    p.add_argument("data", nargs="+", metavar="DATA",
                   help="probe datasets (CSV/Parquet with job_json) or fm-training-estimator "
                        "CSVs")
    p.add_argument("--out", required=True, metavar="BUNDLE_DIR", help="directory to write")
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


def run_learn(args, engine) -> int:
    from fmest_learned_lgbm.train import cv_table, train_bundle

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

    row = {"name": name, "path": str(directory) if directory else None, "source": source}
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
    w = max(len(r["name"]) for r in rows)
    for r in rows:
        if r["status"] != "ok":
            print(f"{r['name']:<{w}}  {r['status']}")
            print(f"{'':<{w}}  {r['path']} ({r['source']})")
            continue
        print(f"{r['name']:<{w}}  {'+'.join(r['targets'])}  trained on {r['trained_on']}; "
              f"{r['trained_rows']} rows, {r['gpu_rows']} on GPUs, "
              f"{r['sources'] or 'no'} sources")
        ev = r["loso"]
        for q in ("memory", "throughput"):
            e = ev.get(q)
            if e:
                print(f"{'':<{w}}  {q}: held-out median |error| theory "
                      f"{e['median_abs_error_theory']:.1%}, hybrid "
                      f"{e['median_abs_error_hybrid']:.1%} ({e['rows']} rows, "
                      f"{e.get('sources') or '?'} sources); {e['interval_level']} interval "
                      f"covers {e['interval_coverage']:.0%}")
        if not ev:
            errs = ", ".join(f"{t} {e:.1%}" for t, e in r["cv_median_abs_error"].items()
                             if e is not None)
            print(f"{'':<{w}}  CV median |error| {errs}")
        print(f"{'':<{w}}  {r['path']} ({r['source']})")
    return 0
