"""The ``memory_theory`` plugin: analytic per-GPU peak memory of a steady-state training step.

The peak is the maximum over the phases of step 2 (forward, backward, optimizer), where the
optimizer states already exist during forward and backward and gradients were freed by
``zero_grad(set_to_none=True)`` (trace_feasibility notes, section 2a). Each phase sums only
what coexists in it; the components of the winning phase are returned.

The estimate runs as named phases over small frozen records (docs/memory_model.md):

1. :func:`job_setup` reads the job and the core's resolved transforms (``ctx.transforms``:
   precision, per-element bytes of the optimizer transform, sharding divisors and framework
   behaviour of the sharding strategy) into a :class:`JobSetup`;
2. per pipeline stage (:func:`pipeline_stages`): :func:`stage_params` ->
   :func:`model_state_terms` (weights, adapters, master copies, gradients, optimizer states and
   temporaries) -> :func:`framework_buffer_terms` -> :func:`activation_terms` (saved
   activations, one layer's backward working set, logits and loss) -> :func:`phase_components`;
3. :func:`assemble` adds the GPU-side terms of :mod:`fmest.device_terms`.

Formulas and constants live in :mod:`fmest_memory_theory.formulas`.
"""

from __future__ import annotations

import functools
from typing import Optional

import attrs
from attrs import frozen

from fmest.counting import lora_modules
from fmest.estimates import MemoryEstimate, Provenance
from fmest.hookspecs import hookimpl
from fmest.transforms import (OptimizerSizing, ShardingPlan, ShardingStrategy, dtype_info,
                              transforms_of)

from fmest_memory_theory import formulas as F
from fmest_memory_theory.encdec import encdec_activation_bytes, stack_lengths
from fmest_memory_theory.host import host_memory_per_node
from fmest_memory_theory.inference import estimate_inference_memory
from fmest_memory_theory.vision import (image_tokens, vision_activation_bytes,
                                        vision_trainable_params, vlm_sequence_len)
from fmest_memory_theory.layer import LayerInputs, layer_activation_bytes

COMPONENTS = ("weights", "master_weights", "lora_adapters", "gradients", "optimizer_states",
              "optimizer_temporaries", "activations", "logits_and_loss", "framework_buffers",
              "cuda_context", "allocator_reserve")
_TENSOR_COMPONENTS = COMPONENTS[:-2]

#: Module names of attention output and MLP down projections across the supported families
#: (their input is the attention output / the MLP product, not the normalized hidden state).
ATTN_OUT_NAMES = frozenset({"o_proj", "out_proj", "dense", "c_proj", "wo", "output_proj",
                            "attn_out", "self_attention.dense"})
MLP_OUT_NAMES = frozenset({"down_proj", "w2", "c_proj", "fc2", "dense_4h_to_h",
                           "output_linear", "down", "mlp.c_proj"})


# ---------------------------------------------------------------------------------------------
# per-model derived numbers (cached: ModelSpec is frozen and hashable, hf_config excluded)
# ---------------------------------------------------------------------------------------------

@frozen
class ModelNumbers:
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


def _attention_dims(model) -> tuple[int, int, int, int]:
    """(q, k, v, o) projection widths; MLA models (``qk_head_dim``) expand k/v to every head."""
    head_dim = model.head_dim
    if model.qk_head_dim:
        qk = model.num_attention_heads * model.qk_head_dim
        vo = model.num_attention_heads * (model.v_head_dim or head_dim)
        return qk, qk, vo, vo
    q_dim = model.num_attention_heads * head_dim
    kv_dim = model.num_kv_heads * head_dim
    return q_dim, kv_dim, kv_dim, q_dim


@functools.lru_cache(maxsize=256)
def model_numbers(model) -> ModelNumbers:
    num_layers = model.num_layers
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
    groups = model.groups
    emb = sum(grp.params for grp in groups if grp.kind in ("embedding", "position"))
    norms = sum(grp.params for grp in groups if grp.kind == "norm")
    other = sum(grp.params for grp in groups if grp.kind == "other")
    final_norm = sum(grp.params for grp in groups if grp.kind == "norm" and "final" in grp.name)
    vectors = norms + other + sum(lin.bias_params for lin in model.linears)
    for grp in groups:
        if grp.kind == "embedding":
            largest = max(largest, grp.params)
            shapes.append((model.vocab_size, max(1, grp.params // max(1, model.vocab_size)), 1))
        elif grp.kind == "position":
            vectors += grp.params
    layer_dense = dense + (norms - final_norm) + other
    q_dim, k_dim, v_dim, o_dim = _attention_dims(model)
    moe_layers = (model.num_moe_layers or num_layers) if model.is_moe else 0
    return ModelNumbers(
        layer_dense_params=layer_dense, layer_expert_params=expert, embedding_params=emb,
        head_params=head, final_norm_params=final_norm,
        largest_layer_params=(layer_dense + expert) / num_layers, largest_tensor_params=largest,
        matrix_shapes=tuple(shapes), vector_params=vectors, q_dim=q_dim, k_dim=k_dim,
        v_dim=v_dim, o_dim=o_dim, moe_layers=moe_layers, dense_layers=num_layers - moe_layers)


@frozen
class LoraNumbers:
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
def lora_numbers(model, targets: tuple, rank: int) -> LoraNumbers:
    from fmest.job import Training

    mods = lora_modules(model, Training(technique="lora", lora_target_modules=targets,
                                        lora_rank=rank))
    params = 0.0
    shapes = []
    flags = dict(in_attn=False, on_attn_out=False, on_mlp_in=False, on_mlp_out=False)
    in_el = sharded_el = rank_el = 0.0
    for mod in mods:
        count = mod.layers * mod.copies
        params += F.lora_adapter_params(rank, mod.in_features, mod.out_features) * count
        shapes += [(rank, mod.in_features, count), (mod.out_features, rank, count)]
        per_layer = mod.layers / model.num_layers * (mod.active_copies if mod.kind == "expert"
                                                     else 1.0)
        is_out = mod.name in ATTN_OUT_NAMES or mod.name in MLP_OUT_NAMES
        if mod.kind == "attention":
            flags["on_attn_out" if mod.name in ATTN_OUT_NAMES else "in_attn"] = True
        else:
            flags["on_mlp_out" if mod.name in MLP_OUT_NAMES else "on_mlp_in"] = True
        in_el += mod.in_features * per_layer
        if is_out:
            sharded_el += mod.in_features * per_layer
        rank_el += rank * per_layer
    return LoraNumbers(adapter_params=params, shapes=tuple(shapes), **flags,
                       input_elements_per_token=in_el,
                       sharded_input_elements_per_token=sharded_el,
                       rank_elements_per_token=rank_el)


# ---------------------------------------------------------------------------------------------
# 1. the job
# ---------------------------------------------------------------------------------------------

@frozen(kw_only=True)
class JobSetup:
    """What every phase reads: the job, the model numbers and the resolved transforms."""

    training: object
    parallelism: object
    layout: object
    model: object
    dims: ModelNumbers
    lora: Optional[LoraNumbers]
    sizing: OptimizerSizing       # optimizer transform (per-element bytes)
    plan: ShardingPlan            # sharding transform (divisors)
    strategy: ShardingStrategy    # framework behaviour of the sharding strategy
    act_bytes: int                # compute-dtype storage bytes per element
    adapter_act_bytes: int        # dtype of adapter inputs/outputs (fp32 under amp/master LoRA)
    tokens: float                 # tokens of one micro-batch on one GPU
    seq_local: float
    accumulating: bool            # gradients live across micro-batches (accum or pipeline)
    dtensor_tp: bool
    dtensor_sp: bool
    offload_optimizer: bool
    offload_params: bool
    stack: object = None          # fmest.stacks.ResolvedStack (None: eager PyTorch)
    expert_plan: Optional[ShardingPlan] = None  # divisors of expert weights (expert-DP group)


def job_setup(job, ctx) -> JobSetup:
    """Phase 1: the job and the core's transforms (``ctx.transforms``) as one record."""
    training, par, lay, model = job.training, job.parallelism, ctx.layout, ctx.model
    transforms = transforms_of(job, ctx)
    sizing, plan, stack = transforms.optimizer, transforms.sharding, transforms.stack
    if stack is not None and stack.fuses("loss") and training.loss == "standard":
        # the stack's fused cross-entropy never holds the fp32 logits (Megatron
        # cross_entropy_loss_fusion, Liger fused linear CE, Unsloth chunked CE)
        training = attrs.evolve(training, loss="fused")
    lora = training.technique in ("lora", "qlora")
    # PyTorch-native TP (DTensor) is what composes with FSDP (torchtitan): loss_parallel and
    # separately all-gathered SP inputs (ShardingStrategy.native_tensor_parallel)
    dtensor_tp = lay.tp > 1 and plan.strategy.native_tensor_parallel
    # VLMs: image tokens join the text sequence (fmest_memory_theory.vision)
    seq_local = vlm_sequence_len(training.seq_len, model.vision, image_size=training.image_size,
                                 images=training.images_per_sample) / lay.cp
    return JobSetup(
        training=training, parallelism=par, layout=lay, model=model, dims=model_numbers(model),
        lora=(lora_numbers(model, tuple(training.lora_target_modules), training.lora_rank)
              if lora else None),
        sizing=sizing, plan=plan, strategy=plan.strategy, act_bytes=sizing.compute_bytes,
        adapter_act_bytes=sizing.trainable_bytes if lora else sizing.compute_bytes,
        tokens=training.micro_batch_size * seq_local, seq_local=seq_local,
        accumulating=training.grad_accum_steps > 1 or lay.pp > 1, dtensor_tp=dtensor_tp,
        dtensor_sp=dtensor_tp and par.sequence_parallel,
        offload_optimizer=par.cpu_offload in ("optimizer", "params"),
        offload_params=par.cpu_offload == "params", stack=stack,
        expert_plan=transforms.expert_sharding or plan)


@frozen(kw_only=True)
class Stage:
    """One distinct pipeline stage: its layers, whether it holds the embedding/head, and how
    many micro-batches of activations it keeps in flight."""

    name: str
    layers: int
    has_embedding: bool
    has_head: bool
    inflight: float


def pipeline_stages(num_layers: int, pp: int, schedule: str, micro: int,
                    vstages: int) -> tuple[Stage, ...]:
    """The distinct stages: the first holds the most in-flight micro-batches, the last the
    head (formulas.pipeline_inflight_microbatches)."""
    if pp <= 1:
        return (Stage(name="all", layers=num_layers, has_embedding=True, has_head=True,
                      inflight=1.0),)
    per = F.ceil_div(num_layers, pp)
    first = F.pipeline_inflight_microbatches(schedule, pp, micro, vstages)
    return (Stage(name="first", layers=per, has_embedding=True, has_head=False, inflight=first),
            Stage(name="last", layers=per, has_embedding=False, has_head=True, inflight=1.0))


# ---------------------------------------------------------------------------------------------
# 2. one stage
# ---------------------------------------------------------------------------------------------

@frozen(kw_only=True)
class StageParams:
    """Parameters of one stage on one GPU (after tensor and expert parallelism)."""

    fraction: float
    dense: float
    expert: float
    embedding: float
    head: float
    final_norm: float

    @property
    def total(self) -> float:
        return self.dense + self.expert + self.embedding + self.head + self.final_norm


def stage_params(setup: JobSetup, stage: Stage) -> StageParams:
    dims, tp = setup.dims, setup.layout.tp
    frac = stage.layers / setup.model.num_layers
    return StageParams(
        fraction=frac, dense=dims.layer_dense_params * frac / tp,
        expert=dims.layer_expert_params * frac / (tp * setup.layout.ep),
        embedding=dims.embedding_params / tp if stage.has_embedding else 0.0,
        head=(dims.head_params / tp if stage.has_head else 0.0),
        final_norm=dims.final_norm_params if stage.has_head else 0.0)


@frozen(kw_only=True)
class _Divisors:
    """A stage's sharding divisors, dense and expert weights blended (:func:`_blended_divisor`)."""

    params_divisor: float
    grads_divisor: float
    optimizer_divisor: float


@frozen(kw_only=True)
class ModelState:
    """Model-state bytes of one stage (the optimizer and sharding transforms applied)."""

    base_bytes: float            # stage weights before sharding
    weights: float
    lora_adapters: float
    trainable_params: float
    master: float
    grads_full: float            # every sharded gradient
    grads_peak: float            # the most gradients alive at once
    states: float
    temps: float                 # optimizer-step temporaries
    temps_in_backward: float     # optimizer-in-backward temporaries
    quantized: tuple             # the QLoRA-quantized linears


def _base_weight_bytes(setup: JobSetup, params: StageParams) -> tuple[float, tuple]:
    """Stage weights before sharding; QLoRA stores its linears (but the head) in NF4 or
    LLM.int8 (Dettmers et al. 2023 section 3; Dettmers et al. 2022)."""
    training, tp = setup.training, setup.layout.tp
    if training.technique != "qlora":
        return params.total * setup.sizing.weight_bytes, ()
    quant = tuple(lin for lin in setup.model.linears if lin.kind not in ("head",))
    q_params = sum(lin.weight_params for lin in quant) * params.fraction / tp
    if training.quantization_bits == 4:
        q_bytes = q_params * F.nf4_bytes_per_param(training.double_quantization)
    else:
        q_bytes = sum(F.int8_weight_bytes(lin.in_features, lin.out_features) * lin.layers
                      * lin.copies for lin in quant) * params.fraction / tp
    return q_bytes + (params.total - q_params) * setup.act_bytes, quant


def _optimizer_state_bytes(setup: JobSetup, trainable: float) -> float:
    """States of ``trainable`` parameters before sharding (Adafactor: factored statistics,
    Shazeer & Stern 2018; others: formulas.optimizer_state_bytes)."""
    sizing, lora = setup.sizing, setup.lora
    if sizing.factored:
        shapes = lora.shapes if lora else setup.dims.matrix_shapes
        vectors = 0.0 if lora else setup.dims.vector_params
        elements = F.factored_state_elements(list(shapes), vectors) * trainable / max(
            1.0, (lora.adapter_params if lora else setup.model.param_counts().total))
        return (elements + trainable * sizing.states) * sizing.state_bytes
    return F.optimizer_state_bytes(trainable, sizing.states, sizing.state_bytes,
                                   sizing.state_overhead_bytes)


def _step_temporaries(setup: JobSetup, trainable: float, opt_div: int) -> float:
    """Parameter-sized temporaries of the update (``OptimizerSpec.step_temp_states``); a
    for-loop or in-backward update holds one tensor's worth at a time."""
    sizing, training, lora = setup.sizing, setup.training, setup.lora
    temps = trainable * sizing.temp_states * sizing.state_bytes / opt_div
    if sizing.impl == "for_loop" or training.optimizer_in_backward:
        biggest = (setup.dims.largest_tensor_params / setup.layout.tp) if not lora else \
            (trainable / max(1, len(lora.shapes) // 2 * setup.model.num_layers))
        temps = max(temps, biggest * sizing.state_bytes * max(1.0, sizing.states))
    return temps


def _frozen_vision_params(setup: JobSetup) -> float:
    """A VLM's vision tower is frozen unless ``train_vision_tower`` (its projector trains)."""
    vision = setup.model.vision
    if vision is None:
        return 0.0
    return vision.tower_params + vision.projector_params - vision_trainable_params(
        vision, train_tower=setup.training.train_vision_tower)


def _blended_divisor(setup: JobSetup, which: str, expert_share: float) -> float:
    """The sharding divisor ``which`` (``params_divisor``...) of a stage whose
    ``expert_share`` of elements are expert weights: dense ones shard over the data-parallel
    group, expert ones over the expert-data-parallel group (``Transforms.expert_sharding``;
    Megatron-Core's distributed optimizer shards expert buffers over ``intra_expt_dp_group``,
    megatron/core/distributed/distributed_data_parallel.py)."""
    dense = getattr(setup.plan, which)
    expert = getattr(setup.expert_plan or setup.plan, which)
    if not expert_share or expert == dense:
        return dense
    return 1.0 / ((1.0 - expert_share) / dense + expert_share / expert)


def model_state_terms(setup: JobSetup, params: StageParams) -> ModelState:
    """Weights, adapters, master copies, gradients, optimizer states and temporaries of one
    stage, divided by the sharding plan (ZeRO paper section 5; ``OptimizerSizing`` bytes);
    expert weights by the expert sharding plan (:func:`_blended_divisor`)."""
    sizing, lora = setup.sizing, setup.lora
    base_bytes, quant = _base_weight_bytes(setup, params)
    trainable = lora.adapter_params * params.fraction / setup.layout.tp if lora else \
        params.total - _frozen_vision_params(setup) * params.fraction / setup.layout.tp
    weight_share = params.expert / params.total if params.total else 0.0
    trained_share = 0.0 if lora or not trainable else min(1.0, params.expert / trainable)
    plan = _Divisors(params_divisor=_blended_divisor(setup, "params_divisor", weight_share),
                     grads_divisor=_blended_divisor(setup, "grads_divisor", trained_share),
                     optimizer_divisor=_blended_divisor(setup, "optimizer_divisor",
                                                        trained_share))
    adapter_divisor = setup.plan.params_divisor
    weights = 0.0 if setup.offload_params else base_bytes / plan.params_divisor
    adapters = trainable * sizing.trainable_bytes / adapter_divisor if lora else 0.0
    if lora and setup.offload_params:
        adapters = 0.0
    master = trainable * sizing.master_bytes / plan.optimizer_divisor
    grads_full = trainable * sizing.grad_bytes / plan.grads_divisor
    states = _optimizer_state_bytes(setup, trainable) / plan.optimizer_divisor
    temps = _step_temporaries(setup, trainable, plan.optimizer_divisor)
    if setup.offload_optimizer:
        master = states = temps = 0.0
    if setup.offload_params:
        grads_full = 0.0
    grads_peak, temps_in_bwd = grads_full, 0.0
    if setup.training.optimizer_in_backward:
        if not lora:
            grads_peak = min(grads_full, (setup.dims.largest_tensor_params / setup.layout.tp)
                             * sizing.grad_bytes)
        temps_in_bwd, temps = temps, 0.0
    return ModelState(base_bytes=base_bytes, weights=weights, lora_adapters=adapters,
                      trainable_params=trainable, master=master, grads_full=grads_full,
                      grads_peak=grads_peak, states=states, temps=temps,
                      temps_in_backward=temps_in_bwd, quantized=quant)


@frozen(kw_only=True)
class Buffers:
    """Framework buffers of one stage by lifetime."""

    static: float = 0.0           # persistent across the step
    fwd_bwd: float = 0.0          # during forward and backward only
    fwd_only: float = 0.0         # during forward only (autocast cache under full ckpt)
    accumulated: float = 0.0      # unsharded accumulated gradients (part of fwd_bwd)
    unsharded_accumulation: bool = False
    autocast_layer: float = 0.0   # one recomputed block's autocast weight copies


def _bucket_bytes(setup: JobSetup, state: ModelState) -> float:
    """Persistent flat buckets: DDP's gradient bucket copy (``ShardingStrategy.ddp_bucket``)
    or DeepSpeed-style reduce/all-gather buckets (``*_bucket_elements``)."""
    strategy, dp = setup.strategy, setup.layout.dp
    stack = setup.stack
    out = float(stack.profile.workspace_bytes) if stack is not None else 0.0
    if stack is not None and stack.profile.contiguous_grad_buffer \
            and "gradients" not in strategy.shards:
        # gradients accumulate in the framework's flat buffer, which is what is reduced
        # (Megatron param_and_grad_buffer, DeepSpeed BF16_Optimizer): no bucket copies
        return out
    if strategy.ddp_bucket and not strategy.shards and dp > 1 and state.trainable_params:
        out += state.grads_full * F.DDP_BUCKET_COPIES_OF_GRADS
    buckets = strategy.reduce_bucket_elements + strategy.allgather_bucket_elements
    if buckets and dp > 1:
        out += min(buckets, state.trainable_params) * setup.act_bytes
    return out


def _gathered_param_buffers(setup: JobSetup, params: StageParams, state: ModelState) -> Buffers:
    """Unsharded parameters (and gradients) of a parameter-sharding strategy."""
    strategy, lay, act = setup.strategy, setup.layout, setup.act_bytes
    lora = setup.lora is not None
    layer_unsharded = (setup.dims.largest_layer_params / lay.tp) * act
    if strategy.param_gather and not (lay.pp > 1 and strategy.pp_unsharded_params):
        # the root unit (embedding, final norm, output projection: everything outside the
        # per-block units) is gathered at the start of forward and FSDP2 keeps the root
        # unsharded until backward ends (``fully_shard`` docs)
        root = (params.embedding + params.head) * act
        fwd_bwd = F.FSDP_UNSHARDED_LAYERS * layer_unsharded + root
        if not lora:   # one layer's unsharded grads (+ fp32 copy for reduce)
            fwd_bwd += layer_unsharded / act * (act + (F.FP32_BYTES if setup.sizing.precision
                                                       == "amp" else 0))
        return Buffers(fwd_bwd=fwd_bwd)
    # SHARD_GRAD_OP, or parameters kept unsharded under PP (torchtitan:
    # reshard_after_forward=False): the stage's parameters stay unsharded through forward and
    # backward, and unsharded gradients accumulate over micro-batches (fp32 under amp with
    # ``fp32_grad_accum``, FSDP_PP_ACCUMULATED_GRAD_BYTES)
    fwd_bwd = state.base_bytes * act / max(setup.sizing.weight_bytes, 1) if not lora \
        else state.base_bytes
    if lora or not setup.accumulating:
        return Buffers(fwd_bwd=fwd_bwd)
    # FSDP2 upcasts every unsharded gradient it accumulates without sync to ``reduce_dtype``,
    # whatever ``reshard_after_forward`` says: under PP FULL_SHARD and SHARD_GRAD_OP run the
    # same (torchtitan sets reshard_after_forward=False for both)
    acc_b = F.FSDP_PP_ACCUMULATED_GRAD_BYTES if (
        lay.pp > 1 and strategy.fp32_grad_accum and setup.sizing.precision == "amp") else act
    acc_buf = params.total * acc_b
    return Buffers(fwd_bwd=fwd_bwd + acc_buf, accumulated=acc_buf, unsharded_accumulation=True)


def _autocast_buffers(setup: JobSetup, params: StageParams, stage: Stage) -> Buffers:
    """torch.autocast caches compute-dtype copies of fp32 weights (``cached_cast``) until the
    autocast region exits after forward; what outlives it is what the matmuls saved. Under
    full checkpointing only the (not checkpointed) output projection keeps its copy into
    backward, and the recomputed block re-casts its own weights for its backward."""
    act, tp = setup.act_bytes, setup.layout.tp
    head_copy = (params.head or (setup.dims.embedding_params / tp if stage.has_head else 0.0)) \
        * act
    copies = (params.dense + params.expert) * act + head_copy
    if setup.training.activation_checkpointing == "full":
        return Buffers(fwd_only=copies - head_copy, fwd_bwd=head_copy,
                       autocast_layer=(setup.dims.largest_layer_params / tp) * act)
    return Buffers(fwd_bwd=copies)


def framework_buffer_terms(setup: JobSetup, params: StageParams, state: ModelState,
                           stage: Stage) -> Buffers:
    """Framework buffers of one stage: flat buckets (static), gathered parameters under
    parameter sharding or the autocast weight cache under amp (forward/backward)."""
    static = _bucket_bytes(setup, state)
    plan = setup.plan
    if "parameters" in setup.strategy.shards and plan.params_divisor > 1 \
            or setup.offload_params:
        inner = _gathered_param_buffers(setup, params, state)
    elif (setup.sizing.precision == "amp" and setup.lora is None
          and setup.act_bytes < F.FP32_BYTES):
        inner = _autocast_buffers(setup, params, stage)
    else:
        inner = Buffers()
    return Buffers(static=static, fwd_bwd=inner.fwd_bwd, fwd_only=inner.fwd_only,
                   accumulated=inner.accumulated,
                   unsharded_accumulation=inner.unsharded_accumulation,
                   autocast_layer=inner.autocast_layer)


@frozen(kw_only=True)
class Activations:
    """Activation-side bytes of one stage and micro-batch schedule."""

    saved_layer: float       # one layer's saved tensors
    work_layer: float        # one layer's backward working set
    saved_all: float         # everything saved for backward at the end of forward
    logits_held: float
    logits_fwd_extra: float
    logits_bwd_extra: float
    head_grad: float         # the output projection's weight gradient


def _layer_inputs(setup: JobSetup) -> LayerInputs:
    training, lay = setup.training, setup.layout
    return LayerInputs(
        tokens=setup.tokens, batch=training.micro_batch_size, seq=setup.seq_local,
        act_bytes=setup.act_bytes, tp=lay.tp, sequence_parallel=setup.parallelism
        .sequence_parallel, attention=training.attention, compiled=training.compile,
        trainable_all=setup.lora is None, adapter_bytes=setup.adapter_act_bytes,
        checkpointing=training.activation_checkpointing, dtensor_sp=setup.dtensor_sp,
        autocast=setup.sizing.precision == "amp", **_stack_layer_inputs(setup))


def _stack_layer_inputs(setup: JobSetup) -> dict:
    """The stack's fused kernels as LayerInputs fields; under a stack that fuses the fp8 cast
    into the GEMM producers (Transformer Engine), saved GEMM inputs are the fp8 copies."""
    stack = setup.stack
    if stack is None:
        return {}
    fp8_saved = stack.fuses("fp8_cast") and setup.training.dtype == "fp8"
    return {"fused_norm": stack.fuses("norm"), "fused_activation": stack.fuses("activation"),
            "fused_layout": stack.fuses("layout"),
            "gemm_input_bytes": (dtype_info(setup.training.dtype).operand_bytes
                                 if fp8_saved else None)}


def _final_norm_bytes(setup: JobSetup) -> float:
    """The final norm's saved tensors (DTensor SP: sharded input + gathered output)."""
    training, tp, hidden = setup.training, setup.layout.tp, setup.model.hidden_size
    lora = setup.lora is not None
    if setup.dtensor_sp:
        return (F.norm_saved_bytes(setup.tokens, hidden, setup.act_bytes,
                                   upcast=not training.compile, output_needed=False,
                                   weight_trainable=not lora) / tp
                + (setup.tokens * hidden * setup.act_bytes if not lora else 0.0))
    return F.norm_saved_bytes(setup.tokens, hidden, setup.act_bytes, upcast=not training.compile,
                              output_needed=not lora, weight_trainable=not lora) / (
        tp if setup.parallelism.sequence_parallel else 1)


def _logits(tokens, vocab, act_bytes, loss, compiled, vocab_parallel=False):
    """(held, forward extra, backward extra): formulas.logits_bytes plus the compute-dtype
    logits that exist before the fp32 upcast in forward (standard loss)."""
    held, bwd_extra = F.logits_bytes(tokens, vocab, act_bytes, loss=loss, compiled=compiled,
                                     vocab_parallel=vocab_parallel)
    fwd_extra = tokens * vocab * act_bytes if loss == "standard" else 0.0
    return held, fwd_extra, bwd_extra


def _encdec_saved_bytes(setup: JobSetup, stage: Stage) -> float:
    """Both stacks of an encoder-decoder at their own lengths (fmest_memory_theory.encdec),
    with this plugin's per-layer formula, for the layers of ``stage``."""
    training, model, cp = setup.training, setup.model, setup.layout.cp
    base = _layer_inputs(setup)
    if model.eager_only and base.attention == "sdpa":  # T5's position bias: eager attention
        base = attrs.evolve(base, attention="eager")

    def per_layer(seq: int) -> float:
        inputs = attrs.evolve(base, tokens=training.micro_batch_size * seq / cp, seq=seq / cp)
        return layer_activation_bytes(model, setup.dims, setup.lora, inputs)[0]

    lengths = stack_lengths(model, seq_len=training.seq_len, source_len=training.source_len,
                            target_len=training.target_len)
    whole = encdec_activation_bytes(model, per_layer, lengths=lengths,
                                    batch=training.micro_batch_size, act_bytes=setup.act_bytes,
                                    tp=setup.layout.tp)
    return whole * stage.layers / model.num_layers * stage.inflight


def _vision_saved_bytes(setup: JobSetup) -> float:
    """The vision tower's activations for one micro-batch (trained or frozen)."""
    training, vision = setup.training, setup.model.vision
    tokens = image_tokens(vision, training.image_size)
    return vision_activation_bytes(
        vision, tokens, images=training.micro_batch_size * training.images_per_sample,
        act_bytes=setup.act_bytes, trained=training.train_vision_tower,
        checkpointing=training.activation_checkpointing == "full") / setup.layout.tp


def activation_terms(setup: JobSetup, params: StageParams, state: ModelState,
                     buffers: Buffers, stage: Stage) -> Activations:
    """Saved activations of the in-flight micro-batches (Korthikanti et al. 2022 section 4,
    pipeline schedules section 4.2.3), the pipeline runtime's stage outputs, the final norm,
    logits and loss, and one layer's backward working set."""
    training, par, lay, model = setup.training, setup.parallelism, setup.layout, setup.model
    act, tokens = setup.act_bytes, setup.tokens
    saved_l, work_l = layer_activation_bytes(model, setup.dims, setup.lora,
                                             _layer_inputs(setup))
    resident_layers = 1 if training.activation_offload else stage.layers * stage.inflight
    saved_all = saved_l * resident_layers
    if model.is_encoder_decoder and not training.activation_offload:
        saved_all = _encdec_saved_bytes(setup, stage)
    if model.vision is not None and stage.has_embedding:
        saved_all += _vision_saved_bytes(setup) * stage.inflight
    if lay.pp > 1 and not stage.has_head:
        # the pipeline runtime keeps each in-flight chunk's stage output until its backward
        # (``PipelineStage.fwd_cache``); no layer of the stage saves it
        chunks = stage.inflight * max(1, par.pp_virtual_stages
                                      if par.pp_schedule == "interleaved" else 1)
        saved_all += chunks * tokens * model.hidden_size * act / (
            lay.tp if par.sequence_parallel else 1)
    held = fwd_tr = bwd_tr = head_grad = 0.0
    if stage.has_head:
        saved_all += _final_norm_bytes(setup)
        held, fwd_tr, bwd_tr = _logits(tokens, model.vocab_size / lay.tp, act, training.loss,
                                       training.compile, vocab_parallel=setup.dtensor_tp)
        # the output projection's weight gradient appears with the logits' gradient (the
        # embedding's, when tied)
        tied = 0.0 if params.head else setup.dims.embedding_params / lay.tp
        head_grad = (params.head or tied) * setup.sizing.grad_bytes / setup.plan.grads_divisor \
            if setup.lora is None else 0.0
    work_l += buffers.autocast_layer
    if state.quantized:   # bnb / torchao NF4 dequantize one weight at a time (not the head)
        work_l += max(lin.in_features * lin.out_features for lin in state.quantized) \
            / lay.tp * act
    return Activations(saved_layer=saved_l, work_layer=work_l, saved_all=saved_all,
                       logits_held=held, logits_fwd_extra=fwd_tr, logits_bwd_extra=bwd_tr,
                       head_grad=head_grad)


def _backward_candidates(setup, static, state, buffers, acts, stage, acc_grads):
    """The moments of backward that can peak: the loss gradient, the head's weight gradient,
    the first layer's backward, and the end of backward (every grad sharded)."""
    training = setup.training
    both = buffers.static + buffers.fwd_bwd
    # chunked loss: the output weight's earlier chunk contributions are summed in place while
    # the next one is computed (``InputBuffer::accumulate``)
    head_contrib = acts.head_grad if training.loss == "chunked" else 0.0
    # standard loss: the head's weight gradient appears only after log-softmax backward has
    # freed the nll gradient and saved log-softmax; fused/chunked losses produce it at once
    standard = training.loss == "standard"
    head_first = 0.0 if (setup.accumulating or standard) else acts.head_grad
    return [
        dict(static, gradients=acc_grads + head_first + head_contrib,
             activations=acts.saved_all, logits_and_loss=acts.logits_held + acts.logits_bwd_extra,
             framework_buffers=both, optimizer_temporaries=0.0),
        dict(static, gradients=acc_grads + (0.0 if setup.accumulating else acts.head_grad),
             activations=acts.saved_all, logits_and_loss=acts.logits_held if standard else 0.0,
             framework_buffers=both, optimizer_temporaries=0.0),
        dict(static, gradients=max(acc_grads, min(state.grads_peak, acts.head_grad
                                                  + state.grads_full / max(stage.layers, 1))),
             activations=acts.saved_all + acts.work_layer, logits_and_loss=0.0,
             framework_buffers=both, optimizer_temporaries=state.temps_in_backward),
        dict(static, gradients=state.grads_peak, activations=acts.saved_layer + acts.work_layer,
             logits_and_loss=0.0, framework_buffers=both - buffers.accumulated,
             optimizer_temporaries=state.temps_in_backward),
    ]


def phase_components(setup: JobSetup, state: ModelState, buffers: Buffers, acts: Activations,
                     stage: Stage) -> dict[str, dict[str, float]]:
    """Components alive at the peak of each phase of step 2 (module doc)."""
    # accumulated grads between micro-batches; when they accumulate unsharded (framework
    # buffers) the sharded grads only appear as the last backward reduce-scatters them
    acc_grads = state.grads_peak if setup.accumulating and not buffers.unsharded_accumulation \
        else 0.0
    static = {"weights": state.weights, "master_weights": state.master,
              "lora_adapters": state.lora_adapters, "optimizer_states": state.states}
    forward = dict(static, gradients=acc_grads, activations=acts.saved_all,
                   logits_and_loss=acts.logits_held + acts.logits_fwd_extra,
                   framework_buffers=buffers.static + buffers.fwd_bwd + buffers.fwd_only,
                   optimizer_temporaries=0.0)
    candidates = _backward_candidates(setup, static, state, buffers, acts, stage, acc_grads)
    in_backward = setup.training.optimizer_in_backward
    optimizer = dict(static, gradients=state.grads_peak if not in_backward else 0.0,
                     activations=0.0, logits_and_loss=0.0, framework_buffers=buffers.static,
                     optimizer_temporaries=state.temps)
    return {"forward": forward,
            "backward": max(candidates, key=lambda comps: sum(comps.values())),
            "optimizer": optimizer}


# ---------------------------------------------------------------------------------------------
# 3. the estimate
# ---------------------------------------------------------------------------------------------

@frozen(kw_only=True)
class StagePeak:
    allocated: float
    phase: str
    components: dict
    phase_allocated: dict
    stage: str


def stage_peak(setup: JobSetup, stage: Stage) -> StagePeak:
    """The phases of one stage and the one that peaks."""
    params = stage_params(setup, stage)
    state = model_state_terms(setup, params)
    buffers = framework_buffer_terms(setup, params, state, stage)
    acts = activation_terms(setup, params, state, buffers, stage)
    phases = phase_components(setup, state, buffers, acts, stage)
    totals = {name: sum(comp.values()) for name, comp in phases.items()}
    best = None
    for name, comp in phases.items():
        if best is None or totals[name] > totals[best]:
            best = name
    return StagePeak(allocated=totals[best], phase=best, components=phases[best],
                     phase_allocated=totals, stage=stage.name)


def _split_vision(setup: JobSetup, peak: StagePeak, components: dict) -> None:
    """Show a VLM's tower and projector weights and the tower's activations as their own
    components (moved out of ``weights`` / ``activations``; the total is unchanged)."""
    vision = setup.model.vision
    if vision is None:
        return
    share = (vision.tower_params + vision.projector_params) / max(
        1.0, setup.model.param_counts().total)
    moved = int(round(components.get("weights", 0) * share))
    components["weights"] -= moved
    components["vision_weights"] = moved
    if peak.phase != "optimizer":
        acts = min(components.get("activations", 0),
                   int(round(_vision_saved_bytes(setup))))
        components["activations"] -= acts
        components["vision_activations"] = acts


def _host_bytes(setup: JobSetup) -> float:
    """Host RAM per node (fmest_memory_theory.host): model loading, offloaded state."""
    lay, dims, training = setup.layout, setup.dims, setup.training
    total = setup.model.param_counts().total
    lora = setup.lora
    trainable = lora.adapter_params if lora else total - _frozen_vision_params(setup)
    sharded_init = setup.plan.params_divisor > 1  # ZeRO-3 / FSDP full shard materialize sharded
    return host_memory_per_node(
        total_params=total, trainable_params=trainable,
        largest_layer_params=dims.largest_layer_params, gpus_per_node=lay.gpus_per_node,
        nodes=lay.nodes, cpu_offload=setup.parallelism.cpu_offload, sharded_init=sharded_init,
        load_bytes_per_param=setup.sizing.weight_bytes,
        host_model_copy=(setup.stack.profile.host_model_copy if setup.stack is not None
                         else "per_process_full"),
        rank_shard_divisor=lay.tp * lay.pp * setup.plan.params_divisor).total_bytes


def assemble(setup: JobSetup, peak: StagePeak) -> MemoryEstimate:
    """Round the peak's components and add the GPU-side terms (:mod:`fmest.device_terms`)."""
    ctx_bytes = F.cuda_context_bytes(setup.layout.world_size)
    components = {name: int(round(peak.components.get(name, 0.0)))
                  for name in _TENSOR_COMPONENTS}
    _split_vision(setup, peak, components)
    components["cuda_context"] = int(round(ctx_bytes))
    fitted = setup.stack.fitted.reserve_fraction if setup.stack is not None else None
    components["allocator_reserve"] = int(round(
        F.allocator_reserve_bytes(peak.allocated) if fitted is None
        else fitted * peak.allocated))
    total = sum(components.values())
    phase_peaks = {name: int(round(value * (1 + F.ALLOCATOR_RESERVE_FRACTION) + ctx_bytes))
                   for name, value in peak.phase_allocated.items()}
    phase_peaks[peak.phase] = total
    notes = (f"precision={setup.sizing.precision}", f"optimizer_impl={setup.sizing.impl}",
             f"stage={peak.stage}", f"shard_group={setup.plan.group_size}")
    if setup.stack is not None:
        notes += (setup.stack.summary(),) + _stack_memory_notes(setup, fitted)
    return MemoryEstimate(
        total_bytes=total, components=components, phase=peak.phase,
        phase_peaks_bytes=phase_peaks, host_bytes=int(_host_bytes(setup)),
        provenance=Provenance(basis="analytic", detail=(
            "step-2 phase peak; Korthikanti 2022 activations, ZeRO 2020 states, QLoRA 2023 "
            "NF4; allocator reserve %.0f%% of allocated" % (100 * F.ALLOCATOR_RESERVE_FRACTION))),
        notes=notes)


def _stack_memory_notes(setup: JobSetup, fitted) -> tuple:
    """What the stack changed in memory, by name (issue 12)."""
    stack, sizing, out = setup.stack, setup.sizing, []
    if sizing.grad_bytes == F.FP32_BYTES and sizing.precision == "master":
        out.append(f"{stack.name}: gradients accumulate in an fp32 buffer (4 B/param)")
    if stack.profile.contiguous_grad_buffer and "gradients" not in setup.strategy.shards:
        out.append(f"{stack.name}: contiguous gradient buffer, no bucket copies")
    if stack.profile.workspace_bytes:
        out.append(f"{stack.name}: framework workspaces "
                   f"{stack.profile.workspace_bytes / 2**20:.0f} MiB")
    if setup.training.loss == "fused" and stack.fuses("loss"):
        out.append(f"{stack.name}: fused cross-entropy (no fp32 logits)")
    if fitted is not None:
        out.append(f"{stack.name}: allocator reserve {fitted:.3f} x allocated "
                   f"({stack.fitted.origin})")
    return tuple(out)


def estimate_bytes(job, ctx) -> MemoryEstimate:
    """The :class:`MemoryEstimate` of ``job`` (see module doc)."""
    setup = job_setup(job, ctx)
    training, par = setup.training, setup.parallelism
    best = None
    for stage in pipeline_stages(setup.model.num_layers, setup.layout.pp, par.pp_schedule,
                                 training.grad_accum_steps, par.pp_virtual_stages):
        peak = stage_peak(setup, stage)
        if best is None or peak.allocated > best.allocated:
            best = peak
    return assemble(setup, best)


@hookimpl
def fmest_estimate_memory(job, ctx):
    """Analytic per-GPU peak memory (basis ``analytic``); answers every job (serving memory
    for ``mode: inference``, fmest_memory_theory.inference)."""
    if job.mode == "inference":
        return estimate_inference_memory(job, ctx)
    return estimate_bytes(job, ctx)
