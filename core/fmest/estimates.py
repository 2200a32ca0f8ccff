"""What estimation hooks return. Every answer carries its own provenance.

Plugins build these; the engine fills ``provenance.plugin`` with the entry-point name of the
plugin that answered (plugins need not know their own name), so an answer can never be
attributed to the wrong plugin.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import attrs
from attrs import field, frozen

BASES = ("measured", "learned", "traced", "analytic", "quoted")

# -- the component vocabulary -------------------------------------------------------------------
# Names a MemoryEstimate's ``components`` and a TimeEstimate's ``breakdown`` use, so plugins that
# read another plugin's answer (through the engine) look up names, never substrings.

#: Where a memory component lives relative to PyTorch's caching allocator:
#: ``allocated`` bytes are what ``torch.cuda.max_memory_allocated()`` counts; ``reserve`` is what
#: the allocator holds above that (``max_memory_reserved() - max_memory_allocated()``);
#: ``outside`` is device memory the allocator never sees (CUDA context, the kernel images and
#: library handles a step loads, NCCL buffers: PyTorch "CUDA semantics", memory management
#: notes).
ALLOCATED, RESERVE, OUTSIDE = "allocated", "reserve", "outside"

#: Memory component name -> (allocator class, meaning). The analytic plugin uses the first block,
#: the traced plugin the tracker's categories (second block); both share the device terms.
MEMORY_COMPONENTS: dict[str, tuple[str, str]] = {
    "weights": (ALLOCATED, "model weights in their storage dtype (sharded share)"),
    "master_weights": (ALLOCATED, "fp32 master copy of the trainable weights"),
    "lora_adapters": (ALLOCATED, "LoRA adapter weights"),
    "gradients": (ALLOCATED, "gradients of the trainable parameters"),
    "optimizer_states": (ALLOCATED, "optimizer state (e.g. Adam moments)"),
    "optimizer_temporaries": (ALLOCATED, "optimizer step working buffers"),
    "activations": (ALLOCATED, "activations saved for backward"),
    "logits_and_loss": (ALLOCATED, "logits, loss and their gradients"),
    "framework_buffers": (ALLOCATED, "collective and prefetch buffers the framework allocates"),
    # preference objectives (fmest.objectives)
    "reference_weights": (ALLOCATED, "the frozen reference model of DPO/KTO (a copy of the "
                                     "policy's weights, sharded like them)"),
    "reference_forward": (ALLOCATED, "logits of the largest no-grad forward pass of a DPO/KTO "
                                     "step (reference or KL log-probs)"),
    # the traced plugin's tracker categories
    "params": (ALLOCATED, "parameters (traced)"),
    "grads": (ALLOCATED, "gradients (traced)"),
    "optimizer_state": (ALLOCATED, "optimizer state (traced)"),
    "temporaries": (ALLOCATED, "short-lived tensors at the peak (traced)"),
    # GPU-side terms (fmest.physics.device_terms)
    "cuda_context": (OUTSIDE, "CUDA context with the kernels and library handles the step loads "
                              "(plus NCCL buffers when the estimate has no separate "
                              "nccl_buffers)"),
    "nccl_buffers": (OUTSIDE, "NCCL communicator buffers"),
    "allocator_reserve": (RESERVE, "caching-allocator reserve above the allocated peak"),
    # vision-language models (issue 14)
    "vision_weights": (ALLOCATED, "vision tower and projector weights (VLMs)"),
    "vision_activations": (ALLOCATED, "vision tower activations (VLMs)"),
    # inference (issue 14)
    "kv_cache": (ALLOCATED, "KV cache of the served sequences (inference)"),
    "cuda_graphs": (OUTSIDE, "captured CUDA graphs' private memory pools (inference)"),
    # calibration knobs (fmest.physics.calibration)
    "fragmentation": (RESERVE, "allocator fragmentation added by --fragmentation-gib"),
    "misc_overhead": (OUTSIDE, "other memory added by --misc-overhead-gib"),
}

#: Components counted by ``max_memory_allocated`` / by ``max_memory_reserved`` / by neither.
ALLOCATED_COMPONENTS = tuple(k for k, (cls, _) in MEMORY_COMPONENTS.items() if cls == ALLOCATED)
RESERVE_COMPONENTS = tuple(k for k, (cls, _) in MEMORY_COMPONENTS.items() if cls == RESERVE)
OUTSIDE_COMPONENTS = tuple(k for k, (cls, _) in MEMORY_COMPONENTS.items() if cls == OUTSIDE)
#: Components holding saved activations (what a time model reads as activation traffic).
ACTIVATION_COMPONENTS = ("activations", "vision_activations")

#: Time breakdown part name -> meaning. ``communication_<group>`` parts are exposed
#: (non-overlapped) collective time of that parallel group.
TIME_PARTS: dict[str, str] = {
    "compute": "matrix-multiply time at the achieved FLOP rate",
    "memory_bound": "bandwidth-bound kernels (norms, activations, elementwise)",
    "communication_tp": "exposed tensor-parallel collectives",
    "communication_ep": "exposed expert-parallel all-to-alls",
    "communication_pp": "exposed pipeline send/recv",
    "communication_cp": "exposed context-parallel (ring attention) exchanges",
    "communication_dp": "exposed data-parallel / sharding collectives",
    "pipeline_bubble": "pipeline fill and drain",
    "optimizer_step": "the optimizer update",
    "offload": "exposed host-device transfers of offloaded state",
    "reference_forward": "the no-grad forward passes of a DPO/KTO step (reference and KL "
                         "log-probs, fmest.objectives), with their exposed parameter gathers",
    "framework_overhead": "launch and framework overhead",
}
#: Parallel groups a ``communication_<group>`` part may name.
COMM_GROUPS = ("tp", "ep", "pp", "cp", "dp")


def allocated_bytes(estimate: "MemoryEstimate") -> int:
    """The part of a memory estimate a measured ``max_memory_allocated`` corresponds to:
    the total less ``reserve`` and ``outside`` components (unknown names count as allocated)."""
    skip = sum(estimate.components.get(k, 0) for k in RESERVE_COMPONENTS + OUTSIDE_COMPONENTS)
    return int(estimate.total_bytes - skip)


def memory_counters(estimate: "MemoryEstimate") -> dict[str, int]:
    """The peak as each counter a measurement reports it, labelled: ``allocated_bytes``
    (``torch.cuda.max_memory_allocated``), ``reserved_bytes`` (``max_memory_reserved``: plus
    the caching allocator's reserve) and ``device_bytes`` (nvidia-smi: plus the CUDA context,
    library workspaces and communicator buffers, the total the fits verdict compares)."""
    outside = sum(estimate.components.get(k, 0) for k in OUTSIDE_COMPONENTS)
    return {"allocated_bytes": allocated_bytes(estimate),
            "reserved_bytes": int(estimate.total_bytes - outside),
            "device_bytes": int(estimate.total_bytes)}



@frozen(kw_only=True)
class Provenance:
    """Where a number comes from.

    ``basis``: ``measured`` (a measurement of this very configuration), ``learned`` (a trained
    model), ``traced`` (executing the real code on fake tensors), ``analytic`` (formulas),
    ``quoted`` (a published table such as a price list). ``interval`` is a (low, high) pair for
    the main quantity (P10/P90 for learned answers: :data:`INTERVAL_QUANTILES`; ``detail``
    names the level), ``in_domain`` says whether a learned model saw requests like this one.
    ``scaled``: a traced answer that applied parallelism the trace did not execute (tp/pp/cp/
    ep, or sharding without a fake process group) by dividing its categories: not validated,
    so hybrid ranks it below analytic; ``False``: everything it reports was executed.
    ``unfused_stack``: a traced answer that ran eager PyTorch kernels for a job whose training
    stack (this name) fuses norm/activation/RoPE/loss kernels eager does not (issue 12): its
    peak is high by what those kernels save, so hybrid ranks it below analytic too.
    """

    basis: str = field(validator=attrs.validators.in_(BASES))
    plugin: str = ""
    detail: str = ""
    interval: Optional[tuple[float, float]] = None
    in_domain: Optional[bool] = None
    scaled: Optional[bool] = None
    unfused_stack: Optional[str] = None


#: The quantiles a provenance ``interval`` spans (low = P10, high = P90): an 80 % interval.
INTERVAL_QUANTILES = (0.1, 0.9)
_Z90 = 1.2815515655446004  # standard normal quantile at 0.9


def fits_probability(total_bytes: float, interval: Optional[tuple[float, float]],
                     usable_bytes: float) -> Optional[float]:
    """P(peak <= ``usable_bytes``) from a point estimate and its P10-P90 ``interval``.

    The peak is taken as log-normal around ``total_bytes`` (the median), with the spread of
    each side read from its end of the interval: ``ln(P90 / point) = 1.2816 sigma`` above,
    ``ln(point / P10) = 1.2816 sigma`` below (a split log-normal; the learned plugin's
    intervals are conformalized quantiles, Romano et al. 2019, arXiv:1905.03222). ``None``
    without an interval (an analytic answer states no spread). A scheduler wanting 90 %
    confidence asks for ``fits_probability >= 0.9``."""
    if interval is None or total_bytes <= 0 or usable_bytes <= 0:
        return None
    low, high = interval
    if usable_bytes >= total_bytes:
        spread = math.log(high / total_bytes) if high > total_bytes else 0.0
    else:
        spread = math.log(total_bytes / low) if 0 < low < total_bytes else 0.0
    gap = math.log(usable_bytes / total_bytes)
    if spread <= 0.0:
        return 1.0 if gap >= 0 else 0.0
    return 0.5 * (1.0 + math.erf(gap * _Z90 / spread / math.sqrt(2.0)))


#: The verdict's words by the probability that the job fits (``fits_probability``): at least
#: the threshold gives the word. Symmetric around 0.5: "LIKELY" is 3-to-1 odds, plain FITS /
#: DOES NOT FIT 19-to-1 (the 5 % / 95 % a scheduler can act on); between 25 % and 75 % the
#: estimate cannot tell. Without an interval the verdict is the point estimate's FITS / DOES
#: NOT FIT.
VERDICTS = ((0.95, "FITS"), (0.75, "LIKELY FITS"), (0.25, "UNCERTAIN"), (0.05, "LIKELY OOM"),
            (0.0, "DOES NOT FIT"))
#: ``--fit-confidence``'s default (issue 22): the P(fit) at which the searches (largest
#: micro-batch, fewest GPUs, ``fmest plan``) count a candidate as fitting and below which
#: ``--fail-if-no-fit`` exits 3. Measured out of source (``benchmarks/uncertainty.py``, open
#: sources, 2026-11-27): at 0.9, 78 % of the runs that ran count as fitting and 98 % of the
#: recorded OOMs do not (at 0.5: 100 % and 88 %). ``--fit-confidence 0.5`` asks for the
#: point estimate's own verdict.
DEFAULT_FIT_CONFIDENCE = 0.9


def verdict_word(fits: Optional[bool], probability: Optional[float]) -> str:
    """The verdict: by :data:`VERDICTS` with a probability, else FITS / DOES NOT FIT."""
    if probability is None:
        return "-" if fits is None else ("FITS" if fits else "DOES NOT FIT")
    for threshold, word in VERDICTS:
        if probability >= threshold:
            return word
    return VERDICTS[-1][1]


def verdict_text(fits: Optional[bool], probability: Optional[float]) -> str:
    """``"FITS (97 %)"``, ``"UNCERTAIN (55 %)"`` ...; the bare word without a probability."""
    word = verdict_word(fits, probability)
    return word if probability is None else f"{word} ({probability * 100:.0f} %)"


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
    #: host (CPU) RAM per node: model loading, offloaded optimizer state and parameters
    host_bytes: Optional[int] = None
    #: named numbers beside the breakdown (inference: max_batch, max_context, usable_bytes)
    metrics: dict[str, float] = field(factory=dict)


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
    #: named numbers beside the breakdown (inference: prefill_seconds, decode_step_seconds,
    #: decode_tokens_per_second, tokens_priced)
    metrics: dict[str, float] = field(factory=dict)


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


#: (id of a plugin's provenance record, plugin) -> (that record, the record naming the plugin):
#: plugins build one provenance record and return it with every answer, so the stamped copy
#: is made once (the record is kept so its id is not reused)
_STAMPED: dict[tuple[int, str], tuple[Any, Any]] = {}


def with_plugin(estimate, plugin: str):
    """A copy of ``estimate`` whose provenance names ``plugin`` (``estimate`` itself when it
    already does)."""
    provenance = estimate.provenance
    if provenance.plugin == plugin:
        return estimate
    key = (id(provenance), plugin)
    hit = _STAMPED.get(key)
    if hit is None or hit[0] is not provenance:
        if len(_STAMPED) > 1024:     # plugins that build a record per answer: stay bounded
            _STAMPED.clear()
        hit = _STAMPED[key] = (provenance, attrs.evolve(provenance, plugin=plugin))
    return attrs.evolve(estimate, provenance=hit[1])
