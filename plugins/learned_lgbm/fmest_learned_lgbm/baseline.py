"""The analytic baseline a learned model corrects.

Hook implementations cannot ask the engine for another plugin's answer (they receive only
``job`` and ``ctx``), so the baseline is computed by calling the analytic plugins' hook
functions directly: ``fmest_memory_theory.plugin.fmest_estimate_memory(job=, ctx=)`` and
``fmest_time_roofline.plugin.fmest_estimate_time(job=, ctx=, memory=)``. Training calls the
very same functions, so the learned ratio always refers to the formulas that are installed;
the bundle records the baseline's name and version and a prediction notes any mismatch.
"""

from __future__ import annotations

import importlib
from importlib import metadata as importlib_metadata

from fmest.errors import PluginError

PLUGIN = "learned_lgbm"

#: target -> (module, function, distribution) of the analytic baseline.
BASELINES = {
    "memory": ("fmest_memory_theory.plugin", "fmest_estimate_memory", "fmest-memory-theory"),
    "time": ("fmest_time_roofline.plugin", "fmest_estimate_time", "fmest-time-roofline"),
}


def baseline_name(target: str) -> str:
    module, func, _dist = BASELINES[target]
    return f"{module}:{func}"


def baseline_version(target: str) -> str:
    dist = BASELINES[target][2]
    try:
        return importlib_metadata.version(dist)
    except importlib_metadata.PackageNotFoundError:
        return "unknown"


def _function(target: str):
    module, func, dist = BASELINES[target]
    try:
        return getattr(importlib.import_module(module), func)
    except (ImportError, AttributeError) as exc:
        raise PluginError(PLUGIN, f"the analytic {target} baseline {module}:{func} is not "
                          f"importable ({type(exc).__name__}: {exc}); install {dist}") from None


def theory_memory(job, ctx):
    """The analytic :class:`MemoryEstimate` of ``job`` (``None`` if the formulas do not
    apply). :class:`fmest.errors.InfeasibleError` propagates."""
    return _function("memory")(job=job, ctx=ctx)


def theory_time(job, ctx, memory=None):
    """The analytic :class:`TimeEstimate` of ``job``, priced with the analytic memory (not the
    chosen one) so training and prediction see the same baseline."""
    if memory is None:
        try:
            memory = theory_memory(job, ctx)
        except PluginError:
            memory = None
    return _function("time")(job=job, ctx=ctx, memory=memory)


#: Memory components that are not allocator bytes: the CUDA context lives outside the caching
#: allocator, so neither ``max_memory_allocated`` on a GPU nor the CPU allocator counts it.
#: The learned ratio is taken against the rest, and these are added back unchanged.
NOT_ALLOCATED = ("cuda_context",)
#: Components the ratio applies to though they are not in the measurement: the caching
#: allocator's reserve above the allocated peak scales with what is allocated.
RESERVE = ("allocator_reserve",)


def allocated_bytes(est) -> float:
    """The part of an analytic memory estimate that a measured allocated peak corresponds to:
    the total less the CUDA context and the allocator's reserve."""
    skip = sum(est.components.get(k, 0) for k in NOT_ALLOCATED + RESERVE)
    return float(est.total_bytes - skip)


def theory_value(target: str, job, ctx) -> float | None:
    """The baseline number the ratio is taken against: allocated bytes for ``memory`` (see
    :func:`allocated_bytes`), seconds per step for ``time``."""
    if target == "memory":
        est = theory_memory(job, ctx)
        return None if est is None else allocated_bytes(est)
    est = theory_time(job, ctx)
    return None if est is None else float(est.step_seconds)
