"""The analytic baseline a learned model corrects, taken through the engine.

At estimation time the engine hands the correction hooks (``fmest_correct_memory`` /
``fmest_correct_time``) every answer so far; the baseline is the ``analytic`` one (ties broken
by plugin name, as policies do). Training asks the same engine for the same answers
(:func:`theory_value`), so the learned ratio always refers to the installed formulas, the
theory runs once per hybrid estimate, and this plugin imports no other plugin. The bundle
records the baseline plugin's name and distribution version; a prediction notes a mismatch.
"""

from __future__ import annotations

from importlib import metadata as importlib_metadata
from typing import Optional, Sequence

from fmest.estimates import OUTSIDE_COMPONENTS
from fmest.estimates import allocated_bytes as _allocated_bytes

PLUGIN = "learned_lgbm"
BASIS = "analytic"

#: Memory components that are not allocator bytes (the CUDA context, NCCL buffers): neither
#: ``max_memory_allocated`` on a GPU nor the CPU allocator counts them. The learned ratio is
#: taken against the rest, and these are added back unchanged (fmest.estimates vocabulary).
NOT_ALLOCATED = OUTSIDE_COMPONENTS


def allocated_bytes(est) -> float:
    """The part of an analytic memory estimate that a measured allocated peak corresponds to:
    the total less the outside-allocator components and the allocator's reserve."""
    return float(_allocated_bytes(est))


def comparable_bytes(est, counter: str = "allocated") -> float:
    """The part of an analytic memory estimate a counter sees: ``allocated`` ->
    :func:`allocated_bytes`; ``reserved`` (the caching allocator's pool) -> the total less the
    outside-allocator components; ``whole`` (nvidia-smi) -> the total."""
    if counter == "whole":
        return float(est.total_bytes)
    if counter == "reserved":
        return float(est.total_bytes - sum(est.components.get(k, 0) for k in NOT_ALLOCATED))
    return allocated_bytes(est)


def analytic(candidates: Sequence) -> Optional[object]:
    """The baseline among ``candidates``: the ``analytic`` answer of the first plugin by name."""
    pool = sorted((c for c in candidates if c.provenance.basis == BASIS),
                  key=lambda c: c.provenance.plugin)
    return pool[0] if pool else None


def baseline_version(plugin: str) -> str:
    """The installed version of the distribution providing entry point ``plugin`` of group
    ``fmest`` (read from package metadata; nothing is imported)."""
    for ep in importlib_metadata.entry_points(group="fmest"):
        if ep.name == plugin and ep.dist is not None:
            return ep.dist.version
    return "unknown"


def _analytic_plugins(engine):
    return engine.plugins_with_basis(BASIS)


def theory_answers(job, ctx, engine):
    """(analytic memory, analytic time priced with that memory) through ``engine``; either may
    be ``None``. :class:`fmest.errors.InfeasibleError` propagates."""
    only = _analytic_plugins(engine)
    memories, _failures = engine.ask_memory(job, ctx, only=only)
    memory = analytic(memories)
    times, _failures = engine.ask_time(job, ctx, memory, only=only)
    return memory, analytic(times)


def theory_value(target: str, job, ctx, engine) -> float | None:
    """The baseline number the ratio is taken against: allocated bytes for ``memory`` (see
    :func:`allocated_bytes`), seconds per step for ``time``."""
    memory, time = theory_answers(job, ctx, engine)
    if target == "memory":
        return None if memory is None else allocated_bytes(memory)
    return None if time is None else float(time.step_seconds)
