"""What estimation hooks return. Every answer carries its own provenance.

Plugins build these; the engine fills ``provenance.plugin`` with the entry-point name of the
plugin that answered (plugins need not know their own name), so an answer can never be
attributed to the wrong plugin.
"""

from __future__ import annotations

from typing import Optional

import attrs
from attrs import field, frozen

BASES = ("measured", "learned", "traced", "analytic", "quoted")


@frozen(kw_only=True)
class Provenance:
    """Where a number comes from.

    ``basis``: ``measured`` (a measurement of this very configuration), ``learned`` (a trained
    model), ``traced`` (executing the real code on fake tensors), ``analytic`` (formulas),
    ``quoted`` (a published table such as a price list). ``interval`` is a (low, high) pair for
    the main quantity (P10/P90 for learned answers), ``in_domain`` says whether a learned model
    saw requests like this one.
    """

    basis: str = field(validator=attrs.validators.in_(BASES))
    plugin: str = ""
    detail: str = ""
    interval: Optional[tuple[float, float]] = None
    in_domain: Optional[bool] = None


@frozen(kw_only=True)
class MemoryEstimate:
    """Per-GPU peak memory of one training step.

    ``total_bytes`` is the peak over the phases of a steady-state step; ``components`` is the
    breakdown at that peak (name -> bytes, summing to ``total_bytes``); ``phase`` names where
    the peak is (``forward``, ``backward``, ``optimizer``); ``phase_peaks_bytes`` gives each
    phase's peak.
    """

    total_bytes: int
    components: dict[str, int]
    provenance: Provenance
    phase: str = ""
    phase_peaks_bytes: dict[str, int] = field(factory=dict)
    notes: tuple[str, ...] = ()


@frozen(kw_only=True)
class TimeEstimate:
    """Time of one optimizer step (all micro-batches of the gradient accumulation) and of the
    run. ``breakdown`` (name -> seconds) explains ``step_seconds``; exposed (non-overlapped)
    parts sum to it. ``total_seconds`` is ``None`` when the job has no workload."""

    step_seconds: float
    breakdown: dict[str, float]
    provenance: Provenance
    mfu: Optional[float] = None
    hfu: Optional[float] = None
    flops_per_step: Optional[float] = None
    total_seconds: Optional[float] = None
    total_steps: Optional[float] = None
    notes: tuple[str, ...] = ()


@frozen(kw_only=True)
class TokensEstimate:
    """Throughput: tokens per second for the whole job and per GPU."""

    tokens_per_second: float
    tokens_per_second_per_gpu: float
    provenance: Provenance
    samples_per_second: Optional[float] = None
    mfu: Optional[float] = None
    hfu: Optional[float] = None
    notes: tuple[str, ...] = ()


@frozen(kw_only=True)
class CostEstimate:
    """Dollar cost of the run on rented instances."""

    usd: Optional[float]
    usd_per_hour: float
    provenance: Provenance
    provider: str = ""
    instance: str = ""
    instances: int = 0
    gpus_per_instance: int = 0
    region: str = ""
    price_type: str = ""
    price_observed: str = ""
    price_source: str = ""
    stale: bool = False
    gpu_hours: Optional[float] = None
    notes: tuple[str, ...] = ()


def with_plugin(estimate, plugin: str):
    """A copy of ``estimate`` whose provenance names ``plugin``."""
    return attrs.evolve(estimate, provenance=attrs.evolve(estimate.provenance, plugin=plugin))
