"""Training bundles: rows -> features and log(measured/theory) -> quantile LightGBM models,
cross-validated by source (rows with a ``source`` column) or model family, written with
checksums and metadata.

Why a ratio: the model learns what the formulas miss, so it starts from a sane answer and,
outside the data, a tree's flat extrapolation keeps the last correction instead of a wild
number. Why quantiles: P10/P50/P90 models give the interval; the held-out residuals then widen
it (conformalized quantile regression, Romano et al. 2019, arXiv:1905.03222) so that on sources
the models never saw it covers the truth about 80 % of the time. Why weights: a few published
tables hold most rows; each source's rows sum to weight 1 so every source counts equally.
:func:`loso_evaluate` gives the honest figure: each source answered by a whole training run
that never saw it.
"""

from __future__ import annotations

import datetime as _dt
import fnmatch
import json
import math
import os
import platform
import shutil
from collections import Counter
from pathlib import Path
from typing import Any, Optional, Sequence

import attrs

from fmest.atomic import check_writable_dir, os_reason, replace_dir_atomic
from fmest.errors import FmestError, InputError
from fmest_learned_lgbm import __version__
from fmest_learned_lgbm.baseline import baseline_version, comparable_bytes, theory_answers
from fmest_learned_lgbm.bundle import FORMAT, gated_point, sha256_file
from fmest_learned_lgbm.data import DataFile, Sample, read_dataset
from fmest_learned_lgbm.features import (
    DEFAULT_FEATURES,
    FEATURE_SETS,
    domain_reasons,
    family,
    feature_values,
    kind,
    model_name,
)

TARGETS = ("memory", "time")
ALPHAS = {"p10": 0.1, "p50": 0.5, "p90": 0.9}
COVERAGE = 0.8
INTERVAL_LEVEL = "P10-P90"
MIN_ROWS = 8
NUM_BOOST_ROUND = 150
SHRINKAGE = (0.0, 0.25, 0.5, 0.75, 1.0)
#: With sources weighed equally (each source's rows sum to weight 1), a leaf must hold at least
#: this much weight: that many sources' worth. A correction one source alone asks for cannot
#: get a leaf of its own, which is what keeps a ~300-row table from steering the model. Chosen
#: among 1-6 on the nested leave-one-source-out benchmark (benchmarks/learned_gpu.py, so the
#: benchmark saw this choice): memory has ~15 sources whose residuals barely carry over (4:
#: the correction is damped to ~theory and the interval remains), time ~35 (2).
MIN_SOURCES_PER_LEAF = {"memory": 4.0, "time": 2.0}
#: Inner folds (sources dealt into this many groups) when a whole training runs inside an
#: outer leave-one-source-out loop (:func:`loso_evaluate`).
INNER_FOLDS = 8


def lgbm_params(n_rows: int, alpha: float, *, weighted: bool = False,
                target: str = "time") -> dict[str, Any]:
    """Parameters for 50-1,000 rows: few shallow leaves, deterministic. ``weighted`` (rows
    weighed so each source sums to 1): a leaf needs ``MIN_SOURCES_PER_LEAF[target]`` sources'
    weight (the quantile objective's hessian is the row weight)."""
    params = {"objective": "quantile", "alpha": alpha, "learning_rate": 0.05, "num_leaves": 7,
              "max_depth": 3, "min_data_in_leaf": max(2, min(10, n_rows // 20)),
              "min_data_per_group": 2, "max_cat_to_onehot": 16, "lambda_l2": 1.0,
              "min_sum_hessian_in_leaf": 0.0, "feature_pre_filter": False,
              "deterministic": True, "force_row_wise": True, "num_threads": 1, "seed": 7,
              "verbose": -1}
    if weighted:
        params.update(min_sum_hessian_in_leaf=MIN_SOURCES_PER_LEAF.get(target, 2.0),
                      min_data_in_leaf=5)
    return params


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
        self.groups: list[str] = []    # the source column ("" when the data has none)
        self.counters: list[str] = []  # memory counter per row
        self.skipped: Counter = Counter()
        self.baseline_plugins: Counter = Counter()  # plugin that gave each row's baseline

    def __len__(self) -> int:
        return len(self.y)

    @property
    def by_source(self) -> bool:
        """Whether rows carry their source (>= 3 distinct, none empty): then CV leaves one
        source out and training weighs sources equally."""
        return all(self.groups) and len(set(self.groups)) >= 3

    def weights(self, rows: Sequence[int]) -> Optional[list[float]]:
        """Row weights so each source's rows sum to 1 (``None`` without sources)."""
        if not self.by_source:
            return None
        count = Counter(self.groups[i] for i in rows)
        return [1.0 / count[self.groups[i]] for i in rows]


def build_tables(samples: Sequence[Sample], engine, targets: Sequence[str],
                 features: Optional[dict[str, list[str]]] = None) -> dict[str, Table]:
    """Resolve each ok sample with ``engine`` and compute features and the baseline (for
    memory, the part of the analytic answer the sample's counter sees)."""
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
                comparable_bytes(base, s.memory_counter) if target == "memory"
                else float(base.step_seconds))
            if base is not None:
                table.baseline_plugins[base.provenance.plugin] += 1
            if not theory or theory <= 0:
                table.skipped["no analytic baseline"] += 1
                continue
            table.values.append(feature_values(table.names, job, ctx, theory=theory,
                                               device=s.device, counter=s.memory_counter))
            table.y.append(math.log(measured / theory))
            table.theory.append(theory)
            table.measured.append(measured)
            table.families.append(family(job, ctx))
            table.models.append(model_name(job, ctx))
            table.devices.append(s.device)
            table.groups.append(s.group)
            table.counters.append(s.memory_counter)
    return tables


def feature_spec(table: Table, rows: Optional[Sequence[int]] = None) -> list[dict[str, Any]]:
    idx = range(len(table)) if rows is None else rows
    spec: list[dict[str, Any]] = []
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
    """Fit the three quantile models on ``rows``; returns (spec, {quantile: Booster}). Each
    feature of ``spec`` says whether any of the three models splits on it (``used``)."""
    import lightgbm
    import numpy as np

    spec = feature_spec(table, rows)
    x = _matrix(table, spec, rows)
    y = np.asarray([table.y[i] for i in rows], dtype=float)
    weights = table.weights(rows)
    cats = [i for i, f in enumerate(spec) if f["kind"] == "categorical"]
    boosters = {}
    for q, alpha in ALPHAS.items():
        ds = lightgbm.Dataset(x, label=y, weight=weights,
                              feature_name=[f["name"] for f in spec],
                              categorical_feature=cats, free_raw_data=False,
                              params={"verbose": -1})
        boosters[q] = lightgbm.train(lgbm_params(len(rows), alpha, weighted=weights is not None,
                                                 target=table.target), ds,
                                     num_boost_round=NUM_BOOST_ROUND)
    used = np.zeros(len(spec))
    for b in boosters.values():
        used += b.feature_importance("split")
    for f, n in zip(spec, used, strict=True):
        f["used"] = bool(n > 0)
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


def _weighted_quantile(xs, weights, q):
    """The smallest x whose cumulative weight reaches ``q`` of the total (weights ``None``:
    :func:`_quantile`)."""
    if weights is None:
        return _quantile(xs, q)
    pairs = sorted(zip(xs, weights, strict=True))
    if not pairs:
        return math.nan
    total = sum(w for _x, w in pairs)
    acc = 0.0
    for x, w in pairs:
        acc += w
        if acc >= q * total - 1e-12:
            return x
    return pairs[-1][0]


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


def cv_groups(table: Table) -> tuple[str, list[str]]:
    """What CV holds out: the ``source`` when rows carry one (:attr:`Table.by_source`), else
    the model family (``model_type``) with at least 3 families, else the model name."""
    if table.by_source:
        return "source", table.groups
    if len(set(table.families)) >= 3:
        return "model_type", table.families
    return "model", table.models


def quantity_error(target: str, y: float, point: float) -> float:
    """Signed error of an answer ``point`` (log ratio to theory; 0 = theory itself) against a
    row whose measured log ratio is ``y``: memory as ``estimate / measured - 1``, time as a
    rate (``throughput estimate / measured - 1`` = ``measured step / estimated step - 1``),
    as ``benchmarks/accuracy.py`` scores them."""
    return math.exp(point - y) - 1 if target == "memory" else math.exp(y - point) - 1


@attrs.frozen(kw_only=True)
class RawPrediction:
    """One held-out row's quantile predictions (log ratio) before shrinkage and margin, and
    whether the row lies inside the fold model's training domain."""

    p10: float
    p50: float
    p90: float
    in_domain: bool


@attrs.frozen(kw_only=True)
class HeldOut:
    """One held-out row's answer: quantiles (log ratio), point, interval and domain."""

    p10: float
    p50: float
    p90: float
    point: float
    low: float
    high: float
    in_domain: bool


def predict_rows(trained: dict, table: Table, rows: Sequence[int]) -> dict[int, HeldOut]:
    """What a trained target (:func:`train_target`) answers for ``rows``."""
    spec, boosters = trained["spec"], trained["boosters"]
    shrink, margin, gate = trained["shrinkage"], trained["margin"], trained["gate"]
    p = _predict(boosters, table, spec, rows)
    out = {}
    for k, i in enumerate(rows):
        point = gated_point(shrink, gate, p["p10"][k], p["p50"][k], p["p90"][k])
        out[i] = HeldOut(p10=p["p10"][k], p50=p["p50"][k], p90=p["p90"][k], point=point,
                         low=min(p["p10"][k] - margin, point),
                         high=max(p["p90"][k] + margin, point),
                         in_domain=not domain_reasons(spec, table.values[i]))
    return out


def summarize(table: Table, pred: dict[int, HeldOut], groups: Sequence[str]) -> dict[str, Any]:
    """Errors of theory, learned and hybrid (learned inside its domain, else theory) over the
    held-out answers ``pred``, plain and with sources (groups) weighed equally, and the
    interval coverage."""
    rows = sorted(pred)
    if not rows:
        return {"rows": 0}
    t = table.target
    count = Counter(groups[i] for i in rows)
    weights = [1.0 / count[groups[i]] for i in rows]

    def err(i, which):
        h = pred[i]
        point = {"theory": 0.0, "learned": h.point,
                 "hybrid": h.point if h.in_domain else 0.0}[which]
        return abs(quantity_error(t, table.y[i], point))

    def stats(rs, ws):
        out: dict[str, float] = {"rows": len(rs), "sources": len({groups[i] for i in rs})}
        for which in ("theory", "learned", "hybrid"):
            e = [err(i, which) for i in rs]
            out[f"median_abs_error_{which}"] = _median(e)
            out[f"p90_abs_error_{which}"] = _quantile(e, 0.9)
            out[f"source_weighted_median_abs_error_{which}"] = _weighted_quantile(e, ws, 0.5)
            out[f"within10_share_{which}"] = sum(x <= 0.10 for x in e) / len(e)
        inside = [pred[i].low <= table.y[i] <= pred[i].high for i in rs]
        out["interval_coverage"] = sum(inside) / len(rs)
        out["interval_coverage_source_weighted"] = (
            sum(w for w, ok in zip(ws, inside, strict=True) if ok) / sum(ws))
        out["in_domain_share"] = sum(pred[i].in_domain for i in rs) / len(rs)
        return out

    summary = stats(rows, weights)
    summary["per_group"] = []
    for g in sorted(count):
        rs = [i for i in rows if groups[i] == g]
        s = stats(rs, [1.0] * len(rs))
        summary["per_group"].append({"group": g, **{k: s[k] for k in (
            "rows", "median_abs_error_theory", "median_abs_error_learned",
            "median_abs_error_hybrid", "interval_coverage", "in_domain_share")}})
    return summary


def _cv_predictions(table: Table, rows: Sequence[int], groups: Sequence[str],
                    max_folds: int) -> dict[int, RawPrediction]:
    """Held-out quantile predictions for ``rows``, one model per fold of groups."""
    folds = group_folds([groups[i] for i in rows], max_folds)
    pred: dict[int, RawPrediction] = {}
    for held_local in folds:
        held = [rows[k] for k in held_local]
        held_set = set(held)
        train_rows = [i for i in rows if i not in held_set]
        if len(train_rows) < MIN_ROWS // 2:
            continue
        spec, boosters = fit(table, train_rows)
        p = _predict(boosters, table, spec, held)
        for k, i in enumerate(held):
            pred[i] = RawPrediction(p10=p["p10"][k], p50=p["p50"][k], p90=p["p90"][k],
                                    in_domain=not domain_reasons(spec, table.values[i]))
    return pred


#: Correct only where the model's own P10-P90 excludes theory (:func:`gated_point`). Chosen by
#: design, not per training run: choosing it on the inner CV flipped between folds and cost
#: more than it saved on held-out sources (benchmarks/learned_gpu.py, 2026-11-23).
GATE = True


def _choose(table: Table, pred: dict[int, RawPrediction]) -> tuple[float, float, bool]:
    """(shrinkage, margin, gate) from held-out predictions.

    Shrinkage: the share of the (gated) correction with the smallest held-out |log error|
    (sources weighed equally when rows carry them), so a correction that does not carry over
    is damped, down to theory itself. Margin: the ``COVERAGE`` quantile of the conformity scores
    ``max(P10 - y, y - P90)`` (conformalized quantile regression, Romano et al. 2019,
    arXiv:1905.03222) over the rows, clamped at 0."""
    rows = sorted(pred)
    if not rows:
        return 1.0, 0.0, GATE
    weights = table.weights(rows) or [1.0] * len(rows)

    def loss(lam):
        return sum(w * abs(gated_point(lam, GATE, pred[i].p10, pred[i].p50, pred[i].p90)
                           - table.y[i])
                   for w, i in zip(weights, rows, strict=True))

    shrink = min(SHRINKAGE, key=lambda v: (loss(v), -v))
    scores = [max(pred[i].p10 - table.y[i], table.y[i] - pred[i].p90) for i in rows]
    # Calibrated per row, not per source: the promise is that 80 % of measurements fall
    # inside (a source-weighted margin over-covers the large, well-predicted tables).
    margin = max(0.0, _quantile(scores, COVERAGE))
    return shrink, margin, GATE


def train_target(table: Table, rows: Optional[Sequence[int]] = None, *,
                 max_folds: Optional[int] = None) -> dict[str, Any]:
    """Cross-validate on ``rows`` (grouped: :func:`cv_groups`; ``max_folds`` None = one fold
    per source when rows carry sources, else up to 10), choose shrinkage and interval margin
    on the held-out predictions, then fit on all ``rows``. Returns ``spec``, ``boosters``,
    ``shrinkage``, ``margin`` and ``cv`` (the summary of the held-out answers)."""
    rows = list(range(len(table))) if rows is None else list(rows)
    group_by, groups = cv_groups(table)
    n_groups = len({groups[i] for i in rows})
    if max_folds is None:
        max_folds = n_groups if group_by == "source" else 10
    cv: dict[str, Any]
    if n_groups < 2:
        shrink, margin, gate = 1.0, 0.0, GATE
        cv = {"method": "none: fewer than 2 groups", "group_by": group_by, "folds": 0,
              "rows": len(rows), "margin": 0.0, "shrinkage": 1.0}
    else:
        raw = _cv_predictions(table, rows, groups, max_folds)
        shrink, margin, gate = _choose(table, raw)
        held = {}
        for i, r in raw.items():
            point = gated_point(shrink, gate, r.p10, r.p50, r.p90)
            held[i] = HeldOut(p10=r.p10, p50=r.p50, p90=r.p90, point=point,
                              low=min(r.p10 - margin, point),
                              high=max(r.p90 + margin, point), in_domain=r.in_domain)
        folds = min(max_folds, n_groups)
        cv = summarize(table, held, groups)
        cv.update(method=f"grouped by {group_by}: " + (
            "leave-one-group-out" if folds == n_groups else f"{folds} folds"),
            group_by=group_by, folds=folds, groups=n_groups, margin=margin, shrinkage=shrink,
            gate=gate,
            interval_coverage_raw=(sum(raw[i].p10 <= table.y[i] <= raw[i].p90
                                       for i in raw) / len(raw)) if raw else math.nan)
    spec, boosters = fit(table, rows)
    return {"spec": spec, "boosters": boosters, "shrinkage": shrink, "margin": margin,
            "gate": gate, "cv": cv}


def loso_evaluate(table: Table, *, inner_folds: int = INNER_FOLDS,
                  progress=None) -> dict[str, Any]:
    """The honest figure: for each source, the whole training (inner CV choosing shrinkage
    and margin over ``inner_folds`` folds of the other sources, then the fit) runs without
    it, and its rows are answered by that model with its domain check. Returns the
    :func:`summarize` dict (theory, learned, hybrid, interval coverage) plus ``method``."""
    group_by, groups = cv_groups(table)
    pred: dict[int, HeldOut] = {}
    names = sorted(set(groups))
    for n, g in enumerate(names, 1):
        held = [i for i in range(len(table)) if groups[i] == g]
        train_rows = [i for i in range(len(table)) if groups[i] != g]
        if len(train_rows) < MIN_ROWS:
            continue
        trained = train_target(table, train_rows, max_folds=inner_folds)
        pred.update(predict_rows(trained, table, held))
        if progress:
            progress(f"{table.target}: held out {n}/{len(names)} {g}")
    out = summarize(table, pred, groups)
    out["method"] = (f"leave-one-{group_by}-out, nested: each held-out {group_by}'s rows are "
                     f"answered by a model trained (inner CV over {inner_folds} folds of the "
                     f"other {group_by}s choosing shrinkage and interval margin) without it; "
                     "hybrid = learned inside its domain, else theory")
    out["group_by"] = group_by
    return out


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


def _feature_set(name: str, samples: Sequence[Sample]) -> tuple[str, dict[str, list[str]]]:
    """``auto``: ``evidence`` when the rows carry a ``source`` column (published GPU runs),
    else ``probes``."""
    if name == "auto":
        name = "evidence" if samples and all(s.group for s in samples) else "probes"
    if name not in FEATURE_SETS:
        raise InputError("--features", "unknown feature set", value=name,
                         accepted=("auto", *FEATURE_SETS))
    return name, FEATURE_SETS[name]


#: The quantity each target is scored as (time as throughput, the way users read it).
QUANTITY = {"memory": "memory", "time": "throughput"}


def evaluation(meta_targets: dict[str, Any]) -> dict[str, Any]:
    """The top-level ``evaluation`` of a bundle: per quantity, the held-out median |error| of
    theory alone and of hybrid (nested leave-one-source-out when computed, else the CV), and
    whether hybrid beats theory on both memory and throughput (the rule for making hybrid the
    default method)."""
    out: dict[str, Any] = {}
    for target, t in meta_targets.items():
        ev = t.get("loso") or t.get("cv") or {}
        if not ev.get("rows") or "median_abs_error_theory" not in ev:
            continue  # no held-out figures (CV needs 2 groups)
        out[QUANTITY[target]] = {
            "method": ev.get("method", ""), "rows": ev["rows"], "sources": ev.get("sources"),
            **{k: ev[k] for k in ev if k.startswith(("median_abs_error", "source_weighted",
                                                      "p90_abs_error", "within10"))},
            "interval_level": INTERVAL_LEVEL,
            "interval_coverage": ev.get("interval_coverage"),
            "interval_coverage_source_weighted": ev.get("interval_coverage_source_weighted"),
            "in_domain_share": ev.get("in_domain_share")}
    beats = [q in out and out[q]["median_abs_error_hybrid"] < out[q]["median_abs_error_theory"]
             for q in ("memory", "throughput")]
    out["hybrid_beats_theory"] = all(beats)
    return out


#: What a bundle directory holds that training writes (everything else in it is the user's).
BUNDLE_FILES = ("metadata.json", "*.p[0-9]*.txt")


def _bundle_file(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in BUNDLE_FILES)


def check_out_dir(out: Path) -> None:
    """``--out`` before any training: absent, an empty directory or a bundle (it is replaced
    as a whole, so a directory of other files is refused rather than emptied), in a place a
    file can be created. An :class:`InputError` naming ``--out`` otherwise."""
    try:
        entries = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    except OSError as exc:
        raise InputError("--out", f"cannot read {out}: {os_reason(exc)}",
                         value=str(out)) from None
    if out.exists() and not out.is_dir():
        raise InputError("--out", "exists and is not a directory", value=str(out))
    if entries and "metadata.json" not in entries:
        raise InputError("--out", "is a directory that holds no bundle (no metadata.json); "
                         "fmest learn replaces the directory it writes: give a new or empty "
                         "directory, or a bundle to retrain", value=str(out))
    check_writable_dir(Path(os.path.abspath(out)).parent, field="--out", value=str(out))


def carry_extras(old: Path, new: Path) -> None:
    """Copy what the user keeps in the bundle directory ``old`` (a README, an ``__init__.py``:
    anything but :data:`BUNDLE_FILES`) into its replacement ``new``; old models are not
    carried, so a retrain leaves none behind."""
    if not old.is_dir():
        return
    for entry in old.iterdir():
        if _bundle_file(entry.name):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.copytree(entry, new / entry.name, symlinks=True)
        else:
            shutil.copy2(entry, new / entry.name, follow_symlinks=False)


def train_bundle(paths: Sequence[str], engine, out: str | Path, *,
                 targets: Sequence[str] = TARGETS, name: Optional[str] = None,
                 samples: Optional[Sequence[Sample]] = None,
                 files: Optional[Sequence[DataFile]] = None, features: str = "auto",
                 loso: Optional[bool] = None, description: Optional[str] = None,
                 progress=None) -> dict[str, Any]:
    """Train and write a bundle to directory ``out``; returns its metadata.

    ``samples``/``files`` may be given instead of reading ``paths`` (benchmarks use subsets).
    ``features``: a :data:`FEATURE_SETS` name or ``auto``. ``loso``: also run the nested
    leave-one-source-out evaluation (:func:`loso_evaluate`) and store it as each target's
    ``loso`` (default: when rows carry sources). Targets with fewer than ``MIN_ROWS`` usable
    rows are skipped and recorded; none at all is an :class:`InputError`.

    ``out`` is checked before any work (:func:`check_out_dir`) and written whole or not at
    all: the bundle is built in a temporary directory beside it and swapped in
    (:func:`fmest.atomic.replace_dir_atomic`), so a kill or a full disk leaves the old bundle
    as it was; the user's own files in an old bundle are carried over (:func:`carry_extras`).
    """
    for t in targets:
        if t not in TARGETS:
            raise InputError("--targets", "unknown target", value=t, accepted=TARGETS)
    out = Path(out)
    check_out_dir(out)
    if samples is None:
        files, samples = [], []
        for p in paths:
            f, s = read_dataset(p)
            files.append(f)
            samples += s
    files = list(files or [])
    feature_set, feature_names = _feature_set(features, samples)
    tables = build_tables(samples, engine, targets, feature_names)
    meta_targets: dict[str, Any] = {}
    not_trained: dict[str, str] = {}
    written: dict[str, dict] = {}
    for target, table in tables.items():
        if len(table) < MIN_ROWS:
            not_trained[target] = (f"{len(table)} usable rows (< {MIN_ROWS}); skipped: "
                                   f"{dict(table.skipped)}")
            continue
        trained = train_target(table)
        cv = trained["cv"]
        written[target] = trained["boosters"]
        meta_targets[target] = {
            "target": "log(measured / theory)",
            "measured": ("measured peak bytes vs the part of the analytic answer its counter "
                         "sees (allocated: less cuda_context, nccl_buffers and "
                         "allocator_reserve; reserved: less cuda_context and nccl_buffers; "
                         "whole: the total)") if target == "memory"
            else "measured step seconds",
            "baseline": _baseline(table), "baseline_version": baseline_version(_baseline(table)),
            # at prediction the factor scales what the caching allocator holds (the total
            # less the outside components); probes measured allocated bytes
            "predict_counter": ("reserved" if feature_set == "evidence" else "allocated")
            if target == "memory" else None,
            "features": trained["spec"],
            "models": {},
            "interval": f"{INTERVAL_LEVEL}: P10/P90 quantile models widened by a conformal "
                        f"margin (log units) from grouped CV for {COVERAGE:.0%} coverage",
            "interval_level": INTERVAL_LEVEL,
            "interval_margin": trained["margin"],
            "shrinkage": trained["shrinkage"],
            "gate": trained["gate"],
            "params": {q: lgbm_params(len(table), a, weighted=table.by_source, target=target)
                       for q, a in ALPHAS.items()},
            "num_boost_round": NUM_BOOST_ROUND,
            "rows": len(table),
            "sources": len(set(table.groups)) if table.by_source else None,
            "weighting": "each source's rows sum to weight 1" if table.by_source else "rows",
            "devices": dict(Counter(table.devices)),
            "counters": dict(Counter(table.counters)) if target == "memory" else None,
            "families": sorted(set(table.families)),
            "models_seen": sorted(set(table.models)),
            "skipped": dict(table.skipped),
            "cv": cv,
        }
        if loso if loso is not None else table.by_source:
            meta_targets[target]["loso"] = loso_evaluate(table, progress=progress)
    if not meta_targets:
        raise InputError("DATA", "no target could be trained: " + "; ".join(
            f"{t}: {why}" for t, why in not_trained.items()))
    used = [t for t in tables.values() if len(t) >= MIN_ROWS]
    all_devices = [d for t in used for d in t.devices]
    rows = max(len(t) for t in tables.values())
    sources = sorted({g for t in used for g in t.groups if g})
    biggest = tables[max(tables, key=lambda t: len(tables[t]))]
    meta = {
        "format": FORMAT,
        "name": name or out.name,
        "created": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
        "versions": _versions(),
        "feature_set": feature_set,
        "training_data": {
            "description": description or (describe_devices(biggest.devices)
                                           + (" from " + ", ".join(Path(f.path).name
                                                                   for f in files)
                                              if files else "")),
            "device": sorted(set(all_devices)),
            "rows": rows,
            "trained_rows": sum(len(t) for t in used),
            "gpu_rows": sum(d == "cuda" for d in all_devices),
            "sources": len(sources),
            "rows_per_target": {t.target: len(t) for t in used},
            "files": [{"file": Path(f.path).name, "format": f.format, "rows": f.rows,
                       "sha256": f.sha256, "skipped": list(f.skipped)} for f in files],
        },
        "evaluation": evaluation(meta_targets),
        "targets": meta_targets,
        "not_trained": not_trained,
    }

    def build(directory: Path) -> None:
        """The whole bundle in a fresh directory (swapped in for ``out`` when complete)."""
        carry_extras(out, directory)
        for target, boosters in written.items():
            for q, b in boosters.items():
                fname = f"{target}.{q}.txt"
                b.save_model(str(directory / fname))
                meta_targets[target]["models"][q] = {"file": fname,
                                                     "sha256": sha256_file(directory / fname)}
        (directory / "metadata.json").write_text(
            json.dumps(meta, indent=2, sort_keys=False) + "\n", encoding="utf-8")

    # a kill or a full disk while writing leaves the old bundle as it was
    replace_dir_atomic(out, build, field="--out")
    return meta


def _pct(x) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.1%}"


def cv_table(meta: dict) -> str:
    """The aligned evaluation table printed by ``fmest learn``: per target, the grouped CV
    and (when run) the nested leave-one-source-out figures."""
    head = ("target", "eval", "rows", "groups", "theory med|err|", "learned med|err|",
            "hybrid med|err|", "theory p90", "hybrid p90", f"{INTERVAL_LEVEL} cover")
    lines = [head]
    for target, t in meta["targets"].items():
        for label, ev in (("CV", t["cv"]), ("LOSO", t.get("loso"))):
            if not ev:
                continue
            if not ev.get("rows") or "median_abs_error_theory" not in ev:
                lines.append((target, label, str(t["rows"]), "-", ev.get("method", "-"),
                              "-", "-", "-", "-", "-"))
                continue
            lines.append((target, label, str(ev["rows"]),
                          f"{ev.get('groups') or ev.get('sources')} "
                          f"{ev.get('group_by', '')}".strip(),
                          _pct(ev["median_abs_error_theory"]),
                          _pct(ev["median_abs_error_learned"]),
                          _pct(ev["median_abs_error_hybrid"]),
                          _pct(ev["p90_abs_error_theory"]), _pct(ev["p90_abs_error_hybrid"]),
                          f"{ev['interval_coverage']:.0%}"))
    from fmest.output.render import Column, render_table

    out = [render_table([Column(name=h, align="left" if i < 4 else "right")
                         for i, h in enumerate(head)], lines[1:])]
    groups = [(target, g["group"], g["rows"], f"{g['median_abs_error_theory']:.1%}",
               f"{g['median_abs_error_hybrid']:.1%}", f"{g['interval_coverage']:.0%}",
               f"{g['in_domain_share']:.0%}")
              for target, t in meta["targets"].items()
              for g in (t.get("loso") or t["cv"]).get("per_group", [])]
    if groups:
        out.append("")
        out.append(render_table(
            [Column(name="target"), Column(name="held out"),
             *(Column(name=n, align="right") for n in ("rows", "theory", "hybrid", "cover",
                                                        "in domain"))], groups))
    for target, why in meta.get("not_trained", {}).items():
        out.append(f"not trained: {target}: {why}")
    return "\n".join(out)
