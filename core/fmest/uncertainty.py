"""P10-P90 intervals on the analytic answers, from their leave-one-source-out residuals.

``core/fmest/data/uncertainty.json`` (written by ``python benchmarks/uncertainty.py --write``)
holds, per training stack and for all rows, the quantiles of true / predicted for the analytic
memory and step-time answers on the evidence set without its sealed sources; a stack with too
few sources uses the quantiles of all rows. :func:`with_interval` puts the interval
``(answer x P10, answer x P90)`` on an analytic answer that has none (a learned answer carries
its own conformal interval), so every training answer says how far off it may be and the memory
verdict gets a probability (:func:`fmest.estimates.fits_probability`).

The memory quantiles compare each evidence row in its own counter (allocated, reserved or the
whole device) and are applied to the analytic total; the step-time quantiles compare step times
(a rate row read as its step time). Inference answers get none (the evidence is training runs),
nor memory answers the user calibrated (``--activation-factor``, ``--fragmentation-gib``,
``--misc-overhead-gib``: the uncalibrated answers' spread does not describe them).
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any, Optional

import attrs

#: What each answer's interval is read from, per quantity
QUANTITIES = ("memory", "time")


@functools.lru_cache(maxsize=1)
def table() -> dict[str, Any]:
    """The shipped table (``{}`` when the file is absent: no intervals)."""
    try:
        text = (resources.files("fmest") / "data" / "uncertainty.json").read_text()
    except (FileNotFoundError, OSError):
        return {}
    return json.loads(text)


def group(quantity: str, stack: Optional[str]) -> tuple[str, Optional[dict]]:
    """``(group name, quantiles)`` for an answer of ``quantity`` on ``stack``."""
    rows = table().get(quantity) or {}
    key = f"stack:{stack}"
    if stack and key in rows:
        return key, rows[key]
    return "all", rows.get("all")


def _added(quantity: str, job, answer) -> Optional[tuple[str, dict]]:
    """``(group name, quantiles)`` of the interval :func:`with_interval` puts on ``answer``;
    None when it puts none (the answer keeps whatever interval it has)."""
    if answer is None or job.mode != "training":
        return None
    prov = answer.provenance
    if prov.interval is not None or prov.basis != "analytic":
        return None
    cal = job.calibration
    if quantity == "memory" and (cal.activation_factor != 1.0 or cal.fragmentation_gib
                                 or cal.misc_overhead_gib):
        return None     # calibrated by the user: the uncalibrated answers' spread says nothing
    name, q = group(quantity, job.training.stack)
    return None if q is None else (name, q)


def _interval(quantity: str, answer, q: dict) -> tuple[float, float]:
    value = answer.total_bytes if quantity == "memory" else answer.step_seconds
    return (value * q["p10"], value * q["p90"])


def interval_of(quantity: str, job, answer) -> Optional[tuple[float, float]]:
    """The interval ``with_interval(quantity, job, answer)`` carries, without building it (the
    searches judge many candidates by their interval alone)."""
    if answer is None:
        return None
    added = _added(quantity, job, answer)
    return answer.provenance.interval if added is None else _interval(quantity, answer, added[1])


def with_interval(quantity: str, job, answer):
    """``answer`` with the P10-P90 interval of its group when it is analytic and has none."""
    added = _added(quantity, job, answer)
    if added is None:
        return answer
    prov = answer.provenance
    name, q = added
    interval = _interval(quantity, answer, q)
    detail = (f"{prov.detail}; " if prov.detail else "") + (
        f"P10-P90 from the analytic answers' leave-one-source-out residuals ({name}: "
        f"{q['rows']} rows, {q['sources']} sources; core/fmest/data/uncertainty.json)")
    return attrs.evolve(answer, provenance=attrs.evolve(prov, interval=interval, detail=detail))


__all__ = ["QUANTITIES", "group", "interval_of", "table", "with_interval"]
