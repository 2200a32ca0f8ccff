"""The precision policy rule, shared by every plugin so that memory, time and traces agree.

``training.precision`` says what is stored: ``pure`` (weights, grads, states in the compute
dtype), ``amp`` (fp32 weights/grads/states, compute under autocast), ``master`` (compute-dtype
weights and grads + fp32 master weights and states). ``auto`` resolves by
:func:`resolve_precision`.
"""

from __future__ import annotations


def resolve_precision(training, sharding, stack=None) -> str:
    """The precision policy for ``precision="auto"`` (documented in docs/memory_model.md).

    * LoRA/QLoRA -> ``amp``: frozen base in ``dtype``, adapters, their grads and states in fp32
      (peft ``autocast_adapter_dtype=True``).
    * fp32 compute -> ``pure``.
    * full + a sharding strategy with ``auto_precision`` -> that policy: the built-in FSDP
      strategies that shard parameters say ``amp`` (fp32 sharded parameters, gradients and
      states, compute in ``dtype`` on all-gathered copies: FSDP2 ``MixedPrecisionPolicy``,
      torchtitan); DeepSpeed ZeRO 1-3 say ``master`` (``dtype`` weights and grads plus fp32
      master weights and fp32 states: DeepSpeed bf16/fp16 optimizers, Megatron).
    * full + fp16 single GPU/DDP -> ``amp`` (fp16 weights without master copies diverge).
    * full + bf16 single GPU/DDP -> ``pure`` (torchtune and PEFT's benchmark train in pure bf16;
      the measured rows of the evidence set, measured_dev.csv, are pure bf16).

    ``sharding`` is the job's :class:`fmest.transforms.ShardingStrategy` (``ctx.sharding``).
    ``stack`` (a :class:`fmest.stacks.ResolvedStack`): a stack's ``auto_precision`` decides
    full half-precision training before the sharding strategy does (torchtune: ``pure``;
    Megatron-Core and DeepSpeed: ``master``; llm-foundry: ``amp``; core/fmest/data/stacks.toml).
    """
    if training.precision != "auto":
        return training.precision
    if training.technique in ("lora", "qlora"):
        return "amp"
    if training.dtype == "fp32":
        return "pure"
    auto = getattr(getattr(stack, "profile", None), "auto_precision", None)
    if auto is not None:
        return auto
    if sharding.auto_precision is not None:
        return sharding.auto_precision
    if training.dtype == "fp16":
        return "amp"
    return "pure"
