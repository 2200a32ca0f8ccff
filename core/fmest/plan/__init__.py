"""Planning: which GPUs, how many and how to lay the job out (``fmest plan``). See
docs/plan.md. The planner (numpy arrays) is imported on first use, so registering the ``plan``
command and building its arguments cost nothing."""

from __future__ import annotations

from typing import Any


def plan_output(args, engine, *, job_layers=None):
    """The ``fmest plan --format json`` object for parsed ``fmest plan`` arguments (see
    :func:`fmest.plan.command.plan_output`)."""
    from fmest.plan.command import plan_output as output

    return output(args, engine, job_layers=job_layers)


def __getattr__(name: str) -> Any:
    if name in ("Constraints", "Plan", "PlanResult", "plan"):
        from fmest.plan import planner

        return getattr(planner, name)
    raise AttributeError(name)


__all__ = ["Constraints", "Plan", "PlanResult", "plan", "plan_output"]
