"""When Megatron's fused scale-mask-softmax kernel runs, and when its eager fallback does.

Megatron's ``FusedScaleMaskSoftmax`` (eager attention, no flash/TE kernel) runs the CUDA kernel
``ScaledUpperTriangMaskedSoftmax`` (causal) only when ``is_kernel_available`` says the shape fits
it; otherwise it silently falls back to ``forward_torch_softmax``: an fp32 upcast, the
query-key layer scaling multiply, ``masked_fill_`` and ``torch.nn.Softmax`` in fp32, and the
downcast, one eager kernel each (bigscience-workshop/Megatron-DeepSpeed
@8387ae17c4704f6579f88a84500b535d19d7fbbf megatron/model/fused_softmax.py
``FusedScaleMaskSoftmax.is_kernel_available`` / ``forward_torch_softmax``; the same rule in
NVIDIA/Megatron-LM's legacy ``megatron/model/fused_softmax.py``). The conditions, for scores
``[b, np, sq, sk]`` (``np`` heads per tensor-parallel rank):

* the inputs are fp16/bf16 and ``masked_softmax_fusion`` is on (the default;
  ``--no-masked-softmax-fusion`` turns it off);
* ``16 < sk <= max_seq`` (4096 in the fork at 8387ae17; 2048 before its 2022-03-06 sync of
  Megatron-LM's fused kernels, 1cb76a64), ``sq % 4 == 0``, ``b * np % 4 == 0``;
* causal: ``b * np`` a multiple of the kernel's batches per block
  (:func:`batches_per_block`).
"""

from __future__ import annotations

#: ``C10_WARP_SIZE`` on NVIDIA GPUs
WARP_SIZE = 32
#: ``threads_per_block`` of ``get_batch_per_block`` (scaled_masked_softmax.h)
THREADS_PER_BLOCK = 128


def batches_per_block(key_seq_len: int) -> int:
    """The fused kernel's rows per thread block for keys of length ``key_seq_len``
    (megatron/fused_kernels/scaled_masked_softmax.h ``get_batch_per_block`` at 8387ae17: the
    next power of two of the key length sets the warp size, up to 32; two rows per warp up to
    128 keys, else one; 128 threads per block)."""
    next_pow2 = 1 << max(int(key_seq_len) - 1, 0).bit_length()
    warp = min(next_pow2, WARP_SIZE)
    per_warp = 2 if next_pow2 <= 128 else 1
    return (THREADS_PER_BLOCK // warp) * per_warp


def fused_softmax_available(*, micro_batch: int, heads_per_rank: int, seq_len: int,
                            max_seq: int, causal: bool = True) -> bool:
    """Whether ``FusedScaleMaskSoftmax`` runs its fused kernel for self-attention scores of
    ``micro_batch x heads_per_rank x seq_len x seq_len`` (module doc)."""
    attn_batches = micro_batch * heads_per_rank
    if not (16 < seq_len <= max_seq and seq_len % 4 == 0 and attn_batches % 4 == 0):
        return False
    per_block = batches_per_block(seq_len)
    return attn_batches % per_block == 0 if causal else seq_len % per_block == 0
