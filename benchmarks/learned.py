"""Evidence for the learned plugin: on model families it never saw, does ``hybrid`` beat
``theory``, and do the P10/P90 intervals cover the truth about 80 % of the time?

For each model family (``model_type``) of the probe data, a bundle is trained with
``fmest_learned_lgbm.train.train_bundle`` on the other families only (its own inner CV picks
the interval margin and the shrinkage), then every row of the held-out family is estimated
through the engine with ``--method hybrid --learned-model <that bundle>`` and with
``--method theory``. The engine holds only memory_theory, time_roofline and learned_lgbm, so
the comparison isolates the learned correction (hybrid falls back to theory when the learned
answer is out of domain). Errors are on the allocated part of the estimate (the total less
the CUDA context and the allocator reserve), which is what the probes measure.

Usage: ``python benchmarks/learned.py [DATA ...]`` (default: the torch runner's CPU probes and
the learned plugin's own CPU probes).
"""

from __future__ import annotations

import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = [
    ROOT / "plugins/torch_runner/fmest_torch_runner/data/cpu_probes.csv",
    ROOT / "plugins/learned_lgbm/fmest_learned_lgbm/data/cpu_probes_own.csv",
]


def _engine():
    import fmest_learned_lgbm.plugin as learned
    import fmest_memory_theory.plugin as memory
    import fmest_time_roofline.plugin as roofline
    from fmest.testing import new_engine

    return new_engine((memory, "memory_theory"), (roofline, "time_roofline"),
                      (learned, "learned_lgbm"))


def main(argv=None) -> int:
    from fmest.convert import job_from_dict
    from fmest.errors import FmestError
    from fmest_learned_lgbm.baseline import allocated_bytes
    from fmest_learned_lgbm.bundle import load_bundle
    from fmest_learned_lgbm.data import read_dataset
    from fmest_learned_lgbm.features import family, feature_values
    from fmest_learned_lgbm.train import train_bundle

    paths = [Path(p) for p in (argv if argv else sys.argv[1:])] or \
        [p for p in DEFAULT_DATA if p.exists()]
    files, samples = [], []
    for p in paths:
        f, s = read_dataset(str(p))
        files.append(f)
        samples += [x for x in s if x.status == "ok" and x.memory_bytes]
    engine = _engine()
    fam_of, kept, refused = [], [], []
    for s in samples:
        try:
            job = job_from_dict(s.job)
            fam_of.append(family(job, engine.context(job)))
            kept.append(s)
        except FmestError as exc:  # a row today's input rules refuse: counted, not fatal
            refused.append(f"{type(exc).__name__}: {str(exc)[:120]}")
    samples = kept
    if refused:
        print(f"{len(refused)} rows refused by today's job rules, e.g. {refused[0]}")
    families = sorted(set(fam_of))
    print(f"data: {', '.join(p.name for p in paths)}; {len(samples)} ok rows, "
          f"{len(families)} families: {', '.join(families)}")
    rows = []
    t0 = time.perf_counter()
    for held in families:
        train = [s for s, f in zip(samples, fam_of, strict=True) if f != held]
        test = [s for s, f in zip(samples, fam_of, strict=True) if f == held]
        with tempfile.TemporaryDirectory() as tmp:
            train_bundle([], engine, tmp, targets=("memory",), samples=train, files=files)
            model = load_bundle(tmp).targets["memory"]
            for s in test:
                base = job_from_dict(s.job)
                ctx = engine.context(base)
                out = {}
                for method in ("theory", "hybrid"):
                    job = base.evolve(options={"method": method, "learned_model": tmp})
                    chosen = engine.decide("memory", job, ctx=ctx).chosen
                    out[method] = (allocated_bytes(chosen), chosen.provenance.basis)
                theory_alloc = out["theory"][0]
                y = math.log(s.memory_bytes / theory_alloc)
                values = feature_values(model.names, base, ctx, theory=theory_alloc)
                lo, _point, hi = model.predict_log_ratio(values)
                rows.append({"family": held, "theory": abs(out["theory"][0] / s.memory_bytes - 1),
                             "hybrid": abs(out["hybrid"][0] / s.memory_bytes - 1),
                             "learned_chosen": out["hybrid"][1] == "learned",
                             "covered": lo <= y <= hi})
    print(f"(leave-one-family-out, {time.perf_counter() - t0:.0f} s)\n")
    head = ("held-out family", "rows", "theory med|err|", "hybrid med|err|", "learned chosen",
            "P10-P90 covers")
    table = [head]
    for fam in families + ["ALL"]:
        rs = [r for r in rows if fam in ("ALL", r["family"])]
        table.append((fam, str(len(rs)), f"{statistics.median(r['theory'] for r in rs):.2%}",
                      f"{statistics.median(r['hybrid'] for r in rs):.2%}",
                      f"{sum(r['learned_chosen'] for r in rs) / len(rs):.0%}",
                      f"{sum(r['covered'] for r in rs) / len(rs):.0%}"))
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    for k, r in enumerate(table):
        if k == len(table) - 1:
            print("  ".join("-" * w for w in widths))
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(r, widths, strict=True))))
    allr = rows
    mean_t = statistics.mean(r["theory"] for r in allr)
    mean_h = statistics.mean(r["hybrid"] for r in allr)
    print(f"\nmean |err|: theory {mean_t:.2%}, hybrid {mean_h:.2%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
