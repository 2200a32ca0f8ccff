"""``POST /v1/plan``: served only when the planner package (``fmest.plan``) is installed."""

from __future__ import annotations

import importlib.util


def plan_available() -> bool:
    return importlib.util.find_spec("fmest.plan") is not None


def plan_response(body, service):
    raise NotImplementedError  # wired when fmest.plan lands (see docs/serve.md)
