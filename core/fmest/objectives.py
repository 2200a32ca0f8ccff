"""Training objectives beyond the causal-LM loss: what a preference trainer runs per step.

One place for what ``training.objective`` and ``training.reference_model`` mean to every
plugin. Read from TRL (huggingface/trl at commit f2cd57710ae345ea6428ae95363267fcf38a3dc8),
which LLaMA-Factory, ms-swift and alignment-handbook build their preference stages on:

- ``dpo`` (``trl/trainer/dpo_trainer.py``): each sample is a chosen and a rejected sequence,
  concatenated into one batch ("batch is [chosen, rejected]", ``logps.chunk(2, dim=0)``), so a
  micro-batch of B pairs runs 2B sequences through the policy with gradients. The reference
  log-probs come from a second forward of the same 2B sequences under ``torch.no_grad()`` with
  gradient checkpointing disabled, *after* the policy forward and before its backward: through a
  frozen copy of the model (``ref_model``: created from the policy's path with the same
  ``model_init_kwargs``, so the same dtype and quantization; ``prepare_deepspeed`` keeps ZeRO-3
  sharding and turns ZeRO-1/2 into stage 0, i.e. a full replica, ``trl/models/utils.py``;
  ``prepare_fsdp`` shards it like the policy), through the policy with its PEFT adapters
  disabled (``use_adapter``, no copy) when the model is a PEFT model and no ``ref_model`` is
  given, or not at all with ``precompute_ref_log_probs`` (the log-probs are computed once
  before training and stored in the dataset).
- ``kto`` (``trl/trainer/kto_trainer.py``): unpaired completions; each micro-batch of B also
  runs B mismatched "KL" completions through the policy under ``torch.no_grad()``
  (``_compute_kl_logps``), and the reference forward covers both the completions and the KL
  completions (``completion_logits`` and ``KL_logits``), one call each.
- ``orpo``, ``simpo``, ``cpo``: chosen + rejected pairs like DPO, no reference model
  (reference-free losses: ORPO's odds ratio, SimPO's length-normalised reward, CPO).
- ``lm``: the causal-LM loss (pre-training, SFT): one sequence per sample, no reference.

Reward modelling (a score head instead of the LM head) and PPO/GRPO (generation, reward and
value models) are not objectives here: their config readers report them as not modelled.
"""

from __future__ import annotations

from typing import Optional

OBJECTIVES = ("lm", "dpo", "kto", "orpo", "simpo", "cpo")
REFERENCE_MODELS = ("auto", "none", "copy", "adapter", "precomputed")
#: objectives that run a chosen and a rejected sequence per sample
PAIRWISE = frozenset({"dpo", "orpo", "simpo", "cpo"})
#: objectives whose loss needs reference log-probs
WITH_REFERENCE = frozenset({"dpo", "kto"})


def sequences_per_sample(objective: str) -> int:
    """Sequences the policy runs with gradients per sample of ``micro_batch_size``."""
    return 2 if objective in PAIRWISE else 1


def resolved_reference(objective: str, reference_model: str, technique: str) -> str:
    """``none`` / ``copy`` / ``adapter`` / ``precomputed``: ``auto`` is TRL's default, a frozen
    copy for full training and the adapter-disabled policy for LoRA/QLoRA (module doc)."""
    if objective not in WITH_REFERENCE:
        return "none"
    if reference_model != "auto":
        return reference_model
    return "adapter" if technique in ("lora", "qlora") else "copy"


def check(objective: str, reference_model: str, technique: str) -> Optional[str]:
    """Why ``reference_model`` cannot go with the objective and technique (a message for
    ``training.reference_model``), or None."""
    if reference_model not in ("auto", "none") and objective not in WITH_REFERENCE:
        return (f"needs an objective with a reference model (objective "
                f"{' or '.join(sorted(WITH_REFERENCE))}); objective {objective!r} has none, so "
                "leave it at 'auto' or 'none'")
    if reference_model == "adapter" and technique == "full":
        return ("'adapter' disables the PEFT adapters for the reference pass and needs "
                "technique lora or qlora; full training keeps a 'copy' or 'precomputed' "
                "log-probs")
    return None


def forward_only_calls(objective: str, reference: str) -> tuple[int, ...]:
    """Sequences per sample of each extra forward pass under ``torch.no_grad()`` in a step
    (module doc): DPO's reference pass over the pair; KTO's policy pass over the KL
    completions and its reference passes over the completions and the KL completions."""
    calls: list[int] = []
    if objective == "kto":
        calls.append(1)
    if reference in ("copy", "adapter"):
        calls.extend((2,) if objective == "dpo" else (1, 1) if objective == "kto" else ())
    return tuple(calls)



def reference_of(training) -> str:
    """:func:`resolved_reference` of a ``fmest.job.Training``."""
    return resolved_reference(training.objective, training.reference_model, training.technique)


def no_grad_calls(training) -> tuple[int, ...]:
    """:func:`forward_only_calls` of a ``fmest.job.Training`` (its objective and resolved
    reference)."""
    return forward_only_calls(training.objective, reference_of(training))
