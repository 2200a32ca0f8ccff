"""Activations of one transformer layer for one micro-batch: what it saves for backward and
the working set while it runs backward (Korthikanti et al. 2022, arXiv:2205.05198, section 4,
refined per op for eager PyTorch; docs/memory_model.md). Each block of the layer (norms,
attention, MLP, LoRA inputs) is its own function; :func:`layer_activation_bytes` combines them
and applies activation checkpointing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from attrs import frozen

from fmest_memory_theory import formulas as F

if TYPE_CHECKING:
    from fmest.models.spec import ModelSpec
    from fmest_memory_theory.inventory import LoraNumbers, ModelNumbers


@frozen(kw_only=True)
class LayerInputs:
    """The job-side inputs of one layer's activation count.

    ``dtensor_sp``: PyTorch-native (DTensor) sequence parallelism, as torchtitan applies it
    (``PrepareModuleInput(input_layouts=Shard(1), desired_input_layouts=Replicate())``): the
    norm output is all-gathered to the full sequence by a separate collective and the
    column-parallel matmuls save that gathered tensor, ``T*h`` elements rather than
    Megatron's ``T*h/t`` (Megatron-SP re-gathers in backward instead, Korthikanti section
    4.2.2). In backward the gradient of the gathered input is likewise full-sequence.
    """

    tokens: float
    batch: float
    seq: float
    act_bytes: int
    tp: int
    sequence_parallel: bool
    attention: str
    compiled: bool
    trainable_all: bool
    adapter_bytes: float
    checkpointing: str
    dtensor_sp: bool = False
    #: the step runs under torch.autocast (precision ``amp``)
    autocast: bool = False
    #: the training stack's fused kernels (``ResolvedStack.fuses``): a fused norm saves its
    #: input in the compute dtype (no fp32 upcast, no pre-scale copy: TE LayerNormLinear,
    #: Liger/Unsloth RMSNorm keep X and rstd); a fused SwiGLU saves only its input, gate and
    #: up (Megatron ``megatron/core/fusions/fused_bias_swiglu.py`` ``save_for_backward(input)``,
    #: Liger ``LigerSiLUMulFunction`` saves a and b); a fused layout (Megatron sbhd) feeds the
    #: output projection the attention kernel's own output, no contiguous copy
    fused_norm: bool = False
    fused_activation: bool = False
    fused_layout: bool = False
    #: bytes per element of a saved GEMM input (None: ``act_bytes``). Transformer Engine fp8
    #: Linear saves the fp8-cast input for the weight gradient, not the bf16 one
    #: (TransformerEngine transformer_engine/pytorch/module/linear.py, layernorm_linear.py:
    #: the quantized ``inputmat`` / ``ln_out`` is what ``save_for_backward`` keeps)
    gemm_input_bytes: float | None = None
    #: the quantized frozen linears keep their inputs for backward (stacks.toml
    #: ``quant_saves_gemm_inputs``: bitsandbytes 0.41.1 ``MatMul4Bit.forward`` sets
    #: ``ctx.tensors = (A, B)`` whenever A needs a gradient; later releases keep (None, B))
    frozen_gemm_inputs_saved: bool = False
    #: the stack's model code (stacks.toml, Lit-GPT): norms without an fp32 upcast
    #: (``norm_keeps_compute_dtype``), a fused qkv split by views (``fused_qkv_views``), a
    #: dropout in front of every adapter (``lora_dropout``) and the fused qkv LoRA's zero pad
    #: (``lora_qkv_zero_pad``)
    norm_no_upcast: bool = False
    #: the model's norms are ``torch.nn.LayerNorm`` (formulas.LAYER_NORM_MODEL_TYPES:
    #: ``native`` or ``low``; ``""``: RMSNorm with its explicit fp32 upcast)
    layer_norm: str = ""
    fused_qkv_views: bool = False
    fused_qkv_expands_mqa: bool = False
    lora_dropout: float = 0.0
    lora_qkv_zero_pad: bool = False
    #: the MLP activation is one torch op whatever the HF ``hidden_act`` says (stacks.toml
    #: ``mlp_activation_one_op``): no eager multi-op extras
    mlp_activation_one_op: bool = False
    #: bytes per element of the residual stream between layers (None: ``act_bytes``). PEFT's
    #: k-bit preparation leaves fp32 norms, whose outputs are fp32, and a bitsandbytes
    #: ``Linear4bit`` returns its input's dtype (``out.to(inp_dtype)``), so the MLP output and
    #: with it every layer input is fp32: what full checkpointing keeps per layer
    #: (estimator ``_stream_bytes``)
    stream_bytes: Optional[float] = None
    #: LLaMA-Adapter / Adapter-v2 (estimator ``_adapter_layer_terms``): the share of layers
    #: backward runs through (Adapter v1: none below ``adapter_start_layer`` holds a trainable
    #: parameter, so those save nothing), the bytes a layer saves beyond the frozen base's
    #: (averaged over the layers: the prefix attention's output, Adapter-v2's pre-scale linear
    #: outputs and norm products) and whether the output projection reads the gated sum
    #: ``y + gating_factor * ay`` (a new tensor, which a quantized projection keeps)
    saved_layer_share: float = 1.0
    adapter_extra_bytes: float = 0.0
    adapter_gated_attn_out: bool = False
    #: Megatron-Core selective recomputation (``training.selective_modules`` on a Megatron-Core
    #: stack or with ``recompute_modules`` set): the ``--recompute-modules`` names, each module
    #: keeping only its checkpoint input (:func:`megatron_selective_saved_bytes`); None: the
    #: op-level rule of :func:`selective_saved_bytes`
    recompute_modules: Optional[frozenset] = None

    @property
    def gemm_bytes(self) -> float:
        """Bytes per element of an input a matmul saves for its weight gradient."""
        return self.act_bytes if self.gemm_input_bytes is None else self.gemm_input_bytes

    @property
    def norm_divisor(self) -> int:
        """What norms and residuals are divided by: ``tp`` under sequence parallelism."""
        return self.tp if self.sequence_parallel else 1


@frozen(kw_only=True)
class _Needs:
    """Which saved inputs a weight gradient needs (all under full training; under LoRA only
    where an adapter in the compute dtype sits)."""

    attn_in: bool
    o_in: bool
    mlp_in: bool
    mlp_out: bool


_NEEDS_ALL = _Needs(attn_in=True, o_in=True, mlp_in=True, mlp_out=True)
_NEEDS_NONE = _Needs(attn_in=False, o_in=False, mlp_in=False, mlp_out=False)


def _needs(lora: Optional[LoraNumbers], inputs: LayerInputs) -> _Needs:
    if inputs.trainable_all:
        return _NEEDS_ALL
    if lora is not None and inputs.frozen_gemm_inputs_saved:
        # every quantized linear keeps its input; the output projection's input is the
        # attention kernel's own output (Lit-GPT reshapes it as a view), kept by the kernel
        return _Needs(attn_in=True, o_in=lora.on_attn_out or inputs.adapter_gated_attn_out,
                      mlp_in=True, mlp_out=True)
    if lora is None or inputs.adapter_bytes != inputs.act_bytes or inputs.lora_dropout > 0:
        # adapters in another dtype read a cast copy, behind a dropout the dropped copy
        # (lora_input_bytes), not the shared input
        return _NEEDS_NONE
    return _Needs(attn_in=lora.in_attn, o_in=lora.on_attn_out, mlp_in=lora.on_mlp_in,
                  mlp_out=lora.on_mlp_out)


def norm_block_bytes(hidden: float, inputs: LayerInputs, output_needed: bool) -> float:
    """One norm's saved bytes (formulas.norm_saved_bytes); under DTensor SP its sharded input
    plus the full-sequence gathered output the matmuls keep."""
    upcast = not (inputs.compiled or inputs.fused_norm or inputs.norm_no_upcast)
    prescale = inputs.trainable_all
    if upcast and inputs.layer_norm:
        # torch.nn.LayerNorm (formulas.LAYER_NORM_MODEL_TYPES): the kernel keeps its input,
        # fp32 only when autocast cast it; the weight is applied inside, no pre-scale copy
        upcast, prescale = inputs.autocast and inputs.layer_norm == "native", False
    if not inputs.dtensor_sp:
        output = inputs.tokens * hidden * inputs.gemm_bytes if output_needed else 0.0
        return (F.norm_saved_bytes(inputs.tokens, hidden, inputs.act_bytes, upcast=upcast,
                                   output_needed=False, weight_trainable=prescale)
                + output) / inputs.norm_divisor
    return (F.norm_saved_bytes(inputs.tokens, hidden, inputs.act_bytes, upcast=upcast,
                               output_needed=False,
                               weight_trainable=prescale) / inputs.norm_divisor
            + (inputs.tokens * hidden * inputs.act_bytes if output_needed else 0.0))


def qkv_output_bytes(model: ModelSpec, dims: ModelNumbers, inputs: LayerInputs) -> float:
    """The q, k and v projections' outputs of one layer on one rank (key/value heads split
    over at most their own count of tensor-parallel ranks)."""
    kv_split = min(inputs.tp, max(1, model.num_kv_heads))
    return inputs.tokens * (dims.q_dim / inputs.tp + (dims.k_dim + dims.v_dim) / kv_split) \
        * inputs.act_bytes


def attention_block_bytes(model: ModelSpec, dims: ModelNumbers, inputs: LayerInputs,
                          needs: _Needs) -> tuple[float, float, float]:
    """(q/k/v projections' outputs, the attention core, the output projection's input)."""
    tokens, act, tp = inputs.tokens, inputs.act_bytes, inputs.tp
    qkv = qkv_output_bytes(model, dims, inputs)
    if inputs.fused_qkv_views:
        qkv = tokens * fused_qkv_saved_elements(model, dims, inputs.fused_qkv_expands_mqa) \
            / tp * act
    core = F.attention_core_bytes(tokens=tokens, batch=inputs.batch, seq=inputs.seq,
                                  heads=model.num_attention_heads / tp, q_dim=dims.o_dim / tp,
                                  act_bytes=act, attention=inputs.attention,
                                  dropout=model.dropout,
                                  softmax_fp32=model.eager_softmax_upcast or inputs.autocast)
    # output projection input: eager attention builds it by a contiguous copy; sdpa/flash
    # outputs are transposed into a contiguous copy too unless the block is compiled
    o_in = (tokens * dims.o_dim / tp * act * F.EAGER_ATTN_OUTPUT_COPIES
            if (needs.o_in and (inputs.attention == "eager" or not inputs.compiled)) else 0.0)
    if needs.o_in and inputs.fused_layout and inputs.attention != "eager":
        # sbhd: the projection saves the kernel's output itself, or its fp8 cast under TE fp8
        o_in = (tokens * dims.o_dim / tp * inputs.gemm_bytes
                if inputs.gemm_bytes != act else 0.0)
    return qkv, core, o_in


def fused_qkv_saved_elements(model: ModelSpec, dims: ModelNumbers,
                             expands_mqa: bool = False) -> float:
    """Elements per token that attention keeps from a fused qkv projection split by views
    (Lit-GPT ``CausalSelfAttention.forward``, Lightning-AI/litgpt 8641822 lit_gpt/model.py):
    the roped q and k are new tensors (``torch.cat`` of the roped and the pass-through part);
    with one key/value head per query (MHA) or a single one (MQA) v is a view of the fused
    output, which stays alive whole; with grouped queries (GQA) k and v are expanded to every
    query head first, v by a reshape copy, and the fused output is freed. ``expands_mqa``: the
    2024+ LitGPT code expands a single key/value head too when training (stacks.toml
    ``fused_qkv_expands_mqa``: ``input_pos is None or n_query_groups != 1``, litgpt/model.py at
    00af8b0d9b43eaa3f8c812e3e8bd53ef38cbb49d), so MQA takes the GQA count."""
    groups, heads = max(1, model.num_kv_heads), model.num_attention_heads
    if groups == heads or (groups == 1 and not expands_mqa):
        return dims.q_dim + dims.k_dim + (dims.q_dim + dims.k_dim + dims.v_dim)
    return 3.0 * dims.q_dim


def dense_mlp_bytes(model: ModelSpec, dims: ModelNumbers, intermediate: float,
                    inputs: LayerInputs, needs: _Needs) -> float:
    """A dense MLP's saved tensors; an unfused activation (GPT-2 ``gelu_new``,
    ``ModelNumbers.mlp_activation``) saves more."""
    tokens, act, tp = inputs.tokens, inputs.act_bytes, inputs.tp
    extra = 0.0 if inputs.mlp_activation_one_op else F.activation_extra_saved_bytes(
        tokens, intermediate / tp, act, dims.mlp_activation)
    if model.gated_mlp and inputs.fused_activation:
        # fused SwiGLU: gate and up in the compute dtype, the product as the down GEMM input
        return tokens * intermediate / tp * (
            2 * act + (inputs.gemm_bytes if needs.mlp_out else 0.0))
    if model.gated_mlp:
        return extra + F.gated_mlp_saved_bytes(tokens, intermediate / tp, act,
                                               product_needed=needs.mlp_out)
    return extra + F.plain_mlp_saved_bytes(tokens, intermediate / tp, act,
                                           output_needed=needs.mlp_out)


def mlp_block_bytes(model: ModelSpec, dims: ModelNumbers, inputs: LayerInputs,
                    needs: _Needs) -> tuple[float, float]:
    """(saved bytes averaged over dense and MoE layers, the widest intermediate a token
    passes): MoE layers keep top-k expert activations, dispatch copies (formulas
    .moe_dispatch_bytes), shared experts and fp32 router logits."""
    mlp_dense = dense_mlp_bytes(model, dims, model.intermediate_size, inputs, needs)
    if not dims.moe_layers:
        return mlp_dense, model.intermediate_size
    top_k = model.experts_per_token or 1
    moe_inter = model.moe_intermediate_size or model.intermediate_size
    mlp_moe = sum(_moe_parts(model, dims, inputs, needs))
    mlp = (dims.dense_layers * mlp_dense + dims.moe_layers * mlp_moe) / model.num_layers
    widest = max(model.intermediate_size if dims.dense_layers else 0, moe_inter * top_k)
    return mlp, widest


def _moe_parts(model: ModelSpec, dims: ModelNumbers, inputs: LayerInputs,
               needs: _Needs) -> tuple[float, float, float, float]:
    """One MoE layer's saved bytes by part: (routed experts' SwiGLU, dispatch copies, shared
    experts, fp32 router logits)."""
    tokens, act, tp = inputs.tokens, inputs.act_bytes, inputs.tp
    top_k = model.experts_per_token or 1
    moe_inter = model.moe_intermediate_size or model.intermediate_size
    shared_inter = dims.shared_expert_intermediate
    return (F.gated_mlp_saved_bytes(tokens * top_k, moe_inter / tp, act,
                                    product_needed=needs.mlp_out),
            F.moe_dispatch_bytes(tokens, model.hidden_size / inputs.norm_divisor, top_k, act),
            dense_mlp_bytes(model, dims, shared_inter, inputs, needs) if shared_inter else 0.0,
            tokens * model.num_experts * F.FP32_BYTES)


def lora_input_bytes(lora: Optional[LoraNumbers], inputs: LayerInputs) -> float:
    """peft casts each adapted module's input to the adapter dtype (``_cast_input_dtype``) and
    the adapter keeps a copy of it plus the rank-sized ``x A`` product for its weight grads.
    Without autocast the copy is in the adapter dtype (fp32 adapters: an fp32 copy). Under
    torch.autocast (``amp``) F.linear re-casts its input to the compute dtype and autograd saves
    that cast, so the copy and the product are in the compute dtype: checked against the
    torch_runner trace (qwen2.5-0.5b, amp, all-linear LoRA, 16 x 2048 tokens: 112.3 GiB
    against the trace's 112.2; 8 x 512: 15.51 against 15.52)."""
    if lora is None:
        return 0.0
    saved = inputs.act_bytes if inputs.autocast else inputs.adapter_bytes
    extra = 0.0
    dropout = inputs.lora_dropout > 0
    if inputs.adapter_bytes != inputs.act_bytes or dropout:
        # behind a dropout each adapter saves the dropped copy and its bool mask (CUDA
        # native_dropout); a fused qkv LoRA runs its q/k/v adapters on one input
        per_element = saved + (F.DROPOUT_MASK_BYTES if dropout else 0)
        replicated = lora.input_elements_per_token - lora.sharded_input_elements_per_token
        if inputs.lora_qkv_zero_pad and lora.qkv_adapted > 1:
            replicated -= lora.qkv_adapted_in * (1 - 1 / lora.qkv_adapted)
        extra = inputs.tokens * per_element * (
            replicated / inputs.norm_divisor + lora.sharded_input_elements_per_token / inputs.tp)
    if inputs.lora_qkv_zero_pad and lora.qkv_adapted and not lora.qkv_all:
        # LoRAQKVLinear.zero_pad: index_copy saves its source, the reshaped copy of the
        # enabled q/k/v outputs (stacks.toml lora_qkv_zero_pad)
        extra += inputs.tokens * lora.qkv_adapted_out / inputs.tp * inputs.act_bytes
    return extra + inputs.tokens * lora.rank_elements_per_token * saved


def selective_saved_bytes(model: ModelSpec, dims: ModelNumbers, inputs: LayerInputs,
                          widest: float) -> float:
    """torchtitan op-level SAC keeps the layer input, the attention output and every other
    matmul output (q, v, MLP gate, MLP down), recomputes norms and pointwise ops
    (torchtitan parallelize_llama ``_save_list``; the s^2 core is never kept)."""
    tokens, act, tp = inputs.tokens, inputs.act_bytes, inputs.tp
    kv_split = min(tp, max(1, model.num_kv_heads))
    flash_out = F.attention_core_bytes(tokens=tokens, batch=inputs.batch, seq=inputs.seq,
                                       heads=model.num_attention_heads / tp,
                                       q_dim=dims.o_dim / tp, act_bytes=act, attention="sdpa",
                                       dropout=0.0)
    layer_input = tokens * model.hidden_size * act / inputs.norm_divisor
    return (layer_input + tokens * (dims.q_dim / tp + dims.v_dim / kv_split) * act + flash_out
            + tokens * widest / tp * act + tokens * model.hidden_size / inputs.norm_divisor
            * act)


def megatron_selective_saved_bytes(model: ModelSpec, dims: ModelNumbers, inputs: LayerInputs,
                                   needs: _Needs, full: float) -> float:
    """Megatron-Core selective recomputation (``--recompute-granularity selective
    --recompute-modules``; NVIDIA/Megatron-LM d98e8a64ddf34856e74b24714e3bedb2f5a39553): each
    listed module runs under a checkpoint that keeps only its input and frees what it saves
    inside, the layer's ``full`` (``none``) count less those internals:

    * ``core_attn`` (attention.py ``_checkpointed_attention_forward``,
      ``tensor_parallel.checkpoint``): q, k, v stay (the checkpoint's inputs); the kernel's
      saved tensors go (the s^2 probabilities, or flash's output and log-sum-exp) except the
      output the output projection keeps as its own input (sbhd layout);
    * ``mla_up_proj`` (multi_latent_attention.py ``qkv_up_checkpoint``,
      ``CheckpointWithoutOutput``): the up-projected, roped q, k, v are discarded; the
      compressed latents (q_lora_rank + kv_lora_rank per token, the checkpoint's inputs) stay;
    * ``layernorm`` (transformer_layer.py ``input_layernorm_checkpoint`` /
      ``pre_mlp_norm_checkpoint``, ``CheckpointWithoutOutput``): both norms' outputs (what
      the next matmul saves) are discarded, their inputs stay;
    * ``mlp`` (transformer_layer.py ``recompute_mlp``, dense layers only): the MLP keeps only
      its input, the pre-MLP norm's output;
    * ``moe`` (moe/moe_layer.py ``moe_layer_recompute``): the whole MoE layer (router,
      dispatch, experts, shared experts) keeps only its input;
    * ``moe_act`` (moe/experts.py ``activation_recompute``, ``CheckpointWithoutOutput``): the
      routed experts keep fc1's output (gate and up) but not the activation's output (fc2's
      input) nor the activation's own saved tensors;
    * ``shared_experts`` (moe/moe_layer.py ``shared_experts_recompute``): the shared experts
      keep only their input.
    """
    mods = inputs.recompute_modules or frozenset()
    tokens, act, tp = inputs.tokens, inputs.act_bytes, inputs.tp
    freed = 0.0
    qkv, core, o_in = attention_block_bytes(model, dims, inputs, needs)
    if "core_attn" in mods:
        kernel_out = (tokens * dims.o_dim / tp * act
                      if needs.o_in and inputs.fused_layout and inputs.attention != "eager"
                      and inputs.gemm_bytes == act else 0.0)
        freed += max(core - kernel_out, 0.0)
    if "mla_up_proj" in mods and model.kv_lora_rank:
        latents = tokens * (model.q_lora_rank + model.kv_lora_rank) * act
        freed += max(qkv - latents, 0.0)
    if "layernorm" in mods:
        hidden = model.hidden_size
        freed += (norm_block_bytes(hidden, inputs, needs.attn_in)
                  - norm_block_bytes(hidden, inputs, False)
                  + norm_block_bytes(hidden, inputs, needs.mlp_in)
                  - norm_block_bytes(hidden, inputs, False))
    if "mlp" in mods and dims.dense_layers:
        freed += dims.dense_layers / model.num_layers * dense_mlp_bytes(
            model, dims, model.intermediate_size, inputs, needs)
    if dims.moe_layers:
        experts, dispatch, shared, router = _moe_parts(model, dims, inputs, needs)
        share = dims.moe_layers / model.num_layers
        if "moe" in mods:
            freed += share * (experts + dispatch + shared + router)
        else:
            if "moe_act" in mods:
                top_k = model.experts_per_token or 1
                moe_inter = model.moe_intermediate_size or model.intermediate_size
                freed += share * max(experts - 2 * tokens * top_k * moe_inter / tp * act, 0.0)
            if "shared_experts" in mods:
                freed += share * shared
    return max(full - freed * inputs.saved_layer_share, 0.0)


def layer_activation_bytes(model: ModelSpec, dims: ModelNumbers, lora: Optional[LoraNumbers],
                           inputs: LayerInputs) -> tuple[float, float]:
    """(saved per layer, working set while that layer runs backward) for one micro-batch,
    under ``inputs.checkpointing`` (none / full: only the layer input is kept and the layer is
    recomputed / selective)."""
    hidden, tokens, act = model.hidden_size, inputs.tokens, inputs.act_bytes
    needs = _needs(lora, inputs)
    mlp, widest = mlp_block_bytes(model, dims, inputs, needs)
    qkv, core, o_in = attention_block_bytes(model, dims, inputs, needs)
    full = (norm_block_bytes(hidden, inputs, needs.attn_in) + qkv + core + o_in
            + norm_block_bytes(hidden, inputs, needs.mlp_in) + mlp
            + F.dropout_mask_bytes(tokens, hidden, model.dropout) / inputs.norm_divisor
            + lora_input_bytes(lora, inputs)) * inputs.saved_layer_share \
        + inputs.adapter_extra_bytes
    grad_buffers = F.LAYER_BACKWARD_GRAD_BUFFERS * tokens * max(
        widest / inputs.tp, hidden if inputs.dtensor_sp else hidden / inputs.norm_divisor) * act
    if inputs.checkpointing == "none":
        return full, grad_buffers
    if inputs.checkpointing == "full":   # the recomputed layer beyond its checkpointed input
        stream = act if inputs.stream_bytes is None else inputs.stream_bytes
        layer_input = tokens * hidden * stream / inputs.norm_divisor
        return layer_input, max(full - layer_input, 0.0) + grad_buffers
    if inputs.recompute_modules is not None:
        saved = megatron_selective_saved_bytes(model, dims, inputs, needs, full)
    else:
        saved = min(selective_saved_bytes(model, dims, inputs, widest), full)
    return saved, max(full - saved, 0.0) + grad_buffers
