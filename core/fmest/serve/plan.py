"""``POST /v1/plan``: the planner's ``fmest plan --format json`` object, served when the
planner package exposes ``fmest.plan.plan_output(args, engine, *, job_layers=None)`` (the
same seam as :func:`fmest.api.estimate_output`); until then the route answers 501."""

from __future__ import annotations

import json
from typing import Any, Callable, Optional

from fmest.bounds import Bound
from fmest.errors import InputError
from fmest.serve.inputs import INPUT_SOURCE, args_from_body

#: What one request may ask of the planner beyond what ``fmest plan`` accepts: the service
#: runs plans one at a time, so one request's work delays every other plan.
PLAN_BOUNDS: tuple[Bound, ...] = (
    Bound(path="top", maximum=100,
          reason="plans in the answer, about 2.6 KB of JSON each; 100 make a 0.26 MB table "
                 "(the page shows 15), 1,000 took 6 s to render and 2.6 MB to send"),
    Bound(path="refine", maximum=10,
          reason="plans re-estimated with the job's --method; a traced estimate takes 5-9 s "
                 "for a 1B model on first use, so 10 fill most of the default 120 s --timeout"),
)


def check_plan_bounds(args) -> None:
    """Refuse a plan flag above its bound in :data:`PLAN_BOUNDS` (422 naming the flag)."""
    for bound in PLAN_BOUNDS:
        value = getattr(args, bound.path, None)
        if value is not None and value > bound.maximum:
            raise InputError(bound.path, f"above this service's bound {bound.maximum:g}: "
                             f"{bound.reason}", value=value)


def _plan_output() -> Optional[Callable[..., Any]]:
    try:
        from fmest import plan as planner
    except ImportError:
        return None
    return getattr(planner, "plan_output", None)


def plan_available(service) -> bool:
    """Whether the planner exposes its seam and ``fmest plan`` is a registered command."""
    return _plan_output() is not None and "plan" in service.commands


def plan_response(flags, body: Any, service) -> str:
    """The JSON text of ``fmest plan --format json`` with the body's job and flags
    (``flags``: :data:`fmest.flags.PLAN_FLAGS`)."""
    from fmest.inputs import read_document

    output = _plan_output()
    if output is None:  # the route exists only where plan_available() said yes
        raise RuntimeError("fmest.plan exposes no plan_output(args, engine, *, job_layers)")
    args, job_input = args_from_body(flags, body)
    check_plan_bounds(args)
    layers = read_document(job_input, source=INPUT_SOURCE) if job_input is not None else None
    with service.exclusive:  # a plan runs thousands of estimates: one at a time
        return json.dumps(output(args, service.engine, job_layers=layers), default=str)
