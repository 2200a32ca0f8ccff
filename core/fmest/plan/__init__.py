"""Planning: which GPUs, how many and how to lay the job out (``fmest plan``), and the fewest
GPUs a job needs (``memory.min_gpus``). See docs/plan.md."""

from fmest.plan.planner import Constraints, Plan, PlanResult, plan


def plan_output(args, engine, *, job_layers=None):
    """The ``fmest plan --format json`` object for parsed ``fmest plan`` arguments (see
    :func:`fmest.plan.command.plan_output`)."""
    from fmest.plan.command import plan_output as output

    return output(args, engine, job_layers=job_layers)


__all__ = ["Constraints", "Plan", "PlanResult", "plan", "plan_output"]
