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

from fmest.counting import total_params, trainable_params
from fmest.engine import sharding_name


def _log2(x: float) -> float:
    return math.log2(x) if x and x > 0 else 0.0


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


def kind(name: str) -> str:
    return FEATURES[name][0]


def check_names(names) -> list[str]:
    """The names this module cannot compute (empty when all are known)."""
    return [n for n in names if n not in FEATURES]


def feature_values(names, job, ctx, *, theory: float, device: str = "cuda") -> dict[str, Any]:
    """Feature name -> value for ``job`` (``theory`` is the analytic baseline value)."""
    extra = {"theory": theory, "device": device}
    return {n: FEATURES[n][1](job, ctx, extra) for n in names}


def family(job, ctx) -> str:
    """The cross-validation group: the model family (``model_type``)."""
    return ctx.model.model_type or job.model


def model_name(job, ctx) -> str:
    return ctx.model.name or job.model
