"""``POST /v1/plan``: the planner's ``fmest plan --format json`` object, served when the
planner package exposes ``fmest.plan.plan_output(args, engine, *, job_layers=None)`` (the
same seam as :func:`fmest.api.estimate_output`); until then the route answers 501."""

from __future__ import annotations

import json
from typing import Any, Callable, Optional

from fmest.serve.inputs import INPUT_SOURCE, args_from_body


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
    layers = read_document(job_input, source=INPUT_SOURCE) if job_input is not None else None
    with service.exclusive:  # a plan runs thousands of estimates: one at a time
        return json.dumps(output(args, service.engine, job_layers=layers), default=str)
