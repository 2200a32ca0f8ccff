"""GPU-side memory outside the tensors a formula or a trace sees: one source for every plugin.

Shared by the analytic memory plugin and the traced (torch runner) plugin so that both answer
with the same additive terms. Calibration status: the caching-allocator reserve is derived from
traces of the real training code replayed through the allocator simulator (core/fmest/data/
allocator_reserve.json, docs/allocator.md); the other terms are documented typical values, not
yet measured on a GPU by this project.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

MIB = 1 << 20

#: Device memory a training process holds outside the caching allocator (what nvidia-smi shows
#: beyond ``torch.cuda.max_memory_reserved()``): the CUDA context, the kernel images lazy
#: module loading brings in as the step first runs them (cuBLAS/cuBLASLt, attention, fused
#: optimizer, loss kernels) and the libraries' handles. Measured by fmest on one H200 SXM
#: (driver 580.159.04, CUDA 13.0, torch 2.11.0+cu130, transformers 5.17.0, 2026-11-27;
#: benchmarks/gpu/results/H200-SXM-141GB-2026-11-27, benchmarks/data/parts/gpu_probe.csv):
#: device memory in use (pynvml) minus ``max_memory_reserved`` after 3 training steps is
#: 1.3338-1.3456 GiB over all 43 cases (Llama-3.2-1B, Llama-3.1-8B, Qwen2.5-0.5B/3B; full, LoRA,
#: QLoRA with bitsandbytes; AdamW fused/foreach/8-bit), median 1.3358 GiB = 1368 MiB; of it
#: 0.604 GiB was in use before the first model was built (the context as created; the
#: documented ~500 MiB of the PyTorch "CUDA semantics" notes). cuBLAS workspaces are
#: allocated through the caching allocator (torch's CublasHandlePool ``getNewWorkspace``), so
#: they are in the reserved bytes, not here. Other GPUs and CUDA versions have no measurement
#: here yet (stas00/ml-engineering: "the CUDA kernels take 0.5-2 GB").
CUDA_CONTEXT_BYTES = 1368 * MIB
#: NCCL: one communicator's device memory (buffers of ``NCCL_BUFFSIZE`` per channel and peer,
#: proxy and kernel state), measured on 4 x A100 NVLink with PyTorch, one 4 MB all-reduce per
#: process group: 544 MB for a 2-rank group, 688 MB for 3-4 ranks (NVIDIA/nccl issue #964,
#: 2023-08-16, nvidia-smi MiB). The larger figure for every world size > 1, so that a per-GPU
#: peak under full sharding never rises past 2 GPUs (docs/memory_model.md, "Known
#: non-monotonic answers"; a 2-GPU job is priced 144 MiB high). Counted once per process (one
#: data-parallel communicator); further communicators (Megatron's tensor/pipeline/context
#: groups, all-to-all peers) add more (NVIDIA/nccl #986, #1685) and are not modelled.
NCCL_BUFFER_BYTES = 688 * MIB
#: Caching-allocator reserve (``max_memory_reserved`` minus the tensor peak), derived from the
#: table core/fmest/data/allocator_reserve.json (``python scripts/derive_allocator_reserve.py``,
#: 2026-11-27, torch 2.13.0 / transformers 5.24.0: 47 fake-tensor traces of HF-transformers
#: training steps, 0.36B-70B, full/LoRA, AC on/off, 0.5k-24k tokens per micro-batch, replayed
#: through fmest.allocator with the default PYTORCH_CUDA_ALLOC_CONF). Its ``summary.rule``: a
#: Theil-Sen line of reserve bytes over the tensor peak, ~1.21 GiB + 3.4 %; leave-one-out it
#: predicts the replayed reserved peak to 4.1 % median. Used only where the step's transient
#: blocks are unknown (a traced peak, a measured reserved figure): the reserve follows the
#: largest transient block, not the model size (the transient rule below).
ALLOCATOR_RESERVE_CONSTANT_BYTES = 1_294_546_350
ALLOCATOR_RESERVE_FRACTION = 0.0337
#: the smallest tensor peak of the table (qwen2.5-0.5b full b1 s512): below it the rule is not
#: extrapolated as a constant but scaled down in proportion to the allocated bytes
ALLOCATOR_RESERVE_MIN_TRACED_BYTES = 4_940_636_160


#: The same under ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` (segments grow by pages
#: instead of new cudaMalloc blocks): the table's ``summary.rule_expandable``, the 47 traces
#: replayed with expandable segments: ~1.06 GiB + 0 % (leave-one-out 3.1 % median).
ALLOCATOR_RESERVE_EXPANDABLE_CONSTANT_BYTES = 1_142_416_384
ALLOCATOR_RESERVE_EXPANDABLE_FRACTION = 0.0


#: The reserve as a function of the step's largest transient block (fmest issue 21): the
#: table's ``summary.rule_transient`` (``python scripts/derive_allocator_reserve.py
#: --summarize``, 2026-11-27, the traces of the table): a Theil-Sen line of the replayed
#: reserve over ``transient_block_bytes``, the analytic largest block a training step
#: allocates and frees (the logits the loss upcasts to fp32 and their gradient, tokens x vocab
#: x 4 B for transformers' standard loss: :func:`transient_block_bytes`). The caching
#: allocator caches a freed block's segment and splits it for smaller requests
#: (c10/cuda/CUDACachingAllocator.cpp @ eb42ad6e, ``get_free_block`` / ``should_split``;
#: ``free_block`` returns no memory to the driver), so the next request of that size, once
#: small blocks sit inside the cached segment, maps a fresh one: the reserve follows the
#: largest transient block, not the model size. Leave-one-trace-out it predicts the reserved
#: peak better than the tensor-peak rule above (the table's ``loo_*`` entries over the 47
#: traces: default 3.2 % vs 4.1 % median, expandable segments 0.65 % vs 3.1 %). Used where the
#: per-layer block is unknown (the traced plugin); the memory plugin uses the two-term rule.
ALLOCATOR_RESERVE_TRANSIENT_CONSTANT_BYTES = 1_218_783_946
ALLOCATOR_RESERVE_TRANSIENT_SLOPE = 0.51076
ALLOCATOR_RESERVE_TRANSIENT_EXPANDABLE_CONSTANT_BYTES = 78_697_002
ALLOCATOR_RESERVE_TRANSIENT_EXPANDABLE_SLOPE = 0.53958


#: The two-term rule (fmest issue 21, re-derived): replays of 70B LoRA (full AC, 4k tokens,
#: batch 2 and 4) and Qwen2-7B full (batch 48 x 512) showed the reserve growing with batch
#: through the PER-LAYER blocks, not only the logits. Under recomputation each layer's backward
#: re-allocates that layer's activations and frees them before the next layer's (without
#: recomputation it frees the layer's saved tensors): the per-layer block is what one layer
#: frees in backward (memory_theory ``Activations.saved_layer + work_layer``); the caching allocator keeps
#: each freed segment (``free_block`` returns nothing to the driver), rounds every request above
#: 1 MiB to 2 MiB / 20 MiB segments and splits a cached block for a smaller request whenever the
#: remainder is over ``kMinLargeAlloc`` (``should_split``; c10/cuda/CUDACachingAllocator.cpp @
#: eb42ad6eca0ce61e7c581212b4bf32f991425571): gradients and saved checkpoints placed into the
#: split segments leave the next layer's same-size working set no contiguous block, so about
#: one layer's working set stays reserved on top of the logits' share. The table's
#: ``summary.rule_layer`` (``python scripts/derive_allocator_reserve.py --summarize``,
#: 2026-11-27, torch 2.13.0: least-absolute-deviation fit with non-negative coefficients of the
#: replayed reserve over (1, transient_block_bytes, layer_block_bytes) on the table's traces,
#: 0.36B-70B, 47 traces): ~0.26 GiB + 0.44 x transient + 0.86 x layer (default),
#: ~0.03 GiB + 0.51 x transient + 0.14 x layer (expandable segments). Leave-one-trace-out
#: median (max) |error| of the replayed reserved peak: 2.4 % (20.7 %) vs 3.2 % (23.5 %) for the
#: transient rule and 4.1 % (25.6 %) for the tensor-peak rule; expandable 0.36 % vs 0.65 %.
ALLOCATOR_RESERVE_LAYER_CONSTANT_BYTES = 280_508_416
ALLOCATOR_RESERVE_LAYER_TRANSIENT_SLOPE = 0.44391
ALLOCATOR_RESERVE_LAYER_SLOPE = 0.8578
ALLOCATOR_RESERVE_LAYER_EXPANDABLE_CONSTANT_BYTES = 30_822_741
ALLOCATOR_RESERVE_LAYER_EXPANDABLE_TRANSIENT_SLOPE = 0.50507
ALLOCATOR_RESERVE_LAYER_EXPANDABLE_SLOPE = 0.13721


def transient_block_bytes(tokens: float, vocab: float, logits_bytes: float = 4.0) -> float:
    """The largest block a training step allocates and frees: one logits-sized tensor of
    ``tokens x vocab`` elements of ``logits_bytes`` (fp32 for transformers' loss, which
    upcasts the logits; per TP rank, the vocabulary shard)."""
    return max(0.0, float(tokens) * float(vocab) * float(logits_bytes))


#: The reserve the allocator cannot give back at the peak (fmest issue 22), the rule of
#: core/fmest/data/allocator_reserve.json ``floor.summary`` (``python
#: scripts/derive_allocator_reserve.py --floor``, 2026-11-27, torch 2.13.0, the 14 traces of the
#: reserve table): Theil-Sen line (median pairwise slope, then median intercept: the method of
#: the reserve's own rule) of the smallest no-OOM capacity of each replayed step minus its
#: tensor peak. ``release_cached_blocks`` (ALLOC) frees only segments without a live block, so
#: fragmentation inside live segments and the rounding of live blocks stay: median 0.67 GiB,
#: 0.25 .. 2.51 GiB, 71 % of the replay's whole reserve (22 .. 100 %).
ALLOCATOR_FLOOR_CONSTANT_BYTES = 647_101_320
ALLOCATOR_FLOOR_FRACTION = 0.00396
#: The same under ``expandable_segments:True`` (``floor.summary.rule_expandable``): a full
#: release unmaps every whole free page (``unmap_block``), so only the partial 2 MiB / 20 MiB
#: pages around live blocks stay: median 0.09 GiB, 0.02 .. 0.25 GiB (14 % of the reserve).
ALLOCATOR_FLOOR_EXPANDABLE_CONSTANT_BYTES = 88_392_028
ALLOCATOR_FLOOR_EXPANDABLE_FRACTION = 0.00087


def irreducible_reserve_bytes(allocated_bytes: float, expandable: bool = False) -> float:
    """The reserve no release can return at a peak of ``allocated_bytes`` tensors: the floor
    rule above (``C + f x allocated``), scaled like ``fmest.physics.device_terms.
    allocator_reserve_bytes`` by ``allocated / A_min`` below the table's smallest tensor peak.
    A peak fits a device only if tensors + this floor (+ memory outside the allocator) do."""
    m = ALLOCATOR_RESERVE_MIN_TRACED_BYTES
    a = max(0.0, float(allocated_bytes))
    c, f = ((ALLOCATOR_FLOOR_EXPANDABLE_CONSTANT_BYTES, ALLOCATOR_FLOOR_EXPANDABLE_FRACTION)
            if expandable else (ALLOCATOR_FLOOR_CONSTANT_BYTES, ALLOCATOR_FLOOR_FRACTION))
    return (c + f * max(a, m)) * min(1.0, a / m)


def allocator_reserve_bytes(allocated_bytes: float, expandable: bool = False,
                            transient_bytes: float | None = None,
                            layer_bytes: float | None = None) -> float:
    """Caching-allocator reserve over the allocated peak, scaled by ``allocated / A_min`` below
    the table's smallest tensor peak ``A_min``. With ``transient_bytes`` (the step's largest
    transient block, :func:`transient_block_bytes`): ``C_t + s x transient_bytes`` (the
    table's transient rule), never below the reserve no release gives back
    (:func:`irreducible_reserve_bytes`: that floor is a part of the reserve).
    With ``layer_bytes`` too (what one layer frees in backward, memory_theory
    ``StagePeak.layer_block``): the two-term rule ``C_l + s_t x transient + s_l x layer``.
    Without it (a caller that knows only the allocated bytes: a trace's peak, a measured
    reserved figure): ``C + f x allocated``, the tensor-peak rule (constants above)."""
    a = max(0.0, float(allocated_bytes))
    m = ALLOCATOR_RESERVE_MIN_TRACED_BYTES
    if transient_bytes is not None:
        t = max(0.0, float(transient_bytes))
        if layer_bytes is not None:
            c, s, sl = ((ALLOCATOR_RESERVE_LAYER_EXPANDABLE_CONSTANT_BYTES,
                         ALLOCATOR_RESERVE_LAYER_EXPANDABLE_TRANSIENT_SLOPE,
                         ALLOCATOR_RESERVE_LAYER_EXPANDABLE_SLOPE) if expandable else
                        (ALLOCATOR_RESERVE_LAYER_CONSTANT_BYTES,
                         ALLOCATOR_RESERVE_LAYER_TRANSIENT_SLOPE, ALLOCATOR_RESERVE_LAYER_SLOPE))
            held = (c + s * t + sl * max(0.0, float(layer_bytes))) * min(1.0, a / m)
            return max(held, irreducible_reserve_bytes(a, expandable))
        c, s = ((ALLOCATOR_RESERVE_TRANSIENT_EXPANDABLE_CONSTANT_BYTES,
                 ALLOCATOR_RESERVE_TRANSIENT_EXPANDABLE_SLOPE) if expandable else
                (ALLOCATOR_RESERVE_TRANSIENT_CONSTANT_BYTES, ALLOCATOR_RESERVE_TRANSIENT_SLOPE))
        held = (c + s * t) * min(1.0, a / m)
        return max(held, irreducible_reserve_bytes(a, expandable))
    if expandable:
        return (ALLOCATOR_RESERVE_EXPANDABLE_CONSTANT_BYTES
                + ALLOCATOR_RESERVE_EXPANDABLE_FRACTION * max(a, m)) * min(1.0, a / m)
    return (ALLOCATOR_RESERVE_CONSTANT_BYTES + ALLOCATOR_RESERVE_FRACTION * max(a, m)) \
        * min(1.0, a / m)


def allocated_from_reserved(reserved_bytes: float, expandable: bool = False) -> float:
    """The inverse of ``a + allocator_reserve_bytes(a, expandable)``: allocated bytes from a
    reserved figure (planner calibration)."""
    x = max(0.0, float(reserved_bytes))
    m = ALLOCATOR_RESERVE_MIN_TRACED_BYTES
    at_min = m + allocator_reserve_bytes(m, expandable)
    if x < at_min:
        return x * m / at_min
    if expandable:
        return (x - ALLOCATOR_RESERVE_EXPANDABLE_CONSTANT_BYTES) / (
            1.0 + ALLOCATOR_RESERVE_EXPANDABLE_FRACTION)
    return (x - ALLOCATOR_RESERVE_CONSTANT_BYTES) / (1.0 + ALLOCATOR_RESERVE_FRACTION)


def nccl_buffer_bytes(world_size: int) -> float:
    """One NCCL communicator's device memory for ``world_size`` ranks (0 for one GPU)."""
    return NCCL_BUFFER_BYTES if world_size > 1 else 0.0


def cuda_context_bytes(world_size: int) -> float:
    """Memory outside the caching allocator: the CUDA context with the kernels a training step
    loads (+ one NCCL communicator when more than one GPU; constants above)."""
    return CUDA_CONTEXT_BYTES + nccl_buffer_bytes(world_size)


# ---------------------------------------------------------------------------------------------
# Per-stream pools under FSDP (fmest issue 21; docs/allocator.md "Per-stream pools under FSDP")
# ---------------------------------------------------------------------------------------------
#: The caching allocator keeps its cached blocks per stream: ``get_free_block`` searches the
#: ``BlockPool`` only for blocks whose ``stream`` is the request's (the pool's ``BlockComparator``
#: orders by stream first, then size), ``free_block`` puts a freed block back into its own
#: stream's pool and returns nothing to the driver, and a block freed while ``record_stream``
#: lists other streams waits in ``insert_events`` / ``process_events`` until their work is done
#: (pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp @ eb42ad6e). A block a side stream
#: allocated therefore stays in that stream's pool: the default stream (activations, optimizer
#: temporaries) never reuses it. The reserved bytes are the sum over pools of each pool's
#: high-water mark, not the high-water mark of their sum (what ``max_memory_allocated`` sees).
#:
#: Which side streams allocate the blocks that a training step's allocated count holds, by
#: the stack's FSDP implementation (stacks whose own code runs the step; others: none):
#:
#: * ``fsdp1`` (torch.distributed.fsdp.FullyShardedDataParallel; pytorch/pytorch
#:   torch/distributed/fsdp/_runtime_utils.py @ 00ae0bc91ac2c1718d1baa193d9d299e2b82776c):
#:   ``_unshard`` allocates each unit's padded unsharded flat parameter inside
#:   ``stream(unshard_stream)`` (``FlatParamHandle._alloc_padded_unsharded_flat_param``,
#:   _flat_param.py), ``limit_all_gathers`` holding two units (the root stays gathered from
#:   forward to backward): the gathered parameters live in the unshard stream's pool.
#:   ``_post_backward_hook`` / ``_reduce_grad`` allocate ``new_sharded_grad`` (and its
#:   ``_cast_grad_to_param_dtype`` copy) inside ``stream(post_backward_stream)`` and keep it as
#:   the sharded ``.grad``: the sharded gradients live in the post-backward stream's pool.
#:   The unsharded gradient autograd produced on the default stream is freed with
#:   ``_no_dispatch_record_stream(autograd_computed_grad, post_backward)``: its block waits
#:   for the reduce-scatter, so while the next unit's gradient is computed one more unit's
#:   unsharded gradient stays reserved in the default pool (backward only).
#:   Stacks: hf-trainer (accelerate's FSDP plugin wraps the model in
#:   FullyShardedDataParallel, FSDP1: accelerate 1.0.1 src/accelerate/accelerator.py
#:   ``prepare_model``, the version of the evidence's IBM fms-acceleration runs),
#:   fsdp-qlora (AnswerDotAI/fsdp_qlora e877dda train.py: ``FSDP(..., limit_all_gathers=True)``).
#: * ``fsdp2`` (``fully_shard``; torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py @
#:   010ae4a89516fa3be548ab16dff711414ec12d0b): ``foreach_all_gather`` allocates the
#:   all-gather output (one unit, the parameter dtype) inside ``stream(all_gather_copy_in_
#:   stream)``, and ``foreach_all_gather_copy_out`` copies it into the unsharded parameters on
#:   the default stream: the parameters live in the default pool, the all-gather outputs of the
#:   unit computed and the unit prefetched in the copy-in stream's pool, which fmest's
#:   allocated count does not hold. ``foreach_reduce`` allocates ``reduce_scatter_input`` on
#:   the default stream but ``reduce_output`` (which becomes the sharded gradient) inside
#:   ``stream(reduce_scatter_stream)``: the sharded gradients live in that stream's pool.
#:   Stack: torchtitan (``fully_shard`` in torchtitan/models/llama3/infra/parallelize.py).
FSDP_STREAM_POOL_STACKS: dict[str, str] = {
    "hf-trainer": "fsdp1", "fsdp-qlora": "fsdp1", "torchtitan": "fsdp2"}
#: the kinds as numbers for the planner's arrays (core/fmest/plan/vector.py ``memory_bytes``)
STREAM_POOL_KIND_CODES: dict[str, float] = {"fsdp1": 1.0, "fsdp2": 2.0}
#: FSDP2's all-gather outputs in the copy-in stream's pool: the unit being copied out and the
#: unit prefetched (implicit prefetch issues one all-gather ahead; _fsdp_param_group.py)
FSDP2_ALL_GATHER_OUTPUT_UNITS = 2


def stream_pool_extra_bytes(phase_allocated: Mapping[str, float],
                            side_pools: Sequence[Mapping[str, float]],
                            outside_count: float = 0.0,
                            default_extra: Mapping[str, float] | None = None) -> float:
    """Reserved bytes beyond the allocated peak that separate per-stream pools hold.

    ``phase_allocated``: allocated bytes at each phase's peak. ``side_pools``: for each side
    stream's pool, the bytes of each phase's allocated count that live in it. ``outside_count``:
    a side pool's high-water bytes the allocated count does not hold at all.
    ``default_extra``: default-pool bytes a phase keeps reserved but not allocated (a block
    freed under ``record_stream``). Each pool keeps its own high-water mark, so the tensors
    reserved are ``max_p(A_p - sum_k s_kp + d_p) + sum_k max_p s_kp + outside``; the answer is
    that less ``max_p A_p`` (never negative)."""
    if not phase_allocated:
        return 0.0
    extra = default_extra or {}
    default_high = max(a - sum(pool.get(p, 0.0) for pool in side_pools) + extra.get(p, 0.0)
                       for p, a in phase_allocated.items())
    side_high = sum(max(pool.values(), default=0.0) for pool in side_pools)
    held = default_high + side_high + max(0.0, outside_count)
    return max(0.0, held - max(phase_allocated.values()))


#: PyTorch releases before this one (MAJOR, MINOR) allocated FSDP2's reduce-scatter input inside
#: the reduce-scatter stream (``foreach_reduce_scatter``: ``torch.empty(..., dtype=reduce_dtype)``
#: under ``torch.cuda.stream(reduce_scatter_stream)``); pytorch/pytorch PR #129721 (2024-06-27,
#: "Ran reduce-scatter copy-in in default stream", first in 2.5) moved it to the default stream
FSDP2_RS_INPUT_DEFAULT_STREAM_FROM = (2, 5)


def fsdp2_rs_input_in_side_pool(torch_version: str | None) -> bool:
    """Whether the run's PyTorch (``hardware.torch_version``) keeps FSDP2's reduce-scatter
    input in the reduce-scatter stream's pool (before 2.5; not stated: no)."""
    from fmest.job import torch_at_least

    return torch_at_least(torch_version, *FSDP2_RS_INPUT_DEFAULT_STREAM_FROM) is False


def fsdp_stream_pool_bytes(kind: str | None, phase_allocated: Mapping[str, float],
                           phase_gathered: Mapping[str, float],
                           phase_grads: Mapping[str, float], unit_gathered: float,
                           unit_grad: float, root_rs_input: float = 0.0) -> float:
    """:func:`stream_pool_extra_bytes` for a stack's FSDP implementation ``kind``
    (:data:`FSDP_STREAM_POOL_STACKS`; ``None``: no side-stream pools, 0). ``phase_gathered``:
    the gathered parameters each phase's count holds (the root and the in-flight units);
    ``phase_grads``: its sharded gradients; ``unit_gathered``: one unit as all-gathered;
    ``unit_grad``: one unit's unsharded gradient (0 where the unit has none: frozen LoRA
    units), held by ``record_stream`` at every backward moment (phases named ``backward*``).
    ``root_rs_input``: FSDP2 before PyTorch 2.5 (:func:`fsdp2_rs_input_in_side_pool`) casts each
    unit's unsharded gradients into a reduce-scatter input inside the reduce-scatter stream; the
    root unit's (embedding and head, the largest) maps its own segment there at the end of
    backward, cached beside the sharded gradients (the layers' input is counted in the
    backward's allocated bytes)."""
    if kind == "fsdp1":
        return stream_pool_extra_bytes(
            phase_allocated, (phase_gathered, phase_grads),
            default_extra={name: max(0.0, unit_grad) for name in phase_allocated
                           if name.startswith("backward")})
    if kind == "fsdp2":
        return stream_pool_extra_bytes(
            phase_allocated, (phase_grads,),
            outside_count=FSDP2_ALL_GATHER_OUTPUT_UNITS * max(0.0, unit_gathered)
            + max(0.0, root_rs_input))
    return 0.0
