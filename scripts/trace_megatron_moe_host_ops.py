"""Trace behind ``fmest.physics.time_constants.MEGATRON_MOE_LAYER_HOST_OPS`` (not a test).

Counts the ATen ops Megatron-Core's MoE transformer layers dispatch on the host, forward and
backward, and where ``MoEAlltoAllTokenDispatcher`` makes the host wait for the GPU
(``_maybe_dtoh_and_synchronize`` at ``cuda_sync_point``), on CPU: two gloo ranks, EP 2, the
local (no Transformer Engine) spec, RMSNorm, SwiGLU, a top-k router with aux loss. The D2H
copies the real code makes at ``cuda_dtoh_point`` are counted one op each (on CPU they are
no-ops). Per layer = (4 layers - 2 layers) / 2.

Needs a checkout of NVIDIA/Megatron-LM (d98e8a64ddf34856e74b24714e3bedb2f5a39553 was traced:
``git -C MEGATRON_CLONE archive d98e8a64 megatron/core | tar x -C DIR``)
and the ``triton`` package (imported by megatron.core; no kernel of it runs), both on
PYTHONPATH; then

    python scripts/trace_megatron_moe_host_ops.py LAYERS LOCAL_EXPERTS TOPK 0

Result (torch 2.13, 2026-11): one local expert, 2 layers fwd 286 / bwd 317 ops, 4 layers
560 / 607 (syncs at ops 120, 257, 394, 531): 137 forward and 145 backward per layer. Each
further local expert adds 10 forward and ~23 backward ops (``SequentialMLP``'s loop; the
grouped GEMM runs them in one call). Full recompute needs the CUDA RNG tracker and is not
traced here.
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as Fn
from torch.utils._python_dispatch import TorchDispatchMode


class Count(TorchDispatchMode):
    def __init__(self):
        super().__init__(); self.ops = 0; self.marks = []; self.names = []
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1; self.names.append(str(func))
        return func(*args, **(kwargs or {}))

COUNTER = None

def run(rank, world, layers, local_experts, topk, recompute):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("PORT", "29533"))
    torch.cuda.current_device = lambda: "cpu"
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from megatron.core import parallel_state as ps
    ps.initialize_model_parallel(expert_model_parallel_size=world)
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer.moe import token_dispatcher as td
    td.MoEAlltoAllTokenDispatcher.cuda_dtoh_stream = object()
    def dtoh(self, point, tokens_per_expert=None):
        if not self.drop_and_pad and point == self.cuda_dtoh_point:
            # the real code copies each of these device tensors to the host here (one
            # non-blocking D2H copy each: counted as one op apiece)
            names = ["input_splits", "output_splits", "output_splits_tp", "num_out_tokens"]
            if self.num_local_experts > 1 and not self.config.moe_permute_fusion:
                names.append("num_global_tokens_per_local_expert")
            moved = int(torch.is_tensor(tokens_per_expert))
            for n in names:
                v = getattr(self, n, None)
                if torch.is_tensor(v):
                    moved += 1
                    if n in ("input_splits", "output_splits", "output_splits_tp"):
                        setattr(self, n, v.numpy())
            if COUNTER is not None:
                COUNTER.ops += moved
        if not self.drop_and_pad and point == self.cuda_sync_point and COUNTER is not None:
            COUNTER.marks.append((COUNTER.ops, point))
        return tokens_per_expert
    td.MoEAlltoAllTokenDispatcher._maybe_dtoh_and_synchronize = dtoh
    import contextlib

    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.tensor_parallel import random as tpr
    from megatron.core.transformer.transformer_block import TransformerBlock
    from megatron.core.transformer.transformer_config import TransformerConfig
    tpr.CudaRNGStatesTracker.fork = lambda self, name=None: contextlib.nullcontext()
    try:
        model_parallel_cuda_manual_seed(0)
    except Exception:
        pass
    cfg = TransformerConfig(num_layers=layers, hidden_size=64, ffn_hidden_size=128,
        num_attention_heads=4, num_moe_experts=local_experts * world, moe_router_topk=topk,
        moe_ffn_hidden_size=32, moe_token_dispatcher_type="alltoall",
        expert_model_parallel_size=world, add_bias_linear=False, gated_linear_unit=True,
        activation_func=Fn.silu, normalization="RMSNorm", use_cpu_initialization=True,
        moe_router_load_balancing_type="aux_loss", moe_aux_loss_coeff=1e-2,
        bias_activation_fusion=False, bias_dropout_fusion=False, apply_rope_fusion=False,
        masked_softmax_fusion=False, persist_layer_norm=False, gradient_accumulation_fusion=False,
        hidden_dropout=0.0, attention_dropout=0.0,
        recompute_granularity="full" if recompute else None,
        recompute_method="uniform" if recompute else None,
        recompute_num_layers=1 if recompute else None)
    spec = get_gpt_layer_local_spec(num_experts=cfg.num_moe_experts, moe_grouped_gemm=False)
    block = TransformerBlock(cfg, spec)
    x = torch.randn(16, 2, 64, requires_grad=True)
    global COUNTER
    for it in range(2):
        COUNTER = Count()
        with COUNTER:
            y = block(x, attention_mask=torch.triu(torch.ones(16, 16), 1).bool()[None, None])
            y = y[0] if isinstance(y, tuple) else y
            fwd = COUNTER.ops
            y.float().pow(2).mean().backward()
        if rank == 0 and it == 1:
            print(f"RESULT layers={layers} local_experts={local_experts} topk={topk} "
                  f"recompute={recompute} fwd={fwd} bwd={COUNTER.ops - fwd} "
                  f"syncs={len(COUNTER.marks)} marks={[m for m, _ in COUNTER.marks]}", flush=True)
    dist.destroy_process_group()

if __name__ == "__main__":
    import torch.multiprocessing as mp
    L, E, K, R = (int(a) for a in sys.argv[1:5])
    mp.spawn(run, args=(2, L, E, K, R), nprocs=2)
