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


def run_learn(args, engine) -> int:
    from fmest_learned_lgbm.train import cv_table, train_bundle

    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    meta = train_bundle(args.data, engine, args.out, targets=targets, name=args.name)
    if args.format == "json":
        print(json.dumps(meta, indent=2))
        return 0
    print(f"wrote bundle {meta['name']!r} to {args.out} "
          f"({meta['training_data']['description']})")
    print(cv_table(meta))
    return 0


def add_list_arguments(p) -> None:
    p.add_argument("--format", choices=("table", "json"), default="table")


def run_list(args, engine) -> int:
    from fmest.errors import FmestError

    from fmest_learned_lgbm.bundle import available_bundles, load_bundle

    rows = []
    for name, (directory, source) in sorted(available_bundles().items()):
        row = {"name": name, "path": str(directory) if directory else None, "source": source}
        if directory is not None:
            try:
                b = load_bundle(directory)
                row.update(status="ok", targets=sorted(b.targets),
                           trained_on=b.meta.get("training_data", {}).get("description"),
                           created=b.meta.get("created"),
                           cv_median_abs_error={t: m.meta.get("cv", {}).get(
                               "median_abs_error_learned") for t, m in b.targets.items()})
            except FmestError as exc:
                row.update(status=f"broken: {exc}")
        else:
            row.update(status="broken")
        rows.append(row)
    if args.format == "json":
        print(json.dumps(rows, indent=2))
        return 0
    w = max(len(r["name"]) for r in rows)
    for r in rows:
        if r["status"] == "ok":
            errs = ", ".join(f"{t} {e:.1%}" for t, e in r["cv_median_abs_error"].items()
                             if e is not None)
            print(f"{r['name']:<{w}}  {'+'.join(r['targets'])}  trained on {r['trained_on']}; "
                  f"CV median |error| {errs}")
        else:
            print(f"{r['name']:<{w}}  {r['status']}")
        print(f"{'':<{w}}  {r['path']} ({r['source']})")
    return 0
