"""Trace what PyTorch FSDP1 keeps alive through backward when a frozen unit runs under
reentrant activation checkpointing (the Hugging Face Trainer + PEFT LoRA/QLoRA + FSDP case).

PEFT's ``fsdp_auto_wrap_policy`` wraps every LoRA A/B linear as its own FSDP unit, so each
decoder-layer unit holds only frozen tensors (huggingface/peft v0.13.2 src/peft/utils/other.py;
transformers 4.48.1 ``Trainer._fsdp_qlora_plugin_updates`` installs it). For a FlatParameter
that does not require grad, FSDP1 ``_pre_forward`` calls
``_register_post_backward_reshard_only_hook``, which registers
``torch.autograd.graph.register_multi_grad_hook`` on the unit's *input activations*
(pytorch/pytorch PR 101982, in torch >= 2.1; torch/distributed/fsdp/_runtime_utils.py). Under
reentrant checkpointing (transformers' default: ``gradient_checkpointing_enable`` passes
``use_reentrant=True``, transformers 4.48.1 src/transformers/modeling_utils.py) the unit's
grad-enabled forward is the recompute inside ``CheckpointFunction.backward``, whose inputs are
detached leaves; the hook's closure holds the leaf's ``AccumulateGrad`` node
(``_get_grad_fn_or_grad_acc``), which holds the leaf, whose hook dict holds the closure: a cycle
through C++ that Python's GC cannot break. So each layer's recompute input (sharing the stashed
input's storage) and the gradient accumulated into it (``inp.grad``) stay alive until FSDP's
end-of-backward callback removes the hooks (``_finalize_params``).

This script runs real FSDP1 (gloo, CPU, one process) over a stack of frozen blocks under
reentrant checkpointing and counts the live storages of the activation size when the first
block's input gradient is produced (the end of backward), with and without FSDP:

    python scripts/trace_fsdp1_frozen_ckpt.py --layers 4 8 --tokens 65536 --hidden 64

Needs torch (CPU). Expected: plain ~3 activation-sized storages at the end of backward,
FSDP1 ~3 + 2 x (layers - 1) (each earlier layer's input and its gradient).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def run(layers: int, tokens: int, hidden: int, fsdp: bool) -> dict:
    import torch
    from torch.utils.checkpoint import checkpoint

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins" / "torch_runner"))
    from fmest_torch_runner.tracker import StorageTracker  # type: ignore[import-not-found]

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(hidden, hidden, bias=False)
            self.lin.weight.requires_grad_(False)     # frozen base: a frozen FSDP unit

        def forward(self, x):
            return x + torch.tanh(self.lin(x))

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = torch.nn.ModuleList(Block() for _ in range(layers))
            self.head = torch.nn.Linear(hidden, 1, bias=False)   # trainable

        def forward(self, x):
            for b in self.blocks:      # HF: self._gradient_checkpointing_func(layer.__call__, ...)
                x = checkpoint(b, x, use_reentrant=True)
            return self.head(x).sum()

    torch.manual_seed(0)
    model: torch.nn.Module = Model()
    if fsdp:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy
        model = FSDP(model, auto_wrap_policy=ModuleWrapPolicy({Block}),
                     device_id=torch.device("cpu"), use_orig_params=False)
    act_bytes = tokens * hidden * 4
    out: dict = {"layers": layers, "fsdp": fsdp, "activation_bytes": act_bytes}
    for step in range(2):          # step 0 runs FSDP's lazy init
        x = torch.randn(tokens, hidden, requires_grad=True)   # enable_input_require_grads
        tracker = StorageTracker(track_resize=True)
        seen: list[int] = []

        def probe(grad, tracker=tracker, seen=seen):
            seen.append(tracker.total)

        x.register_hook(probe)
        with tracker:
            base = tracker.total
            loss = model(x)
            loss.backward()
        if step == 1:
            out["live_at_end_of_backward"] = seen[0] - base
            out["activation_sized"] = round((seen[0] - base) / act_bytes, 2)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--tokens", type=int, default=1 << 16)
    ap.add_argument("--hidden", type=int, default=64)
    args = ap.parse_args(argv)
    import torch.distributed as dist
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29561")
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        for layers in args.layers:
            for fsdp in (False, True):
                r = run(layers, args.tokens, args.hidden, fsdp)
                print(f"layers={r['layers']:3d} fsdp1={str(r['fsdp']):5s} live at end of backward"
                      f" = {r['live_at_end_of_backward']:>12d} B = {r['activation_sized']:6.2f}"
                      f" x one layer input ({r['activation_bytes']} B)")
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
