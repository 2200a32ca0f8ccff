"""Count the ATen ops eager transformers code dispatches per decoder layer (forward + backward).

The time model's host-dispatch floor (``fmest_time_roofline.formulas.EAGER_OPS_*``) multiplies
these counts by a per-op host time. They are counted here, on CPU, with a ``TorchDispatchMode``
over a small ``LlamaForCausalLM`` (sdpa attention) at 2 and 4 layers: the difference, halved, is
the per-layer count; the rest is outside the layers (embedding, norm, head, loss). LoRA rows
adapt q/k/v/o with PEFT (rank 8, dropout 0.05); checkpointing is transformers'
``gradient_checkpointing_enable`` (non-reentrant). Needs torch, transformers and peft.

    python benchmarks/count_eager_ops.py
    python benchmarks/count_eager_ops.py --fused   # ops a fused kernel chain replaces

``--fused`` counts the same steps with one chain at a time replaced by a stand-in that launches
what a fused kernel launches (Liger-Kernel's Triton kernels, linkedin/Liger-Kernel
src/liger_kernel/ops: RMSNorm one kernel forward, one kernel plus a ``sum`` backward; RoPE one
kernel for q and k each way (counted as one op per tensor here); SwiGLU one kernel each way
(one op per input gradient here); cross-entropy on the logits one
kernel forward, the gradient written in it, one scaling op backward): the difference to the
eager count is what ``fmest_time_roofline.formulas.EAGER_OPS_REPLACED_BY_FUSED`` subtracts from
a stack's host dispatch when the job or Liger fuses that chain.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class _Count(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


class _FusedNorm(torch.autograd.Function):
    """RMSNorm as one kernel forward, one kernel and a weight-gradient ``sum`` backward. It
    saves its input as Liger's RMSNorm does (the saved tensor is part of what checkpointing
    replays, so it changes the count), though the stand-in's backward does not read it."""

    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        return torch.mul(x, weight)

    @staticmethod
    def backward(ctx, grad):
        _, weight = ctx.saved_tensors
        return torch.mul(grad, weight), torch.sum(grad, dim=tuple(range(grad.dim() - 1)))


class _FusedRope(torch.autograd.Function):
    """RoPE of q and k: one op per output each way (shapes kept, values not: ops are
    counted; Liger rotates q and k in one kernel, so this keeps one launch more)."""

    @staticmethod
    def forward(ctx, q, k):
        return torch.mul(q, 1.0), torch.mul(k, 1.0)

    @staticmethod
    def backward(ctx, gq, gk):
        return torch.mul(gq, 1.0), torch.mul(gk, 1.0)


class _FusedSwiGLU(torch.autograd.Function):
    """silu(gate) * up: one op forward, one per input gradient backward (Liger computes both
    in one kernel: one launch more here)."""

    @staticmethod
    def forward(ctx, gate, up):
        ctx.save_for_backward(gate, up)
        return torch.mul(gate, up)

    @staticmethod
    def backward(ctx, grad):
        gate, up = ctx.saved_tensors
        return torch.mul(grad, up), torch.mul(grad, gate)


#: the chains ``--fused`` replaces one at a time (FUSED_KERNEL_OPS names)
FUSED_CHAINS = ("norm", "rope", "activation")


def _patch(fused: str):
    """Replace one eager chain of transformers' Llama with its fused stand-in; returns the
    undo."""
    from transformers.models.llama import modeling_llama as L

    if fused == "norm":
        old = L.LlamaRMSNorm.forward
        L.LlamaRMSNorm.forward = lambda self, x: _FusedNorm.apply(x, self.weight)
        return lambda: setattr(L.LlamaRMSNorm, "forward", old)
    if fused == "rope":
        old = L.apply_rotary_pos_emb
        L.apply_rotary_pos_emb = lambda q, k, cos, sin, unsqueeze_dim=1: _FusedRope.apply(q, k)
        return lambda: setattr(L, "apply_rotary_pos_emb", old)
    if fused == "activation":
        old = L.LlamaMLP.forward
        L.LlamaMLP.forward = lambda self, x: self.down_proj(
            _FusedSwiGLU.apply(self.gate_proj(x), self.up_proj(x)))
        return lambda: setattr(L.LlamaMLP, "forward", old)
    raise ValueError(fused)


def ops_per_step(layers: int, *, lora: bool, checkpointing: bool,
                 fused: str = "") -> tuple[int, int]:
    """(forward ops, backward ops) of one micro-batch of a ``layers``-layer Llama, with the
    chain ``fused`` (``FUSED_CHAINS``) replaced by its fused stand-in."""
    undo = _patch(fused) if fused else None
    try:
        return _ops_per_step(layers, lora=lora, checkpointing=checkpointing)
    finally:
        if undo:
            undo()


def _ops_per_step(layers: int, *, lora: bool, checkpointing: bool) -> tuple[int, int]:
    import transformers

    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                   num_key_value_heads=4, num_hidden_layers=layers,
                                   vocab_size=128, attn_implementation="sdpa")
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    if lora:
        import peft

        model = peft.get_peft_model(model, peft.LoraConfig(
            r=8, lora_dropout=0.05, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if lora:
            model.enable_input_require_grads()
    model.train()
    ids = torch.randint(0, 128, (1, 16))
    with _Count() as fwd:
        out = model(input_ids=ids, labels=ids)
    with _Count() as bwd:
        out.loss.backward()
    return fwd.ops, bwd.ops


def per_layer(*, lora: bool, checkpointing: bool, fused: str = "") -> tuple[float, float]:
    """(forward, backward) ops per decoder layer: the 4-layer count less the 2-layer one,
    halved."""
    two = ops_per_step(2, lora=lora, checkpointing=checkpointing, fused=fused)
    four = ops_per_step(4, lora=lora, checkpointing=checkpointing, fused=fused)
    return (four[0] - two[0]) / 2, (four[1] - two[1]) / 2


def fused_main() -> int:
    print(f"{'chain':11s} {'ckpt':5s} {'fwd eager':>9s} {'fwd fused':>9s} {'bwd eager':>9s} "
          f"{'bwd fused':>9s} {'replaced fwd':>12s} {'replaced bwd':>12s}")
    for ckpt in (False, True):
        eager = per_layer(lora=False, checkpointing=ckpt)
        for chain in FUSED_CHAINS:
            fused = per_layer(lora=False, checkpointing=ckpt, fused=chain)
            print(f"{chain:11s} {ckpt!s:5s} {eager[0]:9.0f} {fused[0]:9.0f} {eager[1]:9.0f} "
                  f"{fused[1]:9.0f} {eager[0] - fused[0]:12.0f} {eager[1] - fused[1]:12.0f}")
    return 0


def main() -> int:
    import sys

    if "--fused" in sys.argv[1:]:
        return fused_main()
    print(f"{'lora':5s} {'ckpt':5s} {'per layer':>10s} {'forward':>8s} {'backward':>8s} "
          f"{'outside':>8s} {'fwd out':>8s}")
    for lora in (False, True):
        for ckpt in (False, True):
            two = ops_per_step(2, lora=lora, checkpointing=ckpt)
            four = ops_per_step(4, lora=lora, checkpointing=ckpt)
            fwd, bwd = (four[0] - two[0]) / 2, (four[1] - two[1]) / 2
            per_layer = fwd + bwd
            print(f"{lora!s:5s} {ckpt!s:5s} {per_layer:10.0f} {fwd:8.0f} {bwd:8.0f} "
                  f"{sum(two) - 2 * per_layer:8.0f} {two[0] - 2 * fwd:8.0f}")
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
