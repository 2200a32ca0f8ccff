"""The ``memory_theory`` plugin: analytic per-GPU peak memory of a steady-state training step.

The peak is the maximum over the phases of step 2 (forward, backward, optimizer), where the
optimizer states already exist during forward and backward and gradients were freed by
``zero_grad(set_to_none=True)`` (shared/research/trace_feasibility.md section 2a). Each phase
sums only what coexists in it; the components of the winning phase are returned. Formulas
and constants live in :mod:`fmest_memory_theory.formulas`; docs/memory_model.md explains them.
"""

from __future__ import annotations

import functools

from attrs import frozen

from fmest.counting import lora_modules
from fmest.estimates import MemoryEstimate, Provenance
from fmest.hookspecs import hookimpl
from fmest.precision import resolve_precision

from fmest_memory_theory import formulas as F

COMPONENTS = ("weights", "master_weights", "lora_adapters", "gradients", "optimizer_states",
              "optimizer_temporaries", "activations", "logits_and_loss", "framework_buffers",
              "cuda_context", "allocator_reserve")

#: Module names of attention output and MLP down projections across the supported families
#: (their input is the attention output / the MLP product, not the normalized hidden state).
_ATTN_OUT_NAMES = frozenset({"o_proj", "out_proj", "dense", "c_proj", "wo", "output_proj",
                             "attn_out", "self_attention.dense"})
_MLP_OUT_NAMES = frozenset({"down_proj", "w2", "c_proj", "fc2", "dense_4h_to_h",
                            "output_linear", "down", "mlp.c_proj"})
_LAYER_KINDS = ("attention", "mlp", "expert", "shared_expert", "router", "other")


# ---------------------------------------------------------------------------------------------
# per-model derived numbers (cached: ModelSpec is frozen and hashable, hf_config excluded)
# ---------------------------------------------------------------------------------------------

@frozen
class _ModelNumbers:
    layer_dense_params: float      # all layers, non-expert linears + per-layer norms
    layer_expert_params: float     # all layers, expert linears
    embedding_params: float
    head_params: float
    final_norm_params: float
    largest_layer_params: float    # one layer (dense + experts), unsharded
    largest_tensor_params: float
    matrix_shapes: tuple           # (rows, cols, count) of every matrix, for Adafactor
    vector_params: float
    q_dim: int
    k_dim: int
    v_dim: int
    o_dim: int
    moe_layers: int
    dense_layers: int


@functools.lru_cache(maxsize=256)
def _model_numbers(model) -> _ModelNumbers:
    L = model.num_layers
    dense = expert = head = 0.0
    shapes = []
    largest = 0.0
    for lin in model.linears:
        largest = max(largest, lin.in_features * lin.out_features)
        shapes.append((lin.out_features, lin.in_features, lin.layers * lin.copies))
        if lin.kind == "head":
            head += lin.params
        elif lin.kind == "expert":
            expert += lin.params
        else:
            dense += lin.params
    emb = sum(g.params for g in model.groups if g.kind in ("embedding", "position"))
    norms = sum(g.params for g in model.groups if g.kind == "norm")
    other = sum(g.params for g in model.groups if g.kind == "other")
    final_norm = sum(g.params for g in model.groups if g.kind == "norm" and "final" in g.name)
    vectors = norms + other + sum(lin.bias_params for lin in model.linears)
    for g in model.groups:
        if g.kind == "embedding":
            largest = max(largest, g.params)
            shapes.append((model.vocab_size, max(1, g.params // max(1, model.vocab_size)), 1))
        elif g.kind == "position":
            vectors += g.params
    layer_dense = dense + (norms - final_norm) + other
    hd = model.head_dim
    if model.qk_head_dim:
        q_dim = k_dim = model.num_attention_heads * model.qk_head_dim
        v_dim = o_dim = model.num_attention_heads * (model.v_head_dim or hd)
    else:
        q_dim = o_dim = model.num_attention_heads * hd
        k_dim = v_dim = model.num_kv_heads * hd
    moe_layers = (model.num_moe_layers or L) if model.is_moe else 0
    return _ModelNumbers(
        layer_dense_params=layer_dense, layer_expert_params=expert, embedding_params=emb,
        head_params=head, final_norm_params=final_norm,
        largest_layer_params=(layer_dense + expert) / L, largest_tensor_params=largest,
        matrix_shapes=tuple(shapes), vector_params=vectors, q_dim=q_dim, k_dim=k_dim,
        v_dim=v_dim, o_dim=o_dim, moe_layers=moe_layers, dense_layers=L - moe_layers)


@frozen
class _LoraNumbers:
    adapter_params: float          # all layers
    shapes: tuple                  # (rows, cols, count) of every A and B
    in_attn: bool                  # adapters on q/k/v-like modules
    on_attn_out: bool
    on_mlp_in: bool
    on_mlp_out: bool
    input_elements_per_token: float  # sum of in_features of adapted modules, one layer
    sharded_input_elements_per_token: float  # inputs that are TP-sharded (o/down)
    rank_elements_per_token: float   # r per adapted module, one layer


@functools.lru_cache(maxsize=256)
def _lora_numbers(model, targets: tuple, rank: int) -> _LoraNumbers:
    from fmest.job import Training

    mods = lora_modules(model, Training(technique="lora", lora_target_modules=targets,
                                        lora_rank=rank))
    L = model.num_layers
    params = 0.0
    shapes = []
    flags = dict(in_attn=False, on_attn_out=False, on_mlp_in=False, on_mlp_out=False)
    in_el = sharded_el = r_el = 0.0
    for m in mods:
        n = m.layers * m.copies
        params += F.lora_adapter_params(rank, m.in_features, m.out_features) * n
        shapes += [(rank, m.in_features, n), (m.out_features, rank, n)]
        per_layer = m.layers / L * (m.active_copies if m.kind == "expert" else 1.0)
        is_out = m.name in _ATTN_OUT_NAMES or m.name in _MLP_OUT_NAMES
        if m.kind == "attention":
            flags["on_attn_out" if m.name in _ATTN_OUT_NAMES else "in_attn"] = True
        else:
            flags["on_mlp_out" if m.name in _MLP_OUT_NAMES else "on_mlp_in"] = True
        in_el += m.in_features * per_layer
        if is_out:
            sharded_el += m.in_features * per_layer
        r_el += rank * per_layer
    return _LoraNumbers(adapter_params=params, shapes=tuple(shapes), **flags,
                        input_elements_per_token=in_el,
                        sharded_input_elements_per_token=sharded_el,
                        rank_elements_per_token=r_el)


def _activation_function(model) -> str | None:
    """The MLP activation's name from the raw HF config (GPT-2 ``activation_function``,
    most others ``hidden_act``); None when unknown."""
    cfg = getattr(model, "hf_config", None) or {}
    act = cfg.get("activation_function") or cfg.get("hidden_act")
    return act if isinstance(act, str) else None


# ---------------------------------------------------------------------------------------------
# activations of one layer
# ---------------------------------------------------------------------------------------------

def _layer_activation_bytes(model, mn: _ModelNumbers, ln, *, tokens, batch, seq, ab, tp, sp,
                            attention, compiled, trainable_all, adapter_bytes, ckpt,
                            dtensor_sp=False):
    """(saved per layer, working set while that layer runs backward) for one micro-batch.

    ``dtensor_sp``: PyTorch-native (DTensor) sequence parallelism, as torchtitan applies it
    (``PrepareModuleInput(input_layouts=Shard(1), desired_input_layouts=Replicate())`` before
    attention and feed-forward): the norm output is all-gathered to the full sequence by a
    separate collective and the column-parallel matmuls (wq/wk/wv, w1/w3) save that gathered
    tensor, ``T*h`` elements rather than Megatron's ``T*h/t`` (Megatron-SP's fused
    all-gather-GEMM re-gathers in backward instead, Korthikanti section 4.2.2). In backward the
    gradient of the gathered input is likewise full-sequence before its reduce-scatter.
    """
    h, a = model.hidden_size, model.num_attention_heads
    tsp = tp if sp else 1                     # what norms/residuals are divided by
    kv_split = min(tp, max(1, model.num_kv_heads))
    dropout = model.dropout
    lora_same_dtype = ln is not None and adapter_bytes == ab
    need_attn_in = trainable_all or (lora_same_dtype and ln.in_attn)
    need_o_in = trainable_all or (lora_same_dtype and ln.on_attn_out)
    need_mlp_in = trainable_all or (lora_same_dtype and ln.on_mlp_in)
    need_mlp_out = trainable_all or (lora_same_dtype and ln.on_mlp_out)
    upcast = not compiled

    def norm_bytes(output_needed):
        if not dtensor_sp:
            return F.norm_saved_bytes(tokens, h, ab, upcast=upcast,
                                      output_needed=output_needed,
                                      weight_trainable=trainable_all) / tsp
        # sharded input (kept by the norm), full-sequence gathered output (kept by the matmuls)
        return (F.norm_saved_bytes(tokens, h, ab, upcast=upcast, output_needed=False,
                                   weight_trainable=trainable_all) / tsp
                + (tokens * h * ab if output_needed else 0.0))

    norm_a = norm_bytes(need_attn_in)
    qkv = tokens * (mn.q_dim / tp + (mn.k_dim + mn.v_dim) / kv_split) * ab
    core = F.attention_core_bytes(tokens=tokens, batch=batch, seq=seq, heads=a / tp,
                                  q_dim=mn.o_dim / tp, act_bytes=ab, attention=attention,
                                  dropout=dropout)
    # output projection input: eager attention builds it by a contiguous copy; sdpa/flash
    # outputs are transposed into a contiguous copy too unless the block is compiled
    o_in = (tokens * mn.o_dim / tp * ab * F.EAGER_ATTN_OUTPUT_COPIES
            if (need_o_in and (attention == "eager" or not compiled)) else 0.0)
    norm_m = norm_bytes(need_mlp_in)

    act_fn = _activation_function(model)

    def dense_mlp(inter):
        # an unfused activation (GPT-2 ``gelu_new``) saves more than its input
        extra = F.activation_extra_saved_bytes(tokens, inter / tp, ab, act_fn)
        if model.gated_mlp:
            return extra + F.gated_mlp_saved_bytes(tokens, inter / tp, ab,
                                                   product_needed=need_mlp_out)
        return extra + F.plain_mlp_saved_bytes(tokens, inter / tp, ab,
                                               output_needed=need_mlp_out)

    mlp_dense = dense_mlp(model.intermediate_size)
    if mn.moe_layers:
        k = model.experts_per_token or 1
        moe_i = model.moe_intermediate_size or model.intermediate_size
        shared = sum(lin.out_features for lin in model.linears
                     if lin.kind == "shared_expert" and lin.name not in _MLP_OUT_NAMES)
        shared_i = shared / (2 if model.gated_mlp else 1)
        mlp_moe = (F.gated_mlp_saved_bytes(tokens * k, moe_i / tp, ab,
                                           product_needed=need_mlp_out)
                   + F.moe_dispatch_bytes(tokens, h / tsp, k, ab)
                   + (dense_mlp(shared_i) if shared_i else 0.0)
                   + tokens * model.num_experts * F.FP32_BYTES)  # router logits
        mlp = (mn.dense_layers * mlp_dense + mn.moe_layers * mlp_moe) / model.num_layers
        inter_eff = max(model.intermediate_size if mn.dense_layers else 0, moe_i * k)
    else:
        mlp = mlp_dense
        inter_eff = model.intermediate_size
    drop = F.dropout_mask_bytes(tokens, h, dropout) / tsp
    lora_extra = 0.0
    if ln is not None:
        if adapter_bytes != ab:   # peft: fp32 copy of every adapted module's input
            rep = ln.input_elements_per_token - ln.sharded_input_elements_per_token
            lora_extra = tokens * adapter_bytes * (rep / tsp
                                                   + ln.sharded_input_elements_per_token / tp)
        lora_extra += tokens * ln.rank_elements_per_token * adapter_bytes
    full = norm_a + qkv + core + o_in + norm_m + mlp + drop + lora_extra
    grad_buffers = F.LAYER_BACKWARD_GRAD_BUFFERS * tokens * max(
        inter_eff / tp, h if dtensor_sp else h / tsp) * ab
    if ckpt == "none":
        return full, grad_buffers
    layer_input = tokens * h * ab / tsp
    if ckpt == "full":   # the recomputed layer, beyond the checkpointed input it starts from
        return layer_input, max(full - layer_input, 0.0) + grad_buffers
    # selective: torchtitan op-level SAC keeps the layer input, the attention output and
    # every other matmul output (q, v, MLP gate, MLP down), recomputes norms and pointwise ops
    # (torchtitan parallelize_llama ``_save_list``; the s^2 core is never kept).
    flash_out = F.attention_core_bytes(tokens=tokens, batch=batch, seq=seq, heads=a / tp,
                                       q_dim=mn.o_dim / tp, act_bytes=ab, attention="sdpa",
                                       dropout=0.0)
    inter_sel = inter_eff if not mn.moe_layers else inter_eff
    saved = (layer_input + tokens * (mn.q_dim / tp + mn.v_dim / kv_split) * ab + flash_out
             + tokens * inter_sel / tp * ab + tokens * h / tsp * ab)
    saved = min(saved, full)
    return saved, max(full - saved, 0.0) + grad_buffers


# ---------------------------------------------------------------------------------------------
# the estimate
# ---------------------------------------------------------------------------------------------

def _stages(L: int, pp: int, schedule: str, micro: int, vstages: int):
    """(name, layers, has_embedding, has_head, in-flight micro-batches) per distinct stage."""
    if pp <= 1:
        return [("all", L, True, True, 1.0)]
    per = F.ceil_div(L, pp)
    first = F.pipeline_inflight_microbatches(schedule, pp, micro, vstages)
    return [("first", per, True, False, first), ("last", per, False, True, 1.0)]


def estimate_bytes(job, ctx) -> MemoryEstimate:
    """The :class:`MemoryEstimate` of ``job`` (see module doc)."""
    t, par, lay, model = job.training, job.parallelism, ctx.layout, ctx.model
    sharding, opt = ctx.sharding, ctx.optimizer
    mn = _model_numbers(model)
    precision = resolve_precision(t, sharding)
    ab = F.DTYPE_BYTES[t.dtype]
    tp, cp, ep = lay.tp, lay.cp, lay.ep
    sp = par.sequence_parallel
    # PyTorch-native TP (DTensor) is what composes with FSDP (torchtitan); Megatron/DeepSpeed TP
    # do not use ``fsdp``. It brings loss_parallel and separately all-gathered SP inputs.
    dtensor_tp = tp > 1 and sharding.framework == "fsdp"
    dtensor_sp = dtensor_tp and sp
    lora = t.technique in ("lora", "qlora")
    ln = _lora_numbers(model, tuple(t.lora_target_modules), t.lora_rank) if lora else None
    adapter_bytes = (F.FP32_BYTES if precision in ("amp", "master") else ab) if lora else ab
    shard_n = sharding.shard_group_size(dp=lay.dp * cp, gpus_per_node=lay.gpus_per_node,
                                        hsdp_shard_size=par.hsdp_shard_size)
    shards = sharding.shards
    s_params = shard_n if "parameters" in shards else 1
    s_grads = shard_n if "gradients" in shards else 1
    s_opt = shard_n if "optimizer" in shards else 1
    off_opt = par.cpu_offload in ("optimizer", "params")
    off_params = par.cpu_offload == "params"
    impl = t.optimizer_impl if t.optimizer_impl != "auto" else opt.default_impl
    micro = t.grad_accum_steps
    seq_local = t.seq_len / cp
    tokens = t.micro_batch_size * seq_local
    accumulating = micro > 1 or lay.pp > 1

    # per-GPU parameter bytes of a stage ------------------------------------------------
    L = model.num_layers
    if precision == "amp" and not lora:
        param_bytes = F.FP32_BYTES
    elif t.dtype == "fp32":
        param_bytes = F.FP32_BYTES
    else:
        param_bytes = ab
    state_bytes = opt.state_bytes_per_element
    opt_elem = (F.FP32_BYTES if precision in ("amp", "master") else param_bytes) \
        if state_bytes is None else state_bytes
    grad_bytes = adapter_bytes if lora else (F.FP32_BYTES if precision == "amp" else param_bytes)

    best = None
    for name, layers, has_emb, has_head, inflight in _stages(L, lay.pp, par.pp_schedule, micro,
                                                             par.pp_virtual_stages):
        frac = layers / L
        dense_p = mn.layer_dense_params * frac / tp
        expert_p = mn.layer_expert_params * frac / (tp * ep)
        emb_p = mn.embedding_params / tp if has_emb else 0.0
        head_p = (mn.head_params / tp if has_head else 0.0)
        fnorm_p = mn.final_norm_params if has_head else 0.0
        stage_params = dense_p + expert_p + emb_p + head_p + fnorm_p

        # weights
        quant = [lin for lin in model.linears if lin.kind not in ("head",)] \
            if t.technique == "qlora" else []
        if t.technique == "qlora":
            q_params = sum(lin.weight_params for lin in quant) * frac / tp
            if t.quantization_bits == 4:
                q_bytes = q_params * F.nf4_bytes_per_param(t.double_quantization)
            else:
                q_bytes = sum(F.int8_weight_bytes(l.in_features, l.out_features) * l.layers
                              * l.copies for l in quant) * frac / tp
            base_bytes = q_bytes + (stage_params - q_params) * ab
        else:
            base_bytes = stage_params * param_bytes
        weights = base_bytes / s_params
        if off_params:
            weights = 0.0

        if lora:
            trainable = ln.adapter_params * frac / tp
        else:
            trainable = stage_params
        lora_adapters = trainable * adapter_bytes / s_params if lora else 0.0
        if lora and off_params:
            lora_adapters = 0.0

        # master weights, gradients, optimizer states and temporaries
        master = trainable * F.FP32_BYTES / s_opt if precision == "master" else 0.0
        grads_full = trainable * grad_bytes / s_grads
        if opt.factored:
            shapes = ln.shapes if lora else mn.matrix_shapes
            vec = 0.0 if lora else mn.vector_params
            elements = F.factored_state_elements(list(shapes), vec) * trainable / max(
                1.0, (ln.adapter_params if lora else model.param_counts().total))
            states = (elements + trainable * opt.states) * opt_elem / s_opt
        else:
            states = F.optimizer_state_bytes(trainable, opt.states, opt_elem,
                                             opt.quant_overhead_bytes_per_element) / s_opt
        temp_states = opt.step_temp_states.get(impl, 0.0)
        temps = trainable * temp_states * opt_elem / s_opt
        if impl == "for_loop" or t.optimizer_in_backward:
            biggest = (mn.largest_tensor_params / tp) if not lora else \
                (trainable / max(1, len(ln.shapes) // 2 * L))
            temps = max(temps, biggest * opt_elem * max(1.0, opt.states))
        if off_opt:
            master = states = temps = 0.0
        if off_params:
            grads_full = 0.0
        if t.optimizer_in_backward:
            grads_peak = min(grads_full, (mn.largest_tensor_params / tp) * grad_bytes
                             if not lora else grads_full)
            temps_in_bwd = temps
            temps = 0.0
        else:
            grads_peak = grads_full
            temps_in_bwd = 0.0

        # framework buffers
        static_buf = 0.0       # persistent across the step
        fwdbwd_buf = 0.0       # during forward and backward only
        layer_unsharded = (mn.largest_layer_params / tp) * ab
        unsharded_acc = False  # micro-batch grads accumulate unsharded, not in the sharded grads
        acc_buf = 0.0
        fwd_only_buf = 0.0     # during forward only (autocast cache under full checkpointing)
        autocast_layer = 0.0   # one recomputed block's autocast weight copies
        if sharding.framework in ("ddp", "fsdp") and not shards and lay.dp > 1 and trainable:
            static_buf += grads_full * F.DDP_BUCKET_COPIES_OF_GRADS
        if sharding.framework == "deepspeed" and not sharding.param_gather and lay.dp > 1:
            static_buf += min(2 * F.DEEPSPEED_BUCKET_ELEMENTS, trainable) * ab
        if "parameters" in shards and s_params > 1 or off_params:
            if sharding.param_gather and not (lay.pp > 1 and sharding.framework == "fsdp"):
                # the root unit (embedding, final norm, output projection: everything outside
                # the per-block units) is gathered as one group at the start of forward and
                # FSDP2 keeps the root unsharded until backward ends (``fully_shard`` docs:
                # the root's parameters are needed again immediately for backward)
                root = (emb_p + head_p) * ab
                fwdbwd_buf += F.FSDP_UNSHARDED_LAYERS * layer_unsharded + root
                if not lora:   # one layer's unsharded grads (+ fp32 copy for reduce)
                    fwdbwd_buf += layer_unsharded / ab * (ab + (F.FP32_BYTES if precision
                                                                == "amp" else 0))
            else:
                # SHARD_GRAD_OP, or FSDP under PP (torchtitan: reshard_after_forward=False):
                # the stage's parameters stay unsharded through forward and backward, and
                # unsharded gradients accumulate over micro-batches (FSDP2 under PP: upcast to
                # the fp32 reduce dtype, ``FSDP_PP_ACCUMULATED_GRAD_BYTES``)
                fwdbwd_buf += base_bytes * ab / max(param_bytes, 1) if not lora else base_bytes
                if not lora and accumulating:
                    acc_b = F.FSDP_PP_ACCUMULATED_GRAD_BYTES if (
                        lay.pp > 1 and sharding.framework == "fsdp" and precision == "amp"
                        and sharding.param_gather) else ab
                    acc_buf = stage_params * acc_b
                    fwdbwd_buf += acc_buf
                    unsharded_acc = True
        elif precision == "amp" and not lora and ab < F.FP32_BYTES:
            # torch.autocast caches compute-dtype copies of the weights (``cached_cast``: fp32
            # leaf tensors that require grad) until the autocast region exits after forward;
            # what outlives it is what the matmuls saved for backward. Without full
            # checkpointing that is every copy. Under full checkpointing the blocks' saved
            # tensors are dropped, so in backward only the output projection (not
            # checkpointed) still holds its copy, and the recomputed block re-casts its own
            # weights for the length of its backward (counted in its working set).
            head_copy = (head_p or (mn.embedding_params / tp if has_head else 0.0)) * ab
            autocast_copies = (dense_p + expert_p) * ab + head_copy
            if t.activation_checkpointing == "full":
                fwd_only_buf += autocast_copies - head_copy
                fwdbwd_buf += head_copy
                autocast_layer = layer_unsharded
            else:
                fwdbwd_buf += autocast_copies

        # activations and logits
        saved_l, work_l = _layer_activation_bytes(
            model, mn, ln, tokens=tokens, batch=t.micro_batch_size, seq=seq_local, ab=ab, tp=tp,
            sp=sp, attention=t.attention, compiled=t.compile, trainable_all=not lora,
            adapter_bytes=adapter_bytes, ckpt=t.activation_checkpointing, dtensor_sp=dtensor_sp)
        resident_layers = 1 if t.activation_offload else layers * inflight
        saved_all = saved_l * resident_layers
        if lay.pp > 1 and not has_head:
            # the pipeline runtime keeps each in-flight chunk's stage output until that chunk's
            # backward (``PipelineStage.fwd_cache``: ``(output_tuple, input_values)``); no layer
            # of the stage saves it (the last layer's output is only sent to the next stage)
            chunks = inflight * max(1, par.pp_virtual_stages
                                    if par.pp_schedule == "interleaved" else 1)
            saved_all += chunks * tokens * model.hidden_size * ab / (tp if sp else 1)
        if has_head:
            if dtensor_sp:   # final norm: sharded input + full-sequence gathered output
                saved_all += (F.norm_saved_bytes(tokens, model.hidden_size, ab,
                                                 upcast=not t.compile, output_needed=False,
                                                 weight_trainable=not lora) / tp
                              + (tokens * model.hidden_size * ab if not lora else 0.0))
            else:
                saved_all += F.norm_saved_bytes(tokens, model.hidden_size, ab,
                                                upcast=not t.compile,
                                                output_needed=not lora,
                                                weight_trainable=not lora) / (tp if sp else 1)
            held, fwd_tr, bwd_tr = _logits(tokens, model.vocab_size / tp, ab, t.loss, t.compile,
                                           vocab_parallel=dtensor_tp)
            # the output projection's weight gradient appears with the logits' gradient (the
            # embedding's, when tied)
            tied_p = 0.0 if head_p else mn.embedding_params / tp
            head_grad = (head_p or tied_p) * grad_bytes / s_grads if not lora else 0.0
        else:
            held = fwd_tr = bwd_tr = head_grad = 0.0
        work_l += autocast_layer
        if quant:   # bnb / torchao NF4 dequantize one quantized weight at a time to the compute
            # dtype; the embedding and output projection are not quantized
            work_l += max(lin.in_features * lin.out_features for lin in quant) / tp * ab

        # accumulated grads between micro-batches; when they accumulate unsharded (counted in
        # framework_buffers) the sharded grads only appear as the last backward reduce-scatters
        # them, freeing the unsharded ones (``zero_grad(set_to_none=True)`` freed last step's)
        acc_grads = grads_peak if accumulating and not unsharded_acc else 0.0
        static = {"weights": weights, "master_weights": master, "lora_adapters": lora_adapters,
                  "optimizer_states": states}
        phases = {
            "forward": dict(static, gradients=acc_grads, activations=saved_all,
                            logits_and_loss=held + fwd_tr, framework_buffers=static_buf
                            + fwdbwd_buf + fwd_only_buf, optimizer_temporaries=0.0),
        }
        # chunked output loss: the output weight is used once per chunk, so while a chunk's
        # weight-gradient contribution is computed the autograd input buffer already holds the
        # sum of the earlier ones (``InputBuffer::accumulate`` adds in place afterwards)
        head_contrib = head_grad if t.loss == "chunked" else 0.0
        # standard loss: backward opens with the loss gradients (saved log-softmax + its
        # gradient + the logits' gradient) and no parameter gradient yet; the output
        # projection's weight gradient appears only once log-softmax backward has returned and
        # the nll gradient and saved log-softmax are freed, beside one logits-sized gradient.
        # Fused/chunked losses produce the head gradient while their chunk buffers live.
        standard = t.loss == "standard"
        head_first = 0.0 if (accumulating or standard) else head_grad
        bwd_candidates = [
            dict(static, gradients=acc_grads + head_first + head_contrib,
                 activations=saved_all, logits_and_loss=held + bwd_tr,
                 framework_buffers=static_buf + fwdbwd_buf, optimizer_temporaries=0.0),
            dict(static, gradients=acc_grads + (0.0 if accumulating else head_grad),
                 activations=saved_all, logits_and_loss=held if standard else 0.0,
                 framework_buffers=static_buf + fwdbwd_buf, optimizer_temporaries=0.0),
            dict(static, gradients=max(acc_grads, min(grads_peak, head_grad + grads_full / max(
                layers, 1))), activations=saved_all + work_l, logits_and_loss=0.0,
                 framework_buffers=static_buf + fwdbwd_buf, optimizer_temporaries=temps_in_bwd),
            # end of backward: every grad sharded; unsharded accumulators reduce-scattered
            dict(static, gradients=grads_peak, activations=saved_l + work_l,
                 logits_and_loss=0.0, framework_buffers=static_buf + fwdbwd_buf - acc_buf,
                 optimizer_temporaries=temps_in_bwd),
        ]
        phases["backward"] = max(bwd_candidates, key=lambda d: sum(d.values()))
        phases["optimizer"] = dict(static, gradients=grads_peak if not t.optimizer_in_backward
                                   else 0.0, activations=0.0, logits_and_loss=0.0,
                                   framework_buffers=static_buf, optimizer_temporaries=temps)
        for ph, comp in phases.items():
            total = sum(comp.values())
            if best is None or total > best[0]:
                best = (total, ph, comp, {p: sum(c.values()) for p, c in phases.items()}, name)

    allocated, phase, comp, phase_alloc, stage = best
    ctx_bytes = F.cuda_context_bytes(lay.world_size)
    reserve = F.allocator_reserve_bytes(allocated)
    components = {k: int(round(comp.get(k, 0.0))) for k in COMPONENTS
                  if k not in ("cuda_context", "allocator_reserve")}
    components["cuda_context"] = int(round(ctx_bytes))
    components["allocator_reserve"] = int(round(reserve))
    total = sum(components.values())
    phase_peaks = {p: int(round(v * (1 + F.ALLOCATOR_RESERVE_FRACTION) + ctx_bytes))
                   for p, v in phase_alloc.items()}
    phase_peaks[phase] = total
    notes = (f"precision={precision}", f"optimizer_impl={impl}", f"stage={stage}",
             f"shard_group={shard_n}")
    return MemoryEstimate(
        total_bytes=total, components=components, phase=phase, phase_peaks_bytes=phase_peaks,
        provenance=Provenance(basis="analytic", detail=(
            "step-2 phase peak; Korthikanti 2022 activations, ZeRO 2020 states, QLoRA 2023 "
            "NF4; allocator reserve %.0f%% of allocated" % (100 * F.ALLOCATOR_RESERVE_FRACTION))),
        notes=notes)


def _logits(tokens, vocab, ab, loss, compiled, vocab_parallel=False):
    held, bwd_extra = F.logits_bytes(tokens, vocab, ab, loss=loss, compiled=compiled,
                                     vocab_parallel=vocab_parallel)
    tv = tokens * vocab
    fwd_extra = tv * ab if loss == "standard" else 0.0   # compute-dtype logits before upcast
    return held, fwd_extra, bwd_extra


@hookimpl
def fmest_estimate_memory(job, ctx):
    """Analytic per-GPU peak memory (basis ``analytic``); answers every job."""
    return estimate_bytes(job, ctx)
