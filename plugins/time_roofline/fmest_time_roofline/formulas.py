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

import math
from typing import Optional

from fmest.physics.gpu_prefix import value_by_gpu_prefix

# the constants shared with the planner's array formulas, defined once in the core; the ones
# this module does not use itself are re-exported (``F.X``) for the plugin and the tests
from fmest.physics.time_constants import (
    COMPILE_MEMORY_BOUND_SPEEDUP,
    DEFAULT_INTER_NODE_BYTES_PER_S,
    DEFAULT_PCIE_BYTES_PER_S,
    HBM_EFFICIENCY,
    INTER_NODE_COLLECTIVE_EFFICIENCY,
    INTER_NODE_LATENCY_S,
    INTRA_NODE_LATENCY_S,
    OVERLAP_INTERFERENCE_FRACTION,
    PCIE_EFFICIENCY,
    intra_node_collective_efficiency,
)
from fmest.physics.time_constants import (
    CPU_ADAM_PARAMS_PER_S_PER_NODE as CPU_ADAM_PARAMS_PER_S_PER_NODE,
)
from fmest.physics.time_constants import (
    INTRA_NODE_COLLECTIVE_EFFICIENCY as INTRA_NODE_COLLECTIVE_EFFICIENCY,
)
from fmest.physics.time_constants import (
    INTRA_NODE_COLLECTIVE_EFFICIENCY_BY_GPU as INTRA_NODE_COLLECTIVE_EFFICIENCY_BY_GPU,
)
from fmest.transforms import dtype_info

# ---------------------------------------------------------------------------------------------
# Efficiency constants
# ---------------------------------------------------------------------------------------------

#: Best achievable fraction of dense peak for a large bf16 GEMM ("MAMF"), by GPU family
#: (HN §3, ml-engineering MAMF table: A100 SXM 271.2/312, H100 SXM 794.5/989, B200 1745/2250,
#: MI300X 668.4/1300, Gaudi2 418.7/432 ...). Keyed by a prefix of ``GpuSpec.name``.
MAMF_FRACTION_BF16 = {
    "A100-SXM": 0.869, "A100-PCIE": 0.811, "H100-SXM": 0.803, "H800": 0.803, "H200": 0.803,
    "GH200": 0.838, "B200": 0.776, "B300": 0.786, "GB200": 0.729, "MI300X": 0.514,
    "MI325X": 0.604, "GAUDI2": 0.969, "GAUDI3": 0.741,
}
#: Same for fp8 GEMMs (HN §3: H100 1402.6/1979, H200 1453.4/1979, B200 3432.5/4500 ...).
MAMF_FRACTION_FP8 = {
    "H100-SXM": 0.709, "H800": 0.709, "H200": 0.734, "GH200": 0.776, "B200": 0.763,
    "B300": 0.745, "GB200": 0.723, "GAUDI2": 0.955, "GAUDI3": 0.769,
}
#: Fallback when a GPU is not in the MAMF table: the median of the NVIDIA rows of HN §3.
MAMF_FRACTION_DEFAULT = 0.80

#: Clock derate of power-capped parts, applied to every FLOP peak. H100-SXM-96GB (Meta Grand
#: Teton, 500 W default limit, torchtitan docs/performance.md): the TorchTitan paper
#: (arXiv:2410.06511) puts its true peak between H100 NVL (835.5 TFLOP/s at 400 W) and SXM
#: (989.4 at 700 W); linear in power, 500 W gives 835.5 + (989.4-835.5)*100/300 = 886.8,
#: i.e. 0.896 of the tabulated 989.4.
POWER_CAP_DERATE = {"H100-SXM-96GB": 0.896}

#: GEMM-shape saturation: each GEMM dimension d contributes a factor d / (d + D_HALF). With
#: D_HALF = 64 a 4096-wide dimension loses 1.5 %, a LoRA rank of 16 loses 80 % (a tile of a
#: tensor-core GEMM is 64-256 wide; dimensions well below one tile leave the tensor cores idle,
#: NVIDIA "Matrix Multiplication Background User's Guide", tile/wave quantization). The MAMF
#: fractions above are already measured at the best (large) shape, so this factor only
#: describes the fall-off. Calibrated (global) within the 32-128 range that tile sizes allow.
GEMM_HALF_SATURATION_DIM = 64.0

#: Attention core = its own op class (not a GEMM): fraction of dense bf16 peak a fused (flash)
#: attention kernel reaches, forward and backward separately, by architecture. FLOPs are counted
#: the FlashAttention way (causal half; backward = 2.5x forward).
#: * Hopper (PyTorch SDPA's flash backend is FlashAttention-2): Shah et al. 2024, FlashAttention-3
#:   (arXiv:2407.08608) Fig. 5-6, H100 SXM5, head dim 128, seq 16k: FA2 forward causal 335
#:   TFLOP/s, backward 322 TFLOP/s of 989.4 -> 0.339 / 0.325 (abstract: "FA2 achieves only 35 %
#:   utilization on H100").
#: * Ampere: FlashAttention-2 (Dao 2023, arXiv:2307.08691) reaches 50-73 % of A100 peak forward;
#:   A100 causal head-dim-128 runs reach 50-60 % (FA2 forward 156-187 TFLOP/s at 1k-4k tokens,
#:   liangan1/GPU_travel flash-attn benchmark) -> 0.60 forward; no A100 backward figure was
#:   retrieved, so the backward keeps the former combined value 0.60.
#: * Others: 0.45 (between the two).
ATTENTION_FWD_EFFICIENCY = {"A100": 0.60, "A10": 0.60, "H100": 0.339, "H800": 0.339,
                            "H200": 0.339, "H20": 0.339}
ATTENTION_BWD_EFFICIENCY = {"A100": 0.60, "A10": 0.60, "H100": 0.325, "H800": 0.325,
                            "H200": 0.325, "H20": 0.325}
ATTENTION_EFFICIENCY_DEFAULT = 0.45
#: Backwards-compatible alias (forward table).
ATTENTION_EFFICIENCY = ATTENTION_FWD_EFFICIENCY

#: Hopper attention kernels written for it (cuDNN fused attention behind Transformer Engine's
#: DotProductAttention, FlashAttention-3): Shah et al. 2024 (arXiv:2407.08608) abstract "up to
#: 740 TFLOP/s (75 % utilization)" in FP16; causal head-dim-128 forward ~640 TFLOP/s at 16k
#: (Fig. 5) and backward 1.5-1.75x FA2's 322 TFLOP/s (Fig. 6). Taken below those peaks for
#: the 2k-8k sequences of training runs: 0.60 forward, 0.50 backward. Used for stacks whose
#: attention kernel is ``te-fused`` (core/fmest/data/stacks.toml); other GPUs keep the FA2 table.
FUSED_ATTENTION_FWD_EFFICIENCY = {"H100": 0.60, "H800": 0.60, "H200": 0.60, "H20": 0.60}
FUSED_ATTENTION_BWD_EFFICIENCY = {"H100": 0.50, "H800": 0.50, "H200": 0.50, "H20": 0.50}

#: The flash-attention backward pass executes 2.5x the forward FLOPs (it recomputes Q K^T:
#: 5 matmuls vs 2; Dao 2023, Algorithm 2; torch.utils.flop_counter sdpa_backward_flop_count).
FLASH_BACKWARD_FLOPS_FACTOR = 2.5

# HBM_EFFICIENCY and COMPILE_MEMORY_BOUND_SPEEDUP: fmest.physics.time_constants (imported above;
# the planner's array formulas read the same objects).

#: Share of a step in which no useful kernel runs in an eager PyTorch training loop (kernel
#: launch gaps, Python, data loading, host syncs, logging). The MFU survey of HN §2 puts
#: well-tuned runs at 38-56 % of peak while MAMF is 80-87 %; this factor covers the part of
#: that gap that is not memory-bound or communication time. Calibrated (global).
FRAMEWORK_OVERHEAD_FRACTION = 0.15

#: Host (CPU) time per dispatched ATen op of eager PyTorch: Python, pybind11, the autograd
#: and ATen dispatchers, allocator and cudaLaunchKernel, "~5-25 us of CPU-side work per op"
#: before its kernel runs (J. Huang Lin, "From PyTorch op to kernel launch", table of dispatch
#: layers; H. He 2022, "Making Deep Learning Go Brrrr From First Principles", the overhead
#: regime: "overhead: everything else"). Taken at 10 us, inside that range. Kernels run
#: asynchronously, so host time only shows when it exceeds the GPU's: the step is the larger of
#: the two (``host_dispatch_seconds``). Check, not fit: the Qwen README's 256-token LoRA rows
#: (A100, 1.8B/7B/14B) imply 9.6-10.7 us per op with the counts below.
HOST_SECONDS_PER_EAGER_OP = 10e-6
#: ATen ops dispatched per decoder layer and micro-batch by eager transformers code (forward
#: plus backward), by activation checkpointing: counted with a TorchDispatchMode over
#: transformers 5.23 LlamaForCausalLM (sdpa, torch 2.13) at 2 and 4 layers, the difference
#: halved (``python benchmarks/count_eager_ops.py``): 77 + 142 without checkpointing,
#: 70 + 268 with full checkpointing (the backward re-runs the forward).
EAGER_OPS_PER_LAYER = {"none": 219.0, "selective": 219.0, "full": 338.0}
#: Extra ops per LoRA-adapted linear per layer (PEFT 0.21 LoRA, dropout 0.05): (316 - 219) / 4
#: without checkpointing, (487 - 338) / 4 with it (same count, q/k/v/o adapted).
EAGER_OPS_PER_LORA_MODULE = {"none": 24.0, "selective": 24.0, "full": 37.0}
#: Ops outside the layers (embedding, final norm, head, loss) per micro-batch, same count.
EAGER_OPS_OUTSIDE_LAYERS = 65.0


def host_dispatch_seconds(*, layers: float, checkpointing: str, lora_modules_per_layer: float,
                          micro_batches: int) -> float:
    """Host seconds to dispatch the eager ops of ``micro_batches`` forward+backward passes of
    ``layers`` decoder layers (``EAGER_OPS_*`` x ``HOST_SECONDS_PER_EAGER_OP``)."""
    ckpt = checkpointing if checkpointing in EAGER_OPS_PER_LAYER else "none"
    per_layer = EAGER_OPS_PER_LAYER[ckpt] + EAGER_OPS_PER_LORA_MODULE[ckpt] \
        * lora_modules_per_layer
    ops = layers * per_layer + EAGER_OPS_OUTSIDE_LAYERS
    return ops * micro_batches * HOST_SECONDS_PER_EAGER_OP


# Collective efficiencies and latencies, the overlap interference, the PCIe link and the CPU-Adam
# rate: fmest.physics.time_constants (imported above), shared with fmest.plan.vector.

# ---------------------------------------------------------------------------------------------
# Elementwise (memory-bound) traffic
# ---------------------------------------------------------------------------------------------

#: Bytes per element moved by one eager RMSNorm/LayerNorm forward in bf16 (HF LlamaRMSNorm:
#: upcast r2 w4, square+mean r4, multiply by rsqrt r4 w4, downcast r4 w2, weight r2 w2 -> 28).
NORM_BYTES_PER_ELEMENT = 28.0
#: Residual add: read two bf16 tensors, write one.
RESIDUAL_BYTES_PER_ELEMENT = 6.0
#: Rotary embedding on q and k (q*cos + rotate_half(q)*sin: 4 ops, ~16 bytes per element).
ROPE_BYTES_PER_ELEMENT = 16.0
#: Head reshapes/transposes of q, k, v and the attention output (one copy each, r2 w2).
LAYOUT_BYTES_PER_ELEMENT = 4.0
#: Gated activation silu(gate)*up (silu r2 w2, mul r4 w2) per intermediate element; GELU r2 w2.
GATED_ACT_BYTES_PER_ELEMENT = 10.0
ACT_BYTES_PER_ELEMENT = 4.0
#: Backward of elementwise ops reads the incoming gradient and the saved inputs and writes the
#: input gradient: about twice the forward traffic.
ELEMENTWISE_BACKWARD_FACTOR = 2.0
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
#: float8 training (torchao/TE dynamic scaling): each GEMM operand is read in bf16 for the amax,
#: read again and written as fp8 (r2 r2 w1 = 5 bytes per element). These are elementwise
#: kernels: under torch.compile Inductor fuses the amax reduction and the cast with the
#: neighbouring elementwise ops (torchao float8 README: "torch.compile is required to get
#: performance" from float8 training), so they get ``COMPILE_MEMORY_BOUND_SPEEDUP`` like the
#: other elementwise traffic; eager they run as separate kernels.
FP8_CAST_BYTES_PER_ELEMENT = 5.0
#: foreach AdamW runs ~8 multi-tensor kernels (weight decay, two lerps/mults, sqrt, div, add,
#: addcdiv): about 3x the traffic of the single-pass fused kernel (torch/optim/adamw.py).
FOREACH_OPTIMIZER_PASS_FACTOR = 3.0


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


def power_cap_derate(gpu_name: str) -> float:
    """Clock derate of power-capped variants (see ``POWER_CAP_DERATE``; 1.0 otherwise)."""
    return POWER_CAP_DERATE.get(gpu_name, 1.0)


def attention_efficiency(gpu_name: str, direction: str = "fwd", kernel: str = "sdpa") -> float:
    """Fraction of bf16 peak reached by fused attention, ``direction`` ``fwd`` or ``bwd``
    (``ATTENTION_FWD_EFFICIENCY`` / ``ATTENTION_BWD_EFFICIENCY``: FA3 paper figures for FA2
    on H100, FA2 paper range on A100); ``kernel`` ``te-fused`` (a stack's cuDNN/FA3-class
    kernel) uses ``FUSED_ATTENTION_*_EFFICIENCY`` where the GPU has a figure."""
    default = value_by_gpu_prefix(ATTENTION_BWD_EFFICIENCY if direction == "bwd"
                                  else ATTENTION_FWD_EFFICIENCY, gpu_name,
                                  ATTENTION_EFFICIENCY_DEFAULT)
    if kernel == "te-fused":
        fused = FUSED_ATTENTION_BWD_EFFICIENCY if direction == "bwd" \
            else FUSED_ATTENTION_FWD_EFFICIENCY
        return value_by_gpu_prefix(fused, gpu_name, default)
    return default


def gemm_shape_efficiency(m: float, k: float, n: float,
                          half_dim: float = GEMM_HALF_SATURATION_DIM) -> float:
    """Saturating fraction (0-1] of the best-shape GEMM rate for an (m x k) @ (k x n) GEMM:
    the product of d / (d + half_dim) over the three dims (tile quantization, NVIDIA
    "Matrix Multiplication Background User's Guide")."""
    factor = 1.0
    for dim in (m, k, n):
        factor *= dim / (dim + half_dim)
    return factor


def gemm_seconds(m: float, k: float, n: float, *, peak_flops_per_s: float, max_fraction: float,
                 hbm_bytes_per_s: float, bytes_per_element: float,
                 half_dim: float = GEMM_HALF_SATURATION_DIM) -> float:
    """Roofline time of one GEMM: ``max(2mkn / (peak * MAMF * shape), bytes / (HBM * eff))``
    with bytes = (mk + kn + mn) elements (Williams et al. 2009, "Roofline"; NVIDIA Matrix
    Multiplication Background guide, arithmetic intensity)."""
    if m <= 0 or k <= 0 or n <= 0:
        return 0.0
    flops = 2.0 * m * k * n
    rate = peak_flops_per_s * max_fraction * gemm_shape_efficiency(m, k, n, half_dim)
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


def attention_context_tokens(seq_len: int, *, causal: bool = True,
                             sliding_window: Optional[int] = None) -> float:
    """Average number of keys a query attends to: ``s/2`` under a causal mask (the lower
    triangle; flash kernels skip the masked blocks), ``s`` without, at most the window."""
    ctx = seq_len / 2.0 if causal else float(seq_len)
    if sliding_window:
        ctx = min(ctx, float(sliding_window))
    return ctx


def attention_forward_flops_per_token(model, seq_len: int, *, causal: bool = True) -> float:
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


def training_flops_per_token(model, *, seq_len: int, technique: str = "full",
                             lora_modules=(), lora_rank: int = 16,
                             checkpointing: str = "none") -> dict[str, float]:
    """Model and hardware FLOPs per trained token.

    * full training: matmuls ``6 N_mm`` (forward 2, backward 4: input and weight gradients;
      Kaplan et al. 2020, Narayanan et al. 2021) + attention core ``3 x`` forward;
    * LoRA/QLoRA: the frozen base needs the forward and the input-gradient backward only,
      ``4 N_mm``, plus ``6 r (in + out)`` per adapted module (Hu et al. 2021);
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
            + 3.0 * lora_adapter_forward_flops_per_token(lora_modules, lora_rank)
    head_fwd = sum(2.0 * in_features * out_features
                   for in_features, out_features in head_linears(model))
    if checkpointing == "full":
        adapters = lora_adapter_forward_flops_per_token(lora_modules, lora_rank) \
            if technique != "full" else 0.0
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
                                          per_element=None) -> float:
    """HBM bytes of the unfused (eager) elementwise ops of one transformer layer, forward plus
    backward, per token: two norms, two residual adds, RoPE on q/k, head layout copies and the
    MLP activation (op-by-op traffic in the constants above; backward = 2x forward). Scales
    with ``act_bytes / 2`` (the constants are for bf16 activations). Under tensor parallelism
    the head/intermediate terms split over ``tp``; norms and residual adds are replicated on
    every rank unless sequence parallelism splits them too (Korthikanti et al. 2022, §4.2.2).
    ``per_element(op, eager_bytes)`` gives a training stack's bytes per element of ``op``
    (``norm``, ``residual``, ``rope``, ``layout``, ``activation``) when it fuses the chain
    (fmest.stacks.ResolvedStack.bytes_per_element); default: the eager figures."""
    def each(op, eager):
        return eager if per_element is None else per_element(op, eager)
    hidden = model.hidden_size
    q_dim = model.num_attention_heads * (model.qk_head_dim or model.head_dim)
    kv_dim = model.num_kv_heads * (model.qk_head_dim or model.head_dim)
    gated = model.gated_mlp if gated is None else gated
    if model.is_moe:
        inter = model.experts_per_token * (model.moe_intermediate_size or model.intermediate_size)
        shared = [lin for lin in model.linears if lin.kind == "shared_expert"
                  and lin.in_features == hidden]
        inter += max((lin.out_features for lin in shared), default=0)
    else:
        inter = model.intermediate_size
    replicated = (2 * each("norm", NORM_BYTES_PER_ELEMENT) * hidden
                  + 2 * each("residual", RESIDUAL_BYTES_PER_ELEMENT) * hidden)
    split = (each("rope", ROPE_BYTES_PER_ELEMENT) * (q_dim + kv_dim)
             + each("layout", LAYOUT_BYTES_PER_ELEMENT) * (2 * q_dim + 2 * kv_dim)
             + each("activation", GATED_ACT_BYTES_PER_ELEMENT if gated
                    else ACT_BYTES_PER_ELEMENT) * inter)
    fwd = replicated / (tp if sequence_parallel else 1) + split / tp
    return fwd * (1.0 + ELEMENTWISE_BACKWARD_FACTOR) * act_bytes / 2.0


def loss_bytes_per_token(vocab_size: int, loss: str = "standard") -> float:
    """HBM bytes of the cross-entropy over the vocabulary per token, forward and backward."""
    return CE_BYTES_PER_LOGIT.get(loss, CE_BYTES_PER_LOGIT["standard"]) * vocab_size


def eager_attention_bytes_per_token_per_layer(heads: float, seq_len: int) -> float:
    """HBM bytes of materialised s x s attention scores per token per layer (eager attention
    computes the full square and masks it), forward and backward."""
    return EAGER_SCORE_BYTES_PER_ELEMENT * heads * seq_len * (1.0 + ELEMENTWISE_BACKWARD_FACTOR)


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
                         compiled: bool = False) -> float:
    """Time of memory-bound work at ``HBM_EFFICIENCY`` of peak bandwidth (HN §4), divided by
    ``COMPILE_MEMORY_BOUND_SPEEDUP`` under torch.compile."""
    seconds = bytes_moved / (hbm_bytes_per_s * HBM_EFFICIENCY)
    return seconds / COMPILE_MEMORY_BOUND_SPEEDUP if compiled else seconds


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
    B200 with 50 GB/s NICs reach 377 GB/s busbw = 36.5 GB/s per GPU on the wire)."""
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
                       inter_node: bool = False) -> float:
    """All-to-all: each rank sends ``(n-1)/n`` of its buffer (MoE dispatch/combine,
    Lepikhin et al. 2020 GShard)."""
    if n <= 1 or bytes_per_rank <= 0:
        return 0.0
    return (n - 1) / n * bytes_per_rank / bus_bytes_per_s + _latency_s(n, inter_node) / 2


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
    out_el = tokens * q_heads * head_dim
    kv_el = 2.0 * tokens * q_heads * head_dim
    fwd_bytes = steps * (RING_MERGE_FWD_BYTES_PER_OUT_ELEMENT * out_el
                         + RING_KV_PACK_BYTES_PER_KV_ELEMENT * kv_el)
    bwd_bytes = steps * (RING_BWD_BYTES_PER_KV_ELEMENT * kv_el
                         + RING_BWD_BYTES_PER_Q_ELEMENT * out_el)
    n_fwd = 2 if recompute else 1
    memory_bytes = n_fwd * fwd_bytes + bwd_bytes
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
