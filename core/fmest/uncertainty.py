"""P10-P90 intervals on the analytic answers, from their leave-one-source-out residuals.

``core/fmest/data/uncertainty.json`` (written by ``python benchmarks/uncertainty.py --write``)
holds, per group of evidence rows, the quantiles of true / predicted for the analytic memory and
step-time answers on the evidence set without its sealed sources. A group is what the
residuals depend on and the job (or the row's counter) says:

* memory: the counter the row was read in: ``counter:allocated`` (``max_memory_allocated``,
  ``active_bytes``: tensors only) or ``counter:peak`` (``max_memory_reserved``, nvidia-smi and
  unnamed counters: the allocator's cache too). A memory *answer* is the device peak, so it
  takes ``counter:peak``;
* step time: ``stack:<stack>``, else ``gpu:<family>`` (the GPU generation: the kernel-rate
  tables differ most there), else ``all``.

A group with fewer than ``min_sources`` sources or ``min_rows`` rows is not in the table and its
answers widen to the next group of the chain (``answer_groups`` in the table; the answer's
provenance names both). :func:`with_interval` puts the interval ``(answer x P10, answer x P90)``
on an analytic answer that has none (a learned answer carries its own conformal interval), so
every training answer says how far off it may be and the memory verdict gets a probability
(:func:`fmest.estimates.fits_probability`).

The step-time quantiles compare step times (a rate row read as its step time). Inference
answers get none (the evidence is training runs), nor memory answers the user calibrated
(``--activation-factor``, ``--fragmentation-gib``, ``--misc-overhead-gib``: the uncalibrated
answers' spread does not describe them). A table without ``answer_groups`` (written before
2026-11-27) is read as ``stack:<stack>``, else ``all``.
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


#: The GPU families of :func:`gpu_family`, first match on the upper-cased GPU name (the
#: benchmark's ``gpu_family`` breakdown, benchmarks/measured.py, on fmest's GPU names)
_FAMILIES = (("GH200", "H200"), ("H200", "H200"), ("H100", "H100"), ("H800", "H100"),
             ("A100", "A100"), ("A800", "A100"), ("B200", "B200"), ("B300", "B200"),
             ("L40S", "L40S"), ("L4-", "L4"), ("A10G", "A10G"), ("V100", "V100"), ("T4-", "T4"),
             ("MI300X", "MI300X"), ("MI250X", "MI250X"), ("GAUDI", "GAUDI"))
#: Chains of group keys per quantity when the table names none (tables before 2026-11-27)
_DEFAULT_CHAIN = ("stack:{stack}", "all")


@functools.lru_cache(maxsize=256)
def gpu_family(gpu: Optional[str]) -> Optional[str]:
    """The GPU family of a GPU name (``A100``, ``H100``, ``B200``, ``RTX/workstation`` ...);
    None when unknown."""
    if not gpu:
        return None
    name = gpu.upper()
    for key, family in _FAMILIES:
        if key in name:
            return family
    if "RTX" in name or "A6000" in name or "A5000" in name or "TITAN" in name:
        return "RTX/workstation"
    return None


@functools.lru_cache(maxsize=1024)
def _chain(quantity: str, stack: Optional[str], gpu: Optional[str]
           ) -> tuple[str, Optional[dict], str]:
    """``(group used, its quantiles, the provenance sentence)``: the sentence states the
    widening from the more specific groups of the chain the table lacks."""
    tab = table()
    rows = tab.get(quantity) or {}
    chain = (tab.get("answer_groups") or {}).get(quantity) or _DEFAULT_CHAIN
    fields = {"stack": stack, "gpu_family": gpu_family(gpu)}
    skipped: list[str] = []
    for template in chain:
        if any(not value for f, value in fields.items() if "{" + f + "}" in template):
            continue            # the job does not say (no stack given, an unknown GPU)
        key = template.format(**fields)
        if key in rows:
            break
        skipped.append(key)
    else:
        key = "all"
    q = rows.get(key)
    widened = [k for k in skipped if k != key]
    label = "" if q is None else (
        "P10-P90 from the analytic answers' leave-one-source-out residuals (" + key
        + (f", widened from {' and '.join(widened)} (too few sources)" if widened else "")
        + f": {q['rows']} rows, {q['sources']} sources; core/fmest/data/uncertainty.json)")
    return key, q, label


def group(quantity: str, stack: Optional[str], gpu: Optional[str] = None
          ) -> tuple[str, Optional[dict]]:
    """``(group name, quantiles)`` for an answer of ``quantity`` on ``stack`` and ``gpu``: the
    first group of the table's chain for ``quantity`` that the table holds, else ``all``."""
    name, q, _ = _chain(quantity, stack, gpu)
    return name, q


def _added(quantity: str, job, answer) -> Optional[tuple[str, dict]]:
    """``(provenance sentence, quantiles)`` of the interval :func:`with_interval` puts on
    ``answer``; None when it puts none (the answer keeps whatever interval it has)."""
    if answer is None or job.mode != "training":
        return None
    prov = answer.provenance
    if prov.interval is not None or prov.basis != "analytic":
        return None
    cal = job.calibration
    if quantity == "memory" and (cal.activation_factor != 1.0 or cal.fragmentation_gib
                                 or cal.misc_overhead_gib):
        return None     # calibrated by the user: the uncalibrated answers' spread says nothing
    _, q, label = _chain(quantity, job.training.stack, job.hardware.gpu)
    return None if q is None else (label, q)


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
    label, q = added
    interval = _interval(quantity, answer, q)
    detail = f"{prov.detail}; {label}" if prov.detail else label
    return attrs.evolve(answer, provenance=attrs.evolve(prov, interval=interval, detail=detail))


__all__ = ["QUANTITIES", "gpu_family", "group", "interval_of", "table", "with_interval"]
