"""The ``time_roofline`` plugin's hooks: roofline step time, total time and tokens/s
(:mod:`fmest_time_roofline.estimator`, docs/time_model.md).

The estimator loads on the first estimate, not with the plugin: ``fmest --help`` and commands
that estimate nothing load every plugin to list their commands and must stay cheap.
"""

from __future__ import annotations

from fmest.hookspecs import hookimpl


@hookimpl
def fmest_estimate_time(job, ctx, memory):
    """Roofline step time and total time (basis ``analytic``; serving: prefill + decode)."""
    from fmest_time_roofline.estimator import estimate_time

    return estimate_time(job, ctx, memory)


@hookimpl
def fmest_estimate_tokens(job, ctx, time):
    """Throughput implied by the chosen time estimate."""
    from fmest_time_roofline.estimator import estimate_tokens

    return estimate_tokens(job, ctx, time)
