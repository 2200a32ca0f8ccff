"""Memory and step time of many layouts at once, as numpy array formulas.

Each array holds one value per candidate configuration. The structure mirrors the analytic
plugins (docs/memory_model.md, docs/time_model.md); the per-model scale comes from engine
probes (:mod:`fmest.plan.calibrate`). Constants below that are not probed mirror the
time_roofline plugin's formulas (``plugins/time_roofline/fmest_time_roofline/formulas.py``,
each cited there); ``tests/test_plan_vector.py`` keeps the two in agreement.
"""

from __future__ import annotations

import numpy as np

from fmest.device_terms import (ALLOCATOR_RESERVE_FRACTION, CUBLAS_WORKSPACE_BYTES,
                                CUDA_CONTEXT_BYTES, NCCL_BUFFER_BYTES)

#: Ring bus bandwidth / unidirectional link within a node; NVLink4 parts reach 0.82
#: (time_roofline ``INTRA_NODE_COLLECTIVE_EFFICIENCY``, nccl-tests busbw, HN section 5).
INTRA_NODE_EFFICIENCY = 0.78
INTRA_NODE_EFFICIENCY_NVLINK4 = 0.82
NVLINK4_PREFIXES = ("H100-SXM", "H800", "H200", "GH200")
#: Across nodes, fraction of the per-GPU NIC (time_roofline ``INTER_NODE_COLLECTIVE_EFFICIENCY``).
INTER_NODE_EFFICIENCY = 0.72
#: NIC fallback, 200 Gb/s per GPU (time_roofline ``DEFAULT_INTER_NODE_BYTES_PER_S``).
DEFAULT_NIC_BYTES_PER_S = 25e9
#: Per-hop latency of a collective step (time_roofline ``INTRA/INTER_NODE_LATENCY_S``).
INTRA_LATENCY_S = 5e-6
INTER_LATENCY_S = 10e-6
#: Share of hidden communication still paid as SM/HBM interference (time_roofline
#: ``OVERLAP_INTERFERENCE_FRACTION``; FLUX arXiv:2406.06858 section 2).
OVERLAP_INTERFERENCE = 0.2
#: PCIe achievable fraction and fallback link (time_roofline ``PCIE_EFFICIENCY``).
PCIE_EFFICIENCY = 0.80
DEFAULT_PCIE_BYTES_PER_S = 32e9
#: Achievable HBM fraction and torch.compile's fusion speed-up of memory-bound work
#: (time_roofline ``HBM_EFFICIENCY``, ``COMPILE_MEMORY_BOUND_SPEEDUP``).
HBM_EFFICIENCY = 0.85
COMPILE_MEMORY_SPEEDUP = 2.5
#: ZeRO-Offload CPU-Adam rate per node (Ren et al. 2021, arXiv:2101.06840, section 6).
CPU_ADAM_PARAMS_PER_S_PER_NODE = 1.0e9


def ring_all_reduce_seconds(bytes_per_rank, ranks, bus_bytes_per_s, latency_s):
    """``2 (n-1)/n * bytes / busbw + 2 ceil(log2 n) * latency`` (nccl-tests busbw)."""
    n = np.maximum(ranks, 1)
    steps = 2.0 * np.ceil(np.log2(np.maximum(n, 2)))
    return np.where(n > 1, 2.0 * (n - 1) / n * bytes_per_rank / bus_bytes_per_s
                    + steps * latency_s, 0.0)


def ring_half_seconds(bytes_per_rank, ranks, bus_bytes_per_s, latency_s):
    """All-gather or reduce-scatter: ``(n-1)/n * bytes / busbw + ceil(log2 n) * latency``."""
    n = np.maximum(ranks, 1)
    steps = np.ceil(np.log2(np.maximum(n, 2)))
    return np.where(n > 1, (n - 1) / n * bytes_per_rank / bus_bytes_per_s
                    + steps * latency_s, 0.0)


def exposed_seconds(comm_seconds, window_seconds):
    """Communication left on the critical path when it overlaps ``window_seconds`` of
    compute, plus the interference share of the hidden part."""
    hidden = np.minimum(comm_seconds, np.maximum(window_seconds, 0.0))
    return comm_seconds - hidden + OVERLAP_INTERFERENCE * hidden


def group_bus_bandwidth(size, stride, gpus_per_node, intra_bytes_per_s, nic_bytes_per_s):
    """(bus bytes/s, latency, inter-node?) of a group of ``size`` ranks ``stride`` apart:
    NVLink inside a node; hierarchical across ``nodes`` nodes, ``NIC * eff * (size-1) /
    (nodes-1)`` capped by the intra-node rate (time_roofline ``link_bytes_per_s``)."""
    inter = (size > 1) & (size * stride > gpus_per_node)
    per_node = np.maximum(1, gpus_per_node // np.maximum(1, stride))
    nodes = np.maximum(2, np.ceil(size / per_node))
    nic = nic_bytes_per_s * INTER_NODE_EFFICIENCY
    span = np.maximum(nodes, size)
    inter_bw = np.minimum(np.maximum(intra_bytes_per_s, nic), nic * (span - 1) / (nodes - 1))
    bw = np.where(inter, inter_bw, intra_bytes_per_s)
    return bw, np.where(inter, INTER_LATENCY_S, INTRA_LATENCY_S), inter


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
    """CUDA context + cuBLAS workspaces (+ NCCL buffers beyond one GPU), as
    :func:`fmest.device_terms.cuda_context_bytes`."""
    return CUDA_CONTEXT_BYTES + CUBLAS_WORKSPACE_BYTES + np.where(world > 1, NCCL_BUFFER_BYTES,
                                                                  0)


def memory_bytes(c: dict) -> np.ndarray:
    """Per-GPU peak bytes of every configuration in ``c`` (arrays, see ``fmest.plan.planner``).

    Phases as the memory plugin: backward (state + accumulated grads + buffers + saved
    activations of the busiest stage; or at its end all grads + one layer's share) against
    the optimizer step (state + grads + temporaries); then the allocator reserve and context.
    FSDP under pipeline parallelism (and SHARD_GRAD_OP) keeps the stage's parameters unsharded
    through forward and backward and accumulates unsharded gradients (fp32 under FSDP2's
    reduce dtype; memory_theory ``FSDP_PP_ACCUMULATED_GRAD_BYTES``).
    """
    mp = c["tp"] * c["pp"]
    weights = c["w_bytes"] / (mp * c["s_params"])
    optim = (c["master_bytes"] + c["opt_bytes"]) / (mp * c["s_opt"])
    grads = c["grad_bytes"] / (mp * c["s_grads"])
    temps = c["temp_bytes"] / (mp * c["s_opt"])
    gathered_stage = c["fsdp"] & c["params_sharded"] & (c["pp"] > 1) & c["param_gather"]
    stage_params = c["params"] / mp
    acc_bytes = np.where(c["amp"], 4.0, c["act_bytes"])
    buffers = np.where(c["dp"] * c["cp"] > 1,
                       np.where(gathered_stage,
                                np.where(c["lora"], c["w_bytes"] / mp,
                                         stage_params * (c["act_bytes"] + acc_bytes)),
                                c["buffer_bytes"] / mp), 0.0)
    tokens = c["mb"] * c["seq"] / c["cp"]
    acts = c["act_per_token"] * tokens
    accumulating = (c["accum"] > 1) | (c["pp"] > 1)
    static = weights + optim
    stage_layers = np.ceil(c["layers"] / c["pp"])
    backward = static + buffers + np.maximum(acts + np.where(accumulating, grads, 0.0),
                                             grads + acts / stage_layers)
    optimizer = static + grads + temps
    alloc = np.maximum(backward, optimizer)
    return alloc * (1.0 + ALLOCATOR_RESERVE_FRACTION) + context_bytes(c["world"])


def _dp_seconds(c, per_mb):
    """Exposed data-parallel communication of one step (time_roofline's DP section)."""
    group = c["dp"] * c["cp"]
    fwd_mb = per_mb * c["fwd_share"]
    bwd_mb = per_mb - fwd_mb
    tail = 1.0 / np.maximum(1.0, np.ceil(c["layers"] / c["pp"]))
    mp = c["tp"] * c["pp"]
    gbytes = c["grad_wire_bytes"] * c["trainable"] / mp
    pbytes = c["act_bytes"] * c["params"] / mp
    gpn = c["gpn"]
    bw, lat, _ = group_bus_bandwidth(group, c["tp"], gpn, c["intra_bw"], c["nic_bw"])
    ar = ring_all_reduce_seconds(gbytes, group, bw, lat)
    replicated = exposed_seconds(ar * (1 - tail), bwd_mb) + ar * tail \
        + np.where(c["opt_sharded"], ring_half_seconds(pbytes, group, bw, lat), 0.0)
    shard_n = c["s_shard_group"]
    sbw, slat, _ = group_bus_bandwidth(shard_n, c["tp"], gpn, c["intra_bw"], c["nic_bw"])
    replicas = np.maximum(1, group // np.maximum(1, shard_n))
    rbw, rlat, _ = group_bus_bandwidth(replicas, c["tp"] * shard_n, gpn, c["intra_bw"],
                                       c["nic_bw"])
    rs = ring_half_seconds(gbytes, shard_n, sbw, slat) \
        + ring_all_reduce_seconds(gbytes / np.maximum(1, shard_n), replicas, rbw, rlat)
    ag = ring_half_seconds(pbytes, shard_n, sbw, slat)
    m = c["accum"]
    gather = m * (exposed_seconds(ag * (1 - tail), fwd_mb)
                  + exposed_seconds((ag + rs) * (1 - tail), bwd_mb) + (2 * ag + rs) * tail)
    grad_op = m * (exposed_seconds(ag * (1 - tail), fwd_mb)
                   + exposed_seconds(rs * (1 - tail), bwd_mb) + (ag + rs) * tail)
    zero2 = m * (exposed_seconds(rs * (1 - tail), bwd_mb) + rs * tail) + ag
    sharded = np.where(c["param_gather"], gather,
                       np.where(c["params_sharded"], grad_op, zero2))
    out = np.where(c["grads_sharded"] | c["params_sharded"], sharded, replicated)
    return np.where(group > 1, out, 0.0)


def step_seconds(c: dict) -> np.ndarray:
    """Seconds of one optimizer step of every configuration (time_roofline structure:
    micro-batches of compute + memory-bound work + TP/PP/CP communication, the bubble, exposed
    DP communication, the optimizer update or its host offload, and the framework overhead)."""
    mp = c["tp"] * c["pp"]
    tokens = c["mb"] * c["seq"] / c["cp"]
    # the slowest (last) stage: its share of the layers plus the output head and loss
    head_c = c["head_compute"] / c["tp"]
    head_m = c["head_membound"] / c["tp"]
    compute = ((c["compute_repl"] + c["compute_split"] / c["tp"] - head_c) / c["pp"]
               + head_c) * tokens
    membound = (np.where(c["sp"], c["membound_sp"] / c["tp"],
                         c["membound_repl"] + c["membound_split"] / c["tp"]) - head_m) \
        / c["pp"] * tokens + head_m * tokens
    # gradient accumulation reads, adds and writes the gradient buffer per micro-batch
    # (time_roofline: 3 x grad bytes x local params x (m-1)/m at HBM efficiency)
    m = c["accum"]
    grad_local = c["trainable"] / mp
    membound = membound + 3 * c["grad_wire_bytes"] * grad_local * (m - 1) / m \
        / (c["hbm_bw"] * HBM_EFFICIENCY) / np.where(c["compiled"], COMPILE_MEMORY_SPEEDUP, 1.0)
    stage_layers = c["layers"] / c["pp"]
    gpn = c["gpn"]
    act_elems = tokens * c["hidden"]
    tbw, tlat, _ = group_bus_bandwidth(c["tp"], 1, gpn, c["intra_bw"], c["nic_bw"])
    passes = 2 + np.where(c["ckpt_full"], 1, 0)
    tp_t = passes * stage_layers * 2 * ring_all_reduce_seconds(act_elems * c["act_bytes"],
                                                               c["tp"], tbw, tlat)
    pp_inter = (c["pp"] > 1) & (c["world"] > gpn)
    hop_bw = np.where(pp_inter, c["nic_bw"] * INTER_NODE_EFFICIENCY, c["intra_bw"])
    pp_t = np.where(c["pp"] > 1, 2 * (act_elems * c["act_bytes"] / c["tp"] / hop_bw
                                      + np.where(pp_inter, INTER_LATENCY_S, INTRA_LATENCY_S)),
                    0.0)
    # context parallel: K,V all-gathered in forward and again in backward, fp32 dK,dV rotated
    # (PyTorch context_parallel's ring; time_roofline ``ring_attention_costs``), not hidden
    cbw, clat, _ = group_bus_bandwidth(c["cp"], c["tp"], gpn, c["intra_bw"], c["nic_bw"])
    kv_bytes = tokens * c["cp"] * c["kv_dim"] / c["tp"] * c["act_bytes"]
    cp_t = stage_layers * (2 * ring_half_seconds(kv_bytes, c["cp"], cbw, clat)
                           + ring_half_seconds(kv_bytes * 4 / c["act_bytes"], c["cp"], cbw,
                                               clat))
    per_mb = compute + membound + tp_t + pp_t + np.where(c["cp"] > 1, cp_t, 0.0)
    bubble = bubble_fraction(c["pp"], m, c["vstages"]) * m * per_mb
    dp_t = _dp_seconds(c, per_mb)
    opt_params = c["trainable"] / mp / np.where(c["opt_sharded"], c["s_opt"], 1)
    pcie = c["pcie_bw"] * PCIE_EFFICIENCY
    offload = opt_params * (c["grad_bytes_per_param"] + c["act_bytes"]) / pcie \
        + opt_params * np.minimum(gpn, c["world"]) / CPU_ADAM_PARAMS_PER_S_PER_NODE
    opt_t = np.where(c["offload"], offload, c["optimizer_s_per_param"] * opt_params)
    busy = m * per_mb + bubble + dp_t + opt_t
    return busy * (1.0 + c["overhead_fraction"])
