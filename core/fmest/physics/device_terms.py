"""GPU-side memory outside the tensors a formula or a trace sees: one source for every plugin.

Shared by the analytic memory plugin and the traced (torch runner) plugin so that both answer
with the same additive terms. Calibration status: the caching-allocator reserve is derived from
traces of the real training code replayed through the allocator simulator (core/fmest/data/
allocator_reserve.json, docs/allocator.md); the other terms are documented typical values, not
yet measured on a GPU by this project.
"""

from __future__ import annotations

MIB = 1 << 20

#: CUDA context + cuBLAS/cuBLASLt workspaces: memory nvidia-smi shows but
#: ``torch.cuda.max_memory_reserved()`` does not. ~500 MiB for the context with lazy module
#: loading on CUDA 12 (PyTorch "CUDA semantics" notes; stas00/ml-engineering "the CUDA kernels
#: take 0.5-2 GB"), 2 x 32 MiB cuBLAS workspaces on Hopper (``CUBLAS_WORKSPACE_CONFIG=:4096:8``).
CUDA_CONTEXT_BYTES = 512 * MIB
CUBLAS_WORKSPACE_BYTES = 2 * 32 * MIB
#: NCCL: ``NCCL_BUFFSIZE`` 4 MiB per channel and peer direction; ~32 channels on NVLink systems
#: (NCCL environment-variable docs) -> 256 MiB per communicator, counted once.
NCCL_BUFFER_BYTES = 256 * MIB
#: Caching-allocator reserve (``max_memory_reserved`` minus the tensor peak), derived from the
#: table core/fmest/data/allocator_reserve.json (``python scripts/derive_allocator_reserve.py``,
#: 2026-11-27, torch 2.13.0 / transformers 5.24.0: 29 fake-tensor traces of HF-transformers
#: training steps, 0.36B-8B, full/LoRA, AC on/off, 0.5k-16k tokens per micro-batch, replayed
#: through fmest.allocator with the default PYTORCH_CUDA_ALLOC_CONF). Its ``summary.rule``: a
#: Theil-Sen line of reserve bytes over the tensor peak, ~1.45 GiB + 1.4 %; leave-one-out it
#: predicts the replayed reserved peak to 4.6 % median. Used only where the step's transient
#: blocks are unknown (a traced peak, a measured reserved figure): the reserve follows the
#: largest transient block, not the model size (the transient rule below).
ALLOCATOR_RESERVE_CONSTANT_BYTES = 1_555_993_751
ALLOCATOR_RESERVE_FRACTION = 0.01433
#: the smallest tensor peak of the table (qwen2.5-0.5b full b1 s512): below it the rule is not
#: extrapolated as a constant but scaled down in proportion to the allocated bytes
ALLOCATOR_RESERVE_MIN_TRACED_BYTES = 4_940_636_160


#: The same under ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` (segments grow by pages
#: instead of new cudaMalloc blocks): the table's ``summary.rule_expandable``, the 14 traces
#: replayed with expandable segments: ~0.45 GiB + 5.2 % (leave-one-out 4.5 % median).
ALLOCATOR_RESERVE_EXPANDABLE_CONSTANT_BYTES = 479_245_824
ALLOCATOR_RESERVE_EXPANDABLE_FRACTION = 0.05224


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
#: peak better than the tensor-peak rule above (the table's ``loo_*`` entries over the 29
#: traces: default 3.8 % vs 4.6 % median, expandable segments 0.7 % vs 4.5 %).
ALLOCATOR_RESERVE_TRANSIENT_CONSTANT_BYTES = 1_461_147_467
ALLOCATOR_RESERVE_TRANSIENT_SLOPE = 0.20604
ALLOCATOR_RESERVE_TRANSIENT_EXPANDABLE_CONSTANT_BYTES = 39_910_924
ALLOCATOR_RESERVE_TRANSIENT_EXPANDABLE_SLOPE = 0.5447


def transient_block_bytes(tokens: float, vocab: float, logits_bytes: float = 4.0) -> float:
    """The largest block a training step allocates and frees: one logits-sized tensor of
    ``tokens x vocab`` elements of ``logits_bytes`` (fp32 for transformers' loss, which
    upcasts the logits; per TP rank, the vocabulary shard)."""
    return max(0.0, float(tokens) * float(vocab) * float(logits_bytes))


def allocator_reserve_bytes(allocated_bytes: float, expandable: bool = False,
                            transient_bytes: float | None = None) -> float:
    """Caching-allocator reserve over the allocated peak, scaled by ``allocated / A_min`` below
    the table's smallest tensor peak ``A_min``. With ``transient_bytes`` (the step's largest
    transient block, :func:`transient_block_bytes`): ``C_t + s x transient_bytes`` (the
    table's transient rule), never below the reserve no release gives back
    (``fmest.allocator.irreducible_reserve_bytes``: that floor is a part of the reserve).
    Without it (a caller that knows only the allocated bytes: a trace's peak, a measured
    reserved figure): ``C + f x allocated``, the tensor-peak rule (constants above)."""
    a = max(0.0, float(allocated_bytes))
    m = ALLOCATOR_RESERVE_MIN_TRACED_BYTES
    if transient_bytes is not None:
        from fmest.allocator import irreducible_reserve_bytes

        c, s = ((ALLOCATOR_RESERVE_TRANSIENT_EXPANDABLE_CONSTANT_BYTES,
                 ALLOCATOR_RESERVE_TRANSIENT_EXPANDABLE_SLOPE) if expandable else
                (ALLOCATOR_RESERVE_TRANSIENT_CONSTANT_BYTES, ALLOCATOR_RESERVE_TRANSIENT_SLOPE))
        held = (c + s * max(0.0, float(transient_bytes))) * min(1.0, a / m)
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


def cuda_context_bytes(world_size: int) -> float:
    """CUDA context + cuBLAS workspaces (+ NCCL buffers when more than one GPU): memory outside
    the caching allocator (constants above)."""
    return CUDA_CONTEXT_BYTES + CUBLAS_WORKSPACE_BYTES + (NCCL_BUFFER_BYTES if world_size > 1
                                                           else 0)
