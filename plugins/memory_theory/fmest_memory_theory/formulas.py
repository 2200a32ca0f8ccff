"""Pure memory formulas, bytes in and bytes out. Units are in the names; every constant below
is named and sourced. docs/memory_model.md explains how they combine into a step's peak.

Notation (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
Models", arXiv:2205.05198, section 4): ``T`` tokens of one micro-batch on one GPU (``b*s/cp``),
``h`` hidden size, ``a`` attention heads, ``s`` sequence length, ``t`` tensor-parallel size.
"""

from __future__ import annotations

from fmest.models.spec import LAYER_NORM_MODEL_TYPES as _LAYER_NORM_MODEL_TYPES  # noqa: E402

# -- element sizes --------------------------------------------------------------------------
#: Bytes per element of each training dtype, and the fp8 storage rule, are core's single table
#: :data:`fmest.transforms.DTYPES` (resolved per job into ``ctx.transforms.optimizer``).
from fmest.transforms import FP32_BYTES  # noqa: E402

INT8_BYTES = 1

# -- quantized base weights -----------------------------------------------------------------
#: NF4 stores 4 bits per weight (Dettmers et al. 2023, QLoRA, arXiv:2305.14314, section 3).
NF4_BYTES_PER_PARAM = 0.5
#: QLoRA block size for the first quantization level: one absmax per 64 weights (section 3).
NF4_BLOCK_SIZE = 64
#: Double quantization: absmaxes quantized to 8 bits in blocks of 256 with one fp32 constant
#: per block (QLoRA section 3: 32/64 = 0.5 bit -> 8/64 + 32/(64*256) = 0.127 bit per param).
NF4_DQ_BLOCK_SIZE = 256
#: LLM.int8 (Dettmers et al. 2022, arXiv:2208.07339): int8 weights plus one fp32 scale per
#: output row (vector-wise quantization).
INT8_ROW_SCALE_BYTES = 4

# -- LoRA -----------------------------------------------------------------------------------
#: peft keeps LoRA adapters in fp32 (``autocast_adapter_dtype=True``) and casts each adapter's
#: input to the adapter dtype, so every adapted module saves an fp32 copy of its input
#: (docs/research/trace_feasibility.md section 2b: 34.0 vs ~24 GiB activations, 7B r16).
PEFT_ADAPTER_BYTES = FP32_BYTES

# -- activations ----------------------------------------------------------------------------
#: PyTorch RMSNorm/LayerNorm implementations in transformers, torchtune and torchtitan upcast
#: the input to fp32 and keep that copy for backward (``hidden_states.to(torch.float32)``).
NORM_UPCAST_BYTES = FP32_BYTES
#: ...and ``weight * normed.to(dtype)`` keeps the pre-scale compute-dtype tensor for the
#: weight gradient: one more compute-dtype copy per eager norm (see ``norm_saved_bytes``).
NORM_EAGER_PRESCALE_COPIES = 1
#: torch.nn.LayerNorm model types (core ``fmest.models.spec.LAYER_NORM_MODEL_TYPES``)
LAYER_NORM_MODEL_TYPES = _LAYER_NORM_MODEL_TYPES
#: Eager attention modules (transformers ``attn_output.transpose(1, 2).contiguous()``,
#: torchtune ``output.transpose(1, 2).contiguous().view(...)``) feed the output projection a
#: contiguous copy of the attention output, which that matmul saves beside the copy the
#: attention kernel saves for its own backward; compiled blocks recompute the layout copy.
EAGER_ATTN_OUTPUT_COPIES = 1
#: Eager attention in transformers computes softmax in fp32 and casts back
#: (``softmax(..., dtype=torch.float32).to(query.dtype)``): the fp32 probabilities (saved by
#: softmax) and the compute-dtype copy (saved by probs@V) coexist. Measured 5.98 B per score
#: element for bf16 (research notes 2a: eager 74.08 vs sdpa 50.22 GiB, Llama-2-7B s2048).
EAGER_SOFTMAX_BYTES = FP32_BYTES
#: CUDA dropout (``native_dropout``) keeps a 1-byte bool mask per element (Korthikanti eq. 1
#: counts masks at 1 byte).
DROPOUT_MASK_BYTES = 1
#: Flash/memory-efficient attention keep one fp32 log-sum-exp per (batch, head, query)
#: (Dao et al. 2022, FlashAttention, arXiv:2205.14135, algorithm 2).
LSE_BYTES = FP32_BYTES
#: During one layer's backward the engine holds gradient buffers of about two
#: intermediate-sized tensors (the grad of the MLP product and of one of its factors) beside
#: the saved tensors; Korthikanti section 5 counts the same working set for recomputation.
LAYER_BACKWARD_GRAD_BUFFERS = 2

# -- logits and loss ------------------------------------------------------------------------
#: ``cross_entropy = log_softmax + nll_loss`` upcast to fp32 (transformers ``ForCausalLMLoss``,
#: torchtitan/torchtune ``logits.float()``). At the start of backward three fp32 [T, V] tensors
#: coexist: the saved log-softmax output, its gradient from nll_loss and the gradient of the
#: logits (PyTorch ``log_softmax_backward_data`` allocates a new tensor).
LOGITS_FP32_COPIES_BACKWARD = 3
#: Vocabulary-parallel cross-entropy of PyTorch-native TP (``loss_parallel``, used by
#: torchtitan whenever TP > 1): ``torch.distributed.tensor.parallel.loss``
#: ``_nll_loss_and_log_softmax_backward`` fuses nll and log-softmax backward as
#: ``grad_input = zeros_like(x); ...; (grad_input + torch.exp(x)) * grad_output``, so the saved
#: log-softmax ``x``, the zeros/one-hot ``grad_input``, ``exp(x)`` and their sum coexist: four
#: fp32 [T, V/tp] tensors instead of three.
LOSS_PARALLEL_FP32_COPIES_BACKWARD = 4
#: torchtune ``CEWithChunkedOutputLoss`` default ``num_output_chunks`` (torchtune docs).
CHUNKED_LOSS_CHUNKS = 8
#: Fused linear-cross-entropy kernels (Liger ``LigerFusedLinearCrossEntropyLoss``, Apple
#: cut-cross-entropy) never hold more than one chunk of logits; Liger sizes chunks so a chunk
#: is about the hidden-state size; we count one fp32 chunk and its gradient of T*V/16.
FUSED_LOSS_CHUNKS = 16

# -- framework buffers ----------------------------------------------------------------------
#: PyTorch DDP copies gradients into flat all-reduce buckets that persist across steps unless
#: ``gradient_as_bucket_view=True`` ("the saved memory size will be equal to the total
#: gradients size", torch.nn.parallel.DistributedDataParallel docs).
DDP_BUCKET_COPIES_OF_GRADS = 1
#: DeepSpeed ZeRO-1/2/3 IPG reduce buffers are a behaviour of the sharding strategy
#: (``ShardingStrategy.reduce_bucket_elements``, DeepSpeed's ``reduce_bucket_size``) sized by
#: ``fmest.default_plugins.parallelism.zero_reduce_buffer_elements``, which cites
#: deepspeedai/DeepSpeed edaa7221 for each rule (one or two buffers, defaults per stage).
#: ZeRO-3/FSDP keep the current layer's unsharded parameters and prefetch the next one
#: (FSDP ``forward_prefetch``/``backward_prefetch=BACKWARD_PRE``; Zhao et al. 2023 section 3.3).
FSDP_UNSHARDED_LAYERS = 2
#: FSDP2 under pipeline parallelism: ``torch.distributed.pipelining`` runs every micro-batch
#: backward but the last with ``set_requires_gradient_sync(False)`` ("we need to accumulate
#: gradients on previous steps and reduce them on the last step", ``PipelineStage.
#: backward_maybe_with_nosync``), and FSDP2 then upcasts each unsharded gradient to
#: ``reduce_dtype`` before accumulating (``FSDPParam.to_accumulated_grad_if_needed``:
#: ``self.unsharded_accumulated_grad = unsharded_grad.to(self.reduce_dtype)``). torchtitan's
#: ``mixed_precision_reduce`` is fp32, so the stage's unsharded gradients cost 4 bytes/param.
FSDP_PP_ACCUMULATED_GRAD_BYTES = FP32_BYTES

# -- outside the tensors --------------------------------------------------------------------
#: GPU-side terms (CUDA context with the step's kernels, NCCL buffers, allocator reserve) live in
#: core's :mod:`fmest.physics.device_terms`, shared with the traced plugin; re-exported here for the
#: plugin (``F.cuda_context_bytes``) and the benchmarks. The part of the reserve no release
#: returns (fmest issue 22: segments / pages that hold a live block, from replays,
#: core/fmest/data/allocator_reserve.json ``floor``; constants and derivation in
#: :mod:`fmest.allocator`) is where the cap of the reserve at the device stops.
from fmest.allocator import (  # noqa: E402
    irreducible_reserve_bytes as irreducible_reserve_bytes,
)
from fmest.physics.device_terms import (
    ALLOCATOR_RESERVE_FRACTION as ALLOCATOR_RESERVE_FRACTION,
)
from fmest.physics.device_terms import (
    allocator_reserve_bytes as allocator_reserve_bytes,
)
from fmest.physics.device_terms import (
    cuda_context_bytes as cuda_context_bytes,
)

# ============================================================================================
# Weights
# ============================================================================================

def weights_bytes(params: float, bytes_per_param: float) -> float:
    """Stored parameter bytes: ``params x bytes_per_param`` (ZeRO paper, Rajbhandari et al.
    2020, section 3.1: 2 bytes per parameter for fp16 weights)."""
    return params * bytes_per_param


def nf4_bytes_per_param(double_quantization: bool) -> float:
    """Bytes per NF4-quantized weight including quantization constants (Dettmers et al. 2023,
    QLoRA section 3: 4 bits + 32/64 bits without, 8/64 + 32/(64*256) bits with double quant)."""
    if double_quantization:
        consts = INT8_BYTES / NF4_BLOCK_SIZE + FP32_BYTES / (NF4_BLOCK_SIZE * NF4_DQ_BLOCK_SIZE)
    else:
        consts = FP32_BYTES / NF4_BLOCK_SIZE
    return NF4_BYTES_PER_PARAM + consts


def int8_weight_bytes(in_features: int, out_features: int) -> float:
    """LLM.int8 weight bytes of one matrix: int8 weights + one fp32 scale per output row
    (Dettmers et al. 2022, arXiv:2208.07339, section 3.1)."""
    return in_features * out_features * INT8_BYTES + out_features * INT8_ROW_SCALE_BYTES


def lora_adapter_params(rank: int, in_features: int, out_features: int) -> int:
    """LoRA parameters of one adapted matrix: ``A`` (r x in) + ``B`` (out x r)
    (Hu et al. 2021, arXiv:2106.09685, section 4.1)."""
    return rank * (in_features + out_features)


# ============================================================================================
# Optimizer
# ============================================================================================

#: DeepSpeed ZeRO-3's optimizer sub-group (fmest.default_plugins.parallelism, with its source)
from fmest.default_plugins.parallelism import (  # noqa: E402
    DEEPSPEED_SUB_GROUP_ELEMENTS as DEEPSPEED_SUB_GROUP_ELEMENTS,
)


def zero_step_grad_copy_bytes(partition_params: float, grad_bytes: float, *,
                              sub_group_elements: float | None = None) -> float:
    """Transient bytes of a DeepSpeed ZeRO-2/3 optimizer step: the gradient partition of one
    parameter group (ZeRO-2, ``stage_1_and_2.py`` ``step``: ``flat_grad_partition =
    self.flatten(self.averaged_gradients[i])`` then ``single_grad_partition =
    flat_grad_partition.to(fp32)``) or of one sub-group (ZeRO-3, ``stage3.py``
    ``_prepare_fp32_grad_for_sub_group``: ``self.flatten(...).to(fp32)``) is flattened into a
    new ``grad_bytes`` buffer and cast to a new fp32 tensor, both alive at the cast; the fp32
    copy is the master partition's ``.grad`` until that group's update ends
    (deepspeedai/DeepSpeed edaa7221). fp32 gradients: the cast returns the flat buffer itself.
    ``sub_group_elements`` caps the elements (ZeRO-3 sub-groups)."""
    n = partition_params if sub_group_elements is None else \
        min(partition_params, sub_group_elements)
    cast = FP32_BYTES if grad_bytes != FP32_BYTES else 0.0
    return n * (grad_bytes + cast)


def optimizer_state_bytes(trainable_params: float, states: float, bytes_per_element: float,
                          overhead_bytes_per_element: float = 0.0) -> float:
    """Optimizer states: ``states x (element + block-scale overhead) x params`` (ZeRO paper
    section 3.1: Adam keeps 2 fp32 states = 8 bytes/param; 8-bit: Dettmers et al. 2022,
    arXiv:2110.02861, one fp32 absmax per 2048-element block)."""
    return trainable_params * states * (bytes_per_element + overhead_bytes_per_element)


def factored_state_elements(matrix_shapes: list[tuple[int, int, int]],
                            vector_elements: float) -> float:
    """Adafactor second-moment elements: ``rows + cols`` per matrix, full size for vectors
    (Shazeer & Stern 2018, arXiv:1804.04235, section 3). ``matrix_shapes`` holds
    ``(rows, cols, count)``."""
    return sum((rows + cols) * count for rows, cols, count in matrix_shapes) + vector_elements


def mixed_precision_adam_bytes_per_param(half_bytes: int = 2) -> int:
    """The ZeRO paper's 16 bytes/param for mixed-precision Adam: fp16 weights (2) + fp16 grads
    (2) + fp32 master weights, momentum and variance (3 x 4) (Rajbhandari et al. 2020, 3.1)."""
    return half_bytes + half_bytes + 3 * FP32_BYTES


# ============================================================================================
# Activations
# ============================================================================================

def norm_saved_bytes(tokens: float, hidden: float, act_bytes: int, *, upcast: bool,
                     output_needed: bool, weight_trainable: bool = True) -> float:
    """What one RMSNorm/LayerNorm keeps for backward: its input (fp32 upcast copy in eager
    PyTorch, compute dtype when compiled/fused) and its normalized output when the next matmul
    needs it for a weight gradient (Korthikanti eq. 1 counts 2sbh input + 2sbh output).

    Eager (``upcast``) PyTorch norms also keep the compute-dtype normalized tensor *before*
    the learnable scale: ``self.weight * hidden_states.to(input_dtype)`` (transformers
    ``LlamaRMSNorm``; torchtune ``RMSNorm``: ``x_normed.type_as(x) * self.scale``) saves it
    for the weight's gradient (``NORM_EAGER_PRESCALE_COPIES``) when the weight is trainable
    (a frozen weight, LoRA, needs no such gradient); a compiled/fused norm recomputes it. Check: Llama-2-7B s2048 b1 bf16 forward activations
    12.06 GiB in the exact fake-tensor trace (docs/research/trace_feasibility.md 2a);
    this count with the eager attention-output copy gives 12.4, without both 10.9."""
    in_bytes = NORM_UPCAST_BYTES if upcast else act_bytes
    prescale = NORM_EAGER_PRESCALE_COPIES * act_bytes if (upcast and weight_trainable) else 0
    return tokens * hidden * (in_bytes + prescale + (act_bytes if output_needed else 0))


def attention_core_bytes(*, tokens: float, batch: float, seq: float, heads: float,
                         q_dim: float, act_bytes: int, attention: str,
                         dropout: float, softmax_fp32: bool = True) -> float:
    """Saved tensors of the attention core (after q/k/v, before the output projection).

    ``eager``: the b*a*s^2 probabilities in fp32 plus their compute-dtype copy
    (``EAGER_SOFTMAX_BYTES`` + act_bytes, only fp32 when computing in fp32), plus the dropout
    mask and dropped probabilities when attention dropout > 0 (Korthikanti eq. 1: 5as^2b for
    fp16 with dropout). ``softmax_fp32`` False (a model whose eager softmax keeps the scores'
    dtype and no autocast to promote it: core ``EAGER_SOFTMAX_INPUT_DTYPE_MODEL_TYPES``): the
    probabilities in the compute dtype only, the cast back a no-op. The output is rebuilt by a
    contiguous copy that the output projection saves (counted by the caller).
    ``sdpa``/``flash``: no s^2 term; the kernel saves its output and a fp32 log-sum-exp per
    head and query (Dao et al. 2022).
    """
    if attention == "eager":
        softmax = EAGER_SOFTMAX_BYTES if softmax_fp32 else act_bytes
        per_score = softmax + (act_bytes if act_bytes != softmax else 0)
        if dropout > 0:
            per_score += DROPOUT_MASK_BYTES + act_bytes
        return batch * heads * seq * seq * per_score
    return tokens * q_dim * act_bytes + batch * heads * seq * LSE_BYTES


def gated_mlp_saved_bytes(tokens: float, intermediate: float, act_bytes: int, *,
                          product_needed: bool) -> float:
    """SwiGLU ``down(act(gate(x)) * up(x))`` keeps gate (for act backward), act(gate) and up
    (for the product's backward) and, when ``down`` needs a weight gradient, the product
    (Shazeer 2020 GLU variants; tensor count as in Korthikanti eq. 1 for the 2-matmul MLP)."""
    return tokens * intermediate * act_bytes * (3 + (1 if product_needed else 0))


#: Extra intermediate-sized tensors that an activation function written as several eager
#: ops saves beyond the one input a fused kernel (``F.gelu``, ``F.silu``) keeps. Counted from
#: transformers ``activations.py`` (``ACT2CLS``), op by op; a multiplication or addition with
#: a Python scalar saves nothing, a tensor*tensor product saves both factors, ``tanh`` and
#: ``sigmoid`` save their output, ``pow`` saves its input (already counted):
#:
#: * ``gelu_new`` (``NewGELUActivation``, GPT-2/GPT-J/CodeGen):
#:   ``0.5 * x * (1.0 + torch.tanh(sqrt(2/pi) * (x + 0.044715 * torch.pow(x, 3.0))))`` saves
#:   ``tanh(.)``, ``0.5 * x`` and ``1 + tanh(.)``: 3 (measured: ``cpu_probes.csv`` tiny-gpt2
#:   fp32 eager b4 s128: 186.01 MiB measured; 2 MiB per such tensor per layer, T=512, i=1024).
#: * ``gelu_fast`` (``FastGELUActivation``):
#:   ``0.5 * x * (1.0 + torch.tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x)))`` saves
#:   ``0.044715 * x``, ``x * 0.79..``, ``1 + 0.044715 x^2``, ``tanh(.)``, ``0.5 * x`` and
#:   ``1 + tanh(.)``: 6.
#: * ``quick_gelu`` (``QuickGELUActivation``): ``x * torch.sigmoid(1.702 * x)`` saves the
#:   sigmoid output: 1.
#:
#: Fused ones (``gelu``, ``gelu_pytorch_tanh`` = ``F.gelu(approximate="tanh")``, ``silu``,
#: ``relu``) save only their input: 0. Sizes are in the compute dtype (exact in fp32 and under
#: CPU autocast; CUDA autocast runs ``pow`` in fp32, which would make ``gelu_new``'s ``tanh``
#: and ``1 + tanh`` fp32, not modelled).
ACTIVATION_EXTRA_SAVED = {"gelu_new": 3, "gelu_fast": 6, "quick_gelu": 1}


def activation_extra_saved_bytes(tokens: float, intermediate: float, act_bytes: int,
                                 activation: str | None) -> float:
    """Intermediate-sized tensors an unfused activation saves beyond its input
    (``ACTIVATION_EXTRA_SAVED``; 0 for fused or unknown activations)."""
    return tokens * intermediate * act_bytes * ACTIVATION_EXTRA_SAVED.get(activation or "", 0)


def plain_mlp_saved_bytes(tokens: float, intermediate: float, act_bytes: int, *,
                          output_needed: bool) -> float:
    """GELU MLP: the GELU input and, when fc2 needs a weight gradient, its output
    (Korthikanti eq. 1: 8sbh + 8sbh for i = 4h at 2 bytes)."""
    return tokens * intermediate * act_bytes * (1 + (1 if output_needed else 0))


def moe_dispatch_bytes(tokens: float, hidden: float, top_k: float, act_bytes: int) -> float:
    """Permuted copies of the hidden states for expert dispatch and combine: each token is
    copied top-k times into the grouped-GEMM input and the expert outputs are kept for the
    weighted combine (Megablocks, Gale et al. 2022, section 4; transformers grouped_mm path)."""
    return 2 * tokens * top_k * hidden * act_bytes


def dropout_mask_bytes(tokens: float, hidden: float, dropout: float) -> float:
    """Hidden dropout mask after attention and after the MLP: sbh bytes each when dropout > 0
    (Korthikanti eq. 1)."""
    return 2 * tokens * hidden * DROPOUT_MASK_BYTES if dropout > 0 else 0.0


def korthikanti_bytes_per_layer(s: float, b: float, h: float, a: float, t: int = 1,
                                sequence_parallel: bool = False,
                                selective: bool = False) -> float:
    """Korthikanti et al. 2022 eq. 1-4 for GPT with fp16 activations and dropout:
    ``sbh(34 + 5as/h)`` without parallelism, ``sbh(10 + 24/t + 5as/(ht))`` with tensor
    parallelism, ``sbh(34/t + 5as/(ht))`` with sequence parallelism, and no ``5as/h`` term
    with selective recomputation. Used as a published check in the tests."""
    s2 = 0.0 if selective else 5 * a * s / (h * t)
    if sequence_parallel:
        return s * b * h * (34 / t + s2)
    return s * b * h * (10 + 24 / t + s2)


def logits_bytes(tokens: float, vocab: float, act_bytes: int, *, loss: str,
                 compiled: bool, vocab_parallel: bool = False) -> tuple[float, float]:
    """(held after forward, extra transient at the start of backward) for the logits and the
    cross-entropy loss of one micro-batch.

    ``standard``: the fp32 log-softmax output is saved; backward adds its gradient and the
    logits' gradient (``LOGITS_FP32_COPIES_BACKWARD`` fp32 copies in all;
    ``LOSS_PARALLEL_FP32_COPIES_BACKWARD`` with ``vocab_parallel``, PyTorch ``loss_parallel``).
    ``compiled`` does not change it: ``apply_compile`` compiles the transformer blocks; a
    compiled loss function (torchtitan's, fmest.stacks.loss_compiled) is the estimator's
    ``loss_compiled`` branch (the evidence's torchtitan @9dec370 rows ran an eager loss).
    ``chunked`` (torchtune ``CEWithChunkedOutputLoss``): compute-dtype logits are kept and one
    chunk gradient exists at a time (compute dtype when the loss is compiled, fp32 eager).
    ``fused`` (Liger, cut-cross-entropy): only a chunk exists.
    """
    logits = tokens * vocab
    if loss == "standard":
        held = logits * FP32_BYTES
        copies = LOSS_PARALLEL_FP32_COPIES_BACKWARD if vocab_parallel else \
            LOGITS_FP32_COPIES_BACKWARD
        return held, logits * FP32_BYTES * (copies - 1)
    if loss == "chunked":
        # compiled (torchtune compiles the loss with the model): the backward kernel writes
        # the chunk's gradient straight in the compute dtype; eager: an fp32 chunk gradient
        chunk_bytes = act_bytes if compiled else FP32_BYTES
        return logits * act_bytes, logits * chunk_bytes / CHUNKED_LOSS_CHUNKS
    return 0.0, 2 * logits * FP32_BYTES / FUSED_LOSS_CHUNKS


def pipeline_inflight_microbatches(schedule: str, pp: int, microbatches: int,
                                   virtual_stages: int = 1) -> float:
    """Micro-batches whose activations the first pipeline stage holds, in units of its full
    stage. 1F1B: ``min(pp, m)`` (Narayanan et al. 2021, arXiv:2104.04473, section 2.2.1);
    GPipe: all ``m`` (Huang et al. 2019); interleaved 1F1B with ``v`` chunks:
    ``pp * (1 + (pp-1)/(pp*v))`` (Narayanan 2021 section 2.2.2; Korthikanti section 4.2.3)."""
    if pp <= 1:
        return 1.0
    if schedule == "gpipe":
        return float(microbatches)
    if schedule == "interleaved" and virtual_stages > 1:
        full = pp * (1 + (pp - 1) / (pp * virtual_stages))
        return min(full, float(microbatches))
    return float(min(pp, microbatches))


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def gib(x: float) -> float:
    return x / 2**30


__all__ = [n for n in dir() if not n.startswith("_")]
