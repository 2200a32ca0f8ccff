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
#: 2026-11-26, torch 2.13.0 / transformers 5.24.0: 14 fake-tensor traces of HF-transformers
#: training steps, 0.36B-8B, full/LoRA, AC on/off, replayed through fmest.allocator with the
#: default PYTORCH_CUDA_ALLOC_CONF). Its ``summary.rule``: a Theil-Sen line of reserve bytes
#: over the tensor peak has a near-zero slope and an intercept of ~1.49 GiB; leave-one-out it
#: predicts the replayed reserved peak to 3.3 % median (a pure fraction, median 1.118: 7.2 %).
#: The reserve follows the largest transient blocks (logits, attention/MLP temporaries), not
#: the model size. ``ALLOCATOR_RESERVE_FRACTION`` keeps its name for the code that imports it.
ALLOCATOR_RESERVE_CONSTANT_BYTES = 1_597_194_220
ALLOCATOR_RESERVE_FRACTION = 0.00068
#: the smallest tensor peak of the table (qwen2.5-0.5b full b1 s512): below it the rule is not
#: extrapolated as a constant but scaled down in proportion to the allocated bytes
ALLOCATOR_RESERVE_MIN_TRACED_BYTES = 4_940_636_160


#: The same under ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` (segments grow by pages
#: instead of new cudaMalloc blocks): the table's ``summary.rule_expandable``, the 14 traces
#: replayed with expandable segments; the Theil-Sen slope is negative (no physical reading:
#: clamped to 0), so the rule is the median reserve, ~0.60 GiB (leave-one-out 2.3 % median).
ALLOCATOR_RESERVE_EXPANDABLE_CONSTANT_BYTES = 647_403_520


def allocator_reserve_bytes(allocated_bytes: float, expandable: bool = False) -> float:
    """Caching-allocator reserve over the allocated peak: ``C + f x allocated`` (the traced
    table's rule, constants above; ``expandable``: its expandable-segments constant), scaled by
    ``allocated / A_min`` below the table's smallest tensor peak ``A_min``."""
    a = max(0.0, float(allocated_bytes))
    m = ALLOCATOR_RESERVE_MIN_TRACED_BYTES
    if expandable:
        return ALLOCATOR_RESERVE_EXPANDABLE_CONSTANT_BYTES * min(1.0, a / m)
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
        return x - ALLOCATOR_RESERVE_EXPANDABLE_CONSTANT_BYTES
    return (x - ALLOCATOR_RESERVE_CONSTANT_BYTES) / (1.0 + ALLOCATOR_RESERVE_FRACTION)


def cuda_context_bytes(world_size: int) -> float:
    """CUDA context + cuBLAS workspaces (+ NCCL buffers when more than one GPU): memory outside
    the caching allocator (constants above)."""
    return CUDA_CONTEXT_BYTES + CUBLAS_WORKSPACE_BYTES + (NCCL_BUFFER_BYTES if world_size > 1
                                                           else 0)
