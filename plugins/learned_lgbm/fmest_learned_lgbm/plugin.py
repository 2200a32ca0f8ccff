"""The ``learned_lgbm`` fmest plugin: learned memory and time answers, ``fmest learn`` and
``fmest learned-models``.

It declares the basis ``learned``, so the engine asks it only under policies that can choose
learned answers (``learned``, ``hybrid`` or any third-party policy whose ``asks("learned")`` is
true; theory stays fast and never imports lightgbm). It answers through the correction hooks:
the engine hands it the answers so far and it corrects the analytic one (see
:mod:`fmest_learned_lgbm.baseline`) by ``exp(prediction)`` of the bundle's median model,
with basis ``learned``, a P10/P90 ``interval``, ``in_domain`` (every feature inside its training
range and every categorical value seen in training) and a ``detail`` naming the bundle. A
broken bundle raises :class:`fmest.errors.PluginError` naming the file; the engine reports it as
this plugin's failure and the policy falls back to theory.
"""

from __future__ import annotations

import math

import attrs

from fmest.estimates import MemoryEstimate, Provenance, TimeEstimate
from fmest.hookspecs import hookimpl

# None of these import lightgbm at module level: a theory estimate never loads it.
from fmest_learned_lgbm.baseline import NOT_ALLOCATED, analytic, baseline_version, comparable_bytes

# bundle and feature code load when a policy first asks for a learned answer (the default
# policy never does): loading the plugin for `fmest --help` or a theory estimate stays cheap


def _bundle_for(job):
    from fmest_learned_lgbm.bundle import cached_bundle, resolve_bundle_dir

    return cached_bundle(resolve_bundle_dir(job.options.learned_model))


def _scaled(parts: dict, factor: float, total, cast):
    """The baseline's breakdown scaled by ``factor``, adjusted so it sums to ``total``."""
    out = {k: cast(v * factor) for k, v in parts.items()}
    if out:
        biggest = max(out, key=lambda k: abs(out[k]))
        out[biggest] += total - sum(out.values())
    return out


def _same_device_kind(model, values) -> bool:
    """A ratio measured/theory carries the device it was measured on: a model trained only on
    CPU steps predicts the CPU's slowness relative to the GPU formulas (x1e4 for time), not a
    correction. Such a model does not answer for a GPU job (the policy falls back to theory)."""
    for feature in model.features:
        if feature["name"] == "device" and feature["kind"] == "categorical":
            return values.get("device") in feature["levels"]
    return True


def _level(model) -> str:
    """The interval's stated level and how it was calibrated."""
    cv = model.meta.get("cv", {})
    how = ("conformal on leave-one-source-out residuals" if cv.get("group_by") == "source"
           else f"conformal on CV residuals grouped by {cv.get('group_by', '?')}")
    return f"{model.meta.get('interval_level') or 'P10-P90'} (80 % interval, {how})"


def _held_out_figures(model, target: str) -> str:
    """The model's held-out median |error| against theory's, as the bundle measured it
    (nested leave-one-source-out when stored, else the grouped CV)."""
    ev = model.meta.get("loso") or model.meta.get("cv") or {}
    theory, hybrid = ev.get("median_abs_error_theory"), ev.get("median_abs_error_hybrid",
                                                                ev.get("median_abs_error_learned"))
    if theory is None or hybrid is None:
        return "no held-out evaluation stored"
    how = "leave-one-source-out" if model.meta.get("loso") else f"CV ({ev.get('method', '?')})"
    quantity = "memory" if target == "memory" else "throughput"
    return (f"held-out {quantity} median |error| {how}: theory {theory:.1%}, "
            f"hybrid {hybrid:.1%}")


def _predict(target, job, ctx, baseline):
    bundle = _bundle_for(job)
    model = bundle.targets.get(target)
    if model is None:
        return None
    counter = model.meta.get("predict_counter") or "allocated"
    if target == "memory":
        theory = comparable_bytes(baseline, counter)
    else:
        theory = baseline.step_seconds
    if not theory or theory <= 0:
        return None
    from fmest_learned_lgbm.features import feature_values

    values = feature_values(model.names, job, ctx, theory=float(theory), device="cuda",
                            counter=counter)
    if not _same_device_kind(model, values):
        return None
    outside = model.domain(values)
    if job.training.objective != "lm":   # no feature carries it: every training row is lm
        outside = [*outside, f"objective {job.training.objective} (every training row is a "
                   "causal-LM run)"]
    lo, point, hi = model.predict_log_ratio(values)
    notes = [f"learned correction x{math.exp(point):.3f} of the analytic baseline "
             f"({model.meta.get('baseline')}); the breakdown is the analytic one scaled by it"
             + (" (the CUDA context is kept as is)" if target == "memory" else "")]
    if outside:
        notes.append("outside the training domain: " + "; ".join(outside[:4])
                     + (f" (+{len(outside) - 4} more)" if len(outside) > 4 else ""))
    trained = model.meta.get("baseline_version")
    installed = baseline_version(baseline.provenance.plugin)
    if trained and trained != installed:
        notes.append(f"baseline version {installed} differs from the one the "
                     f"bundle was trained against ({trained})")
    if target == "memory":
        fixed = sum(baseline.components.get(k, 0) for k in NOT_ALLOCATED)
        scaled = baseline.total_bytes - fixed
        interval = (fixed + scaled * math.exp(lo), fixed + scaled * math.exp(hi))
    else:
        interval = (float(theory) * math.exp(lo), float(theory) * math.exp(hi))
    prov = Provenance(basis="learned", interval=interval, in_domain=not outside,
                      detail=f"{bundle.describe()}; {target} model; interval "
                      f"{_level(model)}; {_held_out_figures(model, target)}")
    return math.exp(point), prov, tuple(notes)


def _correct(target: str, candidates, job, ctx):
    """(baseline answer, learned factor, provenance, notes) for ``target``, or ``None`` when no
    analytic answer is among ``candidates`` or the bundle has no model for it."""
    base = analytic(candidates)
    if base is None:
        return None
    got = _predict(target, job, ctx, base)
    return None if got is None else (base, *got)


@hookimpl
def fmest_register_estimators(register):
    register("learned")  # a LightGBM prediction is cheap: fine once per search candidate


@hookimpl
def fmest_correct_memory(job, ctx, candidates):
    """Learned per-GPU peak memory (see module doc); ``None`` when no analytic answer is
    among the candidates or the bundle has no memory model (or the job is a serving job: the
    bundles learned training steps)."""
    if job.mode == "inference":
        return None
    got = _correct("memory", candidates, job, ctx)
    if got is None:
        return None
    base, factor, prov, notes = got
    fixed = {k: v for k, v in base.components.items() if k in NOT_ALLOCATED}
    rest = {k: v for k, v in base.components.items() if k not in NOT_ALLOCATED}
    fixed_bytes = sum(fixed.values())
    total = fixed_bytes + int(round((base.total_bytes - fixed_bytes) * factor))
    components = dict(_scaled(rest, factor, total - fixed_bytes, lambda v: int(round(v))),
                      **fixed)
    lo, hi = prov.interval
    prov = attrs.evolve(prov, interval=(float(int(lo)), float(int(math.ceil(hi)))))
    return MemoryEstimate(total_bytes=total, components=components,
                          provenance=prov, phase=base.phase,
                          phase_peaks_bytes={k: fixed_bytes + int(round((v - fixed_bytes)
                                                                        * factor))
                                             for k, v in base.phase_peaks_bytes.items()},
                          notes=notes)


@hookimpl
def fmest_correct_time(job, ctx, candidates):
    """Learned step time when the bundle has a time model; ``None`` otherwise (and for
    serving jobs)."""
    if job.mode == "inference":
        return None
    got = _correct("time", candidates, job, ctx)
    if got is None:
        return None
    base, factor, prov, notes = got
    step = base.step_seconds * factor
    total = base.total_seconds * factor if base.total_seconds is not None else None
    return TimeEstimate(step_seconds=step,
                        breakdown=_scaled(base.breakdown, factor, step, float),
                        provenance=prov,
                        mfu=base.mfu / factor if base.mfu else base.mfu,
                        hfu=base.hfu / factor if base.hfu else base.hfu,
                        flops_per_step=base.flops_per_step, total_seconds=total,
                        total_steps=base.total_steps, notes=notes)


@hookimpl
def fmest_register_commands(register):
    from fmest.plugins import lazy_command

    register("learn", "train a learned-model bundle (LightGBM) from probe datasets",
             *lazy_command("fmest_learned_lgbm.cli", "add_learn_arguments", "run_learn"))
    register("learned-models", "list the installed learned-model bundles",
             *lazy_command("fmest_learned_lgbm.cli", "add_list_arguments", "run_list"))
