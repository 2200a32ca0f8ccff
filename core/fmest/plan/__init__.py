"""Planning: which GPUs, how many and how to lay the job out (``fmest plan``), and the fewest
GPUs a job needs (``memory.min_gpus``). See docs/plan.md."""

from fmest.plan.planner import Constraints, Plan, PlanResult, plan

__all__ = ["Constraints", "Plan", "PlanResult", "plan"]
