"""The ``memory_theory`` plugin's hooks: analytic per-GPU peak memory
(:mod:`fmest_memory_theory.estimator`, docs/memory_model.md).

The estimator loads on the first estimate, not with the plugin: ``fmest --help`` and commands
that estimate nothing load every plugin to list their commands and must stay cheap.
"""

from __future__ import annotations

from fmest.hookspecs import hookimpl


@hookimpl
def fmest_estimate_memory(job, ctx):
    """Analytic per-GPU peak memory (basis ``analytic``) of every job, training or serving."""
    from fmest_memory_theory.estimator import estimate_memory

    return estimate_memory(job, ctx)
