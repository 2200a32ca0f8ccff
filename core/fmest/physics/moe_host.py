"""The host side of a Megatron-Core MoE layer under CUDA graphs and drop-and-pad (issue 20):
one function and its constants, read by time_roofline's formulas and the planner's arrays
(``fmest.plan.vector``), so the two cannot drift."""

from __future__ import annotations

from typing import Optional

from fmest.physics.time_constants import MEGATRON_MOE_LAYER_HOST_OPS

#: Host ops of a Megatron-Core MoE layer forward before the dispatcher's sync: the first sync
#: of the trace behind ``MEGATRON_MOE_LAYER_HOST_OPS`` falls at op 120 of the block's forward
#: (scripts/trace_megatron_moe_host_ops.py docstring: "syncs at ops 120, 257, 394, 531"), i.e.
#: the layer's norms, attention, router and ``MoELayer.preprocess`` (the dispatcher's
#: ``dispatch_preprocess`` permute) up to ``cuda_sync_point`` ``before_ep_alltoall``; the other
#: 137 - 120 = 17 run after it (all-to-all, experts, combine). Read by time_roofline
#: and the planner's arrays.
MEGATRON_MOE_PRESYNC_HOST_OPS = 120.0
#: Host ops of one CUDA-graph replay (``cudaGraphLaunch``) standing for a captured region
CUDA_GRAPH_REPLAY_OPS = 1.0


def moe_layer_host_profile(scope, *, drop_and_pad: bool,
                           dispatcher: Optional[str] = None) -> tuple[dict, bool, bool]:
    """(host ops per MoE layer {forward, backward}, whether the dispatcher syncs, whether the
    expert GEMMs run eagerly) of a Megatron-Core MoE layer under CUDA-graph ``scope``
    (``training.cuda_graph_scope``; None = no graphs) and drop-and-pad, as NVIDIA/Megatron-LM @
    d98e8a64ddf34856e74b24714e3bedb2f5a39553 runs it:

    * the sync: ``MoEAlltoAllTokenDispatcher._maybe_dtoh_and_synchronize`` returns at once
      under drop-and-pad (static capacity, token_dispatcher.py ``preprocess``), HybridEP sizes
      its buffers from the capacity (``_HybridEPManager.setup_metadata``); DeepEP always syncs
      (transformer_config.py refuses drop-and-pad with it);
    * the whole layer (``full``, ``full_iteration``) or ``moe`` (transformer_config.py: drop-
      and-pad only) captured with a static dispatch: the layer replays graphs, one launch per
      pass, experts included;
    * ``attn`` + ``moe_router`` + ``moe_preprocess`` (transformer_layer.py
      ``_te_cuda_graph_capture``, moe_layer.py ``preprocess`` = ``dispatch_preprocess``): the
      forward's pre-sync segment (``MEGATRON_MOE_PRESYNC_HOST_OPS``) is one replay; the
      backward's split was not traced, so it keeps its eager count (an upper bound);
    * any other partial scope: the ops' split was not traced, priced eager."""
    ops = dict(MEGATRON_MOE_LAYER_HOST_OPS)
    sync = not (drop_and_pad and dispatcher != "deepep")
    scopes = set(scope or ())
    whole = bool(scopes & {"full", "full_iteration"})
    moe_static = drop_and_pad and not sync and (whole or "moe" in scopes)
    attn = whole or "attn" in scopes
    if moe_static and attn:
        return ({"forward": CUDA_GRAPH_REPLAY_OPS, "backward": CUDA_GRAPH_REPLAY_OPS},
                False, False)
    if attn and {"moe_router", "moe_preprocess"} <= scopes:
        ops["forward"] = ops["forward"] - MEGATRON_MOE_PRESYNC_HOST_OPS + CUDA_GRAPH_REPLAY_OPS
    return ops, sync, not moe_static
