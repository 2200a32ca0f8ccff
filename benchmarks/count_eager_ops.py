"""Count the ATen ops eager transformers code dispatches per decoder layer (forward + backward).

The time model's host-dispatch floor (``fmest_time_roofline.formulas.EAGER_OPS_*``) multiplies
these counts by a per-op host time. They are counted here, on CPU, with a ``TorchDispatchMode``
over a small ``LlamaForCausalLM`` (sdpa attention) at 2 and 4 layers: the difference, halved, is
the per-layer count; the rest is outside the layers (embedding, norm, head, loss). LoRA rows
adapt q/k/v/o with PEFT (rank 8, dropout 0.05); checkpointing is transformers'
``gradient_checkpointing_enable`` (non-reentrant). Needs torch, transformers and peft.

    python benchmarks/count_eager_ops.py
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


def ops_per_step(layers: int, *, lora: bool, checkpointing: bool) -> tuple[int, int]:
    """(forward ops, backward ops) of one micro-batch of a ``layers``-layer Llama."""
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


def main() -> int:
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
