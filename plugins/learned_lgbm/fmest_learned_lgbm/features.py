"""Features of a job, computed from the job and its resolved :class:`ModelSpec`.

Features are always computed here, at training and at prediction time, from the job itself
(a probe dataset's ``job_json``), never read from a dataset's informational columns, so the
two can never disagree. Sizes are log2-scaled: trees split on ratios, and a configuration
twice as large as any seen is "one step" outside the range, not a thousand.

A bundle stores the names (and order) of the features it was trained with; a name this module
cannot compute makes the bundle incompatible (:func:`check_names`).
"""

from __future__ import annotations

import math
from typing import Any, Callable

from fmest.engine import sharding_name
from fmest.physics.counting import total_params, trainable_params


def _log2(x: float) -> float:
    return math.log2(x) if x and x > 0 else 0.0


def _stack(job) -> str:
    """The job's training stack (``training.stack``, issue 12); ``pytorch`` (the default
    profile) on an fmest without the field or with it unset."""
    return str(getattr(job.training, "stack", None) or "pytorch").lower()


def _peak(job, ctx) -> float:
    """The GPU's dense peak FLOP/s for the job's compute dtype (0 when the table has none)."""
    try:
        return float(ctx.gpu.peak_flops_per_s(job.training.dtype) or 0.0)
    except Exception:  # a GPU row without the dtype's figure: no peak feature
        return 0.0


#: name -> (kind, function(job, ctx, extra) -> value); ``extra`` holds the baseline value
#: and the measuring device.
FEATURES: dict[str, tuple[str, Callable[..., Any]]] = {
    # model
    "params_log2": ("numeric", lambda j, c, e: _log2(total_params(c.model, j.training))),
    "trainable_params_log2": ("numeric",
                              lambda j, c, e: _log2(trainable_params(c.model, j.training))),
    "hidden_log2": ("numeric", lambda j, c, e: _log2(c.model.hidden_size)),
    "intermediate_log2": ("numeric", lambda j, c, e: _log2(c.model.intermediate_size)),
    "layers": ("numeric", lambda j, c, e: float(c.model.num_layers)),
    "heads": ("numeric", lambda j, c, e: float(c.model.num_attention_heads)),
    "kv_heads": ("numeric", lambda j, c, e: float(c.model.num_kv_heads)),
    "vocab_log2": ("numeric", lambda j, c, e: _log2(c.model.vocab_size)),
    "experts": ("numeric", lambda j, c, e: float(c.model.num_experts)),
    "tied_embeddings": ("numeric", lambda j, c, e: float(bool(c.model.tie_word_embeddings))),
    # batch
    "seq_len_log2": ("numeric", lambda j, c, e: _log2(j.training.seq_len)),
    "micro_batch_log2": ("numeric", lambda j, c, e: _log2(j.training.micro_batch_size)),
    "tokens_per_micro_batch_log2": ("numeric", lambda j, c, e: _log2(
        j.training.seq_len * j.training.micro_batch_size)),
    "grad_accum_log2": ("numeric", lambda j, c, e: _log2(j.training.grad_accum_steps)),
    # technique
    "technique": ("categorical", lambda j, c, e: j.training.technique),
    "lora_rank_log2": ("numeric", lambda j, c, e: _log2(j.training.lora_rank)
                       if j.training.technique != "full" else 0.0),
    "dtype": ("categorical", lambda j, c, e: j.training.dtype),
    "precision": ("categorical", lambda j, c, e: j.training.precision),
    "activation_checkpointing": ("categorical",
                                 lambda j, c, e: j.training.activation_checkpointing),
    "attention": ("categorical", lambda j, c, e: j.training.attention),
    "loss": ("categorical", lambda j, c, e: j.training.loss),
    "optimizer": ("categorical", lambda j, c, e: c.optimizer.name),
    "optimizer_impl": ("categorical", lambda j, c, e: j.training.optimizer_impl),
    # parallelism
    "sharding": ("categorical", lambda j, c, e: sharding_name(j)),
    "cpu_offload": ("categorical", lambda j, c, e: j.parallelism.cpu_offload),
    "world_size_log2": ("numeric", lambda j, c, e: _log2(c.layout.world_size)),
    "dp_log2": ("numeric", lambda j, c, e: _log2(c.layout.dp)),
    "tp": ("numeric", lambda j, c, e: float(c.layout.tp)),
    "pp": ("numeric", lambda j, c, e: float(c.layout.pp)),
    "cp": ("numeric", lambda j, c, e: float(c.layout.cp)),
    # where it ran
    "gpu": ("categorical", lambda j, c, e: c.gpu.name),
    "device": ("categorical", lambda j, c, e: e.get("device", "cuda")),
    # the analytic baseline itself
    "theory_log2": ("numeric", lambda j, c, e: _log2(e["theory"])),
    # added for GPU evidence (issue 13): the software stack and what it runs
    "stack": ("categorical", lambda j, c, e: _stack(j)),
    "family": ("categorical", lambda j, c, e: c.model.model_type or "unknown"),
    "ep": ("numeric", lambda j, c, e: float(c.layout.ep)),
    "sequence_parallel": ("numeric", lambda j, c, e: float(bool(
        j.parallelism.sequence_parallel))),
    "activation_offload": ("numeric", lambda j, c, e: float(bool(j.training.activation_offload))),
    "compile": ("numeric", lambda j, c, e: float(bool(j.training.compile))),
    "fp8": ("numeric", lambda j, c, e: float(j.training.dtype == "fp8")),
    "gpu_memory_log2": ("numeric", lambda j, c, e: _log2(c.gpu.memory_bytes)),
    "gpu_peak_flops_log2": ("numeric", lambda j, c, e: _log2(_peak(j, c))),
    # what the measurement counted (allocated / reserved / whole device): a property of the
    # measurement, not of where it was published; estimates are asked as ``reserved`` (the
    # part of the answer the learned factor scales)
    "memory_counter": ("categorical", lambda j, c, e: e.get("counter", "reserved")),
}

_COMMON = ["params_log2", "trainable_params_log2", "hidden_log2", "intermediate_log2", "layers",
           "heads", "kv_heads", "vocab_log2", "experts", "tied_embeddings", "seq_len_log2",
           "micro_batch_log2", "tokens_per_micro_batch_log2", "technique", "lora_rank_log2",
           "dtype", "precision", "activation_checkpointing", "attention", "loss", "optimizer",
           "optimizer_impl", "sharding", "cpu_offload", "world_size_log2", "dp_log2", "tp", "pp",
           "cp", "theory_log2"]

#: Features per target. Memory does not depend on the GPU model or on gradient accumulation;
#: time does, and a model trained on CPU step times must not pass for a GPU one, so ``device``
#: is a time feature (jobs are predicted as ``cuda``: a CPU-trained time model is out of domain).
DEFAULT_FEATURES = {
    "memory": list(_COMMON),
    "time": _COMMON + ["grad_accum_log2", "gpu", "device"],
}


#: Features of the GPU-evidence bundle (published runs, issue 13): what a user's job states
#: (stack, GPU, model dims and family, technique, precision, sharding, tp/pp/cp/ep, micro-batch
#: x sequence, checkpointing, attention, loss, fp8, offload) and nothing that identifies where a
#: row was published. Memory leaves out the GPU's speed; time leaves out nothing it depends on.
_EVIDENCE = ["params_log2", "trainable_params_log2", "hidden_log2", "layers", "vocab_log2",
             "experts", "family", "seq_len_log2", "micro_batch_log2",
             "tokens_per_micro_batch_log2", "technique", "lora_rank_log2", "dtype", "precision",
             "fp8", "activation_checkpointing", "activation_offload", "attention", "loss",
             "compile", "optimizer", "sharding", "cpu_offload", "world_size_log2", "dp_log2",
             "tp", "pp", "cp", "ep", "sequence_parallel", "stack", "gpu_memory_log2",
             "theory_log2"]
EVIDENCE_FEATURES = {
    "memory": _EVIDENCE + ["memory_counter"],
    "time": _EVIDENCE + ["grad_accum_log2", "gpu", "gpu_peak_flops_log2", "device"],
}

#: Named feature sets (``fmest learn --features NAME``).
FEATURE_SETS = {"probes": DEFAULT_FEATURES, "evidence": EVIDENCE_FEATURES}


def kind(name: str) -> str:
    return FEATURES[name][0]


def check_names(names) -> list[str]:
    """The names this module cannot compute (empty when all are known)."""
    return [n for n in names if n not in FEATURES]


def feature_values(names, job, ctx, *, theory: float, device: str = "cuda",
                   counter: str = "reserved") -> dict[str, Any]:
    """Feature name -> value for ``job`` (``theory`` is the analytic baseline value,
    ``counter`` the memory counter the measurement read)."""
    extra = {"theory": theory, "device": device, "counter": counter}
    return {n: FEATURES[n][1](job, ctx, extra) for n in names}


def domain_reasons(spec, values: dict[str, Any]) -> list[str]:
    """Why ``values`` lie outside a model's training domain (empty: in domain).

    ``spec`` lists the model's features (name, kind, training ``min``/``max`` or categorical
    ``levels``, and ``used``: whether any tree splits on it). A feature no tree splits on
    cannot move the prediction, so only used features (all, in bundles without the flag) are
    checked: every numeric value inside its training range, every categorical value seen."""
    out = []
    for f in spec:
        if f.get("used") is False:
            continue
        v = values[f["name"]]
        if f["kind"] == "categorical":
            if str(v) not in f["levels"]:
                out.append(f"{f['name']}={v!r} not seen in training (seen: "
                           f"{', '.join(map(str, f['levels']))})")
        else:
            lo, hi = f["min"], f["max"]
            tol = 1e-9 * max(1.0, abs(lo), abs(hi))
            if v < lo - tol or v > hi + tol:
                out.append(f"{f['name']}={v:g} outside training range [{lo:g}, {hi:g}]")
    return out


def family(job, ctx) -> str:
    """The cross-validation group: the model family (``model_type``)."""
    return ctx.model.model_type or job.model


def model_name(job, ctx) -> str:
    return ctx.model.name or job.model
