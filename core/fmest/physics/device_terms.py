"""GPU-side memory outside the tensors a formula or a trace sees: one source for every plugin.

Shared by the analytic memory plugin and the traced (torch runner) plugin so that both answer
with the same additive terms. Calibration status: ``ALLOCATOR_RESERVE_FRACTION`` is calibrated
globally on the measured rows that report ``max_memory_reserved`` (docs/memory_model.md); the
other terms are documented typical values, not yet measured on a GPU by this project.
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
#: Caching-allocator overhead, reserved over allocated at the peak (block rounding and segments
#: that cannot be merged; PyTorch "CUDA semantics: memory management"). Calibrated globally on
#: the rows of benchmarks/data/dev/measured_dev.csv that report ``max_memory_reserved``; one number for
#: every job.
ALLOCATOR_RESERVE_FRACTION = 0.10


def allocator_reserve_bytes(allocated_bytes: float) -> float:
    """Caching-allocator reserve over the allocated peak (``ALLOCATOR_RESERVE_FRACTION``)."""
    return allocated_bytes * ALLOCATOR_RESERVE_FRACTION


def cuda_context_bytes(world_size: int) -> float:
    """CUDA context + cuBLAS workspaces (+ NCCL buffers when more than one GPU): memory outside
    the caching allocator (constants above)."""
    return CUDA_CONTEXT_BYTES + CUBLAS_WORKSPACE_BYTES + (NCCL_BUFFER_BYTES if world_size > 1
                                                           else 0)
