"""Pure formulas of the roofline time model: FLOPs, bytes, efficiencies and collective costs.

Every function is pure, has its unit in its name and cites its source. Every constant is named,
documented, and either taken from evidence in ``docs/research/hardware_notes.md``
(HN §n) or marked ``calibrated`` (fitted once, globally, against the throughput rows of
``measured_dev.csv`` by ``benchmarks/accuracy_time.py``; never per row). The derivations are in
``docs/time_model.md``. The constants the planner's array formulas also use (HBM and collective
efficiencies, latencies, overlap interference, PCIe, CPU-Adam, the compile speed-up) are defined
in :mod:`fmest.physics.time_constants` and imported here under the same names.
"""

from __future__ import annotations

import csv
import functools
import math
from typing import Iterable, Optional

from fmest.physics.gpu_prefix import value_by_gpu_prefix
from fmest.physics.time_constants import (
    CPU_ADAM_PARAMS_PER_S_PER_NODE as CPU_ADAM_PARAMS_PER_S_PER_NODE,
)

# the constants shared with the planner's array formulas, defined once in the core; the ones
# this module does not use itself are re-exported (``F.X``) for the plugin and the tests
from fmest.physics.time_constants import (
    DEEPSPEED_PIPE_BLOCKING_TRANSFERS,
    DEEPSPEED_PIPE_PARTITION_GATHERS,
    DEFAULT_INTER_NODE_BYTES_PER_S,
    DEFAULT_PCIE_BYTES_PER_S,
    FUSED_LORA_BYTES_PER_FEATURE,
    FUSED_LORA_DROPOUT_BYTES_PER_IN_FEATURE,
    HBM_EFFICIENCY,
    HOST_SECONDS_PER_BACKWARD_OP,
    HOST_SECONDS_PER_EAGER_OP,
    HOST_SECONDS_PER_FORWARD_OP,
    INTER_NODE_COLLECTIVE_EFFICIENCY,
    INTER_NODE_LATENCY_S,
    INTRA_NODE_LATENCY_S,
    KBIT_PREP_CAST_BYTES_PER_ELEMENT,
    KBIT_PREP_GRAD_SUM_EXTRA_BYTES_PER_ELEMENT,
    KBIT_PREP_LORA_FP32_INPUT_SAVED_BYTES_PER_IN_FEATURE,
    KBIT_PREP_TRACED_BYTES_PER_ELEMENT,
    MEGATRON_MOE_LAYER_HOST_OPS,
    MOE_EXPERT_GEMMS_PER_LOCAL_EXPERT,
    NVLINK_DOMAIN_GPUS,
    OVERLAP_INTERFERENCE_FRACTION,
    PCIE_EFFICIENCY,
    TE_GROUPED_GEMM_SECONDS_PER_GEMM,
    ZERO3_HOOK_OPS_PER_LAYER,
    intra_node_collective_efficiency,
)
from fmest.physics.time_constants import (
    HOST_OP_TIME_FACTOR_BY_GPU as HOST_OP_TIME_FACTOR_BY_GPU,
)
from fmest.physics.time_constants import (
    HOST_STAGED_TO_P2P_BUSBW_RATIO as HOST_STAGED_TO_P2P_BUSBW_RATIO,
)
from fmest.physics.time_constants import (
    INTRA_NODE_COLLECTIVE_EFFICIENCY as INTRA_NODE_COLLECTIVE_EFFICIENCY,
)
from fmest.physics.time_constants import (
    INTRA_NODE_COLLECTIVE_EFFICIENCY_BY_GPU as INTRA_NODE_COLLECTIVE_EFFICIENCY_BY_GPU,
)
from fmest.physics.time_constants import (
    PCIE_P2P_DISABLED_BY_GPU as PCIE_P2P_DISABLED_BY_GPU,
)
from fmest.physics.time_constants import (
    PEFT_LORA_BYTES_PER_FEATURE as PEFT_LORA_BYTES_PER_FEATURE,
)
from fmest.physics.time_constants import (
    PEFT_LORA_BYTES_PER_FEATURE_COMPUTE_DTYPE as PEFT_LORA_BYTES_PER_FEATURE_COMPUTE_DTYPE,
)
from fmest.physics.time_constants import (
    PEFT_LORA_BYTES_PER_FEATURE_NO_AUTOCAST as PEFT_LORA_BYTES_PER_FEATURE_NO_AUTOCAST,
)
from fmest.physics.time_constants import (
    PEFT_LORA_DROPOUT_BYTES_PER_IN_FEATURE as PEFT_LORA_DROPOUT_BYTES_PER_IN_FEATURE,
)
from fmest.transforms import dtype_info

# ---------------------------------------------------------------------------------------------
# Efficiency constants
# ---------------------------------------------------------------------------------------------

#: Best achievable fraction of dense peak for a large bf16 GEMM ("MAMF"), by GPU family
#: (HN §3, ml-engineering MAMF table: A100 SXM 271.2/312, H100 SXM 794.5/989, B200 1745/2250,
#: MI300X 668.4/1300, Gaudi2 418.7/432 ...). Keyed by a prefix of ``GpuSpec.name``.
#: Workstation/consumer parts, which HN §3 does not list: torch bf16 ``matmul`` TFLOP/s, best
#: of square sizes 1024-10240, from zzc0721/torch-performance-test-data database.md
#: (commit 078586871da31ad6aaaf6fa43bc4ec3f284b151d, read 2026-11-27; the same table gives
#: A100 SXM4 80GB 264.5 and H100 783.7-790.3, within 3 % of HN §3's 0.869 and 0.803), over the
#: fmest dense peak (gpus.csv): RTX 3090 median of 3 entries 76.58/71 = 1.079 and RTX 4090
#: median of 7 entries 163.09/165.2 = 0.987 (GeForce cards hold clocks above the boost clock
#: that the whitepaper's FP32-accumulate peak is quoted at, so the fraction can exceed 1),
#: RTX A6000 123.34/154.8 = 0.797, L40S 269.15/362.05 = 0.743. H200 (HN §3 has no bf16
#: figure; it borrowed H100's 0.803 until measured): 807.5 / 989.4 = 0.816, measured by fmest on
#: an H200, 2026-11-27 (benchmarks/gpu/microbench.py ``mamf`` sweep, best of 7 square sizes at
#: 6144^3; microbench_H200-SXM-141GB.csv in benchmarks/gpu/results/H200-SXM-141GB-2026-11-27/).
MAMF_FRACTION_BF16 = {
    "A100-SXM": 0.869, "A800": 0.869, "A100-PCIE": 0.811, "H100-SXM": 0.803, "H800": 0.803,
    "H200": 0.816,
    "GH200": 0.838, "B200": 0.776, "B300": 0.786, "GB200": 0.729, "MI300X": 0.514,
    "MI325X": 0.604, "GAUDI2": 0.969, "GAUDI3": 0.741,
    "RTX3090": 1.079, "RTX4090": 0.987, "RTX-A6000": 0.797, "L40S": 0.743,
}
#: Same for fp8 GEMMs (HN §3: H100 1402.6/1979, H200 1453.4/1979, B200 3432.5/4500 ...; fmest's
#: H200 sweep, 2026-11-27: 1494 / 1978.9 = 0.755, within 3 % of HN's 0.734, which stays).
MAMF_FRACTION_FP8 = {
    "H100-SXM": 0.709, "H800": 0.709, "H200": 0.734, "GH200": 0.776, "B200": 0.763,
    "B300": 0.745, "GB200": 0.723, "GAUDI2": 0.955, "GAUDI3": 0.769,
}
#: Fallback when a GPU is not in the MAMF table: the median of the NVIDIA rows of HN §3.
MAMF_FRACTION_DEFAULT = 0.80

#: Sustained GEMM throughput, as a fraction of dense peak, of a GPU running GEMMs back to back
#: at the clock its power limit holds under that load: the rate a training step's GEMMs run at.
#: The MAMF figures above are burst figures: mamf-finder keeps the *fastest* of 100 timed
#: iterations per shape ("fastest result is picked (not the average)", stas00/ml-engineering
#: compute/accelerator/benchmarks/README.md @00b7582a), and fmest's H200 sweep timed 20
#: iterations of 0.6 ms; a step runs its GEMMs for seconds, and random-valued operands switch
#: enough transistors to hold the GPU at its power limit, which lowers the clock (H. He,
#: "Strangely, Matrix Multiplications on GPUs Run Faster When Given 'Predictable' Data",
#: thonking.ai, 2024: "matmuls on the H100 are primarily ... power limited"). Measured:
#:
#: * H200 (fmest microbench, 2026-11-27, benchmarks/gpu/results/H200-SXM-141GB-2026-11-27/
#:   microbench_H200-SXM-141GB.csv ``mamf`` rows): the 12288^3 and 16384^3 bf16 GEMMs, 20
#:   back-to-back iterations of 5-12 ms, median 712.1 and 712.2 TFLOP/s (their fastest
#:   iterations 822 and 805: the clock drops within the first tens of ms) = 0.720 of 989.4;
#:   fp8 16384^3 median 6.625 ms = 1328 TFLOP/s = 0.671 of 1978.9. The long preset GEMMs of
#:   the same run agree (LM heads at 16384 tokens: 690-720 bf16 TFLOP/s).
#: * H100 SXM 80GB (fmest microbench, 2026-11-27, benchmarks/gpu/results/H100-SXM-80GB-2026-11-27/
#:   microbench_H100-SXM-80GB.csv ``sustained`` rows): one 8192^3 GEMM back to back for 4 s,
#:   every iteration timed; the median of the last 2.2 s: bf16 1.621 ms = 678.3 TFLOP/s = 0.686
#:   of 989.4 (first 50 ms: 773.9), fp8 0.9078 ms = 1211 TFLOP/s = 0.612 of 1978.9 (first
#:   50 ms: 1407.5). Its MAMF sweep's best iteration was 795.9 bf16 (0.804).
#: * A100 SXM (He 2024): 8192^3 bf16 through PyTorch/cuBLAS on normally distributed inputs,
#:   257-258 TFLOP/s = 0.824 of 312 (zeros: 295).
#:
#: H800 is the H100 SXM's board (GH100, 132 SMs, HBM3 80 GB, 700 W; gpus.csv): the H100
#: figure is its (the H100-SXM-96GB's 500 W cap stays in ``POWER_CAP_DERATE`` on top);
#: the H200 is the same die with HBM3e and keeps its own figure (its 20-iteration medians, not
#: the 4 s method, which had not been written when it ran); A800 is the A100 SXM die. A GPU without a figure keeps its MAMF
#: fraction times the mean sustained/MAMF ratio of the measured GPUs
#: (:func:`gemm_fraction_and_note`, which says so).
SUSTAINED_GEMM_FRACTION_BF16 = {
    "H200": 0.720, "H100-SXM": 0.686, "H800": 0.686, "A100-SXM": 0.824, "A800": 0.824,
}
SUSTAINED_GEMM_FRACTION_FP8 = {"H200": 0.671, "H100-SXM": 0.612, "H800": 0.612}
#: the GPUs measured themselves (the others of the tables above share their board): the
#: sustained/MAMF ratio of a GPU without a figure is the mean over these
SUSTAINED_GEMM_MEASURED = {"bf16": ("H200", "H100-SXM", "A100-SXM"), "fp8": ("H200", "H100-SXM")}

#: Clock derate of power-capped parts, applied to every FLOP peak. H100-SXM-96GB (Meta Grand
#: Teton, 500 W default limit, torchtitan docs/performance.md): the TorchTitan paper
#: (arXiv:2410.06511) puts its true peak between H100 NVL (835.5 TFLOP/s at 400 W) and SXM
#: (989.4 at 700 W); linear in power, 500 W gives 835.5 + (989.4-835.5)*100/300 = 886.8,
#: i.e. 0.896 of the tabulated 989.4.
POWER_CAP_DERATE = {"H100-SXM-96GB": 0.896}

#: CTA (thread-block) output tiles of cuBLAS's tensor-core GEMM kernels, (rows, cols): NVIDIA
#: "Matrix Multiplication Background User's Guide" (DU-09799-001, Feb 2023) §2.3 "Typical Tile
#: Dimensions In cuBLAS And Performance": 256x128, 128x256, 128x128, 256x64, 64x256, 128x64,
#: 64x128, 64x64 (the same sizes are enumerated by cublasLt's ``cublasLtMatmulTile_t``).
GEMM_CTA_TILES = ((256, 128), (128, 256), (128, 128), (256, 64), (64, 256), (128, 64),
                  (64, 128), (64, 64))

#: Streaming multiprocessors (AMD: compute units) per GPU, the width of one wave of GEMM tiles
#: (one CTA tile per SM; NVIDIA Matrix Multiplication Background guide §3.2 "Wave
#: Quantization"). Keyed by a prefix of ``GpuSpec.name``; a GPU without a figure gets no wave
#: term (tile quantization only), never another GPU's count. Sources: Volta whitepaper (V100
#: 80); Turing whitepaper (T4 40, TITAN RTX 72); A100 whitepaper (108 on every A100; the A800
#: is the same GA100 part with slower NVLink) and
#: ml-engineering compute/accelerator/README.md ("A100-80GB has 108 SMs", "H100 has 132 SMs");
#: Hopper whitepaper (H100 SXM5 132, H100 PCIe 114; H100 NVL, H800 SXM, H200 and GH200 are the
#: same 132-SM GH100 configuration) and FlashAttention-3 (arXiv:2407.08608) App. C.2 ("132, the
#: number of SMs in H100 SXM5"); NVIDIA GA102 whitepaper (RTX 3090 82, RTX A6000 84, A10 72,
#: RTX A5000 64: CUDA cores / 128 per SM); Ada whitepaper (RTX 4090 128, L40/L40S and RTX 6000
#: Ada 142, L4 58); AMD CDNA3 whitepaper (MI300X and MI325X 304 CUs); B200: "the B200's 148
#: SMs" (Aimuyo, Gandhi, Kozyrakis, "Purlin: Separating Orchestration from the Datapath of
#: Collectives", Stanford/NVIDIA, 2026, §5.1 Figure 8 text; read 2026-11-27). The prefix "B200"
#: does not match "GB200-186GB" (no cited GB200 figure: no wave term there).
GPU_SM_COUNT = {
    "V100": 80, "T4-": 40, "TITAN-RTX": 72, "A100": 108, "A800": 108, "A10-": 72,
    "RTX3090": 82,
    "RTX-A6000": 84, "RTX-A5000": 64, "RTX4090": 128, "L40S": 142, "L40-": 142,
    "RTX6000-ADA": 142, "L4-": 58, "H100-SXM": 132, "H100-PCIE": 114, "H100-NVL": 132,
    "H800": 132, "H200": 132, "GH200": 132, "B200": 148, "MI300X": 304, "MI325X": 304,
}

#: Attention core = its own op class (not a GEMM): the fraction of the dense bf16 peak a fused
#: attention kernel reaches comes from published kernel benchmarks in
#: ``fmest/data/attention_kernels.csv`` (Shah et al. 2024 FlashAttention-3, arXiv:2407.08608,
#: Fig. 5-6: FA2, FA3 and cuDNN on H100 SXM5 by sequence length, head dim and causal mask; an
#: FA2 A100 benchmark), interpolated in log2 sequence length and log2 head dim
#: (:func:`attention_efficiency`). Which table kernel runs for a stack's attention kernel:
#: PyTorch SDPA's flash backend is FlashAttention-2; Transformer Engine's DotProductAttention
#: (``te-fused``) runs cuDNN fused attention on Hopper (stacks.toml).
ATTENTION_TABLE_KERNEL = {"sdpa": "fa2", "flash": "fa2", "te-fused": "cudnn",
                          "sdpa-cudnn": "cudnn"}


def sdpa_prefers_cudnn(torch_version: Optional[str], cuda_version: Optional[str],
                       compute_capability: Optional[str]) -> bool:
    """Whether ``torch.nn.functional.scaled_dot_product_attention`` runs cuDNN attention first
    (``sdpa-cudnn``) rather than its FlashAttention-2 backend: on sm90/sm100 from PyTorch 2.11,
    and 2.10 built with CUDA 13 (its cu130 wheel loads cuDNN 9.15.1): ``priority_order`` puts
    cuDNN first when ``check_prefer_cudnn_attention`` finds the loaded cuDNN > 9.15.0 on a
    compute capability 9.x/10.x device (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp;
    the default cu12.x wheels of 2.10 load cuDNN 9.10.2, the 2.11-2.13 wheels cu130 with 9.19-9.20:
    their wheels' metadata and binaries, read 2026-11-28). 2.5.0 also put cuDNN first (2.5.1
    reverted it, pytorch #138522); a MAJOR.MINOR of 2.5 does not say which, so FA2 is kept.
    Unstated version: FA2, what SDPA ran first in every other release."""
    from fmest.job import torch_at_least

    if compute_capability is None or compute_capability.split(".")[0] not in ("9", "10"):
        return False
    if torch_at_least(torch_version, 2, 11):
        return True
    return bool(torch_at_least(torch_version, 2, 10) and cuda_version is not None
                and int(cuda_version.split(".")[0]) >= 13)

#: The flash-attention backward pass executes 2.5x the forward FLOPs (it recomputes Q K^T:
#: 5 matmuls vs 2; Dao 2023, Algorithm 2; torch.utils.flop_counter sdpa_backward_flop_count).
FLASH_BACKWARD_FLOPS_FACTOR = 2.5

# HBM_EFFICIENCY: fmest.physics.time_constants (imported above;
# the planner's array formulas read the same objects).

#: Share of a step in which no useful kernel runs in an eager PyTorch training loop (kernel
#: launch gaps, Python, data loading, host syncs, logging). The MFU survey of HN §2 puts
#: well-tuned runs at 38-56 % of peak while MAMF is 80-87 %; this factor covers the part of
#: that gap that is not memory-bound or communication time. Calibrated (global).
FRAMEWORK_OVERHEAD_FRACTION = 0.15

#: ATen ops dispatched per decoder layer and micro-batch by eager transformers code, forward
#: and backward, by activation checkpointing: counted with a TorchDispatchMode over
#: transformers 5.24 LlamaForCausalLM (sdpa, torch 2.13) at 2 and 4 layers, the difference
#: halved (``python benchmarks/count_eager_ops.py``): 77 + 142 without checkpointing, 70 + 268
#: with full checkpointing (the backward re-runs the forward). The H200 host run of
#: benchmarks/gpu/host_overhead.py counted 80 + 146 and 75 + 274 under transformers 5.17.
EAGER_FORWARD_OPS_PER_LAYER = {"none": 77.0, "selective": 77.0, "full": 70.0}
EAGER_BACKWARD_OPS_PER_LAYER = {"none": 142.0, "selective": 142.0, "full": 268.0}
#: Extra ops per LoRA-adapted linear per layer (PEFT 0.21 LoRA, dropout 0.05, q/k/v/o adapted),
#: same count: forward (133 - 77) / 4 = 14 with or without checkpointing; backward
#: (183 - 142) / 4 = 10.25 without, (361 - 268) / 4 = 23.25 with it.
EAGER_FORWARD_OPS_PER_LORA_MODULE = {"none": 14.0, "selective": 14.0, "full": 14.0}
EAGER_BACKWARD_OPS_PER_LORA_MODULE = {"none": 10.25, "selective": 10.25, "full": 23.25}
#: Eager ops per decoder layer a fused kernel chain replaces (the eager count less the count
#: with the chain's fused stand-in, one launch per output each way as Liger-Kernel's Triton
#: kernels launch; ``python benchmarks/count_eager_ops.py --fused``, transformers 5.24 Llama,
#: torch 2.13), keyed ``<chain>_<checkpointing>`` (``none``: also selective; ``full``: the
#: backward re-runs the forward): a job or Liger fusing the chain on an eager stack dispatches
#: that many fewer ops (:func:`host_dispatch_seconds`). Chains not counted (residual, layout,
#: fp8_cast, lora, loss) remove none.
EAGER_FORWARD_OPS_REPLACED_BY_FUSED = {"norm_none": 12.0, "norm_full": 10.0, "rope_none": 14.0,
                                       "rope_full": 14.0, "activation_none": 1.0,
                                       "activation_full": 1.0}
EAGER_BACKWARD_OPS_REPLACED_BY_FUSED = {"norm_none": 30.0, "norm_full": 54.0, "rope_none": 18.0,
                                        "rope_full": 32.0, "activation_none": 1.0,
                                        "activation_full": 4.0}
#: Ops outside the layers (embedding, final norm, head, loss) per micro-batch, same count:
#: 31 forward, 34 backward.
EAGER_FORWARD_OPS_OUTSIDE_LAYERS = 31.0
EAGER_BACKWARD_OPS_OUTSIDE_LAYERS = 34.0


def host_dispatch_seconds(*, layers: float, checkpointing: str, lora_modules_per_layer: float,
                          micro_batches: int, zero3_hooks: bool = False,
                          fused: Iterable[str] = ()) -> float:
    """Host seconds to dispatch the eager ops of ``micro_batches`` forward+backward passes of
    ``layers`` decoder layers: forward ops (``EAGER_FORWARD_OPS_*``) x
    ``HOST_SECONDS_PER_FORWARD_OP`` + backward ops (``EAGER_BACKWARD_OPS_*``) x
    ``HOST_SECONDS_PER_BACKWARD_OP``, less the ops of the kernel chains in ``fused``
    (``EAGER_*_OPS_REPLACED_BY_FUSED``), plus DeepSpeed ZeRO-3's per-module fetch/release hooks
    when ``zero3_hooks`` (``ZERO3_HOOK_OPS_PER_LAYER``)."""
    ckpt = checkpointing if checkpointing in EAGER_FORWARD_OPS_PER_LAYER else "none"
    mode = "full" if ckpt == "full" else "none"
    fwd_cut = sum(EAGER_FORWARD_OPS_REPLACED_BY_FUSED.get(f"{c}_{mode}", 0.0) for c in fused)
    bwd_cut = sum(EAGER_BACKWARD_OPS_REPLACED_BY_FUSED.get(f"{c}_{mode}", 0.0) for c in fused)
    fwd = layers * (EAGER_FORWARD_OPS_PER_LAYER[ckpt] - fwd_cut
                    + EAGER_FORWARD_OPS_PER_LORA_MODULE[ckpt] * lora_modules_per_layer) \
        + EAGER_FORWARD_OPS_OUTSIDE_LAYERS
    bwd = layers * (EAGER_BACKWARD_OPS_PER_LAYER[ckpt] - bwd_cut
                    + EAGER_BACKWARD_OPS_PER_LORA_MODULE[ckpt] * lora_modules_per_layer) \
        + EAGER_BACKWARD_OPS_OUTSIDE_LAYERS
    hooks = zero3_hook_seconds(layers=layers, checkpointing=ckpt,
                               micro_batches=micro_batches) if zero3_hooks else 0.0
    return (fwd * HOST_SECONDS_PER_FORWARD_OP + bwd * HOST_SECONDS_PER_BACKWARD_OP) \
        * micro_batches + hooks


def zero3_hook_seconds(*, layers: float, checkpointing: str, micro_batches: int) -> float:
    """Host seconds of DeepSpeed ZeRO-3's per-module fetch/release hooks over ``layers``
    decoder layers and ``micro_batches`` forward+backward passes
    (``ZERO3_HOOK_OPS_PER_LAYER`` x ``HOST_SECONDS_PER_EAGER_OP``)."""
    ckpt = checkpointing if checkpointing in ZERO3_HOOK_OPS_PER_LAYER else "none"
    return layers * ZERO3_HOOK_OPS_PER_LAYER[ckpt] * micro_batches * HOST_SECONDS_PER_EAGER_OP



def moe_sync_exposed_seconds(*, moe_layers: float, gpu_forward_per_layer: float,
                             gpu_backward_per_layer: float, recompute_share: float = 0.0,
                             host_ops: Optional[dict] = None,
                             op_seconds: Optional[float] = None,
                             local_experts: float = 1.0, sync: bool = True) -> float:
    """Seconds per micro-batch the GPU waits for the host in a Megatron-Core MoE stage whose
    token dispatcher syncs host and GPU once per MoE layer forward
    (``MEGATRON_MOE_LAYER_HOST_OPS``). After each sync the GPU's queue is empty: a layer's
    forward takes ``max(host ops x HOST_SECONDS_PER_EAGER_OP, one op's dispatch + GPU time)``
    (the host must re-issue the segment's kernels before the GPU can run them), so host time
    shows per segment, not only when the whole pass's host time exceeds its GPU time. The
    backward has no sync (the host runs ahead) and shows only the host time above its GPU time;
    a recomputed layer (``recompute_share`` of them, full recompute) re-runs its forward, sync
    included, inside the backward: that layer's backward segment is its forward and backward
    host ops against its backward GPU time. Returns the time above ``moe_layers x (forward +
    backward GPU time per layer)``. ``op_seconds``: host seconds per op (default
    ``HOST_SECONDS_PER_EAGER_OP``; Grace hosts: ``host_seconds_per_op``). ``local_experts``:
    the rank's ``experts / ep`` experts; each beyond the one the op counts traced adds its
    expert GEMMs' host time (:func:`moe_expert_gemm_host_seconds`). ``sync`` False
    (drop-and-pad, :func:`moe_layer_host_profile`): no sync, each pass shows only its host time
    above its GPU time."""
    ops = MEGATRON_MOE_LAYER_HOST_OPS if host_ops is None else host_ops
    op = HOST_SECONDS_PER_EAGER_OP if op_seconds is None else op_seconds
    gemm_f, gemm_b = moe_expert_gemm_host_seconds(local_experts)
    host_f, host_b = ops["forward"] * op + gemm_f, ops["backward"] * op + gemm_b
    if not sync:
        # drop-and-pad: no sync, the host runs ahead; only host time above GPU time shows
        return moe_layers * (max(0.0, host_f - gpu_forward_per_layer)
                             + max(0.0, host_b - gpu_backward_per_layer))
    fwd = max(host_f, op + gpu_forward_per_layer) - gpu_forward_per_layer
    plain_bwd = max(0.0, host_b - gpu_backward_per_layer)
    recomputed_bwd = max(host_f + host_b, op + gpu_backward_per_layer) - gpu_backward_per_layer
    share = min(max(recompute_share, 0.0), 1.0)
    return moe_layers * (fwd + (1.0 - share) * plain_bwd + share * recomputed_bwd)

# Megatron-Core MoE host profile under CUDA graphs and drop-and-pad: core
# ``fmest.physics.moe_host`` (the planner's arrays read the same function).
from fmest.physics.moe_host import (  # noqa: E402,F401
    CUDA_GRAPH_REPLAY_OPS,
    MEGATRON_MOE_PRESYNC_HOST_OPS,
    moe_layer_host_profile,
)


def moe_capacity_row_factor(tokens_per_rank: float, top_k: float, experts: float,
                            capacity_factor: Optional[float], pad: bool) -> float:
    """Routed rows an expert runs under Megatron-Core's capacity factor, relative to the
    balanced dropless ``tokens x k / experts``: ``get_capacity`` = ``ceil(tokens x k / experts x
    F)`` per source rank (megatron/core/transformer/moe/moe_utils.py @d98e8a64); drop-and-pad
    runs exactly that (padded), dropping without pad runs at most that (balanced routing:
    ``min(1, F)``)."""
    if capacity_factor is None or tokens_per_rank <= 0 or experts <= 0 or top_k <= 0:
        return 1.0
    balanced = tokens_per_rank * top_k / experts
    if pad:
        return math.ceil(balanced * capacity_factor) / balanced
    return min(1.0, float(capacity_factor))


def moe_expert_gemm_host_seconds(local_experts: float) -> tuple[float, float]:
    """(forward, backward) host seconds per MoE layer and micro-batch that a rank's local
    experts beyond the first add in TE's grouped GEMM: ``MOE_EXPERT_GEMMS_PER_LOCAL_EXPERT``
    GEMMs each (fc1 and fc2; dgrad and wgrad in backward), ``TE_GROUPED_GEMM_SECONDS_PER_GEMM``
    apiece (the multi-stream cuBLASLt loop issues one call per expert). The first expert's
    GEMMs are in ``MEGATRON_MOE_LAYER_HOST_OPS`` (traced with one local expert)."""
    extra = max(0.0, local_experts - 1.0) * TE_GROUPED_GEMM_SECONDS_PER_GEMM
    return (MOE_EXPERT_GEMMS_PER_LOCAL_EXPERT["forward"] * extra,
            MOE_EXPERT_GEMMS_PER_LOCAL_EXPERT["backward"] * extra)

# Collective efficiencies and latencies, the overlap interference, the PCIe link and the CPU-Adam
# rate: fmest.physics.time_constants (imported above), shared with fmest.plan.vector.

# ---------------------------------------------------------------------------------------------
# Elementwise (memory-bound) traffic
# ---------------------------------------------------------------------------------------------

#: Bytes per element moved by one eager RMSNorm/LayerNorm forward in bf16, HF LlamaRMSNorm
#: (upcast r2 w4, pow r4 w4, mean r4, multiply by rsqrt r4 w4, downcast r4 w2, weight r2 w2 ->
#: 36): traced by ``python benchmarks/count_elementwise_bytes.py`` (TorchDispatchMode byte
#: count, transformers 5.24, torch 2.13, 2026-11): residual add + norm 42.05 bytes per hidden
#: element forward, less the 6 of the add.
NORM_BYTES_PER_ELEMENT = 36.0
#: Bytes per element of one ``torch.nn.LayerNorm`` forward (one ``native_layer_norm`` kernel:
#: read x, write y in bf16, mean/rstd per row), the norm of the model types of
#: ``fmest.models.spec.LAYER_NORM_MODEL_TYPES`` (gpt2, gpt_neox, falcon, phi, ...): the same
#: trace, residual add + ``F.layer_norm`` 10.02 bytes per hidden element forward, less the add's
#: 6 (``reslayernorm`` in ``benchmarks/count_elementwise_bytes.py``, torch 2.13 CPU, 2026-11-27).
LAYER_NORM_BYTES_PER_ELEMENT = 4.02
#: The norm family under torch.autocast: core ``fmest.physics.time_constants`` (the planner
#: mirrors it).
from fmest.physics.time_constants import (  # noqa: E402,F401
    AUTOCAST_NORM_FAMILY_BYTES,
    PURE_NORM_FAMILY_BYTES,
)

#: Residual add: read two bf16 tensors, write one.
RESIDUAL_BYTES_PER_ELEMENT = 6.0
#: Rotary embedding on q and k, HF apply_rotary_pos_emb (q*cos, neg of half, cat, *sin, add):
#: 20.8 bytes per q/k element forward, same trace (cos/sin reads included).
ROPE_BYTES_PER_ELEMENT = 20.8
#: Head reshapes/transposes of q, k, v and the attention output (one copy each, r2 w2).
LAYOUT_BYTES_PER_ELEMENT = 4.0
#: Gated activation silu(gate)*up (silu r2 w2, mul r4 w2) per intermediate element; GELU r2 w2.
#: Same trace: 10.0 bytes forward for silu(gate)*up.
GATED_ACT_BYTES_PER_ELEMENT = 10.0
ACT_BYTES_PER_ELEMENT = 4.0
#: Backward / forward HBM traffic of each eager elementwise family, from the same trace (bytes
#: of the ATen ops autograd runs for ``torch.autograd.grad``, the formulas of
#: torch/csrc/autograd/derivatives.yaml): residual add + RMSNorm 106.09 / 42.05 = 2.52 (the
#: norm backward re-reads x and rstd in fp32 and sums the two residual-stream gradients), RoPE
#: 38.8 / 20.8 = 1.87, silu(gate)*up 20.0 / 10.0 = 2.00 (GELU tanh 8.0 / 4.0 = 2.00), the
#: attention-output layout copy 2.0 / 4.0 = 0.50 (its backward is a view). ``scores`` is the eager-attention softmax chain (matmul output, mask
#: add, fp32 softmax, downcast): 30.0 / 32.1 = 0.93.
#: ``layer_norm``: residual add + ``F.layer_norm`` backward 16.04 bytes per element, less the
#: residual's share at its factor (6 x 2.52), over the 4.02 forward: (16.04 - 15.12) / 4.02.
ELEMENTWISE_BACKWARD_FACTOR = {"norm": 2.52, "residual": 2.52, "rope": 1.87, "layout": 0.5,
                               "activation": 2.0, "scores": 0.93, "layer_norm": 0.23}
#: Bytes per element of the kernels Inductor generates for each family under torch.compile,
#: forward and backward: each fused chain reads its inputs once and writes its outputs once.
#: Counted by ``python benchmarks/count_elementwise_bytes.py`` (torch.compile of the same
#: code, Inductor CPU backend, torch 2.13, 2026-11; bytes of every non-extern kernel,
#: ``BaseSchedulerNode.get_read_write_buffers_sizes``). ``norm`` is the residual add fused with
#: the RMSNorm that follows it (per hidden element; ``residual`` is then 0); ``loss`` is per
#: logit (fp32 upcast, log-softmax, NLL and their backward fused); ``scores`` per eager
#: attention score; ``fp8_cast`` per GEMM operand element (amax reduction + scaled cast: two
#: kernels, the reduction cannot fuse with its consumer).
COMPILED_FWD_BYTES_PER_ELEMENT = {"norm": 10.0, "residual": 0.0, "rope": 10.8, "layout": 4.0,
                                  "activation": 6.0, "gelu": 4.0, "loss": 4.0, "scores": 12.2,
                                  "fp8_cast": 5.0}
COMPILED_BWD_BYTES_PER_ELEMENT = {"norm": 12.0, "residual": 0.0, "rope": 4.8, "layout": 0.0,
                                  "activation": 10.0, "gelu": 6.0, "loss": 4.0, "scores": 14.2,
                                  "fp8_cast": 0.0}


def compiled_bytes_per_element(op: str) -> tuple[float, float]:
    """(forward, backward) bytes per element of ``op``'s Inductor kernels."""
    return COMPILED_FWD_BYTES_PER_ELEMENT[op], COMPILED_BWD_BYTES_PER_ELEMENT[op]
#: Cross-entropy over the vocabulary, per logit, forward+backward, eager (upcast to fp32, log-
#: softmax, gather, softmax gradient, downcast: ~36 bytes); chunked/fused losses never
#: materialise the fp32 copy (~12 bytes).
CE_BYTES_PER_LOGIT = {"standard": 36.0, "chunked": 12.0, "fused": 12.0}
#: Eager attention materialises the s x s scores: matmul write 2, fp32 softmax r2 w4 r4 w2,
#: mask add r2 w2, read for the AV matmul 2 -> ~20 bytes per score forward.
EAGER_SCORE_BYTES_PER_ELEMENT = 20.0
#: QLoRA: bitsandbytes dequantizes each NF4 weight to bf16 before every use (forward, backward
#: and recompute): read 0.5 byte + block constants, write 2, read 2 in the matmul -> ~4.6 bytes
#: per parameter per use (Dettmers et al. 2023, arXiv:2305.14314, §3 "double dequant").
QLORA_DEQUANT_BYTES_PER_PARAM = 4.6


def gptq_dequant_bytes_per_param(bits: int) -> float:
    """HBM bytes per weight of one GPTQ forward in training (``training.quantization_method``
    ``gptq``). AutoGPTQ 0.5.1 ``qlinear_cuda_old.QuantLinear.forward`` (AutoGPTQ/AutoGPTQ tag
    v0.5.1) unpacks the whole weight with torch ops once the layer sees
    ``kernel_switch_threshold`` (128) rows or more, the path Qwen's finetune.py takes
    (``GPTQConfig(bits=4, disable_exllama=True)``, QwenLM/Qwen 712d922) and ms-swift 1.x forces
    in training (``_check_gptq_model`` sets ``autogptq_cuda_available = False``, ms-swift
    swift/llm/utils/model.py 46922151): read the packed ``qweight`` (bits/8), ``bitwise_right_shift``
    writes int32 (4), ``.to(int8|int16)`` (r4 w i), ``bitwise_and`` (r i w i), ``weight -
    zeros`` (r i w i), ``scales * (...)`` to the 16-bit dtype (r i w 2), and ``torch.matmul``
    reads that weight (2); i = 1 byte (int8) for 2-4 bits, 2 (int16) for 8 bits: 18.5 bytes at
    4 bits, 25 at 8. The matmul saves the dequantized weight for backward, so backward does
    not unpack again (uses: forward, and the recompute under full checkpointing)."""
    i = 2.0 if bits == 8 else 1.0
    return bits / 8.0 + 4.0 + (4.0 + i) + 2 * i + 2 * i + (i + 2.0) + 2.0
#: float8 training (torchao tensorwise dynamic scaling), eager: each GEMM operand goes through
#: abs, amax, fp32 upcast, scale multiply, clamp and the fp8 downcast as separate kernels
#: (torchao/float8/float8_utils.py ``tensor_to_amax``, ``to_fp8_saturated``): 33.0 bytes per
#: operand element, traced by ``python benchmarks/count_elementwise_bytes.py``. Under
#: torch.compile Inductor makes it an amax reduction and one cast kernel,
#: ``COMPILED_FWD/BWD_BYTES_PER_ELEMENT["fp8_cast"]`` = 5 (torchao float8 README: "torch.compile is
#: required to get performance"); a stack that fuses the cast gives its own figure.
FP8_CAST_BYTES_PER_ELEMENT = 33.0
#: foreach AdamW runs ~8 multi-tensor kernels (weight decay, two lerps/mults, sqrt, div, add,
#: addcdiv): about 3x the traffic of the single-pass fused kernel (torch/optim/adamw.py).
FOREACH_OPTIMIZER_PASS_FACTOR = 3.0
#: Fraction of peak HBM bandwidth torch.optim.AdamW's kernels reach on the bytes
#: :func:`optimizer_update_bytes_per_param` counts (the foreach figure on its
#: ``FOREACH_OPTIMIZER_PASS_FACTOR`` passes), by GPU, implementation and parameters (fp32: fp32
#: parameters or an fp32 master copy; bf16: bf16/fp16 parameters and states). Measured by fmest's
#: ``benchmarks/gpu/microbench.py`` ``adamw`` rows, 1e9 parameters (the 1e8 and 3e8 rows within
#: 4 %), 2026-11-27:
#:
#: * H200 (4.8 TB/s), benchmarks/gpu/results/H200-SXM-141GB-2026-11-27/microbench_H200-SXM-141GB.csv:
#:   fused fp32 8.072 ms for 28 bytes/param = 0.723, fused bf16 5.126 ms for 14 = 0.569, foreach
#:   fp32 21.72 ms for 84 = 0.806, foreach bf16 13.04 ms for 42 = 0.671.
#: * H100 SXM (3.35 TB/s), benchmarks/gpu/results/H100-SXM-80GB-2026-11-27/microbench_H100-SXM-80GB.csv:
#:   fused fp32 10.67 ms = 0.783, fused bf16 6.159 ms = 0.679, foreach fp32 29.9 ms = 0.839,
#:   foreach bf16 16.52 ms = 0.759.
#:
#: The fused kernel computes in fp32 per element, so it stays below a streaming copy (0.875 on
#: the H200, 0.897 on the H100) and further at 2-byte elements. H800 is the H100 SXM's board
#: (same HBM3); a GPU without a figure gets the mean of the measured GPUs
#: (``ADAMW_BANDWIDTH_FRACTION``). Other optimizers without a figure (Lion, SGD, Adafactor)
#: stream at ``HBM_EFFICIENCY``.
ADAMW_BANDWIDTH_FRACTION_H200 = {"fused_fp32": 0.723, "fused_bf16": 0.569, "foreach_fp32": 0.806,
                                 "foreach_bf16": 0.671}
ADAMW_BANDWIDTH_FRACTION_H100 = {"fused_fp32": 0.783, "fused_bf16": 0.679, "foreach_fp32": 0.839,
                                 "foreach_bf16": 0.759}
ADAMW_BANDWIDTH_FRACTION_BY_GPU = {"H200": ADAMW_BANDWIDTH_FRACTION_H200,
                                   "H100-SXM": ADAMW_BANDWIDTH_FRACTION_H100,
                                   "H800": ADAMW_BANDWIDTH_FRACTION_H100}
ADAMW_BANDWIDTH_FRACTION = {
    key: round((ADAMW_BANDWIDTH_FRACTION_H200[key] + ADAMW_BANDWIDTH_FRACTION_H100[key]) / 2, 4)
    for key in ADAMW_BANDWIDTH_FRACTION_H200}
#: bitsandbytes' block-wise 8-bit AdamW (``bnb.optim.AdamW8bit``, one fused kernel per
#: parameter tensor that dequantizes both states through a 256-entry code map, updates and
#: re-quantizes them with a per-block absmax) is not bandwidth-bound: fmest's H100 microbench
#: (same CSV, ``AdamW8bit (bitsandbytes)`` rows, bitsandbytes 0.50.2, bf16 parameters in
#: 2^24-element tensors) timed 33.22 ms per 1e9 parameters (1e8: 35.06 ms per 1e8 x 10, 3e8:
#: 34.31), i.e. 301 GB/s on the 10.008 bytes per parameter :func:`optimizer_update_bytes_per_param`
#: counts for it (bf16 parameter and gradient, two 1-byte states + one fp32 absmax per 2048
#: values) = 0.090 of the H100's 3.35 TB/s: about 5.4x the fused torch AdamW's time per
#: parameter. One GPU measured: the fraction is applied to every GPU's bandwidth.
BNB_8BIT_BANDWIDTH_FRACTION = 0.090
#: the catalogue names that run bitsandbytes' 8-bit Adam kernel (core default_plugins/optimizers.py)
BNB_8BIT_ADAM_OPTIMIZERS = frozenset({"adamw_8bit", "paged_adamw_8bit"})
TORCH_ADAMW_OPTIMIZERS = frozenset({"adamw", "adamw_torch_fused"})


def optimizer_bandwidth_fraction(optimizer: str, impl: str, param_bytes: float,
                                 master_bytes: float = 0.0, gpu_name: str = "") -> float:
    """The fraction of peak HBM bandwidth an optimizer update streams its bytes at: torch's
    AdamW at ``ADAMW_BANDWIDTH_FRACTION_BY_GPU`` for ``gpu_name`` (the mean
    ``ADAMW_BANDWIDTH_FRACTION`` for a GPU not measured; fp32 figure when the parameters or a
    master copy are fp32), bitsandbytes' 8-bit Adam at ``BNB_8BIT_BANDWIDTH_FRACTION``, else
    ``HBM_EFFICIENCY``."""
    if optimizer in BNB_8BIT_ADAM_OPTIMIZERS:
        return BNB_8BIT_BANDWIDTH_FRACTION
    if optimizer not in TORCH_ADAMW_OPTIMIZERS:
        return HBM_EFFICIENCY
    width = "fp32" if (master_bytes or param_bytes >= 4) else "bf16"
    table = value_by_gpu_prefix(ADAMW_BANDWIDTH_FRACTION_BY_GPU, gpu_name, None) \
        if gpu_name else None
    return (table or ADAMW_BANDWIDTH_FRACTION).get(f"{impl}_{width}", HBM_EFFICIENCY)


def fp8_cast_bytes_per_element(stack_bytes: Optional[float] = None, *,
                               compiled: bool = False) -> float:
    """HBM bytes per GEMM operand element of a dynamic fp8 cast: the stack's figure when it
    has one (``stack_bytes``), else eager ``FP8_CAST_BYTES_PER_ELEMENT``; under torch.compile
    at most Inductor's ``COMPILED_FWD/BWD_BYTES_PER_ELEMENT["fp8_cast"]``."""
    cast = FP8_CAST_BYTES_PER_ELEMENT if stack_bytes is None else stack_bytes
    return min(cast, sum(compiled_bytes_per_element("fp8_cast"))) if compiled else cast


def dtype_bytes(dtype: str) -> float:
    """Bytes per matmul operand element of a training dtype (fp8 = 1; core's single table
    :data:`fmest.transforms.DTYPES`); ``tf32`` reads fp32 storage."""
    return 4.0 if dtype == "tf32" else float(dtype_info(dtype).operand_bytes)


def storage_dtype(dtype: str) -> str:
    """The dtype a training dtype stores weights and activations in (fp8 -> bf16: the fp8
    storage rule of :data:`fmest.transforms.DTYPES`)."""
    return dtype_info(dtype).storage_dtype


def mamf_fraction(gpu_name: str, dtype: str) -> float:
    """Best-shape GEMM fraction of dense peak for a GPU and dtype (HN §3, ml-engineering
    MAMF table); ``MAMF_FRACTION_DEFAULT`` when the GPU was not measured."""
    table = MAMF_FRACTION_FP8 if dtype == "fp8" else MAMF_FRACTION_BF16
    return value_by_gpu_prefix(table, gpu_name, MAMF_FRACTION_DEFAULT)


@functools.lru_cache(maxsize=256)
def gemm_fraction_and_note(gpu_name: str, dtype: str) -> tuple[float, Optional[str]]:
    """(fraction of dense peak, note) a training step's GEMMs run at on ``gpu_name``: the
    sustained, power-limited rate of ``SUSTAINED_GEMM_FRACTION_*``; a GPU without a figure
    of its own gets its MAMF fraction times the mean sustained/MAMF ratio of the GPUs measured
    (``SUSTAINED_GEMM_MEASURED``), and the note says so."""
    kind = "fp8" if dtype == "fp8" else "bf16"
    table = SUSTAINED_GEMM_FRACTION_FP8 if kind == "fp8" else SUSTAINED_GEMM_FRACTION_BF16
    own = value_by_gpu_prefix(table, gpu_name, None)
    if own is not None:
        return own, None
    measured = SUSTAINED_GEMM_MEASURED[kind]
    ratio = sum(table[g] / mamf_fraction(g, kind) for g in measured) / len(measured)
    return mamf_fraction(gpu_name, dtype) * ratio, (
        f"{gpu_name}: no measured sustained {kind} GEMM rate; GEMMs at its best-iteration "
        f"(MAMF) fraction x {ratio:.3f}, the sustained/MAMF ratio of the GPUs measured "
        f"({', '.join(measured)}; formulas.SUSTAINED_GEMM_FRACTION_{kind.upper()})")


def gemm_fraction(gpu_name: str, dtype: str) -> float:
    """The fraction of :func:`gemm_fraction_and_note` without its note."""
    return gemm_fraction_and_note(gpu_name, dtype)[0]


def power_cap_derate(gpu_name: str) -> float:
    """Clock derate of power-capped variants (see ``POWER_CAP_DERATE``; 1.0 otherwise)."""
    return POWER_CAP_DERATE.get(gpu_name, 1.0)


@functools.lru_cache(maxsize=None)
def _attention_table() -> dict:
    """``fmest/data/attention_kernels.csv`` as {(gpu, kernel, direction, causal): {head_dim:
    [(seq_len, fraction of the GPU's dense bf16 peak)]}} (read once)."""
    from importlib import resources

    from fmest.gpus import shipped_gpus

    peaks = {g.name: g.peak_flops_per_s("bf16") for g in shipped_gpus()}
    text = resources.files("fmest").joinpath("data/attention_kernels.csv").read_text(
        encoding="utf-8")
    table: dict = {}
    for row in csv.DictReader(line for line in text.splitlines() if not line.startswith("#")):
        peak = peaks.get(row["gpu"])
        if not peak:
            continue
        key = (row["gpu"], row["kernel"], row["direction"], row["causal"] == "yes")
        table.setdefault(key, {}).setdefault(int(row["head_dim"]), []).append(
            (float(row["seq_len"]), float(row["tflops"]) * 1e12 / peak))
    for by_dim in table.values():
        for points in by_dim.values():
            points.sort()
    return table


@functools.lru_cache(maxsize=None)
def _gpu_family() -> dict:
    """GPU name -> (architecture, SM count): two GPUs with the same pair run the same kernel
    at the same fraction of their peak (the same silicon configuration)."""
    from fmest.gpus import shipped_gpus

    return {g.name: (g.architecture, value_by_gpu_prefix(GPU_SM_COUNT, g.name, None))
            for g in shipped_gpus()}


def _interp_log2(points, x: float) -> float:
    """Piecewise-linear interpolation of sorted (x, y) points in log2 x, clamped at the ends."""
    if x <= points[0][0]:
        return points[0][1]
    if x >= points[-1][0]:
        return points[-1][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False):
        if x <= x1:
            t = (math.log2(x) - math.log2(x0)) / (math.log2(x1) - math.log2(x0))
            return y0 + t * (y1 - y0)
    return points[-1][1]


def _table_value(by_dim: dict, seq_len: float, head_dim: float) -> float:
    """Table fraction at (seq_len, head_dim): each head dim's series in log2 seq, then
    between the two nearest head dims in log2 head dim (clamped)."""
    dims = sorted(by_dim)
    per_dim = [(float(d), _interp_log2(by_dim[d], seq_len)) for d in dims]
    return _interp_log2(per_dim, head_dim)


def _measured_gpu(gpu_name: str) -> Optional[str]:
    """The table GPU that runs kernels as ``gpu_name`` does: the GPU itself when the table has
    its own rows, else one of the same architecture and SM count, else ``None``."""
    measured = sorted({key[0] for key in _attention_table()})
    if gpu_name in measured:
        return gpu_name
    family = _gpu_family()
    mine = family.get(gpu_name)
    if mine is None or mine[1] is None:
        return None
    for gpu in measured:
        if family.get(gpu) == mine:
            return gpu
    return None


def _tabulated_efficiency(gpu: str, kernel: str, direction: str, causal: bool,
                          seq_len: float, head_dim: float) -> Optional[float]:
    """Fraction of peak of ``kernel`` on the table GPU ``gpu`` (:func:`_direct_efficiency`).
    A GPU published only as forward+backward (FlashAttention-2 arXiv:2307.08691 Fig. 4, A100:
    rate R over 3.5 F, F the forward FLOPs) is split with the bwd/fwd ratio q the same kernel
    reaches on the GPUs measured in both directions at the same point:
    3.5 / R = 1 / r_fwd + 2.5 / (q r_fwd), so r_fwd = R (1 + 2.5 / q) / 3.5, r_bwd = q r_fwd."""
    eff = _direct_efficiency(gpu, kernel, direction, causal, seq_len, head_dim)
    if eff is not None or direction not in ("fwd", "bwd"):
        return eff
    both = _direct_efficiency(gpu, kernel, "fwd+bwd", causal, seq_len, head_dim)
    if both is None:
        return None
    ratios = []
    for other in sorted({key[0] for key in _attention_table()} - {gpu}):
        fwd = _direct_efficiency(other, kernel, "fwd", causal, seq_len, head_dim)
        bwd = _direct_efficiency(other, kernel, "bwd", causal, seq_len, head_dim)
        if fwd is not None and bwd is not None:
            ratios.append(bwd / fwd)
    if not ratios:
        return None
    q = sum(ratios) / len(ratios)
    fwd_eff = both * (1.0 + FLASH_BACKWARD_FLOPS_FACTOR / q) / (1.0 + FLASH_BACKWARD_FLOPS_FACTOR)
    return fwd_eff if direction == "fwd" else fwd_eff * q


def _direct_efficiency(gpu: str, kernel: str, direction: str, causal: bool,
                       seq_len: float, head_dim: float) -> Optional[float]:
    """Fraction of peak of ``kernel`` on the table GPU ``gpu`` from its own rows; a causal
    backward (Fig. 6 of the FA3 paper has none) is the non-causal backward times the causal /
    non-causal forward ratio of the same kernel at the same point (the causal mask's load
    imbalance and partial diagonal blocks, measured on the forward pass)."""
    table = _attention_table()
    row = table.get((gpu, kernel, direction, causal))
    if row is not None:
        return _table_value(row, seq_len, head_dim)
    if causal:
        other = table.get((gpu, kernel, direction, False))
        fwd_c = table.get((gpu, kernel, "fwd", True))
        fwd_n = table.get((gpu, kernel, "fwd", False))
        if other is not None and fwd_c is not None and fwd_n is not None:
            return _table_value(other, seq_len, head_dim) \
                * _table_value(fwd_c, seq_len, head_dim) / _table_value(fwd_n, seq_len, head_dim)
    return None


@functools.lru_cache(maxsize=4096)   # pure in its (hashable) arguments: the table is fixed
def attention_efficiency_and_note(gpu_name: str, direction: str = "fwd", kernel: str = "sdpa",
                                  *, seq_len: float = 4096, head_dim: float = 128,
                                  causal: bool = True) -> tuple[float, Optional[str]]:
    """(fraction of dense bf16 peak, note) of fused attention on ``gpu_name``, ``direction``
    ``fwd`` or ``bwd``, for a stack attention ``kernel`` (``ATTENTION_TABLE_KERNEL``), at
    ``seq_len`` keys and ``head_dim``, from ``fmest/data/attention_kernels.csv``.

    A GPU with no figure of its own (no table GPU of the same architecture and SM count) does
    not borrow another's: its fraction is its own MAMF fraction times the ratio the same
    kernel reaches to MAMF on the GPUs that have the figure (attention and GEMMs run on the
    same tensor cores), and the note says so. A cuDNN (``te-fused``) kernel on a GPU with no
    cuDNN figure reads the FlashAttention-2 figure of that GPU (Transformer Engine's flash
    backend). A tabulated GPU missing one direction scales its own other-direction figure by
    the direction ratio of the same kernel on the GPUs measured in both (note says so)."""
    table_kernel = ATTENTION_TABLE_KERNEL.get(kernel, "fa2")
    measured = _measured_gpu(gpu_name)
    table = _attention_table()
    other = "bwd" if direction == "fwd" else "fwd"
    if measured is not None:
        if not any(key[0] == measured and key[1] == table_kernel for key in table):
            table_kernel = "fa2"
        eff = _tabulated_efficiency(measured, table_kernel, direction, causal, seq_len, head_dim)
        if eff is not None:
            return eff, None
        own = _tabulated_efficiency(measured, table_kernel, other, causal, seq_len, head_dim)
        if own is not None:
            ratios = []
            for gpu in sorted({key[0] for key in table}):
                a = _tabulated_efficiency(gpu, table_kernel, direction, causal, seq_len, head_dim)
                b = _tabulated_efficiency(gpu, table_kernel, other, causal, seq_len, head_dim)
                if a is not None and b is not None:
                    ratios.append(a / b)
            ratio = sum(ratios) / len(ratios)
            return own * ratio, (
                f"{gpu_name}: no published {table_kernel} attention {direction} figure "
                f"(fmest/data/attention_kernels.csv); fraction of peak = its own {other} figure "
                f"x {ratio:.3f}, the {direction}/{other} ratio of {table_kernel} on the GPUs "
                f"measured in both")
    ratios = []
    for gpu in sorted({key[0] for key in table}):
        eff = _tabulated_efficiency(gpu, table_kernel, direction, causal, seq_len, head_dim)
        if eff is not None:
            ratios.append(eff / mamf_fraction(gpu, "bf16"))
    ratio = sum(ratios) / len(ratios)
    note = (f"{gpu_name}: no published {table_kernel} attention {direction} figure "
            f"(fmest/data/attention_kernels.csv); fraction of peak = its MAMF fraction x "
            f"{ratio:.3f}, the ratio {table_kernel} reaches to MAMF on the GPUs measured")
    return mamf_fraction(gpu_name, "bf16") * ratio, note


def attention_efficiency(gpu_name: str, direction: str = "fwd", kernel: str = "sdpa", *,
                         seq_len: float = 4096, head_dim: float = 128,
                         causal: bool = True) -> float:
    """The fraction of :func:`attention_efficiency_and_note` without its note."""
    return attention_efficiency_and_note(gpu_name, direction, kernel, seq_len=seq_len,
                                         head_dim=head_dim, causal=causal)[0]


#: bytes a tensor-core GEMM's operands must be aligned to for its widest (16-byte) loads
#: (cuBLAS documentation, "Tensor Core Usage": leading dimensions, strides and pointers
#: multiples of 16 bytes)
GEMM_FULL_ALIGNMENT_BYTES = 16


def operand_alignment_bytes(elements: float, element_bytes: float) -> int:
    """Bytes an operand whose rows (and the offsets between the q, k and v views of one fused
    projection) are ``elements`` wide is aligned to: the largest power of two up to
    :data:`GEMM_FULL_ALIGNMENT_BYTES` that divides ``elements x element_bytes``."""
    total = int(round(elements * element_bytes))
    if total <= 0 or abs(elements * element_bytes - total) > 1e-9:
        return 1
    align = 1
    while align < GEMM_FULL_ALIGNMENT_BYTES and total % (align * 2) == 0:
        align *= 2
    return align


@functools.lru_cache(maxsize=None)
def _alignment_table() -> dict:
    """``fmest/data/gemm_alignment.csv`` as {(gpu prefix, dtype, cuda range): [(align bytes,
    misaligned TFLOP/s)]}, least-aligned first (read once)."""
    from importlib import resources

    text = resources.files("fmest").joinpath("data/gemm_alignment.csv").read_text(
        encoding="utf-8")
    table: dict = {}
    for row in csv.DictReader(line for line in text.splitlines() if not line.startswith("#")):
        key = (row["gpu"], row["dtype"], row["cuda"])
        table.setdefault(key, []).append((int(row["align_bytes"]),
                                          float(row["misaligned_tflops"]) * 1e12))
    return {key: sorted(rows) for key, rows in table.items()}


@functools.lru_cache(maxsize=None)
def _alignment_gpus() -> dict:
    """{gpu prefix: gpu prefix} of the alignment table (for ``value_by_gpu_prefix``)."""
    return {key[0]: key[0] for key in _alignment_table()}


def cuda_range(cuda_version: Optional[str]) -> str:
    """The gemm_alignment.csv ``cuda`` range of a toolkit ``MAJOR.MINOR`` (None: a current
    one)."""
    if cuda_version is None:
        return ">=11.7"
    major, minor = (int(part) for part in cuda_version.split("."))
    return "<=11.6" if (major, minor) <= (11, 6) else ">=11.7"


def misaligned_gemm_rate(gpu_name: str, dtype: str, align_bytes: int,
                         cuda_version: Optional[str] = None
                         ) -> tuple[Optional[float], Optional[str]]:
    """(FLOP/s, note): the rate cuBLAS's kernel for operands aligned to ``align_bytes`` reached
    on ``gpu_name`` in the published measurements of ``fmest/data/gemm_alignment.csv`` (the
    row with the same or the next wider alignment: the kernels usable at fewer bytes are a
    subset of those usable at more, so its rate bounds the rate from above). That kernel
    runs at its own instruction-bound rate, not the aligned kernel's: at the measured shape
    the aligned kernel itself was held to 42 % of peak by its 128-column output (about 104
    FLOP per byte moved, below the A100's 156 FLOP/B ridge), the misaligned one to 4 % (bf16,
    CUDA <= 11.6). ``None`` at 16 bytes, and with a note where the GPU, dtype and toolkit have
    no published figure (the aligned rate stands)."""
    if align_bytes >= GEMM_FULL_ALIGNMENT_BYTES:
        return None, None
    era = cuda_range(cuda_version)
    prefix = value_by_gpu_prefix(_alignment_gpus(), gpu_name, None)
    rows = _alignment_table().get((prefix, dtype, era)) if prefix else None
    if rows:
        for measured, rate in rows:
            if measured >= align_bytes:
                return rate, None
    return None, (f"{gpu_name}: no published {dtype} GEMM rate with operands aligned to "
                  f"{align_bytes} bytes or more under CUDA {era} "
                  f"(fmest/data/gemm_alignment.csv); the aligned rate is used")


def sm_count(gpu_name: str) -> Optional[int]:
    """SMs (compute units) of a GPU from ``GPU_SM_COUNT``; ``None`` when not tabulated."""
    return value_by_gpu_prefix(GPU_SM_COUNT, gpu_name, None)


@functools.lru_cache(maxsize=65536)
def _tile_wave_efficiency(m: float, n: float, batch: float, sms: Optional[int]) -> float:
    best = 0.0
    for tm, tn in GEMM_CTA_TILES:
        tiles = math.ceil(m / tm) * math.ceil(n / tn) * batch
        slots = math.ceil(tiles / sms) * sms if sms else tiles
        best = max(best, m * n * batch / (slots * tm * tn))
    return best


def gemm_shape_efficiency(m: float, k: float, n: float, sms: Optional[int] = None,
                          batch: float = 1.0) -> float:
    """Fraction (0-1] of the best-shape (MAMF) rate an (m x k) @ (k x n) GEMM (``batch`` of
    them in one batched call) reaches through tile and wave quantization: for each cuBLAS CTA
    tile (tm, tn) of ``GEMM_CTA_TILES``, tiles = ceil(m/tm) ceil(n/tn) batch run in
    ceil(tiles / SMs) waves of ``sms`` tiles, so the useful share is
    m n batch / (waves SMs tm tn); the best tile is taken, as cuBLAS's heuristic tries to
    (NVIDIA Matrix Multiplication Background guide §3.1-3.2). Without an SM count only tile
    quantization applies. ``k`` enters through the roofline's bytes term (``gemm_seconds``)."""
    if m <= 0 or n <= 0:
        return 1.0
    return _tile_wave_efficiency(float(m), float(n), float(batch), sms)


def gemm_seconds(m: float, k: float, n: float, *, peak_flops_per_s: float, max_fraction: float,
                 hbm_bytes_per_s: float, bytes_per_element: float,
                 sms: Optional[int] = None) -> float:
    """Roofline time of one GEMM: ``max(2mkn / (peak * MAMF * shape), bytes / (HBM * eff))``
    with bytes = (mk + kn + mn) elements and shape the tile/wave quantization of
    :func:`gemm_shape_efficiency` on ``sms`` SMs (Williams et al. 2009, "Roofline"; NVIDIA
    Matrix Multiplication Background guide, arithmetic intensity and quantization)."""
    if m <= 0 or k <= 0 or n <= 0:
        return 0.0
    flops = 2.0 * m * k * n
    rate = peak_flops_per_s * max_fraction * gemm_shape_efficiency(m, k, n, sms)
    bytes_moved = (m * k + k * n + m * n) * bytes_per_element
    return max(flops / rate, bytes_moved / (hbm_bytes_per_s * HBM_EFFICIENCY))


# ---------------------------------------------------------------------------------------------
# FLOPs
# ---------------------------------------------------------------------------------------------

def head_linears(model) -> list[tuple[int, int]]:
    """(in, out) of the output projection. A tied lm_head shares the embedding's weight but is
    still a matmul (only the *input* embedding is a lookup; trace_feasibility.md §3), so a
    model without a ``head`` linear in its inventory gets an (hidden x vocab) one here."""
    heads = [(lin.in_features, lin.out_features) for lin in model.linears if lin.kind == "head"]
    if not heads:
        heads = [(model.hidden_size, model.vocab_size)]
    return heads


def linear_forward_flops_per_token(model) -> float:
    """Forward matmul FLOPs per token: 2 x in x out per linear instance a token passes through
    (MoE: ``active_copies`` = top-k experts), plus the output head (tied or not). The input
    embedding is a lookup and costs no FLOPs (Kaplan et al. 2020, arXiv:2001.08361, Table 1,
    excludes embeddings)."""
    total = 0.0
    for lin in model.linears:
        if lin.kind == "head":
            continue
        total += 2.0 * lin.in_features * lin.out_features * lin.layers * lin.active_copies
    for in_features, out_features in head_linears(model):
        total += 2.0 * in_features * out_features
    return total


def attention_context_tokens(seq_len: float, *, causal: bool = True,
                             sliding_window: Optional[int] = None) -> float:
    """Average number of keys a query attends to: ``s/2`` under a causal mask (the lower
    triangle; flash kernels skip the masked blocks), ``s`` without, at most the window."""
    ctx = seq_len / 2.0 if causal else float(seq_len)
    if sliding_window:
        ctx = min(ctx, float(sliding_window))
    return ctx


def attention_forward_flops_per_token(model, seq_len: float, *, causal: bool = True) -> float:
    """Forward FLOPs of the attention core (Q K^T and A V) per token over all layers:
    ``2 * heads * (d_qk + d_v) * context`` per layer (Narayanan et al. 2021, arXiv:2104.04473,
    eq. 2 term ``s/(6h)``; Chinchilla, Hoffmann et al. 2022, Table 4), with the causal half.
    A sliding window bounds the context of the layers that use it only
    (:func:`fmest.models.spec.sliding_layers`: 5 of 6 in Gemma 3, half in Gemma 2, Llama 4's
    chunked layers); the others attend over the whole sequence."""
    from fmest.models.spec import sliding_layers

    d_qk = model.qk_head_dim or model.head_dim
    d_v = model.v_head_dim or model.head_dim
    full = attention_context_tokens(seq_len, causal=causal)
    windowed = attention_context_tokens(seq_len, causal=causal,
                                        sliding_window=model.sliding_window)
    n_sw = min(sliding_layers(model), model.num_layers)
    ctx_layers = full * (model.num_layers - n_sw) + windowed * n_sw
    return 2.0 * model.num_attention_heads * (d_qk + d_v) * ctx_layers


def lora_adapter_forward_flops_per_token(modules, rank: int) -> float:
    """Forward FLOPs of LoRA adapters per token: ``2 r (in + out)`` per adapted module instance
    a token passes (Hu et al. 2021, arXiv:2106.09685: x A then (x A) B)."""
    return sum(2.0 * rank * (mod.in_features + mod.out_features) * mod.layers
               * mod.active_copies for mod in modules)


def last_layer_matmul_forward_flops_per_token(model) -> float:
    """Forward FLOPs of each layer's last matmul (the MLP down projection), summed over layers.
    Non-reentrant activation checkpointing stops recomputing once the last saved tensor is
    rebuilt, so this matmul is never recomputed (torch.utils.checkpoint early stop; measured
    0.78 of a layer forward on Llama-2-7B, trace_feasibility.md §3)."""
    total = 0.0
    for lin in model.linears:
        if lin.kind in ("mlp", "expert", "shared_expert") and lin.out_features == model.hidden_size \
                and lin.in_features != model.hidden_size:
            total += 2.0 * lin.in_features * lin.out_features * lin.layers * lin.active_copies
    return total


def adapter_forward_flops_per_token(model, technique: str) -> float:
    """Forward FLOPs per token that LLaMA-Adapter / Adapter-v2 add (Lit-GPT lit_gpt/adapter.py,
    adapter_v2.py at Lightning-AI/litgpt 8641822b3249bb94f068c254aa5d13decbc9f0a0), 0 for other
    techniques:

    * each adapter layer's queries attend the ``adapter_prompt_length`` prefix keys/values
      (a second SDPA, no causal mask): ``2 x heads x (d_qk + d_v) x prompt_length``, plus the
      gate's multiply-add (2 per attention output). The prefix's own projection is not per
      token (and during fine-tuning it is read from ``adapter_kv_cache``);
    * Adapter-v2: ``adapter_scale * (linear(x) + adapter_bias)``, 2 FLOPs per output feature
      of every linear instance a token passes (the head included)."""
    from fmest.physics.counting import (
        ADAPTER_PROMPT_LENGTH,
        ADAPTER_TECHNIQUES,
        ADAPTER_V2_TECHNIQUES,
        adapter_layers,
    )

    if technique not in ADAPTER_TECHNIQUES:
        return 0.0
    d_qk = model.qk_head_dim or model.head_dim
    d_v = model.v_head_dim or model.head_dim
    heads = model.num_attention_heads
    flops = adapter_layers(model) * (2.0 * heads * (d_qk + d_v) * ADAPTER_PROMPT_LENGTH
                                     + 2.0 * heads * d_v)
    if technique in ADAPTER_V2_TECHNIQUES:
        flops += 2.0 * (sum(lin.out_features * lin.layers * lin.active_copies
                            for lin in model.linears if lin.kind != "head")
                        + sum(out for _, out in head_linears(model)))
    return flops


def training_flops_per_token(model, *, seq_len: int, technique: str = "full",
                             lora_modules=(), lora_rank: int = 16,
                             checkpointing: str = "none") -> dict[str, float]:
    """Model and hardware FLOPs per trained token.

    * full training: matmuls ``6 N_mm`` (forward 2, backward 4: input and weight gradients;
      Kaplan et al. 2020, Narayanan et al. 2021) + attention core ``3 x`` forward;
    * LoRA/QLoRA: the frozen base needs the forward and the input-gradient backward only,
      ``4 N_mm``, plus ``6 r (in + out)`` per adapted module (Hu et al. 2021);
    * Adapter/Adapter-v2 (and their quantized forms): the frozen base likewise, plus ``3 x``
      :func:`adapter_forward_flops_per_token` (forward and its two-sided backward);
    * recompute (hardware FLOPs only, Korthikanti et al. 2022, arXiv:2205.05198 §5): ``full``
      adds one more forward of the transformer layers minus each layer's last matmul (early
      stop), ``selective`` the attention core forward.

    Returns ``model`` (MFU numerator), ``recompute`` and ``hardware`` (= model + recompute).
    """
    mm_fwd = linear_forward_flops_per_token(model)
    attn_fwd = attention_forward_flops_per_token(model, seq_len)
    if technique == "full":
        model_flops = 3.0 * mm_fwd + 3.0 * attn_fwd
    else:
        model_flops = 2.0 * mm_fwd + 3.0 * attn_fwd \
            + 3.0 * lora_adapter_forward_flops_per_token(lora_modules, lora_rank) \
            + 3.0 * adapter_forward_flops_per_token(model, technique)
    head_fwd = sum(2.0 * in_features * out_features
                   for in_features, out_features in head_linears(model))
    if checkpointing == "full":
        adapters = lora_adapter_forward_flops_per_token(lora_modules, lora_rank) \
            + adapter_forward_flops_per_token(model, technique) if technique != "full" else 0.0
        recompute = mm_fwd - head_fwd - last_layer_matmul_forward_flops_per_token(model) \
            + attn_fwd + adapters
    elif checkpointing == "selective":
        recompute = attn_fwd
    else:
        recompute = 0.0
    return {"model": model_flops, "recompute": recompute, "hardware": model_flops + recompute}


# ---------------------------------------------------------------------------------------------
# Memory-bound work
# ---------------------------------------------------------------------------------------------

def elementwise_bytes_per_token_per_layer(model, *, act_bytes: float = 2.0,
                                          gated: Optional[bool] = None, tp: int = 1,
                                          sequence_parallel: bool = False,
                                          per_element=None, compiled: bool = False) -> float:
    """HBM bytes of the elementwise ops of one transformer layer, forward plus backward, per
    token (:func:`elementwise_bytes_fwd_bwd`, summed)."""
    fwd, bwd = elementwise_bytes_fwd_bwd(model, act_bytes=act_bytes, gated=gated, tp=tp,
                                         sequence_parallel=sequence_parallel,
                                         per_element=per_element, compiled=compiled)
    return fwd + bwd


def elementwise_bytes_fwd_bwd(model, *, act_bytes: float = 2.0, gated: Optional[bool] = None,
                              tp: int = 1, sequence_parallel: bool = False, per_element=None,
                              compiled: bool = False,
                              autocast: bool = False) -> tuple[float, float]:
    """(forward, backward) HBM bytes per token of the elementwise ops of one transformer
    layer: two norms, two residual adds, RoPE on q/k, head layout copies and the MLP
    activation. Eager: the op-by-op forward constants above, backward =
    ``ELEMENTWISE_BACKWARD_FACTOR[op]`` x forward. ``compiled`` (torch.compile): the Inductor
    kernels' bytes, ``COMPILED_FWD/BWD_BYTES_PER_ELEMENT``. Scales with ``act_bytes / 2`` (the
    constants are for bf16 activations). Under tensor parallelism the head/intermediate terms
    split over ``tp``; norms and residual adds are replicated on every rank unless sequence
    parallelism splits them too (Korthikanti et al. 2022, §4.2.2). ``per_element(op,
    eager_bytes)`` gives a training stack's forward bytes per element of ``op`` (``norm``,
    ``residual``, ``rope``, ``layout``, ``activation``) when it fuses the chain
    (fmest.stacks.ResolvedStack.bytes_per_element); its backward takes the eager factor; under
    compile the smaller of the stack's and Inductor's bytes is used. The eager norm is the
    model's (``ModelSpec.layer_norm``: one native LayerNorm kernel, else the RMSNorm chain) and,
    under ``autocast``, its fp32 family (``AUTOCAST_NORM_FAMILY_BYTES``)."""
    gated = model.gated_mlp if gated is None else gated
    # torch.nn.LayerNorm models: one native_layer_norm kernel (LAYER_NORM_BYTES_PER_ELEMENT);
    # under autocast the fp32 family less the bf16 residual add (AUTOCAST_NORM_FAMILY_BYTES)
    layer_norm = bool(getattr(model, "layer_norm", ""))
    norm_fwd = LAYER_NORM_BYTES_PER_ELEMENT if layer_norm else NORM_BYTES_PER_ELEMENT
    norm_factor = ELEMENTWISE_BACKWARD_FACTOR["layer_norm" if layer_norm else "norm"]
    if autocast:
        fam_fwd, fam_bwd = AUTOCAST_NORM_FAMILY_BYTES["layer_norm" if layer_norm else "rms_norm"]
        norm_fwd = fam_fwd - RESIDUAL_BYTES_PER_ELEMENT
        norm_factor = (fam_bwd - RESIDUAL_BYTES_PER_ELEMENT
                       * ELEMENTWISE_BACKWARD_FACTOR["residual"]) / norm_fwd
    eager_bytes = {"norm": norm_fwd, "residual": RESIDUAL_BYTES_PER_ELEMENT,
                   "rope": ROPE_BYTES_PER_ELEMENT, "layout": LAYOUT_BYTES_PER_ELEMENT,
                   "activation": GATED_ACT_BYTES_PER_ELEMENT if gated
                   else ACT_BYTES_PER_ELEMENT}

    def each(op) -> tuple[float, float]:
        eager = eager_bytes[op]
        fused = per_element is not None and per_element(op, eager) != eager
        fwd = eager if per_element is None else per_element(op, eager)
        # the model's own eager norm takes its measured backward; a stack's fused kernel the
        # eager RMSNorm chain's factor, as before
        factor = norm_factor if op == "norm" and not fused else ELEMENTWISE_BACKWARD_FACTOR[op]
        pair = (fwd, fwd * factor)
        if compiled:
            key = "gelu" if op == "activation" and not gated else op
            # Inductor's layout copy is the attention output only (q/k/v come out of the fused
            # RoPE kernel in the layout SDPA takes): q of the eager 2q + 2kv elements
            comp = compiled_bytes_per_element(key)
            if sum(comp) < sum(pair):
                pair = comp
        return pair

    hidden = model.hidden_size
    q_dim = model.num_attention_heads * (model.qk_head_dim or model.head_dim)
    kv_dim = model.num_kv_heads * (model.qk_head_dim or model.head_dim)
    if model.is_moe:
        inter = model.experts_per_token * (model.moe_intermediate_size or model.intermediate_size)
        shared = [lin for lin in model.linears if lin.kind == "shared_expert"
                  and lin.in_features == hidden]
        inter += max((lin.out_features for lin in shared), default=0)
    else:
        inter = model.intermediate_size
    layout_elements = q_dim if compiled else 2 * q_dim + 2 * kv_dim
    out = []
    for side in (0, 1):
        replicated = 2 * each("norm")[side] * hidden + 2 * each("residual")[side] * hidden
        split = (each("rope")[side] * (q_dim + kv_dim)
                 + each("layout")[side] * layout_elements
                 + each("activation")[side] * inter)
        out.append((replicated / (tp if sequence_parallel else 1) + split / tp)
                   * act_bytes / 2.0)
    return out[0], out[1]


def loss_bytes_per_token(vocab_size: int, loss: str = "standard", *,
                         compiled: bool = False) -> float:
    """HBM bytes of the cross-entropy over the vocabulary per token, forward and backward
    (under torch.compile the smaller of that and Inductor's fused kernels,
    ``COMPILED_FWD/BWD_BYTES_PER_ELEMENT["loss"]``)."""
    per_logit = CE_BYTES_PER_LOGIT.get(loss, CE_BYTES_PER_LOGIT["standard"])
    if compiled:
        per_logit = min(per_logit, sum(compiled_bytes_per_element("loss")))
    return per_logit * vocab_size


def peft_lora_bytes_per_row(in_features: float, out_features: float, *,
                            dropout: bool, fused: bool = False,
                            autocast: bool = True,
                            adapter_fp32: bool = True) -> tuple[float, float]:
    """(forward, backward) HBM bytes per GEMM row (token) that huggingface/peft's LoRA layer
    adds around one adapted linear of ``in_features`` -> ``out_features``: the fp32 casts of
    the input, the dropout (when ``dropout``), ``* scaling`` and the add into the base output
    (``PEFT_LORA_BYTES_PER_FEATURE``, ``PEFT_LORA_DROPOUT_BYTES_PER_IN_FEATURE``). ``fused``:
    the same adapters under fms-acceleration's fused LoRA kernels (compute-dtype adapters,
    in-place adds: ``FUSED_LORA_BYTES_PER_FEATURE``, ``FUSED_LORA_DROPOUT_BYTES_PER_IN_FEATURE``).
    ``autocast`` False: PEFT's fp32 adapters on a base run without ``torch.autocast`` (``pure``
    precision), whose fp32 adapter output is scaled, added and cast back in fp32
    (``PEFT_LORA_BYTES_PER_FEATURE_NO_AUTOCAST``). ``adapter_fp32`` False: adapters in the
    compute dtype, no casts (``PEFT_LORA_BYTES_PER_FEATURE_COMPUTE_DTYPE``); the dropout, when
    on, then runs on the compute-dtype input (5 bytes per element each way)."""
    if fused:
        per = FUSED_LORA_BYTES_PER_FEATURE
    elif not adapter_fp32:
        per = PEFT_LORA_BYTES_PER_FEATURE_COMPUTE_DTYPE
    else:
        per = PEFT_LORA_BYTES_PER_FEATURE if autocast else PEFT_LORA_BYTES_PER_FEATURE_NO_AUTOCAST
    if not dropout:
        drop = {"fwd": 0.0, "bwd": 0.0}
    elif fused:
        drop = FUSED_LORA_DROPOUT_BYTES_PER_IN_FEATURE
    elif not adapter_fp32:
        # CUDA native_dropout on the compute-dtype input (read 2, write 2 + bool mask 1, as the
        # fused path's forward) and native_dropout_backward (read grad 2 + mask 1, write 2)
        five = FUSED_LORA_DROPOUT_BYTES_PER_IN_FEATURE["fwd"]
        drop = {"fwd": five, "bwd": five}
    else:
        drop = PEFT_LORA_DROPOUT_BYTES_PER_IN_FEATURE
    fwd = (per["fwd_in"] + drop["fwd"]) * in_features + per["fwd_out"] * out_features
    bwd = (per["bwd_in"] + drop["bwd"]) * in_features + per["bwd_out"] * out_features
    return fwd, bwd


#: linear kinds of a decoder layer whose input is the (fp32) residual stream's norm output or
#: the MLP intermediate under PEFT's k-bit preparation (the attention output projection, the
#: last ``attention`` linear of a layer, reads the attention kernel's compute-dtype output)
KBIT_FP32_INPUT_KINDS = ("attention", "mlp", "expert", "shared_expert", "router")


def kbit_fp32_input_linears(model) -> list:
    """The linears (``fmest.models.spec.LinearModule``) that read an fp32 input when PEFT's
    k-bit preparation runs the residual stream in fp32: every decoder linear of
    :data:`KBIT_FP32_INPUT_KINDS` except the attention output projection (the last
    ``attention`` linear: it reads the attention kernel's output, which autocast / flash-attn
    keep in the compute dtype); not the output head."""
    attention = [lin for lin in model.linears if lin.kind == "attention"]
    out_proj = attention[-1] if len(attention) > 1 else None
    return [lin for lin in model.linears
            if lin.kind in KBIT_FP32_INPUT_KINDS and lin is not out_proj]


def kbit_fp32_stream_bytes_per_token(model, *, stage_layers: float, pp: int = 1,
                                     adapted: frozenset = frozenset()) -> tuple[float, float]:
    """Cached :func:`kbit_fp32_stream_bytes_per_token_uncached` (a model spec is hashable;
    an unhashable stand-in is computed each time)."""
    try:
        return _kbit_stream_cached(model, stage_layers, pp, adapted)
    except TypeError:
        return kbit_fp32_stream_bytes_per_token_uncached(model, stage_layers=stage_layers,
                                                         pp=pp, adapted=adapted)


@functools.lru_cache(maxsize=64)
def _kbit_stream_cached(model, stage_layers: float, pp: int,
                        adapted: frozenset) -> tuple[float, float]:
    return kbit_fp32_stream_bytes_per_token_uncached(model, stage_layers=stage_layers, pp=pp,
                                                     adapted=adapted)


def kbit_fp32_stream_bytes_per_token_uncached(
        model, *, stage_layers: float, pp: int = 1,
        adapted: frozenset = frozenset()) -> tuple[float, float]:
    """(forward, backward) HBM bytes per token that PEFT's k-bit preparation of a 4-bit
    bitsandbytes base adds over the compute-dtype stream, over a stage's layers (eager
    kernels; docs/time_model.md §2 "k-bit preparation"):

    * every 4-bit linear with an fp32 input casts it to the compute dtype and its output back
      (``KBIT_PREP_CAST_BYTES_PER_ELEMENT`` per input and output feature per routed copy);
    * flash-attention / autocast cast the fp32 q, k and v down (the same bytes per element);
    * the norms + residual adds, RoPE and the MLP activation run on fp32 tensors
      (``KBIT_PREP_TRACED_BYTES_PER_ELEMENT``: fp32 minus bf16; a non-gated activation, not
      traced, doubles its bf16 bytes as a pure elementwise op does);
    * backward sums the input gradients of the linears that share an fp32 input in fp32
      (``KBIT_PREP_GRAD_SUM_EXTRA_BYTES_PER_ELEMENT``);
    * PEFT's cast of an adapted module's input to the fp32 adapters is a no-op on an fp32
      input (``KBIT_PREP_LORA_FP32_INPUT_SAVED_BYTES_PER_IN_FEATURE``, subtracted for the
      modules named in ``adapted``).

    Tensor parallelism is not split here (PEFT's k-bit preparation runs on single-GPU / data-
    parallel QLoRA)."""
    cast, traced = KBIT_PREP_CAST_BYTES_PER_ELEMENT, KBIT_PREP_TRACED_BYTES_PER_ELEMENT
    saved = KBIT_PREP_LORA_FP32_INPUT_SAVED_BYTES_PER_IN_FEATURE
    hidden = model.hidden_size
    head_dim = model.qk_head_dim or model.head_dim
    q_dim = model.num_attention_heads * head_dim
    kv_dim = model.num_kv_heads * head_dim
    if model.is_moe:
        inter = model.experts_per_token * (model.moe_intermediate_size or model.intermediate_size)
    else:
        inter = model.intermediate_size

    def extra(family: str, side: str) -> float:
        return traced[f"{family}_fp32_{side}"] - traced[f"{family}_bf16_{side}"]

    per_layer = []
    for side in ("fwd", "bwd"):
        if model.gated_mlp:
            act = extra("activation", side)
        else:   # fp32 doubles a pure elementwise op's bytes: the extra is the bf16 figure
            act = ACT_BYTES_PER_ELEMENT * (1.0 if side == "fwd"
                                           else ELEMENTWISE_BACKWARD_FACTOR["activation"])
        per_layer.append(2 * extra("resnorm", side) * hidden
                         + extra("rope", side) * (q_dim + kv_dim)
                         + cast[side] * (q_dim + 2 * kv_dim)
                         + act * inter)
    fwd, bwd = per_layer[0] * stage_layers, per_layer[1] * stage_layers
    shared = 0
    inputs = set()
    for lin in kbit_fp32_input_linears(model):
        rows = lin.active_copies * lin.layers / pp
        fwd += cast["fwd"] * (lin.in_features + lin.out_features) * rows
        bwd += cast["bwd"] * (lin.in_features + lin.out_features) * rows
        if lin.in_features == hidden and lin.kind != "expert":
            shared += 1
            inputs.add("attention" if lin.kind == "attention" else "mlp")
        if lin.name in adapted:
            fwd -= saved["fwd"] * lin.in_features * rows
            bwd -= saved["bwd"] * lin.in_features * rows
    bwd += KBIT_PREP_GRAD_SUM_EXTRA_BYTES_PER_ELEMENT * max(0, shared - len(inputs)) * hidden \
        * stage_layers
    return fwd, bwd


def eager_attention_bytes_per_token_per_layer(heads: float, seq_len: int, *,
                                              compiled: bool = False,
                                              stack_bytes: Optional[tuple] = None) -> float:
    """HBM bytes of materialised s x s attention scores per token per layer (eager attention
    computes the full square and masks it), forward and backward (Inductor's fused softmax
    kernels under torch.compile; the stack's own scale-mask-softmax chain when it gives its
    (forward, backward) bytes per score, ``stack_bytes``: under torch.compile the smaller of
    the two sums)."""
    per_score = sum(compiled_bytes_per_element("scores")) if compiled else \
        EAGER_SCORE_BYTES_PER_ELEMENT * (1.0 + ELEMENTWISE_BACKWARD_FACTOR["scores"])
    if stack_bytes is not None:
        own = float(sum(stack_bytes))
        per_score = min(per_score, own) if compiled else own
    return per_score * heads * seq_len


#: HBM bytes per element of torch's dropout (``aten::native_dropout``: reads the input, writes
#: the output and a bool mask; ``native_dropout_backward``: reads the gradient and the mask,
#: writes the input's gradient), forward and backward (pytorch/pytorch
#: aten/src/ATen/native/cuda/Dropout.cu, tools/autograd/derivatives.yaml ``native_dropout``).
DROPOUT_BYTES_PER_ELEMENT = {"fwd": 2.0 + 2.0 + 1.0, "bwd": 2.0 + 1.0 + 2.0}
#: ... and inside a fused residual chain (Megatron's ``bias_dropout_add`` under torch.jit,
#: megatron/model/transformer.py ``bias_dropout_add_fused_train``): the forward kernel that
#: already reads and writes the stream also writes the mask (1); the backward, which is a
#: pass-through without dropout, reads the gradient and the mask and writes the dropped
#: branch's gradient (2 + 1 + 2)
FUSED_DROPOUT_BYTES_PER_ELEMENT = {"fwd": 1.0, "bwd": 2.0 + 1.0 + 2.0}


def dropout_bytes_per_token_per_layer(*, probability: float, heads: float, seq_len: int,
                                      eager_scores: bool, hidden: float,
                                      fused_residual: bool) -> tuple[float, float, float, float]:
    """(scores forward, scores backward, hidden forward, hidden backward) HBM bytes per token
    per layer of a model's dropout (``ModelSpec.dropout`` > 0): on the s x s attention
    probabilities of eager attention (``heads`` per rank x ``seq_len`` per token; a fused
    attention kernel drops inside the kernel) and on the two hidden-size branch outputs
    before their residual adds (``hidden`` elements per token each, per rank), eager or fused
    into the residual chain (:data:`FUSED_DROPOUT_BYTES_PER_ELEMENT`). All zero at p = 0."""
    if probability <= 0:
        return 0.0, 0.0, 0.0, 0.0
    scores = heads * seq_len if eager_scores else 0.0
    per = FUSED_DROPOUT_BYTES_PER_ELEMENT if fused_residual else DROPOUT_BYTES_PER_ELEMENT
    return (scores * DROPOUT_BYTES_PER_ELEMENT["fwd"], scores * DROPOUT_BYTES_PER_ELEMENT["bwd"],
            2.0 * hidden * per["fwd"], 2.0 * hidden * per["bwd"])


def optimizer_update_bytes_per_param(*, states: float, state_bytes: float, param_bytes: float,
                                     grad_bytes: float, master_bytes: float = 0.0,
                                     impl: str = "foreach") -> float:
    """HBM bytes one optimizer update moves per parameter: read param, grad and states, write
    param and states (+ the low-precision copy when a master copy exists); foreach/for-loop
    implementations make ``FOREACH_OPTIMIZER_PASS_FACTOR`` passes (Loshchilov & Hutter 2019
    AdamW update; torch.optim fused vs foreach kernels)."""
    one_pass = (param_bytes + grad_bytes + 2 * states * state_bytes + param_bytes
                + 2 * master_bytes)
    factor = 1.0 if impl == "fused" else FOREACH_OPTIMIZER_PASS_FACTOR
    return one_pass * factor


def memory_bound_seconds(bytes_moved: float, hbm_bytes_per_s: float, *,
                         compiled: bool = False, efficiency: Optional[float] = None) -> float:
    """Time of memory-bound work at ``HBM_EFFICIENCY`` of peak bandwidth (HN §4), or at a
    kernel's own measured ``efficiency`` (``optimizer_bandwidth_fraction``).
    ``compiled`` is accepted for callers and changes nothing: torch.compile enters through the
    bytes (``COMPILED_FWD/BWD_BYTES_PER_ELEMENT``), not through a divisor."""
    del compiled
    return bytes_moved / (hbm_bytes_per_s * (efficiency or HBM_EFFICIENCY))


# ---------------------------------------------------------------------------------------------
# Communication (Patarasuk & Yuan 2009 ring; Thakur et al. 2005 MPICH collectives)
# ---------------------------------------------------------------------------------------------

def tp_all_gather_bytes_per_element(lin_dtype: str, act_bytes: float) -> float:
    """Bytes per element of the sequence-parallel all-gathers of tensor parallelism. Under
    float8 training the TP plan casts before communicating: torchao
    ``PrepareFloat8ModuleInput``/``Float8ColwiseParallel`` cast the layer input to float8
    (e4m3) *before* the all-gather, and ``Float8RowwiseParallel`` casts the incoming gradient to
    float8 (e5m2, ``NoopFwToFloat8BwDynamic``) before the backward all-gather
    (torchao/float8/float8_tensor_parallel.py; used by torchtitan when float8 and TP are on,
    torchtitan/parallelisms/parallelize_llama.py). The reduce-scatters carry bf16 partial sums.
    """
    return dtype_bytes("fp8") if lin_dtype == "fp8" else act_bytes


def link_bytes_per_s(gpu, *, inter_node: bool, size: int = 2, nodes: int = 2) -> float:
    """Achievable bus bandwidth (nccl-tests ``busbw``) of a collective group: NVLink/xGMI
    within a node; across ``nodes`` nodes a hierarchical collective moves only
    ``(nodes-1)/(size-1)`` of the bus traffic over each GPU's NIC, so
    ``busbw = NIC * eff * (size-1)/(nodes-1)``, capped by the intra-node rate (HN §5: 4 x 8
    B200 with 50 GB/s NICs reach 377 GB/s busbw = 36.5 GB/s per GPU on the wire).

    Without NVLink the intra-node link is the host PCIe link; GPUs whose stock driver gives no
    PCIe peer-to-peer (GeForce RTX 3090/4090: ``PCIE_P2P_DISABLED_BY_GPU``) reach only
    ``HOST_STAGED_TO_P2P_BUSBW_RATIO`` of that, NCCL staging through host memory (both in
    ``intra_node_collective_efficiency``, shared with the planner)."""
    intra = (gpu.intra_node_bytes_per_s or gpu.pcie_bytes_per_s or DEFAULT_PCIE_BYTES_PER_S) \
        * intra_node_collective_efficiency(getattr(gpu, "name", "") or "")
    if not inter_node:
        return intra
    nic = (gpu.inter_node_bytes_per_s or DEFAULT_INTER_NODE_BYTES_PER_S) \
        * INTER_NODE_COLLECTIVE_EFFICIENCY
    nodes = max(2, nodes)
    size = max(nodes, size)
    return min(max(intra, nic), nic * (size - 1) / (nodes - 1))


def group_nodes(size: int, stride: int, gpus_per_node: int) -> int:
    """Nodes spanned by a group of ``size`` ranks ``stride`` apart."""
    per_node = max(1, gpus_per_node // max(1, stride))
    return max(1, math.ceil(size / per_node))


def _latency_s(n: int, inter_node: bool) -> float:
    # tree/ring hybrid: NCCL latency grows ~log2(n) steps (double binary tree, Sanders 2009)
    alpha = INTER_NODE_LATENCY_S if inter_node else INTRA_NODE_LATENCY_S
    return alpha * 2.0 * math.ceil(math.log2(max(2, n)))


def all_reduce_seconds(bytes_per_rank: float, n: int, bus_bytes_per_s: float,
                       inter_node: bool = False) -> float:
    """Ring all-reduce: ``2 (n-1)/n * bytes / busbw`` + latency (nccl-tests busbw definition)."""
    if n <= 1 or bytes_per_rank <= 0:
        return 0.0
    return 2.0 * (n - 1) / n * bytes_per_rank / bus_bytes_per_s + _latency_s(n, inter_node)


def reduce_scatter_seconds(bytes_per_rank: float, n: int, bus_bytes_per_s: float,
                           inter_node: bool = False) -> float:
    """Ring reduce-scatter of a ``bytes_per_rank`` buffer: ``(n-1)/n * bytes / busbw``."""
    if n <= 1 or bytes_per_rank <= 0:
        return 0.0
    return (n - 1) / n * bytes_per_rank / bus_bytes_per_s + _latency_s(n, inter_node) / 2


def all_gather_seconds(bytes_gathered: float, n: int, bus_bytes_per_s: float,
                       inter_node: bool = False) -> float:
    """Ring all-gather producing ``bytes_gathered`` per rank: ``(n-1)/n * bytes / busbw``."""
    return reduce_scatter_seconds(bytes_gathered, n, bus_bytes_per_s, inter_node)


def all_to_all_seconds(bytes_per_rank: float, n: int, bus_bytes_per_s: float,
                       inter_node: bool = False, *, ranks_per_node: Optional[int] = None,
                       nic_bytes_per_s: Optional[float] = None) -> float:
    """All-to-all: each rank sends ``(n-1)/n`` of its buffer (MoE dispatch/combine,
    Lepikhin et al. 2020 GShard; nccl-tests doc/PERFORMANCE.md: alltoall busbw = algbw
    (n-1)/n). Given ``ranks_per_node`` g < n and the NIC rate, the group spans nodes: the
    ``(n-g)/n`` of the buffer bound for other nodes leaves through the rank's own NIC (every
    byte has its own destination, so nothing aggregates as in a hierarchical all-reduce) while
    the ``(g-1)/n`` for its node's peers moves over NVLink (``bus_bytes_per_s``) at the same
    time: the slower of the two. DeepEP's V1 normal kernels (deepseek-ai/DeepEP docs/legacy.md,
    linked from README.md @ 0297fc801788b14b338a46554faca28d419e518a) measure inter-node
    dispatch at 43 / 58 / 51 GB/s RDMA bottleneck bandwidth for EP 16 / 32 / 64 on H800 with one
    400 Gb/s (~50 GB/s) CX7 NIC per GPU: the off-node bytes run at about the one NIC's rate."""
    if n <= 1 or bytes_per_rank <= 0:
        return 0.0
    latency = _latency_s(n, inter_node) / 2
    if ranks_per_node is None or nic_bytes_per_s is None or ranks_per_node >= n:
        return (n - 1) / n * bytes_per_rank / bus_bytes_per_s + latency
    g = max(1, int(ranks_per_node))
    return max((g - 1) / n * bytes_per_rank / bus_bytes_per_s,
               (n - g) / n * bytes_per_rank / nic_bytes_per_s) + latency


def moe_groups_hit(experts: float, experts_per_token: float, groups: float) -> float:
    """Expected number of distinct groups (ranks, nodes) a token's ``k`` experts fall in when
    ``experts`` experts sit in ``groups`` equal groups and the router picks ``k`` distinct
    experts uniformly (balanced routing): ``groups x (1 - C(E - E/groups, k) / C(E, k))``, the
    product form ``prod_{i<k} (E - E/groups - i) / (E - i)`` for the chance a group is missed."""
    k = int(round(experts_per_token))
    if groups <= 1 or k <= 0 or experts <= 0:
        return min(1.0, max(0.0, groups)) if k > 0 else 0.0
    k = min(k, int(experts))
    missed, others = 1.0, experts - experts / groups
    for i in range(k):
        missed *= max(0.0, others - i) / (experts - i)
    return groups * (1.0 - missed)


def flex_dispatch_seconds(shard_token_bytes: float, experts: float, experts_per_token: float,
                          ranks: int, ranks_per_domain: int, bus_bytes_per_s: float,
                          nic_bytes_per_s: float, *, expert_tp: int = 1,
                          inter_node: bool = False) -> float:
    """One dispatch (or combine) of Megatron-Core's ``flex`` token dispatcher (DeepEP or
    HybridEP backend; MoEFlexTokenDispatcher, NVIDIA/Megatron-LM @
    d98e8a64ddf34856e74b24714e3bedb2f5a39553 megatron/core/transformer/moe/token_dispatcher.py:
    one group over the expert-TP x EP ranks, each token routed to its experts' ``expert_tp``
    ranks). ``shard_token_bytes``: the rank's sequence-parallel shard, tokens x hidden x bytes.
    DeepEP's normal kernels send a token ONCE to each destination rank however many of its
    experts that rank holds (``is_token_in_rank`` of get_dispatch_layout, deepseek-ai/DeepEP
    @ 0297fc801788b14b338a46554faca28d419e518a csrc/kernels, docs/legacy.md), and across nodes
    once per remote node, over RDMA to the GPU of the same local index, which forwards it over
    NVLink to the ranks of its node that need it (DeepSeek-V3 technical report, arXiv
    2412.19437 section 3.2.2; DeepEP docs/legacy.md "asymmetric-domain bandwidth forwarding");
    NVIDIA's HybridEP (DeepEP hybrid-ep branch, docs "Hybrid-EP") keeps that hierarchy with
    the NVLink domain (GB200 NVL72) as the node. Balanced routing (:func:`moe_groups_hit`):
    NVLink carries every (token, destination rank) copy except the one to the same-index GPU,
    ``D (g-1)/g``, D = expert_tp x the EP ranks hit; the NIC the ``(N-1)/N`` of the nodes hit
    that are remote; the two at once, the slower one bounds (as :func:`all_to_all_seconds`,
    whose alltoall dispatcher sends all ``k`` copies)."""
    n = max(1, int(ranks))
    if n <= 1 or shard_token_bytes <= 0 or experts_per_token <= 0:
        return 0.0
    etp = max(1, int(expert_tp))
    rank_copies = etp * moe_groups_hit(experts, experts_per_token, n / etp)
    latency = _latency_s(n, inter_node) / 2
    g = max(1, min(int(ranks_per_domain), n))
    if g >= n:
        return (n - 1) / n * rank_copies * shard_token_bytes / bus_bytes_per_s + latency
    nodes = n / g
    remote = moe_groups_hit(experts, experts_per_token, nodes) * (nodes - 1) / nodes
    return max((g - 1) / g * rank_copies * shard_token_bytes / bus_bytes_per_s,
               remote * shard_token_bytes / nic_bytes_per_s) + latency




def nvlink_domain_gpus(gpu_name: str, gpus_per_node: int) -> int:
    """GPUs a rank reaches over NVLink: the node, or the GPU's larger NVLink domain
    (``NVLINK_DOMAIN_GPUS``)."""
    return max(int(gpus_per_node),
               int(value_by_gpu_prefix(NVLINK_DOMAIN_GPUS, gpu_name, 0)))


def nic_bytes_per_s(gpu) -> float:
    """Achieved per-GPU NIC rate of inter-node traffic that no hierarchy reduces (all-to-all):
    the GPU table's NIC bandwidth x ``INTER_NODE_COLLECTIVE_EFFICIENCY``."""
    return (gpu.inter_node_bytes_per_s or DEFAULT_INTER_NODE_BYTES_PER_S) \
        * INTER_NODE_COLLECTIVE_EFFICIENCY


#: Expert-parallel token dispatcher of Megatron-Core (MoEAlltoAllTokenDispatcher,
#: NVIDIA/Megatron-LM @ d98e8a64ddf34856e74b24714e3bedb2f5a39553
#: megatron/core/transformer/moe/token_dispatcher.py): per MoE layer and pass, permute ->
#: A2A(EP) -> AG(expert TP) -> sort_chunks (more than one local expert) | experts |
#: unsort -> RS(expert TP) -> A2A(EP) -> unpermute. HBM elements moved per dispatched token
#: and hidden element, forward: permute reads the token once and writes its ``k`` copies
#: (1 + k per token), unpermute reads the ``k`` expert outputs and writes the token (k + 1);
#: sort_chunks_by_idxs and its inverse each read and write every routed copy (2 k each).
#: The backward runs the same gathers/scatters the other way (permute <-> unpermute), the
#: same bytes. (TE fused ``moe_permute``/``moe_unpermute`` kernels, --moe-permute-fusion.)
MOE_PERMUTE_ELEMENTS_PER_TOKEN = 2.0           # x (1 + k): permute + unpermute
MOE_SORT_ELEMENTS_PER_ROUTED_COPY = 4.0        # x k: sort + unsort, read + write


def moe_permute_bytes(tokens: float, experts_per_token: float, hidden: float,
                      act_bytes: float, local_experts: float, tp: int = 1) -> float:
    """HBM bytes of one MoE layer's token permutation, one pass (forward or backward), for
    ``tokens`` tokens of a micro-batch on a rank: permute/unpermute over the rank's
    sequence-parallel shard ``tokens / tp`` (Megatron-Core requires sequence parallelism for
    MoE with TP: megatron/training/yaml_arguments.py "When using MoE and tensor parallelism,
    sequence parallelism must be used."), sort/unsort over the ``tokens * k`` routed copies the
    expert-TP all-gather brings (expert TP = TP):
    ``(2 (1 + k) tokens / tp + 4 k tokens [local experts > 1]) * hidden * act_bytes``
    (``MOE_PERMUTE_ELEMENTS_PER_TOKEN``, ``MOE_SORT_ELEMENTS_PER_ROUTED_COPY``)."""
    k = float(experts_per_token)
    if k <= 0 or tokens <= 0:
        return 0.0
    elements = MOE_PERMUTE_ELEMENTS_PER_TOKEN * (1.0 + k) * tokens / max(1, tp)
    if local_experts > 1:
        elements += MOE_SORT_ELEMENTS_PER_ROUTED_COPY * k * tokens
    return elements * hidden * act_bytes


#: Megatron-Core's unfused permute path (``--moe-permute-fusion`` off; NVIDIA/Megatron-LM @
#: d98e8a64ddf34856e74b24714e3bedb2f5a39553 megatron/core/transformer/moe/moe_utils.py
#: ``permute``/``unpermute``, the alltoall dispatcher applies the probs in the experts so
#: ``unpermute`` runs without them): ``tokens.index_select(0, sorted_indices)`` reads the
#: ``k`` routed rows of every token where TE's fused permute reads the token once (+ k - 1),
#: and ``unpermute`` writes a ``torch.zeros`` output before ``scatter_add_`` (+ 1), so the
#: forward moves ``k`` more hidden-sized elements per token than the fused kernels. Backward:
#: ``index_select``'s backward is ``zeros`` + ``index_add_`` (a zero-fill and the
#: read-modify-write of the output: + 2) and ``scatter_add_``'s is a gather of ``k`` rows
#: reading them one by one (+ k - 1): ``k + 1`` more. Elements of ``hidden`` per token of the
#: rank's sequence-parallel shard, as (x k, + constant): forward, backward.
MOE_UNFUSED_PERMUTE_FWD_ELEMENTS = (1.0, 0.0)
MOE_UNFUSED_PERMUTE_BWD_ELEMENTS = (1.0, 1.0)
#: Megatron-Core's eager router (``--moe-router-fusion`` off; moe_utils.py
#: ``topk_routing_with_score_function`` + router.py) against TE's
#: ``fused_topk_with_score_function`` (reads the logits, writes the probs and the routing map:
#: ~2.25 fp32 passes over the ``[tokens, experts]`` scores). The eager chain: score function
#: (read + write), expert bias add (read + write), group scores + group top-k (read), the
#: expanded group mask applied by ``masked_fill`` (read + write), ``torch.topk`` (read), dense
#: probs and routing map by ``zeros`` + ``scatter`` (about 1.25): ~9.5 passes, 7 more.
#: Backward: autograd through scatter/topk/masked_fill/score function (~6 passes) against the
#: fused backward's ~3: 3 more. fp32 passes over ``experts`` scores per token (fwd, bwd).
MOE_UNFUSED_ROUTER_EXTRA_FP32_PASSES = (7.0, 3.0)
#: forward HBM elements of the pointwise ops a selective recompute reruns, per output
#: element: a gated activation (SwiGLU: read gate and up, write) 3, a plain one (GELU) 2; a norm
#: (read, write) 2; RoPE on the q/k rotary slices (read, write) 2
GATED_ACT_FORWARD_ELEMENTS = 3.0
PLAIN_ACT_FORWARD_ELEMENTS = 2.0
NORM_FORWARD_ELEMENTS = 2.0
ROPE_FORWARD_ELEMENTS = 2.0


def moe_unfused_permute_bytes(tokens: float, experts_per_token: float, hidden: float,
                              act_bytes: float, tp: int = 1) -> tuple[float, float]:
    """(forward, backward) HBM bytes Megatron-Core's unfused permute/unpermute moves beyond the
    fused kernels', one MoE layer, for the rank's ``tokens / tp`` sequence-parallel shard
    (``MOE_UNFUSED_PERMUTE_FWD_ELEMENTS``, ``MOE_UNFUSED_PERMUTE_BWD_ELEMENTS``)."""
    k = float(experts_per_token)
    if k <= 0 or tokens <= 0:
        return 0.0, 0.0
    per = tokens / max(1, tp) * hidden * act_bytes
    (fk, fc), (bk, bc) = MOE_UNFUSED_PERMUTE_FWD_ELEMENTS, MOE_UNFUSED_PERMUTE_BWD_ELEMENTS
    return (fk * k + fc) * per, (bk * k + bc) * per


def moe_unfused_router_bytes(tokens: float, num_experts: float,
                             tp: int = 1) -> tuple[float, float]:
    """(forward, backward) HBM bytes of Megatron-Core's eager router chain beyond TE's fused
    top-k, one MoE layer, over the rank's ``tokens / tp`` shard
    (``MOE_UNFUSED_ROUTER_EXTRA_FP32_PASSES``, fp32 scores)."""
    if num_experts <= 0 or tokens <= 0:
        return 0.0, 0.0
    per = tokens / max(1, tp) * num_experts * 4.0
    fwd, bwd = MOE_UNFUSED_ROUTER_EXTRA_FP32_PASSES
    return fwd * per, bwd * per


def selective_recomputes_linear(name: str, kind: str, modules) -> bool:
    """Whether Megatron-Core's selective ``recompute_modules`` rerun this linear's forward:
    ``mla_up_proj`` the MLA q/kv up projections (fmest's ``q_b_proj`` / ``kv_b_proj``,
    Megatron's linear_q_up_proj / linear_kv_up_proj), ``mlp`` the dense MLP, ``moe`` the whole
    MoE layer (router, experts, shared experts), ``shared_experts`` the shared experts."""
    if not modules:
        return False
    if "mla_up_proj" in modules and name in ("q_b_proj", "kv_b_proj"):
        return True
    if "mlp" in modules and kind == "mlp":
        return True
    if "moe" in modules and kind in ("expert", "router", "shared_expert"):
        return True
    return "shared_experts" in modules and kind == "shared_expert"


def selective_recompute_linear_flops_per_token(model, modules) -> float:
    """Forward FLOPs per token of the linears ``modules`` recompute (whole model)."""
    return sum(2.0 * lin.in_features * lin.out_features * lin.layers * lin.active_copies
               for lin in model.linears
               if selective_recomputes_linear(lin.name, lin.kind, modules))


def selective_recompute_elementwise_elements_per_token(model, modules, *, tp: int = 1,
                                                       expert_tp: int = 1,
                                                       norm_divisor: float = 1.0) -> float:
    """Forward pointwise elements per token (whole model, one rank) the selective recompute
    reruns: the activation between the up and down projection of ``mlp`` (dense),
    ``moe_act`` / ``moe`` (routed experts), ``shared_experts`` / ``moe`` (shared experts),
    sized from each down projection's input (``GATED_ACT_FORWARD_ELEMENTS`` /
    ``PLAIN_ACT_FORWARD_ELEMENTS``); ``layernorm`` the two
    norms of every layer (``NORM_FORWARD_ELEMENTS``, over the sequence-parallel shard:
    ``norm_divisor``); ``mla_up_proj`` RoPE on the q heads' and the shared k's rotary slice."""
    if not modules:
        return 0.0
    gated = GATED_ACT_FORWARD_ELEMENTS if model.gated_mlp else PLAIN_ACT_FORWARD_ELEMENTS
    total = 0.0
    for lin in model.linears:
        if lin.out_features != model.hidden_size or lin.in_features == model.hidden_size:
            continue
        if lin.kind == "mlp" and "mlp" in modules:
            total += gated * lin.in_features / tp * lin.layers
        elif lin.kind == "expert" and ("moe_act" in modules or "moe" in modules):
            total += gated * lin.in_features / expert_tp * lin.layers * lin.active_copies
        elif lin.kind == "shared_expert" and ("shared_experts" in modules or "moe" in modules):
            total += gated * lin.in_features / tp * lin.layers * lin.active_copies
    if "layernorm" in modules:
        total += 2 * NORM_FORWARD_ELEMENTS * model.hidden_size / norm_divisor * model.num_layers
    if "mla_up_proj" in modules and model.kv_lora_rank:
        rope = (model.hf_config or {}).get("qk_rope_head_dim") or 0
        total += ROPE_FORWARD_ELEMENTS * rope * (model.num_attention_heads / tp + 1) \
            * model.num_layers
    return total


def p2p_seconds(bytes_sent: float, bytes_per_s: float, inter_node: bool = False) -> float:
    """One point-to-point transfer (pipeline stage boundary)."""
    if bytes_sent <= 0:
        return 0.0
    return bytes_sent / bytes_per_s + (INTER_NODE_LATENCY_S if inter_node else INTRA_NODE_LATENCY_S)


def pipeline_bubble_fraction(pp: int, microbatches: int, *, schedule: str = "1f1b",
                             virtual_stages: int = 1) -> float:
    """Idle fraction relative to the ideal compute time: ``(p-1)/m`` for GPipe and 1F1B,
    ``(p-1)/(m v)`` for the interleaved schedule (Narayanan et al. 2021, arXiv:2104.04473,
    §2.2.1-2.2.2)."""
    if pp <= 1:
        return 0.0
    chunks = virtual_stages if schedule == "interleaved" else 1
    return (pp - 1) / (max(1, microbatches) * max(1, chunks))


def deepspeed_pipe_transfers(pp: int) -> int:
    """Blocking activation/gradient transfers per micro-batch on the busiest stage of DeepSpeed's
    ``PipelineEngine`` (``DEEPSPEED_PIPE_BLOCKING_TRANSFERS``): 4 on a middle stage (a
    neighbour on each side), 2 when the pipeline has only end stages (pp = 2), 0 without one."""
    if pp <= 1:
        return 0
    return DEEPSPEED_PIPE_BLOCKING_TRANSFERS["middle" if pp >= 3 else "end"]


def deepspeed_pipe_extra_seconds(*, pp: int, tp: int, activation_bytes: float,
                                 p2p_bytes_per_s: float, p2p_inter_node: bool,
                                 tp_bytes_per_s: float, tp_inter_node: bool) -> float:
    """Seconds per micro-batch DeepSpeed's ``PipelineEngine`` spends beyond the two
    non-overlapped transfers of the TP-split activation that every pipeline is charged
    (estimator ``model_parallel_comm``): the other blocking transfers of
    :func:`deepspeed_pipe_transfers` (``activation_bytes / tp`` each: the engine sends each
    stage output partitioned over the TP group) and, with TP, the
    ``DEEPSPEED_PIPE_PARTITION_GATHERS`` TP all-gathers that rebuild the full
    ``activation_bytes`` tensor (``PartitionedTensor.full``), all on the compute stream."""
    if pp <= 1 or activation_bytes <= 0:
        return 0.0
    extra = max(0, deepspeed_pipe_transfers(pp) - 2) * p2p_seconds(
        activation_bytes / max(1, tp), p2p_bytes_per_s, p2p_inter_node)
    if tp > 1:
        extra += DEEPSPEED_PIPE_PARTITION_GATHERS * all_gather_seconds(
            activation_bytes, tp, tp_bytes_per_s, tp_inter_node)
    return extra


def group_is_inter_node(size: int, stride: int, gpus_per_node: int) -> bool:
    """Whether a process group of ``size`` ranks ``stride`` apart spans nodes (ranks are laid
    out tp fastest, then cp, then dp, then pp; Megatron-LM ``parallel_state`` order)."""
    return size > 1 and size * stride > gpus_per_node


def exposed_comm_seconds(comm_seconds: float, overlap_window_seconds: float) -> float:
    """Communication left on the critical path when it overlaps compute of
    ``overlap_window_seconds``: the part that does not fit the window, plus
    ``OVERLAP_INTERFERENCE_FRACTION`` of the hidden part (SM/HBM contention)."""
    hidden = min(comm_seconds, max(0.0, overlap_window_seconds))
    return comm_seconds - hidden + OVERLAP_INTERFERENCE_FRACTION * hidden


def pcie_seconds(bytes_moved: float, gpu) -> float:
    """Host<->device copy time over PCIe at ``PCIE_EFFICIENCY``."""
    bw = (gpu.pcie_bytes_per_s or DEFAULT_PCIE_BYTES_PER_S) * PCIE_EFFICIENCY
    return bytes_moved / bw


# ---------------------------------------------------------------------------------------------
# Context parallelism: ring attention (PyTorch ``context_parallel``, as used by torchtitan)
# ---------------------------------------------------------------------------------------------
# torch/distributed/tensor/experimental/_attention.py (torch 2.6, the torchtitan rows' torch):
# the sequence is split into 2*cp chunks, rank r holding chunks r and 2cp-1-r (load balance,
# on by default); the attention runs as cp SDPA calls per layer (step 0: the local causal
# block; steps 1..cp-1: full Q x half KV or half Q x full KV, non-causal), so the FLOPs equal
# the causal total. Costs that the single-GPU kernel does not have:
#   * forward K,V arrive by ONE all-gather (``_RotateMethod.ALL_GATHER``, the default), issued
#     at step 0 and waited at step 1: it overlaps only the local causal block;
#   * backward: the K,V all-gather again (overlapping backward step 0) and the dK,dV partial
#     sums rotated in fp32 (``convert_to_f32``) by a permute after every step, each overlapping
#     the next step's kernel; the last one is waited after the loop (exposed);
#   * per-step merges in eager fp32 (``_SDPAMerger``, ``_partial_update`` = torch.cat of the
#     whole buffer): memory-bound traffic below;
#   * callers expand K,V to the query heads before SDPA (torchtitan/HF ``repeat_kv``), so the
#     ring carries ``num_attention_heads`` heads of K and V.

#: HBM bytes per output element (T x heads x head_dim) per forward ring step (steps >= 1): cast
#: of the block output to fp32 (r2 w4), ``out - block_out`` (r4 r4 w4), times the sigmoid of the
#: LSE difference (r4 w4), ``out - ...`` (r4 r4 w4), ``torch.cat`` of the merged half into the
#: full buffer (r4 w4): 46 bytes (op list of ``_SDPAMerger._merge_one``).
RING_MERGE_FWD_BYTES_PER_OUT_ELEMENT = 46.0
#: HBM bytes per K/V element per forward ring step: ``torch.cat`` of K and V into the send
#: buffer (r2 w2).
RING_KV_PACK_BYTES_PER_KV_ELEMENT = 4.0
#: Backward, per K/V element per step: pack (r2 w2 = 4), fp32 accumulate of the step's dK,dV
#: into the received partial sum (``_partial_update`` add + cat: r4 r2 w4 on the half, r4 w4 on
#: the whole = 13), fp32 ``torch.cat`` of dK,dV for the send (r4 w4 = 8): 25 bytes; per query
#: element: fp32 accumulate of dQ (13 bytes).
RING_BWD_BYTES_PER_KV_ELEMENT = 25.0
RING_BWD_BYTES_PER_Q_ELEMENT = 13.0
#: Bytes per element of the rotated dK,dV partial sums (fp32, ``convert_to_f32 = True``).
RING_GRAD_BYTES_PER_ELEMENT = 4.0


def ring_attention_costs(*, cp: int, tokens: float, q_heads: float, head_dim: float,
                         act_bytes: float, fwd_seconds: float, bwd_seconds: float,
                         recompute: bool, gather_bytes_per_s: float, p2p_bytes_per_s: float,
                         gather_inter_node: bool = False, p2p_inter_node: bool = False
                         ) -> dict[str, float]:
    """Extra cost of PyTorch ring attention over the same FLOPs on one GPU, per micro-batch and
    per layer-set whose attention forward/backward take ``fwd_seconds``/``bwd_seconds`` (all
    cp steps). ``tokens`` = local tokens ``T``; K,V carry ``q_heads`` heads (expanded).

    Returns ``memory_bytes`` (eager merge/accumulate traffic, fwd + recompute + bwd) and
    ``exposed_seconds`` (communication not hidden behind the step it overlaps, plus the
    interference share of the hidden part; see the module notes above)."""
    if cp <= 1:
        return {"memory_bytes": 0.0, "exposed_seconds": 0.0, "comm_seconds": 0.0}
    steps = cp - 1
    kv_el = 2.0 * tokens * q_heads * head_dim
    n_fwd = 2 if recompute else 1
    memory_bytes = _ring_merge_bytes(steps, tokens * q_heads * head_dim, kv_el, n_fwd)
    kv_bytes = kv_el * act_bytes
    gather = all_gather_seconds(kv_bytes * cp, cp, gather_bytes_per_s, gather_inter_node)
    step_fwd = fwd_seconds / cp
    step_bwd = bwd_seconds / cp
    exposed = n_fwd * exposed_comm_seconds(gather, step_fwd)  # overlaps the local block only
    exposed += exposed_comm_seconds(gather, step_bwd)
    dkv = p2p_seconds(kv_el * RING_GRAD_BYTES_PER_ELEMENT, p2p_bytes_per_s, p2p_inter_node)
    exposed += steps * exposed_comm_seconds(dkv, step_bwd) + dkv  # last permute after the loop
    comm = (n_fwd + 1) * gather + cp * dkv
    return {"memory_bytes": memory_bytes, "exposed_seconds": exposed, "comm_seconds": comm}


# Transformer Engine's context parallelism (Megatron-Core / NeMo, ``cp_comm_type`` "p2p", the
# default): NVIDIA/TransformerEngine @ 9c61cd7e5e0c93217ad38d4682568ff5dde4f08b
# transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py
# ``AttnFuncWithCPAndKVP2P``. Unlike PyTorch's ring above:
#   * K,V travel at their own head count (``torch.cat((k, v))`` of the GQA K,V: no expansion to
#     the query heads) in the activation dtype;
#   * forward: cp-1 ring steps; step i sends the KV block it holds (``flash_attn_p2p_communicate``)
#     while it runs its attention on two alternating streams, so each send overlaps one step;
#   * backward: the ring carries K,V and dK,dV together (``p2p_comm_buffers`` of shape
#     (2, *kv.shape), dtype kv.dtype) on steps 0..cp-2 and dK,dV alone on the last step, whose
#     receive is waited after the loop (exposed);
#   * the per-step output/LSE corrections are ``jit_fuser`` kernels; their bytes are counted
#     with the eager merge constants above (an upper bound: no fused-kernel trace yet).


def _ring_merge_bytes(steps: int, out_el: float, kv_el: float, n_fwd: int) -> float:
    """HBM bytes of a ring's per-step merges: the output/LSE correction and K,V packing of
    each forward step (``n_fwd`` forwards: 2 with recompute), the dK,dV accumulation and the
    dQ correction of each backward step (the eager constants above)."""
    fwd = steps * (RING_MERGE_FWD_BYTES_PER_OUT_ELEMENT * out_el
                   + RING_KV_PACK_BYTES_PER_KV_ELEMENT * kv_el)
    bwd = steps * (RING_BWD_BYTES_PER_KV_ELEMENT * kv_el + RING_BWD_BYTES_PER_Q_ELEMENT * out_el)
    return n_fwd * fwd + bwd


def te_p2p_ring_attention_costs(*, cp: int, tokens: float, q_heads: float, kv_heads: float,
                                head_dim: float, act_bytes: float, fwd_seconds: float,
                                bwd_seconds: float, recompute: bool, p2p_bytes_per_s: float,
                                p2p_inter_node: bool = False) -> dict[str, float]:
    """Extra cost of Transformer Engine's p2p context parallelism (notes above) over the same
    FLOPs on one GPU, per micro-batch and per layer-set whose attention forward/backward take
    ``fwd_seconds``/``bwd_seconds`` (all cp steps); same keys as :func:`ring_attention_costs`.
    ``tokens`` = local tokens; K,V carry ``kv_heads`` heads."""
    if cp <= 1:
        return {"memory_bytes": 0.0, "exposed_seconds": 0.0, "comm_seconds": 0.0}
    steps = cp - 1
    kv_el = 2.0 * tokens * kv_heads * head_dim
    n_fwd = 2 if recompute else 1
    memory_bytes = _ring_merge_bytes(steps, tokens * q_heads * head_dim, kv_el, n_fwd)
    kv_send = p2p_seconds(kv_el * act_bytes, p2p_bytes_per_s, p2p_inter_node)
    kv_dkv_send = p2p_seconds(2.0 * kv_el * act_bytes, p2p_bytes_per_s, p2p_inter_node)
    step_fwd = fwd_seconds / cp
    step_bwd = bwd_seconds / cp
    exposed = n_fwd * steps * exposed_comm_seconds(kv_send, step_fwd)
    exposed += steps * exposed_comm_seconds(kv_dkv_send, step_bwd) + kv_send  # last dK,dV
    comm = n_fwd * steps * kv_send + steps * kv_dkv_send + kv_send
    return {"memory_bytes": memory_bytes, "exposed_seconds": exposed, "comm_seconds": comm}
