"""Training bundles: rows -> features and log(measured/theory) -> quantile LightGBM models,
cross-validated by model family, written with checksums and metadata.

Why a ratio: the model learns what the formulas miss, so it starts from a sane answer and,
outside the data, a tree's flat extrapolation keeps the last correction instead of a wild
number. Why quantiles: P10/P50/P90 models give the interval; the CV residuals then widen it
(conformalized quantile regression, Romano et al. 2019, arXiv:1905.03222) so that on model
families the models never saw it covers the truth about 80 % of the time.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import platform
from collections import Counter
from pathlib import Path
from typing import Any, Optional, Sequence

from fmest.errors import FmestError, InputError

from fmest_learned_lgbm import __version__
from fmest_learned_lgbm.baseline import allocated_bytes, baseline_version, theory_answers
from fmest_learned_lgbm.bundle import FORMAT, QUANTILES, sha256_file
from fmest_learned_lgbm.data import DataFile, Sample, read_dataset
from fmest_learned_lgbm.features import DEFAULT_FEATURES, family, feature_values, kind, model_name

TARGETS = ("memory", "time")
ALPHAS = {"p10": 0.1, "p50": 0.5, "p90": 0.9}
COVERAGE = 0.8
MIN_ROWS = 8
NUM_BOOST_ROUND = 150
SHRINKAGE = (0.0, 0.25, 0.5, 0.75, 1.0)


def lgbm_params(n_rows: int, alpha: float) -> dict[str, Any]:
    """Parameters for 50-500 rows: few shallow leaves, small leaves allowed, deterministic."""
    return {"objective": "quantile", "alpha": alpha, "learning_rate": 0.05, "num_leaves": 7,
            "max_depth": 3, "min_data_in_leaf": max(2, min(10, n_rows // 20)),
            "min_data_per_group": 2, "max_cat_to_onehot": 16, "lambda_l2": 1.0,
            "min_sum_hessian_in_leaf": 0.0, "feature_pre_filter": False,
            "deterministic": True, "force_row_wise": True, "num_threads": 1, "seed": 7,
            "verbose": -1}


def _baseline(table) -> str:
    """The plugin that gave most rows' baseline (one in practice)."""
    return table.baseline_plugins.most_common(1)[0][0] if table.baseline_plugins else "unknown"


class Table:
    """Training rows of one target."""

    def __init__(self, target: str, names: list[str]) -> None:
        self.target = target
        self.names = names
        self.values: list[dict[str, Any]] = []
        self.y: list[float] = []
        self.theory: list[float] = []
        self.measured: list[float] = []
        self.families: list[str] = []
        self.models: list[str] = []
        self.devices: list[str] = []
        self.skipped: Counter = Counter()
        self.baseline_plugins: Counter = Counter()  # plugin that gave each row's baseline

    def __len__(self) -> int:
        return len(self.y)


def build_tables(samples: Sequence[Sample], engine, targets: Sequence[str],
                 features: Optional[dict[str, list[str]]] = None) -> dict[str, Table]:
    """Resolve each ok sample with ``engine`` and compute features and the baseline."""
    from fmest.convert import job_from_dict

    features = features or DEFAULT_FEATURES
    tables = {t: Table(t, list(features[t])) for t in targets}
    for s in samples:
        if s.status != "ok":
            for t in tables.values():
                t.skipped[f"status {s.status}"] += 1
            continue
        try:
            job = job_from_dict(s.job)
            ctx = engine.context(job)
        except FmestError as exc:
            for t in tables.values():
                t.skipped[f"job does not resolve ({type(exc).__name__})"] += 1
            continue
        answers = None
        for target, table in tables.items():
            measured = s.memory_bytes if target == "memory" else s.step_seconds
            if measured is None:
                table.skipped["no measurement"] += 1
                continue
            try:
                memory, time = answers if answers is not None else \
                    theory_answers(job, ctx, engine)
                answers = (memory, time)
            except FmestError as exc:
                table.skipped[f"no analytic baseline ({type(exc).__name__})"] += 1
                continue
            base = memory if target == "memory" else time
            theory = None if base is None else (
                allocated_bytes(base) if target == "memory" else float(base.step_seconds))
            if base is not None:
                table.baseline_plugins[base.provenance.plugin] += 1
            if not theory or theory <= 0:
                table.skipped["no analytic baseline"] += 1
                continue
            table.values.append(feature_values(table.names, job, ctx, theory=theory,
                                               device=s.device))
            table.y.append(math.log(measured / theory))
            table.theory.append(theory)
            table.measured.append(measured)
            table.families.append(family(job, ctx))
            table.models.append(model_name(job, ctx))
            table.devices.append(s.device)
    return tables


def feature_spec(table: Table, rows: Optional[Sequence[int]] = None) -> list[dict]:
    idx = range(len(table)) if rows is None else rows
    spec = []
    for n in table.names:
        vals = [table.values[i][n] for i in idx]
        if kind(n) == "categorical":
            spec.append({"name": n, "kind": "categorical",
                         "levels": sorted({str(v) for v in vals})})
        else:
            spec.append({"name": n, "kind": "numeric", "min": float(min(vals)),
                         "max": float(max(vals))})
    return spec


def _matrix(table: Table, spec: list[dict], rows: Sequence[int]):
    import numpy as np

    out = np.empty((len(rows), len(spec)), dtype=float)
    for r, i in enumerate(rows):
        v = table.values[i]
        for c, f in enumerate(spec):
            x = v[f["name"]]
            if f["kind"] == "categorical":
                out[r, c] = f["levels"].index(str(x)) if str(x) in f["levels"] else math.nan
            else:
                out[r, c] = float(x)
    return out


def fit(table: Table, rows: Sequence[int]):
    """Fit the three quantile models on ``rows``; returns (spec, {quantile: Booster})."""
    import lightgbm
    import numpy as np

    spec = feature_spec(table, rows)
    x = _matrix(table, spec, rows)
    y = np.asarray([table.y[i] for i in rows], dtype=float)
    cats = [i for i, f in enumerate(spec) if f["kind"] == "categorical"]
    boosters = {}
    for q, alpha in ALPHAS.items():
        ds = lightgbm.Dataset(x, label=y, feature_name=[f["name"] for f in spec],
                              categorical_feature=cats, free_raw_data=False,
                              params={"verbose": -1})
        boosters[q] = lightgbm.train(lgbm_params(len(rows), alpha), ds,
                                     num_boost_round=NUM_BOOST_ROUND)
    return spec, boosters


def _predict(boosters, table: Table, spec, rows):
    x = _matrix(table, spec, rows)
    return {q: [float(v) for v in b.predict(x, num_threads=1)] for q, b in boosters.items()}


def _median(xs):
    xs = sorted(xs)
    n = len(xs)
    if not n:
        return math.nan
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def _quantile(xs, q):
    xs = sorted(xs)
    if not xs:
        return math.nan
    k = min(len(xs) - 1, max(0, math.ceil(q * (len(xs) + 1)) - 1))
    return xs[k]


def group_folds(groups: Sequence[str], max_folds: int = 10) -> list[list[int]]:
    """Held-out row sets, one per group (leave-one-group-out), or groups dealt round-robin by
    size into ``max_folds`` folds when there are more groups."""
    by: dict[str, list[int]] = {}
    for i, g in enumerate(groups):
        by.setdefault(g, []).append(i)
    names = sorted(by, key=lambda g: (-len(by[g]), g))
    if len(names) <= max_folds:
        return [by[g] for g in sorted(by)]
    folds: list[list[int]] = [[] for _ in range(max_folds)]
    for k, g in enumerate(names):
        folds[k % max_folds] += by[g]
    return folds


def cross_validate(table: Table) -> dict[str, Any]:
    """Grouped CV: by model family (``model_type``) when there are at least 3 families, else
    by model name. Returns errors of theory and of the learned model, the interval margin and
    the per-group table."""
    group_by = "model_type"
    groups = table.families
    if len(set(groups)) < 3:
        group_by, groups = "model", table.models
    if len(set(groups)) < 2:
        return {"method": "none: fewer than 2 groups", "group_by": group_by, "folds": 0,
                "rows": len(table), "margin": 0.0}
    folds = group_folds(groups)
    pred: dict[int, dict[str, float]] = {}
    for held in folds:
        train_rows = [i for i in range(len(table)) if i not in set(held)]
        if len(train_rows) < MIN_ROWS // 2:
            continue
        spec, boosters = fit(table, train_rows)
        p = _predict(boosters, table, spec, held)
        for k, i in enumerate(held):
            pred[i] = {q: p[q][k] for q in QUANTILES}
    rows = sorted(pred)
    scores = [max(pred[i]["p10"] - table.y[i], table.y[i] - pred[i]["p90"]) for i in rows]
    margin = max(0.0, _quantile(scores, COVERAGE)) if scores else 0.0
    # How much of the correction to apply: the share whose held-out error is smallest, so a
    # correction that does not carry over to unseen families is damped (0 = theory itself).
    shrink = min(SHRINKAGE, key=lambda lam: (sum(abs(lam * pred[i]["p50"] - table.y[i])
                                                 for i in rows), -lam)) if rows else 1.0

    def errs(rs, which):
        if which == "theory":
            return [abs(math.exp(-table.y[i]) - 1) for i in rs]
        return [abs(math.exp(shrink * pred[i]["p50"] - table.y[i]) - 1) for i in rs]

    def covered(rs, m):
        return sum(pred[i]["p10"] - m <= table.y[i] <= pred[i]["p90"] + m for i in rs) / len(rs)

    per_group = []
    for g in sorted(set(groups)):
        rs = [i for i in rows if groups[i] == g]
        if rs:
            per_group.append({"group": g, "rows": len(rs),
                              "median_abs_error_theory": _median(errs(rs, "theory")),
                              "median_abs_error_learned": _median(errs(rs, "learned")),
                              "interval_coverage": covered(rs, margin)})
    return {"method": f"grouped by {group_by}: " + ("leave-one-group-out" if len(folds) ==
                                                     len(set(groups)) else f"{len(folds)} folds"),
            "group_by": group_by, "folds": len(folds), "rows": len(rows),
            "groups": len(set(groups)),
            "median_abs_error_theory": _median(errs(rows, "theory")),
            "median_abs_error_learned": _median(errs(rows, "learned")),
            "p90_abs_error_theory": _quantile(errs(rows, "theory"), 0.9),
            "p90_abs_error_learned": _quantile(errs(rows, "learned"), 0.9),
            "interval_coverage_raw": covered(rows, 0.0),
            "interval_coverage": covered(rows, margin),
            "margin": margin, "shrinkage": shrink, "per_group": per_group}


def _versions() -> dict[str, str]:
    import lightgbm
    import numpy

    import fmest

    return {"fmest": getattr(fmest, "__version__", "?"), "fmest_learned_lgbm": __version__,
            "lightgbm": lightgbm.__version__, "numpy": numpy.__version__,
            "python": platform.python_version()}


def describe_devices(devices: Sequence[str]) -> str:
    c = Counter(devices)
    kinds = {"cpu": "CPU probes", "cuda": "GPU measurements", "fake": "fake-tensor traces"}
    return ", ".join(f"{kinds.get(d, d)} ({n} rows)" for d, n in sorted(c.items()))


def train_bundle(paths: Sequence[str], engine, out: str | Path, *,
                 targets: Sequence[str] = TARGETS, name: Optional[str] = None,
                 samples: Optional[Sequence[Sample]] = None,
                 files: Optional[Sequence[DataFile]] = None) -> dict[str, Any]:
    """Train and write a bundle to directory ``out``; returns its metadata.

    ``samples``/``files`` may be given instead of reading ``paths`` (benchmarks use subsets).
    Targets with fewer than ``MIN_ROWS`` usable rows are skipped and recorded; none at all is
    an :class:`InputError`.
    """
    for t in targets:
        if t not in TARGETS:
            raise InputError("--targets", "unknown target", value=t, accepted=TARGETS)
    if samples is None:
        files, samples = [], []
        for p in paths:
            f, s = read_dataset(p)
            files.append(f)
            samples += s
    files = list(files or [])
    tables = build_tables(samples, engine, targets)
    out = Path(out)
    meta_targets: dict[str, Any] = {}
    not_trained: dict[str, str] = {}
    written: dict[str, dict] = {}
    for target, table in tables.items():
        if len(table) < MIN_ROWS:
            not_trained[target] = (f"{len(table)} usable rows (< {MIN_ROWS}); skipped: "
                                   f"{dict(table.skipped)}")
            continue
        cv = cross_validate(table)
        spec, boosters = fit(table, list(range(len(table))))
        written[target] = boosters
        meta_targets[target] = {
            "target": "log(measured / theory)",
            "measured": ("measured_peak_bytes (allocated peak) vs the analytic total less "
                         "cuda_context and allocator_reserve") if target == "memory"
            else "measured_step_seconds",
            "baseline": _baseline(table), "baseline_version": baseline_version(_baseline(table)),
            "features": spec,
            "models": {},
            "interval": f"P10/P90 quantile models widened by margin (log units) from "
                        f"grouped CV for {COVERAGE:.0%} coverage",
            "interval_margin": cv.get("margin", 0.0),
            "shrinkage": cv.get("shrinkage", 1.0),
            "params": {q: lgbm_params(len(table), a) for q, a in ALPHAS.items()},
            "num_boost_round": NUM_BOOST_ROUND,
            "rows": len(table),
            "devices": dict(Counter(table.devices)),
            "families": sorted(set(table.families)),
            "models_seen": sorted(set(table.models)),
            "skipped": dict(table.skipped),
            "cv": cv,
        }
    if not meta_targets:
        raise InputError("DATA", "no target could be trained: " + "; ".join(
            f"{t}: {why}" for t, why in not_trained.items()))
    out.mkdir(parents=True, exist_ok=True)
    for target, boosters in written.items():
        for q, b in boosters.items():
            fname = f"{target}.{q}.txt"
            b.save_model(str(out / fname))
            meta_targets[target]["models"][q] = {"file": fname,
                                                 "sha256": sha256_file(out / fname)}
    all_devices = [d for t in tables.values() for d in t.devices]
    rows = max(len(t) for t in tables.values())
    meta = {
        "format": FORMAT,
        "name": name or out.name,
        "created": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
        "versions": _versions(),
        "training_data": {
            "description": describe_devices(
                tables[max(tables, key=lambda t: len(tables[t]))].devices)
            + (" from " + ", ".join(Path(f.path).name for f in files) if files else ""),
            "device": sorted(set(all_devices)),
            "rows": rows,
            "files": [{"file": Path(f.path).name, "format": f.format, "rows": f.rows,
                       "sha256": f.sha256, "skipped": list(f.skipped)} for f in files],
        },
        "targets": meta_targets,
        "not_trained": not_trained,
    }
    (out / "metadata.json").write_text(json.dumps(meta, indent=2, sort_keys=False) + "\n",
                                       encoding="utf-8")
    return meta


def cv_table(meta: dict) -> str:
    """The aligned cross-validation table printed by ``fmest learn``."""
    head = ("target", "rows", "groups", "CV", "theory med|err|", "learned med|err|",
            "theory p90|err|", "learned p90|err|", "P10-P90 cover")
    lines = [head]
    for target, t in meta["targets"].items():
        cv = t["cv"]
        if not cv.get("folds"):
            lines.append((target, str(t["rows"]), "-", cv["method"], "-", "-", "-", "-", "-"))
            continue
        lines.append((target, str(cv["rows"]), f"{cv['groups']} {cv['group_by']}",
                      cv["method"].split(": ", 1)[-1],
                      f"{cv['median_abs_error_theory']:.1%}",
                      f"{cv['median_abs_error_learned']:.1%}",
                      f"{cv['p90_abs_error_theory']:.1%}", f"{cv['p90_abs_error_learned']:.1%}",
                      f"{cv['interval_coverage']:.0%}"))
    widths = [max(len(r[i]) for r in lines) for i in range(len(head))]
    out = ["  ".join(c.ljust(w) if i < 4 else c.rjust(w) for i, (c, w) in
                     enumerate(zip(r, widths))) for r in lines]
    for target, t in meta["targets"].items():
        for g in t["cv"].get("per_group", []):
            out.append(f"  {target:<6} held out {g['group']:<24} rows {g['rows']:>4}  theory "
                       f"{g['median_abs_error_theory']:7.1%}  learned "
                       f"{g['median_abs_error_learned']:7.1%}  cover "
                       f"{g['interval_coverage']:4.0%}")
    for target, why in meta.get("not_trained", {}).items():
        out.append(f"not trained: {target}: {why}")
    return "\n".join(out)
