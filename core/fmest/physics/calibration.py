"""Seed-compatible calibration knobs applied to any memory answer.

Users of the LLM/VLM memory estimator know four knobs, and fmest applies them the same way to
whichever plugin answered (analytic, traced or learned), after the answer and before the fits
verdict, so they show up in the breakdown and the provenance:

- ``activation_factor`` multiplies the activation components (``fmest.estimates
  .ACTIVATION_COMPONENTS``), e.g. to account for a framework that saves more than the model;
- ``fragmentation_gib`` adds a ``fragmentation`` component (allocator fragmentation the
  estimate does not model);
- ``misc_overhead_gib`` adds a ``misc_overhead`` component (anything else: other processes,
  profilers, a second model);
- ``safety_margin`` is the share of GPU memory the fits verdict keeps free
  (:func:`usable_bytes`);
- ``logits_factor`` multiplies the ``logits_and_loss`` component (the estimator's
  ``--logits-factor``);
- ``cuda_context_gib`` replaces the ``cuda_context`` component (its ``--cuda-libs-gib``).

All default to "no change" (1, 0, 0, 0, 1, None).
"""

from __future__ import annotations

import attrs

from fmest.errors import InputError
from fmest.estimates import ACTIVATION_COMPONENTS

GIB = 1 << 30


def apply_calibration(estimate, knobs):
    """``estimate`` with every knob of ``knobs`` (a :class:`fmest.job.Calibration`) applied."""
    return calibrate_memory(estimate, activation_factor=knobs.activation_factor,
                            fragmentation_gib=knobs.fragmentation_gib,
                            misc_overhead_gib=knobs.misc_overhead_gib,
                            logits_factor=knobs.logits_factor,
                            cuda_context_gib=knobs.cuda_context_gib)


def calibrate_memory(estimate, *, activation_factor: float = 1.0,
                     fragmentation_gib: float = 0.0, misc_overhead_gib: float = 0.0,
                     logits_factor: float = 1.0, cuda_context_gib: float | None = None):
    """``estimate`` (a :class:`fmest.estimates.MemoryEstimate`) with the knobs applied; the
    same object when every knob is at its default."""
    if activation_factor == 1.0 and not fragmentation_gib and not misc_overhead_gib \
            and logits_factor == 1.0 and cuda_context_gib is None:
        return estimate
    if activation_factor <= 0 or fragmentation_gib < 0 or misc_overhead_gib < 0 \
            or logits_factor < 0 or (cuda_context_gib is not None and cuda_context_gib < 0):
        raise InputError("calibration", "activation_factor must be > 0, logits_factor >= 0 and "
                         "the GiB knobs >= 0",
                         value=(activation_factor, fragmentation_gib, misc_overhead_gib,
                                logits_factor, cuda_context_gib))
    components = dict(estimate.components)
    before = dict(components)
    for name in ACTIVATION_COMPONENTS:
        if name in components:
            components[name] = int(round(components[name] * activation_factor))
    if "logits_and_loss" in components:
        components["logits_and_loss"] = int(round(components["logits_and_loss"] * logits_factor))
    if cuda_context_gib is not None:
        components["cuda_context"] = int(cuda_context_gib * GIB)
    if fragmentation_gib:
        components["fragmentation"] = int(fragmentation_gib * GIB)
    if misc_overhead_gib:
        components["misc_overhead"] = int(misc_overhead_gib * GIB)
    applied = []
    if activation_factor != 1.0:
        applied.append(f"activations x {activation_factor:g}")
    if logits_factor != 1.0:
        applied.append(f"logits and loss x {logits_factor:g}")
    if cuda_context_gib is not None:
        applied.append(f"CUDA context {cuda_context_gib:g} GiB")
    if fragmentation_gib:
        applied.append(f"+{fragmentation_gib:g} GiB fragmentation")
    if misc_overhead_gib:
        applied.append(f"+{misc_overhead_gib:g} GiB misc overhead")
    text = "calibration knobs: " + ", ".join(applied)
    detail = f"{estimate.provenance.detail}; {text}" if estimate.provenance.detail else text
    total = int(sum(components.values()))
    # every phase holds the added GiB and the replaced CUDA context; the activation and logits
    # change is known for the peak phase only
    everywhere = sum(components.get(k, 0) - before.get(k, 0)
                     for k in ("fragmentation", "misc_overhead", "cuda_context"))
    peak_delta = total - estimate.total_bytes - everywhere
    peaks = {k: max(0, v + everywhere + (peak_delta if k == estimate.phase else 0))
             for k, v in estimate.phase_peaks_bytes.items()}
    return attrs.evolve(
        estimate, components=components, total_bytes=total,
        provenance=attrs.evolve(estimate.provenance, detail=detail),
        phase_peaks_bytes=peaks, notes=(*estimate.notes, text))


def usable_bytes(capacity_bytes: float, safety_margin: float = 0.0) -> float:
    """GPU memory the fits verdict may use: ``capacity x (1 - safety_margin)``."""
    if not 0.0 <= safety_margin < 1.0:
        raise InputError("calibration.safety_margin", "must be a fraction in [0, 1)",
                         value=safety_margin)
    return capacity_bytes * (1.0 - safety_margin)
