"""Memory and step time of many layouts at once, as numpy array formulas.

Each array holds one value per candidate configuration. The structure mirrors the analytic
plugins (docs/memory_model.md, docs/time_model.md); the per-model scale comes from engine
probes (:mod:`fmest.plan.calibrate`). The time constants that are not probed are the
time_roofline plugin's own objects, defined once in :mod:`fmest.physics.time_constants` (each
cited there); ``tests/test_plan_vector.py`` keeps the two formulas in agreement.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from fmest.allocator import (
    ALLOCATOR_FLOOR_CONSTANT_BYTES,
    ALLOCATOR_FLOOR_EXPANDABLE_CONSTANT_BYTES,
    ALLOCATOR_FLOOR_EXPANDABLE_FRACTION,
    ALLOCATOR_FLOOR_FRACTION,
)
from fmest.default_plugins.parallelism import FP32_BYTES
from fmest.physics.device_terms import (
    ALLOCATOR_RESERVE_CONSTANT_BYTES,
    ALLOCATOR_RESERVE_EXPANDABLE_CONSTANT_BYTES,
    ALLOCATOR_RESERVE_EXPANDABLE_FRACTION,
    ALLOCATOR_RESERVE_FRACTION,
    ALLOCATOR_RESERVE_LAYER_CONSTANT_BYTES,
    ALLOCATOR_RESERVE_LAYER_EXPANDABLE_CONSTANT_BYTES,
    ALLOCATOR_RESERVE_LAYER_EXPANDABLE_SLOPE,
    ALLOCATOR_RESERVE_LAYER_EXPANDABLE_TRANSIENT_SLOPE,
    ALLOCATOR_RESERVE_LAYER_SLOPE,
    ALLOCATOR_RESERVE_LAYER_TRANSIENT_SLOPE,
    ALLOCATOR_RESERVE_MIN_TRACED_BYTES,
    ALLOCATOR_RESERVE_TRANSIENT_CONSTANT_BYTES,
    ALLOCATOR_RESERVE_TRANSIENT_EXPANDABLE_CONSTANT_BYTES,
    ALLOCATOR_RESERVE_TRANSIENT_EXPANDABLE_SLOPE,
    ALLOCATOR_RESERVE_TRANSIENT_SLOPE,
    CUDA_CONTEXT_BYTES,
    FSDP2_ALL_GATHER_OUTPUT_UNITS,
    NCCL_BUFFER_BYTES,
    STREAM_POOL_KIND_CODES,
)
from fmest.physics.moe_host import moe_layer_host_profile
from fmest.physics.time_constants import (
    CPU_ADAM_PARAMS_PER_S_PER_NODE,
    DEEPSPEED_PIPE_BLOCKING_TRANSFERS,
    DEEPSPEED_PIPE_PARTITION_GATHERS,
    HBM_EFFICIENCY,
    HOST_SECONDS_PER_EAGER_OP,
    INTER_NODE_COLLECTIVE_EFFICIENCY,
    INTER_NODE_LATENCY_S,
    INTRA_NODE_LATENCY_S,
    MOE_EXPERT_GEMMS_PER_LOCAL_EXPERT,
    OVERLAP_INTERFERENCE_FRACTION,
    PCIE_EFFICIENCY,
    TE_GROUPED_GEMM_SECONDS_PER_GEMM,
)


def ring_all_reduce_seconds(bytes_per_rank, ranks, bus_bytes_per_s, latency_s):
    """``2 (n-1)/n * bytes / busbw + 2 ceil(log2 n) * latency`` (nccl-tests busbw)."""
    size = np.maximum(ranks, 1)
    steps = 2.0 * np.ceil(np.log2(np.maximum(size, 2)))
    return np.where(size > 1, 2.0 * (size - 1) / size * bytes_per_rank / bus_bytes_per_s
                    + steps * latency_s, 0.0)


def ring_half_seconds(bytes_per_rank, ranks, bus_bytes_per_s, latency_s):
    """All-gather or reduce-scatter: ``(n-1)/n * bytes / busbw + ceil(log2 n) * latency``."""
    size = np.maximum(ranks, 1)
    steps = np.ceil(np.log2(np.maximum(size, 2)))
    return np.where(size > 1, (size - 1) / size * bytes_per_rank / bus_bytes_per_s
                    + steps * latency_s, 0.0)


def exposed_seconds(comm_seconds, window_seconds):
    """Communication left on the critical path when it overlaps ``window_seconds`` of
    compute, plus the interference share of the hidden part."""
    hidden = np.minimum(comm_seconds, np.maximum(window_seconds, 0.0))
    return comm_seconds - hidden + OVERLAP_INTERFERENCE_FRACTION * hidden


def group_bus_bandwidth(size, stride, gpus_per_node, intra_bytes_per_s, nic_bytes_per_s):
    """(bus bytes/s, latency, inter-node?) of a group of ``size`` ranks ``stride`` apart:
    NVLink inside a node; hierarchical across ``nodes`` nodes, ``NIC * eff * (size-1) /
    (nodes-1)`` capped by the intra-node rate (time_roofline ``link_bytes_per_s``)."""
    inter = (size > 1) & (size * stride > gpus_per_node)
    per_node = np.maximum(1, gpus_per_node // np.maximum(1, stride))
    nodes = np.maximum(2, np.ceil(size / per_node))
    nic = nic_bytes_per_s * INTER_NODE_COLLECTIVE_EFFICIENCY
    span = np.maximum(nodes, size)
    inter_bw = np.minimum(np.maximum(intra_bytes_per_s, nic), nic * (span - 1) / (nodes - 1))
    bw = np.where(inter, inter_bw, intra_bytes_per_s)
    return bw, np.where(inter, INTER_NODE_LATENCY_S, INTRA_NODE_LATENCY_S), inter


def inflight_microbatches(pp, microbatches, virtual_stages):
    """Micro-batches the first stage holds: ``min(pp, m)`` for 1F1B, ``pp(1+(pp-1)/(pp v))``
    interleaved (Narayanan et al. 2021, arXiv:2104.04473, 2.2; memory_theory
    ``pipeline_inflight_microbatches``)."""
    full = np.where(virtual_stages > 1, pp * (1 + (pp - 1) / (pp * virtual_stages)), pp)
    return np.where(pp > 1, np.minimum(full, microbatches), 1.0)


def bubble_fraction(pp, microbatches, virtual_stages):
    """``(p-1)/(m v)`` (Narayanan et al. 2021, 2.2.1-2.2.2)."""
    return np.where(pp > 1, (pp - 1) / (np.maximum(1, microbatches) * virtual_stages), 0.0)


def context_bytes(world):
    """CUDA context with the step's kernels (+ one NCCL communicator beyond one GPU), as
    :func:`fmest.physics.device_terms.cuda_context_bytes`."""
    return CUDA_CONTEXT_BYTES + np.where(world > 1, NCCL_BUFFER_BYTES, 0)


#: Framework buffers as the memory plugin counts them (memory_theory ``formulas``): DDP's
#: flat all-reduce buckets hold one copy of the gradients (torch DDP docs,
#: ``gradient_as_bucket_view=False``); DeepSpeed ZeRO-1/2 keep reduce and all-gather buckets of
#: 5e8 elements each (DeepSpeed config docs); ZeRO-3/FSDP hold the current and the prefetched
#: layer unsharded (Zhao et al. 2023, section 3.3).
DDP_BUCKET_COPIES_OF_GRADS = 1
DEEPSPEED_BUCKET_ELEMENTS = 500_000_000
FSDP_UNSHARDED_LAYERS = 2


def expert_tp(cfg: dict):
    """The routed experts' tensor-parallel size per configuration (``parallelism.expert_tp``:
    the job's value, else ``tp``; the planner fills ``cfg["etp"]``)."""
    return cfg.get("etp", cfg["tp"])


def expert_share(cfg: dict):
    """Share of a replica's parameters one rank holds along the expert axis, relative to the
    ``1/tp`` of the dense ones: dense parameters whole, expert parameters ``tp / (ep x
    expert_tp)`` (memory_theory: expert params / (expert_tp ep))."""
    return 1.0 - cfg["expert_fraction"] \
        + cfg["expert_fraction"] * (cfg["tp"] / (expert_tp(cfg) * cfg["ep"]))


def state_divisor(cfg: dict, shard, sharded=None):
    """What divides a replica's model-state bytes on one rank: tensor x pipeline parallelism,
    then ``shard`` (the strategy's divisor over dp x cp) for dense weights, while expert
    weights (``1/(ep x expert_tp)`` of them per rank) shard over the expert-data-parallel
    group of tp x dp x cp / (expert_tp x ep) ranks when the strategy shards that state
    (``sharded``), capped like the dense group by a hybrid strategy's node (memory_theory
    ``_blended_divisor``; fmest.transforms ``ShardingStrategy.expert_plan``)."""
    expert_group = np.maximum(1, cfg["tp"] * cfg["dp"] * cfg["cp"]
                              // (expert_tp(cfg) * np.maximum(1, cfg["ep"])))
    # the dense group is the whole dp x cp unless a hybrid strategy stops it at the node
    cap = np.where(shard < cfg["dp"] * cfg["cp"], shard, np.inf)
    flag = (shard > 1) if sharded is None else sharded
    expert_shard = np.where(flag, np.minimum(expert_group, cap), 1.0)
    fraction = cfg["expert_fraction"]
    # expert weights are 1/(ep x expert_tp) per rank where dense ones are 1/tp
    per_expert = cfg["tp"] / (expert_tp(cfg) * cfg["ep"])
    dense_stage, expert_stage = stage_shares(cfg)
    return cfg["tp"] / ((1.0 - fraction) * dense_stage / shard
                        + fraction * expert_stage * per_expert / expert_shard)


def stage_shares(cfg: dict):
    """(dense, expert) shares of the model's parameters on the busiest pipeline stage: the
    planner's ``stage_dense`` / ``stage_expert`` (memory_theory ``pipeline_stages`` and
    ``stage_params``: ``ceil(layers / pp)`` layers, the first stage with the embedding, the
    last with the output head and final norm), else an even ``1/pp``."""
    even = 1.0 / cfg["pp"]
    return cfg.get("stage_dense", even), cfg.get("stage_expert", even)


def stage_param_count(cfg: dict):
    """Parameters of the busiest stage on one rank (dense over tp, experts over ep x
    expert_tp), the ``StageParams.total`` of memory_theory."""
    dense_stage, expert_stage = stage_shares(cfg)
    fraction = cfg["expert_fraction"]
    return cfg["params"] / cfg["tp"] * ((1.0 - fraction) * dense_stage + fraction
                                        * expert_stage * cfg["tp"] / (expert_tp(cfg) * cfg["ep"]))


def local_trainable(cfg: dict):
    """Trainable parameters of a replica that one rank updates (times ``1/tp``): full training
    splits the expert weights over ``ep x expert_tp`` (time_roofline
    ``local_trainable_params``); LoRA trains no expert weights here."""
    return cfg["trainable"] * np.where(cfg["lora"], 1.0, expert_share(cfg))


def recompute_share(cfg: dict):
    """The share of the blocks recomputed per configuration: ``ckpt_share`` (the job's
    ``training.checkpoint_fraction``, 1 when absent) under full checkpointing, else 0
    (time_roofline StepShape.recompute_share)."""
    return np.where(cfg["ckpt_full"], cfg.get("ckpt_share", 1.0), 0.0)


def framework_buffer_bytes(cfg: dict):
    """(buffers held through forward and backward, unsharded gradients accumulated in them)
    per GPU, by the strategy's declared behaviour as the memory plugin counts them: DDP's
    gradient bucket copy, DeepSpeed's reduce buffers, ZeRO-3/FSDP gathered layers and root, a
    stage kept unsharded (no per-layer gather, or ``pp_unsharded_params`` under pipeline
    parallelism) with its unsharded gradient accumulators (fp32 under amp with
    ``fp32_grad_accum``), and torch.autocast's weight copies when parameters are not sharded."""
    act_b = cfg["act_bytes"]
    grads = cfg["grad_bytes"] / state_divisor(cfg, cfg["s_grads"], cfg.get("grads_sharded"))
    no_shards = ~cfg["params_sharded"] & ~cfg["grads_sharded"] & ~cfg["opt_sharded"]
    many = cfg["dp"] > 1
    buckets = np.where(cfg["ddp_bucket"] & no_shards & many,
                       grads * DDP_BUCKET_COPIES_OF_GRADS, 0.0) \
        + cfg["bucket_elements"] * act_b   # DeepSpeed's IPG reduce buffers, full size
    # (filled per row by the planner's _zero_buffer_elements, as the memory plugin's
    # fmest.default_plugins.parallelism.zero_reduce_buffer_elements)
    layer = cfg["layer_params"] / cfg["tp"] * act_b   # a whole layer: ep does not split it
    # the stage's root unit: embedding and head at pp = 1, the busiest stage's one under PP
    root = cfg.get("stage_root", cfg["root_params"])
    gathered = FSDP_UNSHARDED_LAYERS * layer + root / cfg["tp"] * act_b \
        + np.where(cfg["lora"], 0.0, layer / act_b * (act_b + np.where(cfg["amp"], 4.0, 0.0)))
    stage_params = stage_param_count(cfg)
    whole_stage = ~cfg["param_gather"] | ((cfg["pp"] > 1) & cfg["pp_unsharded"])
    accumulating = (cfg["accum"] > 1) | (cfg["pp"] > 1)
    acc_b = np.where((cfg["pp"] > 1) & cfg["fp32_acc"] & cfg["amp"], 4.0, act_b)
    acc = np.where(whole_stage & accumulating & ~cfg["lora"], stage_params * acc_b, 0.0)
    unsharded = np.where(cfg["lora"], cfg["w_bytes"] * stage_params / cfg["params"],
                         stage_params * act_b) + acc
    gathering = cfg["params_sharded"] & (cfg["s_params"] > 1)
    sharded = np.where(gathering, np.where(whole_stage, unsharded, gathered), 0.0)
    autocast = np.where(cfg["amp"] & ~cfg["lora"] & (act_b < 4.0) & ~gathering,
                        np.where(cfg["ckpt_full"], cfg["head_params"] / cfg["tp"] * act_b
                                 + layer + (1.0 - recompute_share(cfg))
                                 * (stage_params - cfg["head_params"] / cfg["tp"]) * act_b,
                                 stage_params * act_b), 0.0)
    return buckets + sharded + autocast, np.where(gathering, acc, 0.0)


def memory_bytes(cfg: dict) -> np.ndarray:
    """Per-GPU peak bytes of every configuration in ``cfg`` (arrays, see
    ``fmest.plan.planner``).

    Phases as the memory plugin: backward (state + accumulated grads + buffers + saved
    activations of the busiest stage; or at its end all grads + one layer's share, the
    unsharded accumulators reduce-scattered) against the optimizer step (state + grads +
    temporaries); then the allocator reserve and context. A stage kept unsharded accumulates
    its gradients unsharded in the buffers instead of the sharded gradients.
    """
    weights = cfg["w_bytes"] / state_divisor(cfg, cfg["s_params"], cfg.get("params_sharded"))
    optim = (cfg["master_bytes"] + cfg["opt_bytes"]) / state_divisor(
        cfg, cfg["s_opt"], cfg.get("opt_sharded"))
    grads = cfg["grad_bytes"] / state_divisor(cfg, cfg["s_grads"], cfg.get("grads_sharded"))
    # DeepSpeed's step gradient copy (fmest.default_plugins.parallelism
    # zero_step_grad_copy_rule) is capped per ZeRO-3 sub-group: the probe's (dp = 1) copy comes
    # out of the temporaries that shrink with the shard divisor and is added back at this size
    opt_div = state_divisor(cfg, cfg["s_opt"], cfg.get("opt_sharded"))
    bpe = cfg.get("copy_bpe", 0.0)
    cap = cfg.get("copy_cap", np.inf)
    trainable = local_trainable(cfg)
    probe_copy = bpe * np.minimum(trainable, cap)
    temps = (cfg["temp_bytes"] - probe_copy) / opt_div \
        + bpe * np.minimum(trainable / opt_div, cap)
    buffers, unsharded_acc = framework_buffer_bytes(cfg)
    tokens = cfg["mb"] * cfg["seq"] / cfg["cp"]
    acts = cfg["act_per_token"] * tokens
    accumulating = (cfg["accum"] > 1) | (cfg["pp"] > 1)
    static = weights + optim
    stage_layers = np.ceil(cfg["layers"] / cfg["pp"])
    held_grads = np.where(accumulating & (unsharded_acc == 0), grads, 0.0)
    backward = static + np.maximum(buffers + acts + held_grads,
                                   buffers - unsharded_acc + grads + acts / stage_layers)
    optimizer = static + grads + temps
    alloc = np.maximum(backward, optimizer)
    # the step's largest transient block: one logits-sized tensor of the micro-batch
    # (memory_theory ``StagePeak.transient_block``; fp32 logits per TP rank's vocabulary)
    transient = cfg["logits_per_token"] * tokens if "logits_per_token" in cfg else None
    # and one layer's backward working set (memory_theory ``StagePeak.layer_block``; the
    # planner's ``_layer_blocks`` probe), the reserve's second term
    layer = cfg["layer_per_token"] * tokens if "layer_per_token" in cfg else None
    pools = stream_pool_bytes(cfg, static, buffers + acts + held_grads,
                              buffers - unsharded_acc + grads + acts / stage_layers,
                              optimizer, grads, held_grads, alloc)
    context = context_bytes(cfg["world"])
    capacity = cfg.get("capacity", 0.0)
    total = device_total(alloc, context, capacity, cfg.get("expandable", False),
                         cfg.get("reserve_fraction"), transient, pools, layer)
    if not np.any(bpe):
        return total
    # the step's flat gradient copies take new segments on top of what the backward left
    # cached when their smaller block exceeds every block the step frees (memory_theory
    # ``_carried_reserve``, ``StagePeak.step_new_segments``): the backward's reserved bytes
    # + the copies, at most the device
    flat = bpe * np.minimum(trainable / opt_div, cap)
    smaller = flat * np.where(bpe > FP32_BYTES, (bpe - FP32_BYTES) / np.maximum(bpe, 1e-9), 1.0)
    # the largest single block the step frees: the logits-sized transient, a layer's largest
    # tensor, the largest weight gradient (memory_theory ``largest_freed_tensors``)
    largest = np.maximum.reduce([np.broadcast_to(0.0 if transient is None else transient,
                                                 flat.shape),
                                 cfg.get("tensor_per_token", 0.0) * tokens,
                                 np.broadcast_to(cfg.get("grad_block", 0.0), flat.shape)])
    carried = device_total(backward, context, 0.0, cfg.get("expandable", False),
                           cfg.get("reserve_fraction"), transient, 0.0, layer) + flat
    carried = np.where(np.asarray(capacity) > 0, np.minimum(carried, capacity), carried)
    return np.where((flat > 0) & (smaller > largest), np.maximum(total, carried), total)


def stream_pool_bytes(cfg: dict, static, start, end, optimizer, grads, held_grads, alloc):
    """FSDP's side-stream pools over the allocated peak (memory_theory ``_stream_pool_bytes``,
    fmest.physics.device_terms.fsdp_stream_pool_bytes, vectorised): the moments are the start
    and the end of backward (``static`` + ``start`` / ``end``) and the optimizer step; the
    gathered units and root sit in FSDP1's unshard-stream pool, the sharded gradients in the
    post-backward (FSDP1) or reduce-scatter (FSDP2) stream's pool; FSDP1 keeps one unit's
    unsharded gradient reserved under ``record_stream`` through backward, FSDP2 two units'
    all-gather outputs in its copy-in stream's pool. ``cfg["stream_pools"]``:
    device_terms.STREAM_POOL_KIND_CODES (0: none)."""
    kind = cfg.get("stream_pools")
    if kind is None or not np.any(kind):
        return 0.0
    act_b = cfg["act_bytes"]
    layer = cfg["layer_params"] / cfg["tp"] * act_b
    fsdp1 = kind == STREAM_POOL_KIND_CODES["fsdp1"]
    gathered = np.where(fsdp1, FSDP_UNSHARDED_LAYERS * layer
                        + cfg["root_params"] / cfg["tp"] * act_b, 0.0)
    unit_grad = np.where(fsdp1 & ~cfg["lora"], layer, 0.0)
    default_high = np.maximum(np.maximum(static + start - gathered - held_grads + unit_grad,
                                         static + end - gathered - grads + unit_grad),
                              optimizer - grads)
    # FSDP2 before PyTorch 2.5: the root unit's reduce-scatter input, in the reduce dtype (fp32
    # under amp), in that stream's pool (device_terms.fsdp2_rs_input_in_side_pool)
    root_rs = np.where(cfg.get("fsdp2_root_rs", False) & ~cfg["lora"],
                       np.where(cfg["amp"], FP32_BYTES, act_b) * cfg["root_params"] / cfg["tp"],
                       0.0)
    outside = np.where(kind == STREAM_POOL_KIND_CODES["fsdp2"],
                       FSDP2_ALL_GATHER_OUTPUT_UNITS * layer + root_rs, 0.0)
    held = default_high + gathered + np.maximum(grads, held_grads) + outside
    on = (kind > 0) & cfg["params_sharded"] & (cfg["s_params"] > 1) & cfg["param_gather"] \
        & (cfg["pp"] <= 1)
    return np.where(on, np.maximum(0.0, held - alloc), 0.0)


def device_total(alloc, context, capacity=0.0, expandable=False,
                 fitted: Optional[float] = None, transient=None, pools=0.0,
                 layer=None) -> np.ndarray:
    """Allocated bytes + the allocator reserve + the context, the reserve capped at the room
    left on the device but never below the floor no release returns (memory_theory's
    ``assemble``: ``min(held, max(room, floor))``; ``capacity`` 0: no device). ``transient``:
    the step's largest transient block (the reserve's transient rule), else the tensor-peak
    rule."""
    # fmest.physics.device_terms.allocator_reserve_bytes, vectorised
    floor = ALLOCATOR_RESERVE_MIN_TRACED_BYTES
    below = np.minimum(1.0, np.maximum(alloc, 0.0) / floor)
    irreducible = np.where(
        expandable,
        ALLOCATOR_FLOOR_EXPANDABLE_CONSTANT_BYTES
        + ALLOCATOR_FLOOR_EXPANDABLE_FRACTION * np.maximum(alloc, floor),
        ALLOCATOR_FLOOR_CONSTANT_BYTES + ALLOCATOR_FLOOR_FRACTION * np.maximum(alloc, floor)
    ) * below
    if transient is None:
        reserve = np.where(expandable,
                           (ALLOCATOR_RESERVE_EXPANDABLE_CONSTANT_BYTES
                            + ALLOCATOR_RESERVE_EXPANDABLE_FRACTION
                            * np.maximum(alloc, floor)) * below,
                           (ALLOCATOR_RESERVE_CONSTANT_BYTES
                            + ALLOCATOR_RESERVE_FRACTION * np.maximum(alloc, floor)) * below)
    elif layer is not None:
        # the two-term rule: logits block + one layer's working set
        block = np.maximum(np.asarray(transient, dtype=float), 0.0)
        lay = np.maximum(np.asarray(layer, dtype=float), 0.0)
        reserve = np.maximum(irreducible, np.where(
            expandable,
            ALLOCATOR_RESERVE_LAYER_EXPANDABLE_CONSTANT_BYTES
            + ALLOCATOR_RESERVE_LAYER_EXPANDABLE_TRANSIENT_SLOPE * block
            + ALLOCATOR_RESERVE_LAYER_EXPANDABLE_SLOPE * lay,
            ALLOCATOR_RESERVE_LAYER_CONSTANT_BYTES
            + ALLOCATOR_RESERVE_LAYER_TRANSIENT_SLOPE * block
            + ALLOCATOR_RESERVE_LAYER_SLOPE * lay) * below)
    else:
        block = np.maximum(np.asarray(transient, dtype=float), 0.0)
        reserve = np.maximum(irreducible, np.where(
            expandable,
            ALLOCATOR_RESERVE_TRANSIENT_EXPANDABLE_CONSTANT_BYTES
            + ALLOCATOR_RESERVE_TRANSIENT_EXPANDABLE_SLOPE * block,
            ALLOCATOR_RESERVE_TRANSIENT_CONSTANT_BYTES
            + ALLOCATOR_RESERVE_TRANSIENT_SLOPE * block) * below)
    # FSDP's side-stream pools (``pools``: stream_pool_bytes) sit beside the default pool's
    reserve = reserve + pools
    if fitted is not None:
        # a stack's fitted reserve over allocated bytes replaces the physics reserve
        # (stacks_fitted.json ``reserve_fraction``; memory_theory ``assemble``)
        reserve = fitted * alloc
    total = alloc + reserve + context
    if np.any(capacity):
        # the allocator frees its cache before it exceeds the device, down to the segments
        # that hold a live block (fmest.allocator.irreducible_reserve_bytes, vectorised:
        # ``irreducible`` above)
        # capped: exactly the device where the floor fits (no rounding either side of the fit
        # test's comparison), tensors + floor + context where it does not; tensors alone past
        # the device keep the whole reserve
        capped = np.minimum(total, np.maximum(capacity, alloc + irreducible + context))
        over = alloc + context > capacity
        total = np.where((np.asarray(capacity) > 0) & ~over, capped, total)
    return total


def _dp_collective_seconds(cfg, gbytes, pbytes, group, stride, shard_n):
    """(all-reduce, reduce-scatter (+ HSDP replica all-reduce), all-gather) seconds of one
    parameter set's data-parallel collectives over ``group`` ranks ``stride`` apart, sharded
    over ``shard_n`` of them (fmest.transforms ``ShardingStrategy.collectives``)."""
    gpn = cfg["gpn"]
    bw, lat, _ = group_bus_bandwidth(group, stride, gpn, cfg["intra_bw"], cfg["nic_bw"])
    ar = ring_all_reduce_seconds(gbytes, group, bw, lat)
    replicated_ag = ring_half_seconds(pbytes, group, bw, lat)
    sbw, slat, _ = group_bus_bandwidth(shard_n, stride, gpn, cfg["intra_bw"], cfg["nic_bw"])
    replicas = np.maximum(1, group // np.maximum(1, shard_n))
    rbw, rlat, _ = group_bus_bandwidth(replicas, stride * shard_n, gpn, cfg["intra_bw"],
                                       cfg["nic_bw"])
    rs = ring_half_seconds(gbytes, shard_n, sbw, slat) \
        + ring_all_reduce_seconds(gbytes / np.maximum(1, shard_n), replicas, rbw, rlat)
    ag = ring_half_seconds(pbytes, shard_n, sbw, slat)
    live = group > 1
    return (np.where(live, ar, 0.0), np.where(live, replicated_ag, 0.0),
            np.where(live, rs, 0.0), np.where(live, ag, 0.0))


def _dp_seconds(cfg, per_mb):
    """Exposed data-parallel communication of one step (time_roofline's DP section): dense
    parameters over dp x cp ranks; under expert parallelism the expert parameters (``1/(ep x
    expert_tp)`` of them per rank) over the expert-data-parallel group of tp x dp x cp /
    (expert_tp x ep) ranks, expert_tp x ep apart (fmest.transforms
    ``data_parallel_collectives``)."""
    group = cfg["dp"] * cfg["cp"]
    fwd_mb = per_mb * cfg["fwd_share"]
    bwd_mb = per_mb - fwd_mb
    tail = 1.0 / np.maximum(1.0, np.ceil(cfg["layers"] / cfg["pp"]))
    mp = cfg["tp"] * cfg["pp"]
    ep = np.maximum(1, cfg["ep"])
    split = (ep > 1) & (cfg["expert_fraction"] > 0)
    # expert share of the gradient and parameter bytes (LoRA here trains no expert weights)
    grad_expert = np.where(split & ~cfg["lora"], cfg["expert_fraction"] * cfg["params"]
                           / np.maximum(cfg["trainable"], 1.0), 0.0)
    param_expert = np.where(split, cfg["expert_fraction"], 0.0)
    gbytes = cfg["grad_wire_bytes"] * cfg["trainable"] / mp
    pbytes = cfg["act_bytes"] * cfg["params"] / mp
    dense = _dp_collective_seconds(cfg, gbytes * (1 - grad_expert), pbytes * (1 - param_expert),
                                   group, cfg["tp"], cfg["s_shard_group"])
    # expert weights split over expert_tp x ep, their group expert_tp x ep apart
    # (fmest.transforms data_parallel_collectives)
    etp = expert_tp(cfg)
    expert_group = np.maximum(1, cfg["tp"] * group // (etp * ep))
    expert = _dp_collective_seconds(
        cfg, gbytes * grad_expert * cfg["tp"] / (etp * ep),
        pbytes * param_expert * cfg["tp"] / (etp * ep), expert_group,
        etp * ep, np.minimum(expert_group, cfg["s_shard_group"]))
    ar, replicated_ag, rs, ag = (d + np.where(split, e, 0.0) for d, e in zip(dense, expert, strict=True))
    # a stack that does not overlap the gradient reduction with backward (stacks.toml
    # ``dp_reduce`` absent, e.g. DeepSpeed's PipelineEngine reducing after the last
    # micro-batch) leaves it all exposed; with ``dp_gather`` the parameter all-gather after
    # the step overlaps the next forward (fmest.stacks apply_to_collectives)
    reduce_hidden = bool(cfg.get("dp_reduce_overlap", True))
    gather_hidden = bool(cfg.get("dp_gather_overlap", False))

    def reduction(seconds):
        """Exposed seconds of a gradient reduction issued in backward."""
        if not reduce_hidden:
            return seconds
        return exposed_seconds(seconds * (1 - tail), bwd_mb) + seconds * tail

    def step_gather(seconds):
        """Exposed seconds of the parameter all-gather after the optimizer step."""
        if not gather_hidden:
            return seconds
        return exposed_seconds(seconds * (1 - tail), fwd_mb) + seconds * tail

    replicated = reduction(ar) + np.where(cfg["opt_sharded"], step_gather(replicated_ag), 0.0)
    accum = cfg["accum"]
    rs_hidden = rs if reduce_hidden else 0.0
    gather = accum * (exposed_seconds(ag * (1 - tail), fwd_mb)
                      + exposed_seconds((ag + rs_hidden) * (1 - tail), bwd_mb)
                      + (2 * ag + rs_hidden) * tail + (rs - rs_hidden))
    grad_op = accum * (exposed_seconds(ag * (1 - tail), fwd_mb) + ag * tail + reduction(rs))
    zero2 = accum * reduction(rs) + step_gather(ag)
    sharded = np.where(cfg["param_gather"], gather,
                       np.where(cfg["params_sharded"], grad_op, zero2))
    out = np.where(cfg["grads_sharded"] | cfg["params_sharded"], sharded, replicated)
    return np.where(group > 1, out, 0.0)


def step_seconds(cfg: dict, parts: Optional[dict] = None) -> np.ndarray:
    """Seconds of one optimizer step of every configuration (time_roofline structure:
    micro-batches of compute + memory-bound work + TP/PP/CP communication, the bubble, exposed
    DP communication, the optimizer update or its host offload, and the framework overhead;
    at least the host's time to dispatch the eager ops of every micro-batch). ``parts``: a
    dict to fill with the step's parts, named as the engine's breakdown (``core``: compute +
    memory-bound work + context-parallel ring; they sum to the step)."""
    mp = cfg["tp"] * cfg["pp"]
    tokens = cfg["mb"] * cfg["seq"] / cfg["cp"]
    # the slowest (last) stage: its share of the layers plus the output head and loss
    head_c = cfg["head_compute"] / cfg["tp"]
    head_m = cfg["head_membound"] / cfg["tp"]
    # GEMM rows grow with the micro-batch: fewer padded tiles and partial waves per token
    # (time_roofline's gemm_shape_efficiency: tile and wave quantization on the GPU's SMs),
    # approximated as time per token ~ c_inf + (c_1 - c_inf) / mb through probes at 1 and 4
    # An MoE expert's GEMM rows grow with expert parallelism too: each of the E/ep local experts
    # takes the tokens of its ep ranks (time_roofline step_shape: rows T k ep etp / (tp E)), so
    # the probes' micro-batch curve (tp = ep = 1) is read at mb x ep x etp / tp
    # (a dense model: ep 1 and no expert TP, so the micro-batch itself)
    rows = cfg["mb"] * cfg.get("ep", 1.0) * expert_tp(cfg) / cfg["tp"]
    shape = 1.0 - cfg["compute_mb_share"] + cfg["compute_mb_share"] / rows
    compute = ((cfg["compute_repl"] + cfg["compute_split"] / cfg["tp"] - head_c) / cfg["pp"]
               + head_c) * tokens * shape
    membound = (np.where(cfg["sp"], cfg["membound_sp"] / cfg["tp"],
                         cfg["membound_repl"] + cfg["membound_split"] / cfg["tp"]) - head_m) \
        / cfg["pp"] * tokens + head_m * tokens
    # the norm family under a sharding whose precision differs from the probes' (autocast's
    # fp32 stream: planner._norm_autocast_bytes), replicated over TP unless sequence-parallel
    if "norm_amp_bytes" in cfg:
        membound = membound + cfg["norm_amp_bytes"] * tokens * (cfg["layers"] / cfg["pp"]) \
            / np.where(cfg["sp"], cfg["tp"], 1.0) / (cfg["hbm_bw"] * HBM_EFFICIENCY)
    accum = cfg["accum"]
    grad_local = local_trainable(cfg) / mp
    hbm = cfg["hbm_bw"] * HBM_EFFICIENCY
    # fp8 weights cast once per step (planner._stack_time_flags fp8_weight_cast_bytes): the
    # probes' one micro-batch casts every block weight; the other m - 1 reuse the cached copies
    cast_b = cfg.get("fp8_weight_cast_bytes", 0.0)
    if np.any(cast_b):
        blocks = (stage_param_count(cfg) - cfg["head_params"] / cfg["tp"]) \
            * np.where(cfg["lora"], 0.0, 1.0)
        membound = membound - cast_b * blocks * (accum - 1) / accum / hbm
    hp_bytes = cfg.get("hp_accum_bytes", 0.0)
    if np.any(hp_bytes):
        # a stack whose optimizer folds every micro-batch's low-precision gradients into fp32
        # ones (time_roofline estimator.hp_grad_accum_bytes: DeepSpeed BF16_Optimizer under
        # Megatron-DeepSpeed) moves hp_bytes per local trainable parameter per micro-batch,
        # the first one included, instead of the read-add-write below. The one-GPU probes
        # (one micro-batch of ``seq`` tokens, tp = pp = 1, no expert split) carry it in their
        # memory-bound seconds per token, split over tp and pp: taken out here
        probed = hp_bytes * cfg["trainable"] / mp / hbm * tokens / cfg["seq"]
        membound = membound - probed + hp_bytes * grad_local / hbm
    elif not cfg.get("wgrad_fused", False):
        # gradient accumulation reads, adds and writes the gradient buffer per micro-batch
        # (time_roofline: 3 x grad bytes x local params x (m-1)/m at HBM efficiency; autograd's
        # AccumulateGrad runs outside a torch.compile graph, so compile does not change it);
        # none where the weight-gradient GEMM accumulates in place (Megatron-Core)
        membound = membound + 3 * cfg["grad_wire_bytes"] * grad_local * (accum - 1) / accum \
            / hbm
    stage_layers = cfg["layers"] / cfg["pp"]
    gpn = cfg["gpn"]
    # activations on the wire: every sequence of the micro-batch (a preference pair's two);
    # each no-grad pass of a DPO/KTO step adds a forward's all-reduces (fmest.objectives)
    act_elems = tokens * cfg.get("pair", 1.0) * cfg["hidden"]
    tbw, tlat, _ = group_bus_bandwidth(cfg["tp"], 1, gpn, cfg["intra_bw"], cfg["nic_bw"])
    passes = 2 + recompute_share(cfg) + cfg.get("fwd_only", 0.0)
    # sequence parallelism: all-gather + reduce-scatter in place of each all-reduce; float8
    # gathers fp8 (time_roofline _tp_seconds, formulas.tp_all_gather_bytes_per_element: the
    # planner's ``tp_gather_bytes``, None = the activations' bytes)
    gather_b = cfg.get("tp_gather_bytes") or cfg["act_bytes"]
    sp_pass = (ring_half_seconds(act_elems * gather_b, cfg["tp"], tbw, tlat)
               + ring_half_seconds(act_elems * cfg["act_bytes"], cfg["tp"], tbw, tlat))
    ar_pass = ring_all_reduce_seconds(act_elems * cfg["act_bytes"], cfg["tp"], tbw, tlat)
    tp_t = passes * stage_layers * 2 * np.where(cfg["sp"], sp_pass, ar_pass)
    # the overlap window: the micro-batch's GEMMs (time_roofline model_parallel_comm), the
    # probed GEMM share of its compute (``matmul_share``, time_roofline metrics)
    gemms = compute * cfg.get("matmul_share", 1.0)
    if cfg.get("tp_overlap", False):
        # the stack overlaps TP traffic with the GEMMs (Megatron --tp-comm-overlap, async TP:
        # time_roofline model_parallel_comm, formulas.exposed_comm_seconds)
        tp_t = exposed_seconds(tp_t, gemms)
    pp_inter = (cfg["pp"] > 1) & (cfg["world"] > gpn)
    hop_bw = np.where(pp_inter, cfg["nic_bw"] * INTER_NODE_COLLECTIVE_EFFICIENCY,
                      cfg["intra_bw"])
    hop_latency_s = np.where(pp_inter, INTER_NODE_LATENCY_S, INTRA_NODE_LATENCY_S)
    pp_t = np.where(cfg["pp"] > 1,
                    2 * (act_elems * cfg["act_bytes"] / cfg["tp"] / hop_bw + hop_latency_s), 0.0)
    if cfg.get("pp_overlap", False):
        # Megatron overlap_p2p_comm: the sends hide behind the micro-batch's GEMMs
        pp_t = exposed_seconds(pp_t, gemms)
    # DeepSpeed's PipelineEngine (time_roofline estimator.deepspeed_pipeline_seconds): blocking
    # send/recv, 4 transfers per micro-batch on a middle stage, and TP all-gathers rebuilding
    # the TP-partitioned stage outputs and gradients
    transfers = np.where(cfg["pp"] >= 3, DEEPSPEED_PIPE_BLOCKING_TRANSFERS["middle"],
                         DEEPSPEED_PIPE_BLOCKING_TRANSFERS["end"])
    ds_pipe = (transfers - 2) * (act_elems * cfg["act_bytes"] / cfg["tp"] / hop_bw
                                 + hop_latency_s) \
        + DEEPSPEED_PIPE_PARTITION_GATHERS * ring_half_seconds(act_elems * cfg["act_bytes"],
                                                               cfg["tp"], tbw, tlat)
    pp_t = pp_t + np.where(cfg.get("ds_pipe", False) & (cfg["pp"] > 1), ds_pipe, 0.0)
    # context parallel: the ring's exposure depends on the local attention time, so compute,
    # memory-bound work and ring traffic come from probes at this tp and cp (a + b mb), the
    # layers split over the stages and the head and loss on the last one
    head_part = (head_c * (1.0 - cfg["compute_mb_share"]) + head_m) * tokens
    cp_core = cfg["cp_core_a"] + cfg["cp_core_b"] * cfg["mb"]
    cp_core = (cp_core - head_part) / cfg["pp"] + head_part
    # expert parallelism: dispatch and combine all-to-alls, forward and backward (+ recompute)
    ep_t = moe_dispatch_seconds(cfg, tokens, gpn)
    # --overlap-moe-expert-parallel-comm: the traffic runs under another micro-batch's
    # compute (time_roofline formulas.exposed_comm_seconds; not with full recompute)
    hidden = np.minimum(ep_t, compute)
    ep_t = np.where(cfg.get("moe_overlap", False) & ~cfg["ckpt_full"],
                    ep_t - hidden + OVERLAP_INTERFERENCE_FRACTION * hidden, ep_t)
    core = np.where(cfg["cp"] > 1, cp_core, compute + membound)
    per_mb = core + tp_t + pp_t + ep_t
    # Megatron-Core's MoE dispatcher syncs the host once per MoE layer forward: the GPU waits
    # (time_roofline estimator.moe_sync_wait_seconds), in every micro-batch and the bubble
    sync_wait = moe_sync_wait_seconds(cfg, per_mb - pp_t) \
        if cfg.get("moe_sync", False) else 0.0
    bubble = bubble_fraction(cfg["pp"], accum, cfg["vstages"]) * accum * (per_mb + sync_wait)
    dp_t = _dp_seconds(cfg, per_mb)
    opt_params = local_trainable(cfg) / mp / np.where(cfg["opt_sharded"], cfg["s_opt"], 1)
    pcie = cfg["pcie_bw"] * PCIE_EFFICIENCY
    offload = opt_params * (cfg["grad_bytes_per_param"] + cfg["act_bytes"]) / pcie \
        + opt_params * np.minimum(gpn, cfg["world"]) / CPU_ADAM_PARAMS_PER_S_PER_NODE
    opt_t = np.where(cfg["offload"], offload, cfg["optimizer_s_per_param"] * opt_params)
    busy = accum * per_mb + bubble + dp_t + opt_t
    # eager PyTorch cannot outrun the host dispatching its ops (time_roofline
    # eager_host_seconds): the step is the larger of the two
    host = accum * (cfg["host_layers"] / cfg["pp"] + cfg["host_outside"])
    # DeepSpeed ZeRO-3 over more than one rank: its hooks' host time adds to the step
    # (time_roofline estimator.apply_deepspeed_runtime)
    hooks = np.where(cfg["dp"] * cfg["cp"] > 1,
                     accum * cfg.get("zero3_hooks", 0.0) / cfg["pp"], 0.0)
    # the optimizer's kernels follow the host's last dispatch (time_roofline step_breakdown)
    step = np.maximum(busy * (1.0 + cfg["overhead_fraction"]) + accum * sync_wait,
                      host - hooks + opt_t) + hooks
    if parts is not None:
        parts.update(core=accum * core, communication_tp=accum * tp_t,
                     communication_pp=accum * pp_t, communication_ep=accum * ep_t,
                     pipeline_bubble=bubble, communication_dp=dp_t, optimizer_step=opt_t,
                     framework_overhead=step - busy)
    return step


def moe_sync_wait_seconds(cfg: dict, gpu_mb):
    """Seconds per micro-batch the GPU waits for the host at Megatron-Core's MoE dispatcher
    syncs (mirror of time_roofline ``estimator.moe_sync_wait_seconds`` and
    ``formulas.moe_sync_exposed_seconds``, ``MEGATRON_MOE_LAYER_HOST_OPS`` x
    ``HOST_SECONDS_PER_EAGER_OP``): per MoE layer of the stage, the forward segment after the
    sync takes ``max(host, one op + GPU)``, the backward shows the host time above its GPU
    time, a recomputed layer's backward segment runs its forward's host ops too. ``gpu_mb``:
    the micro-batch's GPU seconds on the stage less its pipeline hops, ``fwd_share`` of it
    forward (the compute's forward share of the probes, 1/3 or 1/4 with full recompute)."""
    stage_layers = cfg["layers"] / cfg["pp"]
    # host seconds per op: Grace hosts are slower (time_constants.host_seconds_per_op)
    op = cfg.get("host_op_s", HOST_SECONDS_PER_EAGER_OP)
    # the local experts beyond the traced one: one TE grouped-GEMM call each per expert GEMM
    # (formulas.moe_expert_gemm_host_seconds)
    local = np.asarray(cfg.get("num_experts", 0.0), dtype=float) \
        / np.maximum(1, np.asarray(cfg.get("ep", 1), dtype=float))
    ops, sync, experts_eager = moe_layer_host_profile(
        cfg.get("cuda_graph_scope", ()), drop_and_pad=bool(cfg.get("moe_drop_and_pad", False)),
        dispatcher=cfg.get("moe_dispatcher"))
    if not experts_eager:
        local = np.ones_like(local)
    extra = np.maximum(0.0, np.maximum(local, 1.0) - 1.0) * TE_GROUPED_GEMM_SECONDS_PER_GEMM
    host_f = ops["forward"] * op \
        + MOE_EXPERT_GEMMS_PER_LOCAL_EXPERT["forward"] * extra
    host_b = ops["backward"] * op \
        + MOE_EXPERT_GEMMS_PER_LOCAL_EXPERT["backward"] * extra
    per_layer = gpu_mb / stage_layers
    gpu_f = per_layer * cfg["fwd_share"]
    gpu_b = per_layer - gpu_f
    if not sync:
        moe_layers = stage_layers * cfg["moe_layers"] / cfg["layers"]
        return moe_layers * (np.maximum(0.0, host_f - gpu_f) + np.maximum(0.0, host_b - gpu_b))
    fwd = np.maximum(host_f, op + gpu_f) - gpu_f
    plain_bwd = np.maximum(0.0, host_b - gpu_b)
    recomputed_bwd = np.maximum(host_f + host_b, op + gpu_b) - gpu_b
    share = np.clip(recompute_share(cfg), 0.0, 1.0)
    moe_layers = stage_layers * cfg["moe_layers"] / cfg["layers"]
    return moe_layers * (fwd + (1.0 - share) * plain_bwd + share * recomputed_bwd)


def moe_groups_hit(experts, k, groups):
    """Expected distinct groups a token's ``k`` experts fall in, ``experts`` experts in
    ``groups`` equal groups, balanced routing (mirror of time_roofline
    ``formulas.moe_groups_hit``): ``groups x (1 - prod_{i<k} (E - E/groups - i) / (E - i))``."""
    groups = np.asarray(groups, dtype=float)
    kk = int(round(float(k)))
    if kk <= 0 or experts <= 0:
        return np.zeros_like(groups)
    kk = min(kk, int(experts))
    missed = np.ones_like(groups)
    others = experts - experts / np.maximum(groups, 1.0)
    for i in range(kk):
        missed = missed * np.maximum(0.0, others - i) / (experts - i)
    return np.where(groups <= 1, np.minimum(1.0, np.maximum(groups, 0.0)),
                    groups * (1.0 - missed))


def moe_dispatch_seconds(cfg, tokens, gpn):
    """Expert-parallel dispatch + combine per micro-batch (mirror of time_roofline
    ``estimator.moe_dispatch_seconds``, Megatron-Core's alltoall token dispatcher): each rank
    sends its sequence-parallel shard's routed copies (``T/tp * k * h`` elements); the share
    bound for ranks outside the NVLink domain leaves through the rank's own NIC
    (``formulas.all_to_all_seconds``); with tp > 1 an all-gather + reduce-scatter of the routed
    copies over the expert-TP group (``expert_tp`` > 1; the EP group's ranks are ``expert_tp``
    apart); forward and backward (+ the recompute of full checkpointing). The flex dispatcher
    (``moe_flex``: DeepEP / HybridEP) sends a token once per destination rank of the expert-TP x
    EP group and once per remote node (``formulas.flex_dispatch_seconds``)."""
    tp, ep = cfg["tp"], np.maximum(cfg["ep"], 1)
    etp = expert_tp(cfg)
    shard = tokens / tp * cfg["hidden"] * cfg["act_bytes"]
    routed = shard * cfg["experts_per_token"]
    domain = np.maximum(gpn, cfg.get("nvlink_domain", gpn))
    per_node = np.minimum(np.maximum(1, domain // etp), ep)
    inter = (ep > 1) & (ep * etp > domain)
    lat = np.where(inter, INTER_NODE_LATENCY_S, INTRA_NODE_LATENCY_S) \
        * np.ceil(np.log2(np.maximum(ep, 2)))
    nic = cfg["nic_bw"] * INTER_NODE_COLLECTIVE_EFFICIENCY
    intra_t = np.where(inter, per_node - 1, ep - 1) / ep * routed / cfg["intra_bw"]
    inter_t = np.where(inter, (ep - per_node) / ep * routed / nic, 0.0)
    a2a = np.maximum(intra_t, inter_t) + lat
    tbw, tlat, _ = group_bus_bandwidth(etp, 1, gpn, cfg["intra_bw"], cfg["nic_bw"])
    gather = np.where(etp > 1, 2 * ring_half_seconds(routed * etp, etp, tbw, tlat), 0.0)
    if cfg.get("moe_flex", False):
        experts = float(cfg.get("num_experts", 0.0)) or float(cfg["experts_per_token"])
        ranks = ep * etp
        flex_inter = ranks > domain
        g = np.minimum(domain, ranks)
        copies = etp * moe_groups_hit(experts, cfg["experts_per_token"], ranks / etp)
        nodes = ranks / g
        remote = moe_groups_hit(experts, cfg["experts_per_token"], nodes) \
            * (nodes - 1) / nodes
        flex_lat = np.where(flex_inter, INTER_NODE_LATENCY_S, INTRA_NODE_LATENCY_S) \
            * np.ceil(np.log2(np.maximum(ranks, 2)))
        within = (ranks - 1) / ranks * copies * shard / cfg["intra_bw"]
        across = np.maximum((g - 1) / g * copies * shard / cfg["intra_bw"], remote * shard / nic)
        a2a = np.where(flex_inter, across, within) + flex_lat
        gather = 0.0
    passes = 2 + recompute_share(cfg)
    return np.where(ep > 1, passes * cfg["moe_layers"] / cfg["pp"] * (2 * a2a + gather), 0.0)
