"""The ``memory_theory`` estimator: analytic per-GPU peak memory of a steady-state training step
(the plugin's hooks are in :mod:`fmest_memory_theory.plugin`).

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
3. :func:`assemble` adds the GPU-side terms of :mod:`fmest.physics.device_terms`.

Formulas and constants live in :mod:`fmest_memory_theory.formulas`; the per-model numbers
the phases read (sums over the model's inventory, computed once per model) in
:mod:`fmest_memory_theory.inventory`.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Optional

import attrs
from attrs import frozen

from fmest.allocator import padded_growth_of  # noqa: F401  (also this plugin's name for it)
from fmest.default_plugins.parallelism import zero_reduce_buffer_elements, zero_step_grad_copy_rule
from fmest.estimates import MemoryEstimate, Provenance
from fmest.job import expert_tp_of
from fmest.objectives import no_grad_calls, reference_of, sequences_per_sample
from fmest.physics.counting import (
    ADAPTER_TECHNIQUES,
    ADAPTER_V2_TECHNIQUES,
    adapter_layers,
    quantized_base,
)
from fmest.physics.device_terms import (
    FSDP_STREAM_POOL_STACKS,
    fsdp2_rs_input_in_side_pool,
    fsdp_stream_pool_bytes,
)
from fmest.stacks import loss_compiled
from fmest.transforms import (
    OptimizerSizing,
    ShardingPlan,
    ShardingStrategy,
    dtype_info,
    transforms_of,
)
from fmest_memory_theory import formulas as F
from fmest_memory_theory.encdec import encdec_activation_bytes, stack_lengths
from fmest_memory_theory.host import host_memory_per_node
from fmest_memory_theory.inventory import (
    LoraNumbers,
    ModelNumbers,
    adapter_numbers,
    lora_numbers,
    model_numbers,
)
from fmest_memory_theory.layer import LayerInputs, layer_activation_bytes, qkv_output_bytes
from fmest_memory_theory.memo import by_identity
from fmest_memory_theory.vision import (
    image_tokens,
    vision_activation_bytes,
    vision_trainable_params,
    vlm_sequence_len,
)

if TYPE_CHECKING:
    from fmest.engine import EstimateContext
    from fmest.job import Job, Layout, Parallelism, Training
    from fmest.models.spec import LinearModule, ModelSpec, VisionSpec
    from fmest.stacks import ResolvedStack

COMPONENTS = ("weights", "master_weights", "lora_adapters", "gradients", "optimizer_states",
              "optimizer_temporaries", "activations", "logits_and_loss", "framework_buffers",
              "cuda_context", "allocator_reserve")
_TENSOR_COMPONENTS = COMPONENTS[:-2]
#: components only a preference objective has, shown when present
_OBJECTIVE_COMPONENTS = ("reference_weights", "reference_forward")

#: every training estimate's provenance: one frozen record, not one built per estimate. It
#: names this plugin's entry point (pyproject.toml): the engine stamps the name of the
#: plugin that answered on every answer (fmest.estimates.with_plugin), and a record that
#: already carries that name is kept as is (no copy of the estimate per answer); under any
#: other registered name the engine stamps that name as before
PROVENANCE = Provenance(basis="analytic", plugin="memory_theory", detail=(
    "step-2 phase peak; Korthikanti 2022 activations, ZeRO 2020 states, QLoRA 2023 "
    "NF4; allocator reserve from traced allocator replays (core/fmest/data/"
    "allocator_reserve.json)"))


# ---------------------------------------------------------------------------------------------
# 1. the job
# ---------------------------------------------------------------------------------------------

@frozen(kw_only=True)
class JobSetup:
    """What every phase reads: the job, the model numbers and the resolved transforms."""

    training: Training
    parallelism: Parallelism
    layout: Layout
    model: ModelSpec
    dims: ModelNumbers
    lora: Optional[LoraNumbers]
    sizing: OptimizerSizing       # optimizer transform (per-element bytes)
    plan: ShardingPlan            # sharding transform (divisors)
    strategy: ShardingStrategy    # framework behaviour of the sharding strategy
    act_bytes: int                # compute-dtype storage bytes per element
    adapter_act_bytes: int        # dtype of adapter inputs/outputs (fp32 under amp/master LoRA)
    tokens: float                 # tokens of one micro-batch on one GPU
    #: sequences of one micro-batch as run: micro_batch_size x 2 for pairwise objectives
    #: (fmest.objectives: DPO/ORPO/SimPO/CPO batch the chosen and the rejected sequence)
    batch: int
    seq_local: float
    accumulating: bool            # gradients live across micro-batches (accum or pipeline)
    dtensor_tp: bool
    dtensor_sp: bool
    offload_optimizer: bool
    offload_params: bool
    #: the loss as it runs: ``training.loss``, or ``fused`` when the stack fuses a standard
    #: cross-entropy (read this, not ``training.loss``)
    loss: str
    stack: Optional[ResolvedStack] = None   # None: eager PyTorch
    #: torch.compile compiles the ``standard`` loss (fmest.stacks.loss_compiled)
    loss_compiled: bool = False
    expert_plan: Optional[ShardingPlan] = None  # divisors of expert weights (expert-DP group)
    #: the resolved reference model of a DPO/KTO objective (fmest.objectives.resolved_reference)
    reference: str = "none"
    #: sequences per sample of each extra no-grad forward pass (fmest.objectives)
    forward_only_calls: tuple[int, ...] = ()
    #: the GPU's memory (the allocator frees its cache before it exceeds it); 0: unknown
    capacity_bytes: float = 0.0
    #: pad-to-longest batches of varying length: the caching allocator's reserve grows by this
    #: fraction of one micro-batch's transient bytes (fmest.allocator.padded_growth_fraction;
    #: :func:`padded_growth_of`); 0 for fixed shapes
    padded_growth: float = 0.0
    #: the run's PyTorch release (``hardware.torch_version``; None: not stated)
    torch_version: Optional[str] = None


def stack_says(stack: Optional[ResolvedStack], behaviour: str) -> bool:
    """Whether the stack's profile states a boolean ``behaviour`` (fmest.stacks.StackProfile
    fields such as fsdp_no_sync_accumulation, fsdp_flat_param_grads, quantize_head,
    quant_saves_gemm_inputs: the LitGPT behaviours of stacks.toml)."""
    return stack is not None and bool(getattr(stack.profile, behaviour))


def effective_loss(loss: str, stack: Optional[ResolvedStack]) -> str:
    """The stack's fused cross-entropy never holds the fp32 logits (Megatron
    cross_entropy_loss_fusion, Liger fused linear CE, Unsloth chunked CE): a ``standard`` loss
    runs as ``fused`` under a stack that fuses ``loss``. A loss kernel only the job states
    (``training.fused_kernels``: fms-acceleration's Unsloth fast cross-entropy) keeps the
    standard loss's logits: under transformers >= 4.46 it runs on the fp32-upcast, shifted and
    contiguous logits of ``FastForCausalLMLoss`` (``logits.float()``, saved for backward, the
    gradient written in place; foundation-model-stack/fms-acceleration
    47cf9e3ecb8d3dc5c7aa8509e2ee692f2c48907a plugins/fused-ops-and-kernels/src/
    fms_acceleration_foak/kernels/unsloth/cross_entropy_loss.py), so only its time changes."""
    if loss == "standard" and stack is not None and stack.replaces_loss:
        return "fused"
    return loss


def job_setup(job: Job, ctx: EstimateContext) -> JobSetup:
    """Phase 1: the job and the core's transforms (``ctx.transforms``) as one record."""
    training, par, lay, model = job.training, job.parallelism, ctx.layout, ctx.model
    transforms = transforms_of(job, ctx)
    sizing, plan, stack = transforms.optimizer, transforms.sharding, transforms.stack
    lora = training.technique in ("lora", "qlora")
    adapter = training.technique in ADAPTER_TECHNIQUES  # a frozen base, as under LoRA
    # PyTorch-native TP (DTensor) is what composes with FSDP (torchtitan): loss_parallel and
    # separately all-gathered SP inputs (ShardingStrategy.native_tensor_parallel)
    dtensor_tp = lay.tp > 1 and plan.strategy.native_tensor_parallel
    # VLMs: image tokens join the text sequence (fmest_memory_theory.vision)
    seq_local = vlm_sequence_len(training.seq_len, model.vision, image_size=training.image_size,
                                 images=training.images_per_sample) / lay.cp
    batch = training.micro_batch_size * sequences_per_sample(training.objective)
    reference = reference_of(training)
    return JobSetup(
        training=training, parallelism=par, layout=lay, model=model, dims=model_numbers(model),
        lora=(lora_numbers(model, tuple(training.lora_target_modules), training.lora_rank)
              if lora else adapter_numbers(model, training.technique) if adapter else None),
        sizing=sizing, plan=plan, strategy=plan.strategy, act_bytes=sizing.compute_bytes,
        adapter_act_bytes=sizing.trainable_bytes if lora or adapter else sizing.compute_bytes,
        tokens=batch * seq_local, seq_local=seq_local, batch=batch, reference=reference,
        forward_only_calls=no_grad_calls(training),
        accumulating=training.grad_accum_steps > 1 or lay.pp > 1, dtensor_tp=dtensor_tp,
        dtensor_sp=dtensor_tp and par.sequence_parallel,
        offload_optimizer=par.cpu_offload in ("optimizer", "params"),
        offload_params=par.cpu_offload == "params", loss=effective_loss(training.loss, stack),
        loss_compiled=effective_loss(training.loss, stack) == "standard"
        and loss_compiled(training, stack),
        stack=stack, expert_plan=transforms.expert_sharding or plan,
        # what the job must fit in: the total CUDA reports, else the label (GpuSpec)
        capacity_bytes=float(getattr(ctx.gpu, "capacity_bytes", None)
                             or getattr(ctx.gpu, "memory_bytes", 0) or 0),
        padded_growth=padded_growth_of(job, stack),
        torch_version=job.hardware.torch_version)


@frozen(kw_only=True)
class Stage:
    """One distinct pipeline stage: its layers, whether it holds the embedding/head, and how
    many micro-batches of activations it keeps in flight."""

    name: str
    layers: int
    has_embedding: bool
    has_head: bool
    inflight: float


@functools.lru_cache(maxsize=256)
def pipeline_stages(num_layers: int, pp: int, schedule: str, micro: int,
                    vstages: int) -> tuple[Stage, ...]:
    """The distinct stages: the first holds the most in-flight micro-batches, the last the
    head (formulas.pipeline_inflight_microbatches). Cached: a pure function of five numbers
    that every estimate asks."""
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
    """Dense weights split over ``tp``; routed expert weights over ``ep`` x the experts' own
    tensor-parallel size (``parallelism.expert_tp``, = tp unless set: Megatron-Core
    ``--expert-tensor-parallel-size``, megatron/core/parallel_state.py at NVIDIA/Megatron-LM
    d98e8a64ddf34856e74b24714e3bedb2f5a39553). Their gradients and optimizer states follow
    (:func:`model_state_terms` divides ``expert`` by the expert sharding plan)."""
    dims, tp = setup.dims, setup.layout.tp
    frac = stage.layers / setup.model.num_layers
    return StageParams(
        fraction=frac, dense=dims.layer_dense_params * frac / tp,
        expert=dims.layer_expert_params * frac / (expert_tp_of(setup.layout) * setup.layout.ep),
        embedding=dims.embedding_params / tp if stage.has_embedding else 0.0,
        head=(head_params_of(setup) / tp if stage.has_head else 0.0),
        final_norm=dims.final_norm_params if stage.has_head else 0.0)


def head_params_of(setup: JobSetup) -> float:
    """The output head's parameters: the model's (0 when tied to the embedding), or the
    embedding's when the stack's model code builds its own head regardless (stacks.toml
    ``unties_embeddings``) or keeps a copy of the tied embedding on the last of several
    pipeline stages (``pp_tied_head_copy``: Megatron, DeepSpeed's TiedLayerSpec)."""
    dims = setup.dims
    if dims.head_params:
        return dims.head_params
    if stack_says(setup.stack, "unties_embeddings") or (
            setup.layout.pp > 1 and stack_says(setup.stack, "pp_tied_head_copy")):
        return dims.embedding_params
    return dims.head_params


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
    quantized: tuple[LinearModule, ...]  # the QLoRA-quantized linears
    #: the part of ``temps`` that is whole-partition flat buffers (DeepSpeed's ZeRO step copy
    #: of the gradient partition, :func:`_zero_step_grad_copy`): larger than any block the
    #: backward frees, so they take new segments (:func:`assemble`)
    flat_temps: float = 0.0


def _base_weight_bytes(setup: JobSetup,
                       params: StageParams) -> tuple[float, tuple[LinearModule, ...]]:
    """Stage weights before sharding; QLoRA stores its linears (but the head) in NF4 or
    LLM.int8 (Dettmers et al. 2023 section 3; Dettmers et al. 2022)."""
    training, tp, dims = setup.training, setup.layout.tp, setup.dims
    if not quantized_base(training):
        return params.total * setup.sizing.weight_bytes, ()
    q_params = dims.quantizable_weight_params * params.fraction / tp
    if training.quantization_bits == 4:
        q_bytes = q_params * F.nf4_bytes_per_param(training.double_quantization)
    else:
        q_bytes = dims.quantizable_int8_bytes * params.fraction / tp
    head = _quantized_head_params(setup, params)
    if head:   # the stack quantizes the output head too (stacks.toml quantize_head)
        q_params += head
        q_bytes += head * (F.nf4_bytes_per_param(training.double_quantization)
                           if training.quantization_bits == 4 else F.INT8_BYTES)
    rest = params.total - q_params
    prep = kbit_prep_of(training, setup.stack)
    if prep == "none":
        return q_bytes + rest * setup.act_bytes, dims.quantizable
    # PEFT's k-bit preparation casts every non-quantized fp16/bf16 parameter to fp32
    # (embeddings, norms, biases, lm_head); TRL's bf16 re-cast returns the embeddings and
    # the (unquantized) head to the compute dtype
    recast = params.embedding + params.head - head if prep == "peft_bf16_head" else 0.0
    return (q_bytes + recast * setup.act_bytes
            + (rest - recast) * max(setup.act_bytes, F.FP32_BYTES)), dims.quantizable


#: bytes of an fp16 element: what bitsandbytes dequantizes Lightning's weights to
FP16_BYTES = 2


def _quantized_head_params(setup: JobSetup, params: StageParams) -> float:
    """The stage's output-head weights when the stack quantizes every ``nn.Linear``, head
    included (Lightning ``BitsandbytesPrecision.init_context`` swaps ``torch.nn.Linear`` for
    the bitsandbytes class model-wide; lightning 71aed751 fabric/plugins/precision/
    bitsandbytes.py), 0 otherwise (transformers keeps ``lm_head`` unquantized)."""
    if not quantized_base(setup.training) or not stack_says(setup.stack, "quantize_head"):
        return 0.0
    return params.head


def _optimizer_state_bytes(setup: JobSetup, trainable: float) -> float:
    """States of ``trainable`` parameters before sharding (Adafactor: factored statistics,
    Shazeer & Stern 2018; others: formulas.optimizer_state_bytes)."""
    sizing, lora = setup.sizing, setup.lora
    if sizing.factored:
        # the whole model's (or the adapters') factored elements, scaled to this stage
        numbers = lora if lora is not None else setup.dims
        total = lora.adapter_params if lora else setup.dims.total_params
        elements = numbers.factored_state_elements * trainable / max(1.0, total)
        return (elements + trainable * sizing.states) * sizing.state_bytes
    return F.optimizer_state_bytes(trainable, sizing.states, sizing.state_bytes,
                                   sizing.state_overhead_bytes)


def _step_temporaries(setup: JobSetup, trainable: float, opt_div: float) -> float:
    """Parameter-sized temporaries of the update (``OptimizerSpec.step_temp_states``); a
    for-loop or in-backward update holds one tensor's worth at a time."""
    sizing, training, lora = setup.sizing, setup.training, setup.lora
    temps = trainable * sizing.temp_states * sizing.state_bytes / opt_div
    if sizing.impl == "for_loop" or training.optimizer_in_backward:
        biggest = (setup.dims.largest_tensor_params / setup.layout.tp) if not lora else \
            (trainable / max(1, len(lora.shapes) // 2 * setup.model.num_layers))
        temps = max(temps, biggest * sizing.state_bytes * max(1.0, sizing.states))
    return temps


def _zero_step_grad_copy(setup: JobSetup, trainable: float, opt_div: float) -> float:
    """DeepSpeed's ZeRO optimizers flatten and cast each group's (ZeRO-3: sub-group's)
    gradient partition to fp32 at the step (fmest.default_plugins.parallelism
    ``zero_step_grad_copy_rule``, formulas.zero_step_grad_copy_bytes); 0 where the rule says
    there is no copy."""
    per_element, cap = zero_step_grad_copy_rule(
        setup.strategy, setup.stack, setup.sizing.grad_bytes,
        setup.parallelism.zero3_sub_group_elems)
    if not per_element:
        return 0.0
    return F.zero_step_grad_copy_bytes(trainable / opt_div, setup.sizing.grad_bytes,
                                       sub_group_elements=cap)


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
    # the stage's sharding divisors, dense and expert weights blended
    params_divisor = _blended_divisor(setup, "params_divisor", weight_share)
    grads_divisor = _blended_divisor(setup, "grads_divisor", trained_share)
    optimizer_divisor = _blended_divisor(setup, "optimizer_divisor", trained_share)
    adapter_divisor = setup.plan.params_divisor
    weights = 0.0 if setup.offload_params else base_bytes / params_divisor
    weights += _replicated_quant_constants(setup, params, params_divisor)
    adapters = trainable * sizing.trainable_bytes / adapter_divisor if lora else 0.0
    if lora and setup.offload_params:
        adapters = 0.0
    master = trainable * sizing.master_bytes / optimizer_divisor
    grads_full = trainable * sizing.grad_bytes / grads_divisor
    if _lp_grads_kept(setup):
        # the compute-dtype grads beside the fp32 accumulator (stacks.toml lp_grads_kept)
        grads_full += trainable * setup.act_bytes / grads_divisor
    states = _optimizer_state_bytes(setup, trainable) / optimizer_divisor
    # PEFT modules_to_save: a trainable copy of the embedding / head beside the adapters, in
    # the model's dtype, with its gradient and optimizer states (_saved_module_terms)
    copies = _saved_module_params(setup, params)
    c_temps = 0.0
    if copies:
        c_weights, c_grads, c_master, c_states, c_temps = _saved_module_terms(setup, copies)
        weights += c_weights / params_divisor
        grads_full += c_grads / grads_divisor
        master += c_master / optimizer_divisor
        states += c_states / optimizer_divisor
        c_temps /= optimizer_divisor
    flat_temps = _zero_step_grad_copy(setup, trainable + copies, optimizer_divisor)
    temps = _step_temporaries(setup, trainable, optimizer_divisor) + c_temps + flat_temps
    if setup.offload_optimizer:
        master = states = temps = flat_temps = 0.0
    if setup.offload_params:
        grads_full = 0.0
    grads_peak, temps_in_bwd = grads_full, 0.0
    if setup.training.optimizer_in_backward:
        if not lora:
            grads_peak = min(grads_full, (setup.dims.largest_tensor_params / setup.layout.tp)
                             * sizing.grad_bytes)
        temps_in_bwd, temps, flat_temps = temps, 0.0, 0.0
    return ModelState(base_bytes=base_bytes, weights=weights, lora_adapters=adapters,
                      trainable_params=trainable, master=master, grads_full=grads_full,
                      grads_peak=grads_peak, states=states, temps=temps,
                      temps_in_backward=temps_in_bwd, quantized=quant, flat_temps=flat_temps)


def _saved_module_params(setup: JobSetup, params: StageParams) -> float:
    """Parameters of this stage's PEFT ``modules_to_save`` copies (``training.
    lora_modules_to_save``, fmest.physics.counting.modules_to_save_params): vocabulary x hidden
    per tensor-parallel rank for the embedding on the stage that holds it, and for the head on
    the last stage (its own weight even when the model ties it: ``ModulesToSaveWrapper``
    deep-copies the module)."""
    if setup.lora is None:
        return 0.0
    saved = setup.training.lora_modules_to_save
    if not saved:
        return 0.0
    matrix = setup.model.vocab_size * setup.model.hidden_size / setup.layout.tp
    out = matrix if "embedding" in saved and params.embedding > 0 else 0.0
    if "head" in saved and (params.head > 0 or params.final_norm > 0):
        out += matrix
    return out


def _saved_module_terms(setup: JobSetup,
                        copies: float) -> tuple[float, float, float, float, float]:
    """(weights, gradients, master, optimizer states, step temporaries) bytes of ``copies``
    parameters of
    modules_to_save copies before sharding: the copy keeps the module's dtype (the compute
    dtype beside a LoRA base) and torch gives its gradient and its optimizer states the
    parameter's dtype (``torch.optim`` ``zeros_like(p)``); under ``master`` precision the
    engine keeps fp32 master weights and states for every trainable parameter; an optimizer
    with narrower states (8-bit) keeps its own. The update's temporaries take the states'
    dtype (``OptimizerSpec.step_temp_states``)."""
    sizing = setup.sizing
    w = float(sizing.weight_bytes)
    state = float(sizing.state_bytes) if sizing.precision == "master" \
        or sizing.state_bytes < w else w
    states = F.optimizer_state_bytes(copies, sizing.states, state, sizing.state_overhead_bytes)
    # the update's temporaries take the states' dtype (``OptimizerSpec.step_temp_states``)
    return (copies * w, copies * w, copies * sizing.master_bytes, states,
            copies * sizing.temp_states * state)


def _lp_grads_kept(setup: JobSetup) -> bool:
    """Whether the stack keeps each parameter's compute-dtype gradient beside its fp32
    gradient accumulator (stacks.toml ``lp_grads_kept``: DeepSpeed BF16_Optimizer under the
    PipelineEngine), i.e. fp32 gradients were chosen (``fmest.stacks.apply_to_sizing``) and
    the compute dtype is narrower."""
    stack, sizing = setup.stack, setup.sizing
    return (stack is not None and stack.profile.lp_grads_kept
            and sizing.precision == "master" and sizing.grad_bytes == F.FP32_BYTES
            and setup.act_bytes < F.FP32_BYTES and not setup.offload_params)


def _replicated_quant_constants(setup: JobSetup, params: StageParams, divisor: float) -> float:
    """The bitsandbytes NF4 quantization constants (absmax, and with double quantization the
    nested absmax) that stay whole on every GPU when the stack quantizes each weight on each
    rank's GPU and moves only the packed data (stacks.toml ``quant_state_replicated``: Answer.AI
    fsdp_qlora ``load_and_quantize``): FSDP flattens and shards parameters only, so the
    constants are not divided by the sharding divisor, and CPU offload leaves them on the GPU.
    Returns what comes on top of the sharded share ``weights`` already holds."""
    training = setup.training
    if (not quantized_base(training) or training.quantization_bits != 4
            or training.quantization_method != "bnb"
            or not stack_says(setup.stack, "quant_state_replicated")):
        return 0.0
    q = setup.dims.quantizable_weight_params * params.fraction / setup.layout.tp
    consts = q * (F.nf4_bytes_per_param(training.double_quantization) - F.NF4_BYTES_PER_PARAM)
    return consts if setup.offload_params else consts * (1.0 - 1.0 / max(divisor, 1.0))


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
    or DeepSpeed's IPG reduce buffers (``reduce_bucket_elements``, sized from the job's
    ``zero_*`` fields by ``zero_reduce_buffer_elements``) in the compute dtype: DeepSpeed casts
    the module to bf16/fp16 (``engine.py`` ``_configure_distributed_model``) and ZeRO-1/2's
    buffer takes the optimizer's parameter dtype, ZeRO-3's the communication dtype (that same
    dtype by default, ``engine.py`` ``communication_data_type``), deepspeedai/DeepSpeed
    edaa7221."""
    strategy, dp = setup.strategy, setup.layout.dp
    stack = setup.stack
    out = float(stack.profile.workspace_bytes) if stack is not None else 0.0
    if stack is not None and stack.profile.contiguous_grad_buffer \
            and "gradients" not in strategy.shards \
            and not (strategy.reduce_bucket_elements and setup.sizing.grad_bytes != F.FP32_BYTES):
        # gradients accumulate in the framework's flat buffer, which is what is reduced
        # (Megatron param_and_grad_buffer, DeepSpeed BF16_Optimizer): no bucket copies. Under
        # DeepSpeed's ZeRO with compute-dtype gradients (fp16, or bf16 without BF16_Optimizer's
        # fp32 accumulation) the engine runs the ZeRO optimizer (stage_1_and_2.py) and its
        # reduce buckets instead (deepspeedai/DeepSpeed
        # @56c522386878df2513ccb548de76b50191ae3af7 deepspeed/runtime/engine.py
        # _configure_zero_optimizer; stage_1_and_2.py reduce_gradients)
        return out
    if strategy.ddp_bucket and not strategy.shards and dp > 1 and state.trainable_params:
        out += state.grads_full * F.DDP_BUCKET_COPIES_OF_GRADS
    if state.trainable_params:
        out += zero_reduce_buffer_elements(
            strategy, setup.parallelism, pipeline=setup.layout.pp > 1,
            offload_optimizer=setup.offload_optimizer) * setup.act_bytes
    return out


def _gathered_param_buffers(setup: JobSetup, params: StageParams, state: ModelState,
                            static: float) -> Buffers:
    """Unsharded parameters (and gradients) of a parameter-sharding strategy, beside the
    ``static`` buckets."""
    strategy, lay, act = setup.strategy, setup.layout, setup.act_bytes
    lora = setup.lora is not None
    layer_unsharded = _gathered_layer_bytes(setup, state)
    if strategy.param_gather and not (lay.pp > 1 and strategy.pp_unsharded_params):
        # the root unit (embedding, final norm, output projection: everything outside the
        # per-block units) is gathered at the start of forward and FSDP2 keeps the root
        # unsharded until backward ends (``fully_shard`` docs)
        root = (params.embedding + params.head) * act
        fwd_bwd = F.FSDP_UNSHARDED_LAYERS * layer_unsharded + root
        if not lora:   # one layer's unsharded grads (+ fp32 copy for reduce)
            fwd_bwd += layer_unsharded / act * (act + (F.FP32_BYTES if setup.sizing.precision
                                                       == "amp" else 0))
        acc = _no_sync_accumulated_bytes(setup, params)
        if acc:
            return Buffers(static=static, fwd_bwd=fwd_bwd + acc, accumulated=acc,
                           unsharded_accumulation=True)
        return Buffers(static=static, fwd_bwd=fwd_bwd)
    # SHARD_GRAD_OP, or parameters kept unsharded under PP (torchtitan:
    # reshard_after_forward=False): the stage's parameters stay unsharded through forward and
    # backward, and unsharded gradients accumulate over micro-batches (fp32 under amp with
    # ``fp32_grad_accum``, FSDP_PP_ACCUMULATED_GRAD_BYTES)
    fwd_bwd = state.base_bytes * act / max(setup.sizing.weight_bytes, 1) if not lora \
        else state.base_bytes
    if lora or not setup.accumulating:
        return Buffers(static=static, fwd_bwd=fwd_bwd)
    # FSDP2 upcasts every unsharded gradient it accumulates without sync to ``reduce_dtype``,
    # whatever ``reshard_after_forward`` says: under PP FULL_SHARD and SHARD_GRAD_OP run the
    # same (torchtitan sets reshard_after_forward=False for both)
    acc_b = F.FSDP_PP_ACCUMULATED_GRAD_BYTES if (
        lay.pp > 1 and strategy.fp32_grad_accum and setup.sizing.precision == "amp") else act
    acc_buf = params.total * acc_b
    return Buffers(static=static, fwd_bwd=fwd_bwd + acc_buf, accumulated=acc_buf,
                   unsharded_accumulation=True)


def _gathered_layer_bytes(setup: JobSetup, state: ModelState) -> float:
    """One per-block unit as the all-gather unshards it. QLoRA: the quantized linears are
    flattened in their packed storage, not dequantized: under FSDP transformers loads
    bitsandbytes 4-bit weights with ``bnb_4bit_quant_storage`` = the compute dtype
    (fms-acceleration 876e2ed6 plugins/accelerated-peft/.../framework_plugin_bnb.py
    ``model_loader``; huggingface/transformers PR 29587), two 4-bit values per byte packed in
    bf16 elements (numel / 2 bytes, QLoRA's 4 bits); the quantization constants are
    ``QuantState`` attributes, not parameters, so FSDP neither flattens nor gathers them
    (torch/distributed/fsdp/_flat_param.py flattens ``module.parameters()``). The block's
    other tensors (norms) stay in the compute dtype. Dense models: the whole block."""
    lay, act, dims = setup.layout, setup.act_bytes, setup.dims
    whole = dims.largest_layer_params / lay.tp
    if not state.quantized or setup.model.num_layers <= 0:
        return whole * act
    per_param = F.NF4_BYTES_PER_PARAM if setup.training.quantization_bits == 4 \
        else float(F.INT8_BYTES)
    quant = min(whole, dims.quantizable_weight_params / setup.model.num_layers / lay.tp)
    return quant * per_param + (whole - quant) * act


def _no_sync_accumulated_bytes(setup: JobSetup, params: StageParams) -> float:
    """Unsharded gradients that gradient accumulation keeps across micro-batches when the
    stack runs them without sync (stacks.toml ``fsdp_no_sync_accumulation``: Fabric's
    ``no_backward_sync`` is FSDP1 ``no_sync()``, which "will accumulate the full model
    gradients (instead of gradient shards) until the eventual sync", torch
    fully_sharded_data_parallel.py), in the dtype of the parameters they belong to. Full
    training: every parameter. LoRA: the adapters, unless the units are FSDP1
    FlatParameters (``fsdp_flat_param_grads``: use_orig_params=True, and a FlatParameter
    requires grad when any tensor in it does, torch/distributed/fsdp/_flat_param.py): then
    every per-block unit, which holds adapters, accumulates a gradient of its whole block, and
    the root unit (embedding, final norm, head) one only when the head is adapted."""
    stack, sizing = setup.stack, setup.sizing
    if setup.training.grad_accum_steps <= 1 or not stack_says(stack, "fsdp_no_sync_accumulation"):
        return 0.0
    if setup.lora is None:
        # FSDP2 upcasts each accumulated unsharded gradient to the policy's reduce_dtype
        # (stacks.toml ``no_sync_grad_bytes``; FSDPParam.to_accumulated_grad_if_needed)
        return params.total * (getattr(getattr(stack, "profile", None), "no_sync_grad_bytes",
                                       0.0) or sizing.grad_bytes)
    if not stack_says(stack, "fsdp_flat_param_grads"):
        return setup.lora.adapter_params * params.fraction / setup.layout.tp \
            * sizing.trainable_bytes
    blocks = params.dense + params.expert
    if "lm_head" in setup.training.lora_target_modules:
        blocks += params.embedding + params.head + params.final_norm
    return blocks * sizing.weight_bytes


def _autocast_buffers(setup: JobSetup, params: StageParams, stage: Stage,
                      static: float) -> Buffers:
    """torch.autocast caches compute-dtype copies of fp32 weights (``cached_cast``) until the
    autocast region exits after forward; what outlives it is what the matmuls saved. Under
    full checkpointing only the (not checkpointed) output projection keeps its copy into
    backward, and the recomputed block re-casts its own weights for its backward. Beside the
    ``static`` buckets."""
    act, tp = setup.act_bytes, setup.layout.tp
    head_copy = (params.head or (setup.dims.embedding_params / tp if stage.has_head else 0.0)) \
        * act
    copies = (params.dense + params.expert) * act + head_copy
    if setup.training.activation_checkpointing == "full":
        # blocks outside training.checkpoint_fraction keep their copies into backward
        kept = (copies - head_copy) * (1.0 - setup.training.recompute_share)
        return Buffers(static=static, fwd_only=copies - head_copy - kept,
                       fwd_bwd=head_copy + kept,
                       autocast_layer=(setup.dims.largest_layer_params / tp) * act)
    return Buffers(static=static, fwd_bwd=copies)


def framework_buffer_terms(setup: JobSetup, params: StageParams, state: ModelState,
                           stage: Stage) -> Buffers:
    """Framework buffers of one stage: flat buckets (static), gathered parameters under
    parameter sharding or the autocast weight cache under amp (forward/backward)."""
    static = _bucket_bytes(setup, state)
    plan = setup.plan
    if "parameters" in setup.strategy.shards and plan.params_divisor > 1 \
            or setup.offload_params:
        return _gathered_param_buffers(setup, params, state, static)
    if (setup.sizing.precision == "amp" and setup.lora is None
            and setup.act_bytes < F.FP32_BYTES):
        return _autocast_buffers(setup, params, stage, static)
    return Buffers(static=static)


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
    kept_input_grads: float = 0.0  # layer-input gradients FSDP1 keeps to the end of backward
    #: the fp32 logits of the model output the training loop holds from the loss to the end of
    #: the step (stacks.toml ``output_logits_held``)
    output_logits: float = 0.0
    #: the largest single tensor a layer's forward or backward allocates and frees, and the
    #: largest weight gradient the stage frees (:func:`largest_freed_tensors`)
    largest_layer_tensor: float = 0.0
    largest_grad_tensor: float = 0.0


def _layer_inputs(setup: JobSetup) -> LayerInputs:
    """The job side of the per-layer activation count, with the stack's fused kernels as
    LayerInputs fields (no stack: eager PyTorch, nothing fused)."""
    training, lay, stack = setup.training, setup.layout, setup.stack
    share, adapter_extra = _adapter_layer_terms(setup)
    (fused_norm, fused_activation, fused_layout, quant_saves_inputs, norm_no_upcast,
     fused_qkv_views, lora_qkv_zero_pad) = _stack_layer_flags(stack)
    return LayerInputs(
        tokens=setup.tokens, batch=setup.batch, seq=setup.seq_local,
        act_bytes=setup.act_bytes, tp=lay.tp, sequence_parallel=setup.parallelism
        .sequence_parallel, attention=training.attention, compiled=training.compile,
        trainable_all=setup.lora is None, adapter_bytes=setup.adapter_act_bytes,
        checkpointing=training.activation_checkpointing, dtensor_sp=setup.dtensor_sp,
        autocast=setup.sizing.precision == "amp",
        fused_norm=fused_norm, fused_activation=fused_activation, fused_layout=fused_layout,
        gemm_input_bytes=_saved_gemm_input_bytes(setup),
        frozen_gemm_inputs_saved=quantized_base(training) and quant_saves_inputs,
        norm_no_upcast=norm_no_upcast, fused_qkv_views=fused_qkv_views,
        fused_qkv_expands_mqa=stack_says(stack, "fused_qkv_expands_mqa"),
        layer_norm=setup.model.layer_norm,
        lora_dropout=lora_dropout_of(training, stack), lora_qkv_zero_pad=lora_qkv_zero_pad,
        mlp_activation_one_op=stack_says(stack, "mlp_activation_one_op"),
        stream_bytes=_stream_bytes(setup), saved_layer_share=share,
        adapter_extra_bytes=adapter_extra,
        adapter_gated_attn_out=training.technique in ADAPTER_TECHNIQUES,
        recompute_modules=_megatron_recompute_modules(setup))


def _megatron_recompute_modules(setup: JobSetup) -> Optional[frozenset]:
    """Megatron-Core's selective ``--recompute-modules`` (layer.megatron_selective_saved_bytes)
    when the job sets them or runs selective checkpointing on a Megatron-Core stack (whose
    default is ``core_attn``); None: the op-level selective rule."""
    training = setup.training
    if training.activation_checkpointing != "selective":
        return None
    name = getattr(setup.stack, "name", "") or ""
    if training.recompute_modules is None and not name.startswith("megatron-core"):
        return None
    return training.selective_modules


_LAYER_FLAGS: dict[tuple, tuple[object, tuple[bool, ...]]] = {}


def _stack_layer_flags(stack: Optional[ResolvedStack]) -> tuple[bool, ...]:
    """The stack's behaviours :func:`_layer_inputs` reads (fused norm, activation and layout;
    quant_saves_gemm_inputs, norm_keeps_compute_dtype, fused_qkv_views, lora_qkv_zero_pad),
    read once per resolved stack (keyed on its identity: a frozen record, None = eager)."""
    def read() -> tuple[bool, ...]:
        fuses = stack is not None and stack.fuses
        return (bool(fuses and fuses("norm")), bool(fuses and fuses("activation")),
                bool(fuses and fuses("layout")), stack_says(stack, "quant_saves_gemm_inputs"),
                stack_says(stack, "norm_keeps_compute_dtype"),
                stack_says(stack, "fused_qkv_views"), stack_says(stack, "lora_qkv_zero_pad"))
    return by_identity(_LAYER_FLAGS, stack, (), read)


def _adapter_layer_terms(setup: JobSetup) -> tuple[float, float]:
    """LLaMA-Adapter and Adapter-v2 as Lit-GPT runs them (lit_gpt/adapter.py, adapter_v2.py at
    Lightning-AI/litgpt 8641822b3249bb94f068c254aa5d13decbc9f0a0): (share of the layers whose
    activations backward needs, bytes one layer saves beyond the frozen base's, averaged over
    the layers); (1, 0) for other techniques.

    * v1: below ``adapter_start_layer`` nothing is trainable, so those layers save nothing.
      Each adapter layer runs a second SDPA of its queries against the prefix's keys and
      values (``amask`` of T x prompt length) and keeps its output and fp32 log-sum-exp
      (formulas.attention_core_bytes, ``sdpa``) for the gate's gradient
      (``y + gating_factor * ay``); the prefix keys/values are per layer, not per token.
    * v2 also: every ``AdapterV2Linear`` computes ``adapter_scale * (linear(x) +
      adapter_bias)``, whose product saves the pre-scale output for the scale's gradient (one
      compute-dtype copy per output feature and token); trainable RMSNorm weights make
      ``weight * x_normed`` save ``x_normed`` (Lit-GPT RMSNorm; eager upcasting norms save
      their pre-scale copy, formulas.NORM_EAGER_PRESCALE_COPIES); LayerNorm keeps its input,
      mean and rstd whether its weight trains or not. Every layer saves (the norms train).

    Check (fake-tensor trace of Lit-GPT's own code at 8641822, bf16, SDPA): one adapter
    layer of Llama-2-7B saves 140,182 B/token (v1) and 241,746 (v2); StableLM-Alpha-3B
    98,747 and 172,712."""
    technique = setup.training.technique
    if technique not in ADAPTER_TECHNIQUES:
        return 1.0, 0.0
    model, dims, tp, act = setup.model, setup.dims, setup.layout.tp, setup.act_bytes
    layers = max(1, model.num_layers)
    tokens = setup.tokens
    prefix = adapter_layers(model) / layers * F.attention_core_bytes(
        tokens=tokens, batch=setup.batch, seq=setup.seq_local,
        heads=model.num_attention_heads / tp, q_dim=dims.o_dim / tp, act_bytes=act,
        attention="sdpa", dropout=0.0)
    if technique not in ADAPTER_V2_TECHNIQUES:
        return adapter_layers(model) / layers, prefix
    outs = sum(lin.out_features * lin.layers * (lin.active_copies if lin.kind == "expert"
                                                else lin.copies)
               for lin in model.linears if lin.kind != "head") / layers
    return 1.0, prefix + tokens * outs / tp * act + _trainable_norm_bytes(setup, per_layer=True)


def _trainable_norm_bytes(setup: JobSetup, *, per_layer: bool) -> float:
    """What trainable RMSNorm weights add (``x_normed`` kept for ``weight * x_normed``): one
    layer's norms, or the final norm (Adapter-v2: _adapter_layer_terms); 0 for LayerNorm."""
    model, dims = setup.model, setup.dims
    cfg = getattr(model, "hf_config", None) or {}
    if "rms_norm_eps" not in cfg and "rms_norm_epsilon" not in cfg:
        return 0.0
    hidden = model.hidden_size
    norms = ((model.param_counts().norms - dims.final_norm_params)
             / max(1, model.num_layers) / max(1, hidden)) if per_layer else 1.0
    upcast = not (setup.training.compile or stack_says(setup.stack, "norm_keeps_compute_dtype"))
    copies = F.NORM_EAGER_PRESCALE_COPIES if upcast else 1
    return setup.tokens * hidden * setup.act_bytes * copies * norms / (
        setup.layout.tp if setup.parallelism.sequence_parallel else 1)


def lora_dropout_of(training: Training, stack: Optional[ResolvedStack]) -> float:
    """The adapters' dropout probability: the job's ``training.lora_dropout`` when given,
    else the stack's (stacks.toml ``lora_dropout``), else PEFT's default 0.0
    (``LoraConfig.lora_dropout``, huggingface/peft 5d602fdbff04c33c1c4de55cda9d4ae1d7cb7e40
    src/peft/tuners/lora/config.py). PEFT builds one ``nn.Dropout`` per adapted module
    (``LoraLayer.update_layer``: ``nn.Identity`` when p = 0; src/peft/tuners/lora/layer.py at
    v0.13.2 34d479632d63a7e29c4b75202c9eef94335ceb14 and at 5d602fd), so q, k and v each drop
    their own copy of the shared input (layer.lora_input_bytes)."""
    if training.technique not in ("lora", "qlora"):
        return 0.0
    if training.lora_dropout is not None:
        return float(training.lora_dropout)
    return float(stack.profile.lora_dropout) if stack is not None else 0.0


def kbit_prep_of(training: Training, stack: Optional[ResolvedStack]) -> str:
    """PEFT's k-bit preparation as it ran (``fmest.job.KBIT_PREPS``): the job's
    ``training.kbit_prep``, else the stack's (a ``kbit_prep`` profile field where the stack
    states one), else ``none``; only a bitsandbytes QLoRA base is prepared
    (``prepare_model_for_kbit_training`` skips the cast for GPTQ/AQLM/EETQ/HQQ/torchao:
    huggingface/peft 5d602fdbff04c33c1c4de55cda9d4ae1d7cb7e40 src/peft/utils/other.py)."""
    if training.technique != "qlora" or training.quantization_method != "bnb":
        return "none"
    if training.kbit_prep is not None:
        return training.kbit_prep
    stated = getattr(stack.profile, "kbit_prep", None) if stack is not None else None
    return str(stated) if stated else "none"


def _stream_bytes(setup: JobSetup) -> Optional[float]:
    """Bytes per element of the residual stream: fp32 after PEFT's k-bit preparation of a
    4-bit base (fp32 norm weights make fp32 norm outputs; bitsandbytes ``Linear4bit.forward``
    casts its output back to the input's dtype, ``out.to(inp_dtype)``, so the unadapted MLP
    projections return fp32 and the residual add promotes the stream); None otherwise (the
    compute dtype). The 8-bit path is not traced here (compute dtype kept)."""
    if kbit_prep_of(setup.training, setup.stack) == "none" or \
            setup.training.quantization_bits != 4:
        return None
    return float(F.FP32_BYTES)


def _saved_gemm_input_bytes(setup: JobSetup) -> Optional[int]:
    """Under a stack that fuses the fp8 cast into the GEMM producers (Transformer Engine),
    saved GEMM inputs are the fp8 copies; None: the compute dtype's."""
    stack, dtype = setup.stack, setup.training.dtype
    if stack is not None and stack.fuses("fp8_cast") and dtype == "fp8":
        return dtype_info(dtype).operand_bytes
    return None


def _final_norm_bytes(setup: JobSetup) -> float:
    """The final norm's saved tensors (DTensor SP: sharded input + gathered output)."""
    training, tp, hidden = setup.training, setup.layout.tp, setup.model.hidden_size
    lora = setup.lora is not None
    upcast = not (training.compile or stack_says(setup.stack, "norm_keeps_compute_dtype"))
    if setup.dtensor_sp:
        return (F.norm_saved_bytes(setup.tokens, hidden, setup.act_bytes,
                                   upcast=upcast, output_needed=False,
                                   weight_trainable=not lora) / tp
                + (setup.tokens * hidden * setup.act_bytes if not lora else 0.0))
    return F.norm_saved_bytes(setup.tokens, hidden, setup.act_bytes, upcast=upcast,
                              output_needed=not lora, weight_trainable=not lora) / (
        tp if setup.parallelism.sequence_parallel else 1)


def _fp32_head_logits(setup: JobSetup, params: StageParams) -> bool:
    """PEFT's k-bit preparation left the output head in fp32 and no autocast re-casts it
    (precision other than ``amp``: torch.autocast runs ``F.linear`` in the compute dtype
    whatever the weight's dtype), so the head writes fp32 logits."""
    return (kbit_prep_of(setup.training, setup.stack) == "peft"
            and setup.sizing.precision != "amp" and params.head > 0
            and not _quantized_head_params(setup, params))


def _logits(tokens: float, vocab: float, act_bytes: int, loss: str, compiled: bool,
            vocab_parallel: bool = False) -> tuple[float, float, float]:
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
        inputs = attrs.evolve(base, tokens=setup.batch * seq / cp, seq=seq / cp)
        return _layer_bytes(setup, inputs)[0]

    lengths = stack_lengths(model, seq_len=training.seq_len, source_len=training.source_len,
                            target_len=training.target_len)
    whole = encdec_activation_bytes(model, per_layer, lengths=lengths,
                                    batch=setup.batch, act_bytes=setup.act_bytes,
                                    tp=setup.layout.tp)
    return whole * stage.layers / model.num_layers * stage.inflight


def _layer_bytes(setup: JobSetup, inputs: LayerInputs) -> tuple[float, float]:
    """(saved, backward working set) of one layer, averaged over the stage's blocks: under
    full checkpointing of a share f of the blocks (``training.checkpoint_fraction``) those keep
    their input and the others everything they save (their ``none`` count); the working set is
    a recomputed block's, which is the larger."""
    saved, work = layer_activation_bytes(setup.model, setup.dims, setup.lora, inputs)
    share = setup.training.recompute_share
    if inputs.checkpointing == "full" and share < 1.0:
        kept = layer_activation_bytes(setup.model, setup.dims, setup.lora,
                                      attrs.evolve(inputs, checkpointing="none"))[0]
        saved = share * saved + (1.0 - share) * kept
    return saved, work


def _vision_saved_bytes(setup: JobSetup, vision: VisionSpec) -> float:
    """The vision tower's activations for one micro-batch (trained or frozen)."""
    training = setup.training
    tokens = image_tokens(vision, training.image_size)
    return vision_activation_bytes(
        vision, tokens, images=setup.batch * training.images_per_sample,
        act_bytes=setup.act_bytes, trained=training.train_vision_tower,
        checkpointing=training.activation_checkpointing == "full") / setup.layout.tp


def _pipeline_output_bytes(setup: JobSetup, stage: Stage) -> float:
    """The in-flight stage outputs a pipeline runtime keeps for backward: every chunk's
    ``[tokens, hidden]`` output (``torch.distributed.pipelining`` ``PipelineStage.fwd_cache``;
    1/tp of it under sequence parallelism); none where the schedule frees the data once sent
    (stacks.toml ``pp_output_deallocated``: Megatron ``deallocate_pipeline_outputs``); 1/tp
    under DeepSpeed's PipelineEngine with tensor parallelism, which swaps the output's data for
    its tensor-parallel partition before sending (``is_pipe_partitioned``:
    deepspeedai/DeepSpeed @56c522386878df2513ccb548de76b50191ae3af7
    deepspeed/runtime/pipe/engine.py lines 131, 665-669)."""
    par, lay = setup.parallelism, setup.layout
    if stack_says(setup.stack, "pp_output_deallocated"):
        return 0.0
    chunks = stage.inflight * max(1, par.pp_virtual_stages
                                  if par.pp_schedule == "interleaved" else 1)
    partitioned = par.sequence_parallel or (
        lay.tp > 1 and setup.stack is not None
        and setup.stack.profile.pipeline_engine == "deepspeed")
    return chunks * setup.tokens * setup.model.hidden_size * setup.act_bytes / (
        lay.tp if partitioned else 1)


def _embedding_stage_saved_bytes(setup: JobSetup) -> float:
    """Bytes one micro-batch leaves saved between the embedding and the first block, which
    no block checkpoint covers (the checkpoints start at the first block's input): an
    embedding LayerNorm (BLOOM ``word_embeddings_layernorm``; BigScience Megatron-DeepSpeed
    ``--embed-layernorm``) saves its input and fp32 mean and rstd per token
    (``native_layer_norm``), and an embedding dropout its bool mask (``native_dropout``)."""
    model, act, tokens = setup.model, setup.act_bytes, setup.tokens
    h = model.hidden_size
    out = 0.0
    if any(g.name == "word_embeddings_layernorm" for g in model.groups):
        out += tokens * (h * act + 2 * F.FP32_BYTES)
    if model.dropout > 0:
        out += tokens * h * F.DROPOUT_MASK_BYTES
    return out


def activation_terms(setup: JobSetup, params: StageParams, state: ModelState,
                     buffers: Buffers, stage: Stage) -> Activations:
    """Saved activations of the in-flight micro-batches (Korthikanti et al. 2022 section 4,
    pipeline schedules section 4.2.3), the pipeline runtime's stage outputs, the final norm,
    logits and loss, and one layer's backward working set."""
    training, par, lay, model = setup.training, setup.parallelism, setup.layout, setup.model
    act, tokens = setup.act_bytes, setup.tokens
    inputs = _layer_inputs(setup)
    saved_l, work_l = _layer_bytes(setup, inputs)
    resident_layers = 1 if training.activation_offload else stage.layers * stage.inflight
    saved_all = saved_l * resident_layers
    if model.is_encoder_decoder and not training.activation_offload:
        saved_all = _encdec_saved_bytes(setup, stage)
    if model.vision is not None and stage.has_embedding:
        saved_all += _vision_saved_bytes(setup, model.vision) * stage.inflight
    if lay.pp > 1 and not stage.has_head:
        # the pipeline runtime keeps each in-flight chunk's stage output until its backward
        # (``PipelineStage.fwd_cache``); no layer of the stage saves it
        saved_all += _pipeline_output_bytes(setup, stage)
    if stage.has_embedding:
        saved_all += _embedding_stage_saved_bytes(setup) * stage.inflight
    held = fwd_tr = bwd_tr = head_grad = out_logits = 0.0
    if stage.has_head:
        saved_all += _final_norm_bytes(setup)
        # the head's logits gathered to every TP rank (stacks.toml tp_logits_replicated)
        vocab = model.vocab_size / (1 if stack_says(setup.stack, "tp_logits_replicated")
                                    else lay.tp)
        held, fwd_tr, bwd_tr = _logits(tokens, vocab, act, setup.loss, training.compile,
                                       vocab_parallel=setup.dtensor_tp)
        compute_dtype_loss = setup.loss == "standard" \
            and stack_says(setup.stack, "loss_in_compute_dtype")
        if setup.loss_compiled:
            # a compiled cross-entropy (fmest.stacks.loss_compiled): Inductor fuses the fp32
            # upcast, log-softmax and nll into reductions that save only the compute-dtype
            # logits (the graph's input) and per-token statistics, and its backward kernel
            # writes the logits' gradient straight in the compute dtype: one compute-dtype
            # [tokens, vocab] tensor held, one more at the start of backward
            held, fwd_tr, bwd_tr = tokens * vocab * act, 0.0, tokens * vocab * act
        if compute_dtype_loss:
            # F.cross_entropy on compute-dtype logits (no .float()): log_softmax saves its
            # compute-dtype output; backward writes the gradient of that output
            # (nll_loss_backward) and the logits' gradient (_log_softmax_backward_data), both
            # compute dtype (stacks.toml loss_in_compute_dtype)
            held, fwd_tr, bwd_tr = tokens * vocab * act, 0.0, 2 * tokens * vocab * act
        if _fp32_head_logits(setup, params):
            # an fp32 head outside autocast writes fp32 logits: the loss's fp32 upcast is a
            # no-op, no compute-dtype logits exist beside it
            fwd_tr = 0.0
        if setup.loss == "standard" and stack_says(setup.stack, "output_logits_held"):
            # the loop's ``output`` keeps transformers' fp32-upcast logits beside the loss's
            # saved log-softmax output and its gradients (stacks.toml output_logits_held);
            # the compute-dtype logits when the loss takes them as they are
            out_logits = tokens * vocab * (act if compute_dtype_loss else F.FP32_BYTES)
        if setup.loss == "chunked" and stack_says(setup.stack, "chunked_loss_keeps_log_probs"):
            # every chunk's compute-dtype log-softmax output is saved (stacks.toml)
            held += tokens * model.vocab_size / lay.tp * act
        if training.technique in ADAPTER_V2_TECHNIQUES:
            # Adapter-v2's lm_head is an AdapterV2Linear: the pre-scale logits are saved for
            # the scale's gradient; the final norm trains (_adapter_layer_terms)
            saved_all += tokens * model.vocab_size / lay.tp * act \
                + _trainable_norm_bytes(setup, per_layer=False)
        # the output projection's weight gradient appears with the logits' gradient (the
        # embedding's, when tied)
        tied = 0.0 if params.head else setup.dims.embedding_params / lay.tp
        head_grad = (params.head or tied) * setup.sizing.grad_bytes / setup.plan.grads_divisor \
            if setup.lora is None else 0.0
        # a quantized head is dequantized again for each logits chunk's input gradient, at
        # the start of backward: Lightning quantizes from an fp16 copy (``_quantize_weight``:
        # ``weight.to(torch.half)``), so bitsandbytes' ``dequantize_4bit`` returns fp16 and
        # MatMul4Bit casts it to the compute dtype beside it (``.to(A.dtype)``)
        bwd_tr += _quantized_head_params(setup, params) * (
            FP16_BYTES + (act if training.dtype != "fp16" else 0))
    work_l += buffers.autocast_layer
    if state.quantized and training.quantization_method == "gptq":
        # AutoGPTQ 0.5.1 ``qlinear_cuda_old`` (the torch unpacking time_roofline's
        # gptq_dequant_bytes_per_param reads): the int32 shift result and its int8/int16 cast
        # coexist for the weight being unpacked, and ``torch.matmul(x, weight)`` saves the
        # unpacked 16-bit weight for backward: the recomputed layer's weights under full
        # checkpointing, every layer's without it
        unpack = setup.dims.largest_quantizable_params / lay.tp * (
            F.FP32_BYTES + (2 if training.quantization_bits == 8 else 1))
        layer_q = setup.dims.quantizable_weight_params / max(model.num_layers, 1) / lay.tp * act
        work_l += unpack
        if training.activation_checkpointing == "full":
            work_l += layer_q
        # the blocks not checkpointed (training.checkpoint_fraction) save theirs
        saved_all += layer_q * stage.layers * stage.inflight * (1.0 - training.recompute_share)
    elif state.quantized:   # bnb / torchao NF4 dequantize one weight at a time (not the head)
        work_l += setup.dims.largest_quantizable_params / lay.tp * act
    kept = 0.0
    if fsdp1_keeps_checkpoint_inputs(setup):
        # every recomputed block's input (the stashed one: saved_all keeps it) and the
        # gradient accumulated into it live until the end of backward: at the first block's
        # backward, the other blocks' input gradients are held beside the usual working set
        kept = max(stage.layers * training.recompute_share - 1, 0) * tokens * model.hidden_size \
            * (_stream_bytes(setup) or act) / (lay.tp if par.sequence_parallel else 1)
    layer_tensor, grad_tensor = largest_freed_tensors(setup, params, inputs)
    return Activations(saved_layer=saved_l, work_layer=work_l, saved_all=saved_all,
                       logits_held=held, logits_fwd_extra=fwd_tr, logits_bwd_extra=bwd_tr,
                       head_grad=head_grad, kept_input_grads=kept, output_logits=out_logits,
                       largest_layer_tensor=layer_tensor, largest_grad_tensor=grad_tensor)


def largest_freed_tensors(setup: JobSetup, params: StageParams,
                          inputs: LayerInputs) -> tuple[float, float]:
    """The largest single tensors the forward and backward of a stage allocate and free besides
    the logits (``StagePeak.transient_block``): a layer's fused q/k/v output, its MLP input
    projection's output (gate and up as one tensor when gated, as Megatron's ``linear_fc1``
    writes them), eager attention's score matrix (fp32 when the softmax upcasts), and under
    full training one weight's gradient (the largest layer linear, the stage's embedding or
    head), which a ZeRO engine frees once copied into its buckets.

    Each such request above 10 MiB maps a segment of its own rounded size and blocks of
    different segments never merge (pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp @
    eb42ad6eca0ce61e7c581212b4bf32f991425571: ``get_allocation_size``, ``try_merge_blocks``),
    so the largest free block the backward leaves cached is at most the largest of these
    single tensors, not a layer's working set as a whole (:func:`stage_peak`'s test for the
    step's flat copies; replayed in tests/test_carried_reserve.py). Each term is an upper
    bound (separate q, k and v projections write smaller tensors), so the rule errs towards
    reusing a cached block. Returns (the layer's, which grows with the micro-batch's tokens;
    the weight gradient's, which does not)."""
    model, dims, tp = setup.model, setup.dims, inputs.tp
    act, tokens = inputs.act_bytes, inputs.tokens
    qkv = qkv_output_bytes(model, dims, inputs)
    widest = model.moe_intermediate_size * (model.experts_per_token or 1) \
        if model.is_moe and model.moe_intermediate_size else model.intermediate_size
    mlp = tokens * widest * (2 if model.gated_mlp else 1) / tp * act
    scores = 0.0
    if inputs.attention == "eager":
        softmax_fp32 = model.eager_softmax_upcast or inputs.autocast
        scores = inputs.batch * model.num_attention_heads / tp * inputs.seq * inputs.seq * (
            F.EAGER_SOFTMAX_BYTES if softmax_fp32 else act)
    grad = 0.0
    if setup.lora is None:
        grad = max(dims.largest_quantizable_params / tp, params.embedding, params.head) \
            * setup.sizing.weight_bytes
    return max(qkv, mlp, scores), grad


def fsdp1_keeps_checkpoint_inputs(setup: JobSetup) -> bool:
    """Whether FSDP1 keeps every checkpointed block's input and its gradient alive until the
    end of backward (stacks.toml ``fsdp1_frozen_units_keep_ckpt_inputs``): LoRA/QLoRA under
    PyTorch FSDP with PEFT's wrap policy makes each block a frozen unit, for which FSDP1
    registers ``register_multi_grad_hook`` on the unit's inputs
    (``_register_post_backward_reshard_only_hook``, torch/distributed/fsdp/_runtime_utils.py,
    pytorch/pytorch PR 101982); under reentrant checkpointing those inputs are the recompute's
    detached leaves, and the hook's ``AccumulateGrad`` node holds the leaf (and its ``.grad``)
    until ``_finalize_params`` removes the hook at the end of backward. Trace:
    scripts/trace_fsdp1_frozen_ckpt.py (2 x layers layer-input-sized storages live at the end
    of backward under FSDP1, 2 without)."""
    training = setup.training
    return (stack_says(setup.stack, "fsdp1_frozen_units_keep_ckpt_inputs")
            and setup.lora is not None and setup.parallelism.fsdp != "none"
            and training.activation_checkpointing == "full" and not training.activation_offload)


def _backward_candidates(setup: JobSetup, static: dict[str, float], state: ModelState,
                         buffers: Buffers, acts: Activations, stage: Stage,
                         acc_grads: float) -> list[dict[str, float]]:
    """The moments of backward that can peak: the loss gradient, the head's weight gradient,
    the first layer's backward, and the end of backward (every grad sharded)."""
    both = buffers.static + buffers.fwd_bwd
    # chunked loss: the output weight's earlier chunk contributions are summed in place while
    # the next one is computed (``InputBuffer::accumulate``)
    head_contrib = acts.head_grad if setup.loss == "chunked" else 0.0
    # standard loss: the head's weight gradient appears only after log-softmax backward has
    # freed the nll gradient and saved log-softmax; fused/chunked losses produce it at once
    standard = setup.loss == "standard"
    head_first = 0.0 if (setup.accumulating or standard) else acts.head_grad
    return [
        dict(static, gradients=acc_grads + head_first + head_contrib,
             activations=acts.saved_all, logits_and_loss=acts.logits_held + acts.logits_bwd_extra
             + acts.output_logits, framework_buffers=both, optimizer_temporaries=0.0),
        dict(static, gradients=acc_grads + (0.0 if setup.accumulating else acts.head_grad),
             activations=acts.saved_all, logits_and_loss=(acts.logits_held if standard else 0.0)
             + acts.output_logits, framework_buffers=both, optimizer_temporaries=0.0),
        dict(static, gradients=max(acc_grads, min(state.grads_peak, acts.head_grad
                                                  + state.grads_full / max(stage.layers, 1))),
             activations=acts.saved_all + acts.work_layer, logits_and_loss=acts.output_logits,
             framework_buffers=both, optimizer_temporaries=state.temps_in_backward),
        dict(static, gradients=state.grads_peak, activations=acts.saved_layer + acts.work_layer
             + acts.kept_input_grads + (acts.saved_all - acts.saved_layer
                                        if acts.kept_input_grads else 0.0),
             logits_and_loss=acts.output_logits, framework_buffers=both - buffers.accumulated,
             optimizer_temporaries=state.temps_in_backward),
    ]


def phase_components(setup: JobSetup, state: ModelState, buffers: Buffers, acts: Activations,
                     stage: Stage, every_moment: bool = False) -> dict[str, dict[str, float]]:
    """Components alive at the peak of each phase of step 2 (module doc); ``every_moment``:
    every backward moment that can peak as its own entry (``backward``, ``backward:1``, ...:
    the side-stream pools' high-water marks, ``_stream_pool_bytes``)."""
    # accumulated grads between micro-batches; when they accumulate unsharded (framework
    # buffers) the sharded grads only appear as the last backward reduce-scatters them
    acc_grads = state.grads_peak if setup.accumulating and not buffers.unsharded_accumulation \
        else 0.0
    static = {"weights": state.weights, "master_weights": state.master,
              "lora_adapters": state.lora_adapters, "optimizer_states": state.states}
    if setup.reference == "copy":
        static["reference_weights"] = state.weights
    forward = dict(static, gradients=acc_grads, activations=acts.saved_all,
                   logits_and_loss=acts.logits_held + acts.logits_fwd_extra + acts.output_logits,
                   framework_buffers=buffers.static + buffers.fwd_bwd + buffers.fwd_only,
                   optimizer_temporaries=0.0)
    if setup.forward_only_calls and stage.has_head:
        forward["reference_forward"] = _forward_only_bytes(setup)
    candidates = _backward_candidates(setup, static, state, buffers, acts, stage, acc_grads)
    in_backward = setup.training.optimizer_in_backward
    optimizer = dict(static, gradients=state.grads_peak if not in_backward else 0.0,
                     activations=0.0, logits_and_loss=acts.output_logits,
                     framework_buffers=buffers.static, optimizer_temporaries=state.temps)
    if every_moment:
        moments = {f"backward:{n}" if n else "backward": comps
                   for n, comps in enumerate(candidates)}
        return {"forward": forward, **moments, "optimizer": optimizer}
    return {"forward": forward,
            "backward": max(candidates, key=lambda comps: sum(comps.values())),
            "optimizer": optimizer}


# ---------------------------------------------------------------------------------------------
# 3. the estimate
# ---------------------------------------------------------------------------------------------

def _forward_only_bytes(setup: JobSetup) -> float:
    """The largest no-grad forward pass of a preference step (DPO's reference pass, KTO's KL and
    reference passes: fmest.objectives), run after the policy's forward while its saved
    activations and logits are held: that call's logits in the compute dtype (transformers
    returns them unupcast; TRL's ``selective_log_softmax`` then works row by row) and one
    layer's hidden states in and out. A frozen ``copy`` is sharded like the policy's weights
    (``weights`` is already per GPU); under ZeRO-3/FSDP its layers are gathered like the
    policy's, counted in the framework buffers once."""
    per_sample = max(setup.forward_only_calls)
    tokens = setup.tokens / sequences_per_sample(setup.training.objective) * per_sample
    vocab = setup.model.vocab_size / setup.layout.tp
    return tokens * (vocab + 2 * setup.model.hidden_size) * setup.act_bytes


@frozen(kw_only=True)
class StagePeak:
    allocated: float
    phase: str
    components: dict[str, float]
    phase_allocated: dict[str, float]
    stage: str
    #: the largest block the step allocates and frees (one logits-sized tensor: the fp32
    #: upcast, the compute-dtype logits, a fused loss's chunk): the allocator reserve's
    #: abscissa (fmest.physics.device_terms.allocator_reserve_bytes, issue 21)
    transient_block: float = 0.0
    #: the bytes one layer frees in backward: its saved tensors and its backward working set
    #: (``Activations.saved_layer + work_layer``; under recomputation the re-allocated
    #: activations): the allocator reserve's per-layer term
    #: (fmest.physics.device_terms.allocator_reserve_bytes, issue 21)
    layer_block: float = 0.0
    #: reserved bytes beyond the allocated peak that FSDP's side-stream pools hold
    #: (fmest.physics.device_terms.fsdp_stream_pool_bytes, issue 21)
    stream_pools: float = 0.0
    #: the peak is the end of backward with FSDP1's kept block inputs and gradients alive
    #: (``Activations.kept_input_grads``): every reserved segment holds a live block
    pinned: bool = False
    #: the step's whole-partition flat buffers (``ModelState.flat_temps``) when the block
    #: the backward frees are all smaller than them: new segments on top of what the
    #: backward left cached (:func:`assemble`)
    step_new_segments: float = 0.0
    #: the largest single tensors besides the logits the stage frees: a layer's and a
    #: weight gradient's (``Activations.largest_layer_tensor``, ``largest_grad_tensor``)
    largest_layer_tensor: float = 0.0
    largest_grad_tensor: float = 0.0


def stage_peak(setup: JobSetup, stage: Stage) -> StagePeak:
    """The phases of one stage and the one that peaks (the first of equal totals)."""
    params = stage_params(setup, stage)
    state = model_state_terms(setup, params)
    buffers = framework_buffer_terms(setup, params, state, stage)
    acts = activation_terms(setup, params, state, buffers, stage)
    phases = phase_components(setup, state, buffers, acts, stage)
    totals = {name: sum(comp.values()) for name, comp in phases.items()}
    best = max(totals, key=totals.__getitem__)
    block = max(acts.logits_held, acts.logits_fwd_extra, acts.logits_bwd_extra / 2,
                acts.output_logits)
    # the end-of-backward moment (the last of _backward_candidates) holds the kept inputs
    pinned = acts.kept_input_grads > 0 and best == "backward" \
        and phases[best]["activations"] > acts.saved_all + acts.work_layer
    # the flat step copies reuse no cached block when each is larger than the largest block
    # the forward and backward free (the logits-sized transient, the largest single tensor
    # of a layer or weight gradient: largest_freed_tensor)
    # (fp32 gradients: one fp32 copy; else the compute-dtype flat copy and its fp32 cast)
    g = float(setup.sizing.grad_bytes)
    flat_block = state.flat_temps if g == F.FP32_BYTES else state.flat_temps * g / (g + F.FP32_BYTES)
    largest = max(acts.largest_layer_tensor, acts.largest_grad_tensor)
    new_segments = state.flat_temps if flat_block > max(block, largest) else 0.0
    return StagePeak(allocated=totals[best], phase=best, components=phases[best],
                     phase_allocated=totals, stage=stage.name, transient_block=block,
                     layer_block=acts.saved_layer + acts.work_layer,
                     stream_pools=_stream_pool_bytes(setup, params, state, buffers, acts, stage),
                     pinned=pinned, step_new_segments=new_segments,
                     largest_layer_tensor=acts.largest_layer_tensor,
                     largest_grad_tensor=acts.largest_grad_tensor)


def _fsdp_pool_kind(setup: JobSetup) -> Optional[str]:
    """The stack's FSDP implementation whose side-stream pools the job's step runs
    (``FSDP_STREAM_POOL_STACKS``), None where they do not apply: per-unit gathers over more
    than one rank (one rank: FSDP1 runs NO_SHARD, torchtitan applies no fully_shard) without
    DeepSpeed's buckets (ZeRO-3 under the same stack runs DeepSpeed's engine and its streams,
    not derived here); one stage only."""
    stack, strategy = setup.stack, setup.strategy
    kind = FSDP_STREAM_POOL_STACKS.get(stack.name) if stack is not None else None
    if (kind is None or not strategy.param_gather or strategy.reduce_bucket_elements
            or setup.plan.params_divisor <= 1 or setup.layout.pp > 1):
        return None
    return kind


def _stream_pool_bytes(setup: JobSetup, params: StageParams, state: ModelState,
                       buffers: Buffers, acts: Activations, stage: Stage) -> float:
    """The reserve FSDP's side-stream pools add (docs/allocator.md "Per-stream pools under
    FSDP"): the gathered units and root this plugin counts in forward and backward
    (``_gathered_param_buffers``), each phase's sharded gradients, by the stack's FSDP
    implementation (FSDP_STREAM_POOL_STACKS); 0 for other stacks and strategies."""
    kind = _fsdp_pool_kind(setup)
    if kind is None:
        return 0.0
    unit = _gathered_layer_bytes(setup, state)
    gathered = F.FSDP_UNSHARDED_LAYERS * unit + (params.embedding + params.head) * setup.act_bytes
    unit_grad = 0.0 if setup.lora is not None else unit
    root_rs = 0.0
    if kind == "fsdp2" and setup.lora is None \
            and fsdp2_rs_input_in_side_pool(setup.torch_version):
        # the root unit's reduce-scatter input, in the reduce dtype (fp32 under amp)
        reduce_bytes = F.FP32_BYTES if setup.sizing.precision == "amp" else setup.act_bytes
        root_rs = (params.embedding + params.head) * reduce_bytes
    moments = phase_components(setup, state, buffers, acts, stage, every_moment=True)
    return fsdp_stream_pool_bytes(
        kind, {name: sum(comps.values()) for name, comps in moments.items()},
        {name: gathered for name in moments if name != "optimizer"},
        {name: comps.get("gradients", 0.0) for name, comps in moments.items()}, unit, unit_grad,
        root_rs_input=root_rs)


def _split_vision(setup: JobSetup, peak: StagePeak, components: dict[str, int]) -> None:
    """Show a VLM's tower and projector weights and the tower's activations as their own
    components (moved out of ``weights`` / ``activations``; the total is unchanged)."""
    vision = setup.model.vision
    if vision is None:
        return
    share = (vision.tower_params + vision.projector_params) / max(1.0, setup.dims.total_params)
    moved = int(round(components.get("weights", 0) * share))
    components["weights"] -= moved
    components["vision_weights"] = moved
    if peak.phase != "optimizer":
        acts = min(components.get("activations", 0),
                   int(round(_vision_saved_bytes(setup, vision))))
        components["activations"] -= acts
        components["vision_activations"] = acts


def _host_bytes(setup: JobSetup) -> float:
    """Host RAM per node (fmest_memory_theory.host): model loading, offloaded state."""
    lay, dims = setup.layout, setup.dims
    total = dims.total_params
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


def _carried_reserve(setup: JobSetup, peak: StagePeak, reserve, ctx_bytes: float) -> float:
    """The reserve over the allocated peak when the step's flat buffers take new segments
    (``StagePeak.step_new_segments``): PyTorch's caching allocator keeps every block the
    backward freed (it gives cached segments back only when a cudaMalloc fails or on
    ``empty_cache``; DeepSpeed's ZeRO step calls neither: deepspeedai/DeepSpeed
    @56c522386878df2513ccb548de76b50191ae3af7 deepspeed/runtime/zero/stage_1_and_2.py
    ``step``), and best fit finds no cached block as large as a whole-partition buffer, so it
    maps new ones (pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp @ eb42ad6e
    ``get_free_block``, ``alloc_block``; replayed in tests/test_carried_reserve.py). The
    reserved peak is then the backward's reserved bytes plus those buffers; the cached blocks
    are given back before an OOM (``release_cached_blocks``), so at most the room the device
    has left. 0 when the step takes no new segment."""
    backward = peak.phase_allocated.get("backward")
    if not peak.step_new_segments or backward is None:
        return 0.0
    reserved = backward + reserve(backward) + peak.step_new_segments
    carried = reserved - peak.allocated
    if setup.capacity_bytes:
        carried = min(carried, setup.capacity_bytes - ctx_bytes - peak.allocated)
    return max(0.0, carried)


def assemble(setup: JobSetup, peak: StagePeak) -> MemoryEstimate:
    """Round the peak's components and add the GPU-side terms (:mod:`fmest.physics.device_terms`)."""
    ctx_bytes = F.cuda_context_bytes(setup.layout.world_size)
    components = {name: int(round(peak.components.get(name, 0.0)))
                  for name in _TENSOR_COMPONENTS}
    _split_vision(setup, peak, components)
    for name in _OBJECTIVE_COMPONENTS:   # only in preference steps (fmest.objectives)
        if name in peak.components:
            components[name] = int(round(peak.components[name]))
    components["cuda_context"] = int(round(ctx_bytes))
    stack = setup.stack
    fitted = stack.fitted.reserve_fraction if stack is not None else None
    expandable = stack is not None and stack.profile.expandable_segments

    # pad-to-longest batches of varying length: cached blocks of the other shapes stay
    # (docs/allocator.md "Variable-length batches"); the physics reserve grows by the replayed
    # fraction of the micro-batch's transient bytes (a fitted stack fraction replaces it)
    growth = setup.padded_growth * (peak.components.get("activations", 0.0)
                                    + peak.components.get("logits_and_loss", 0.0))

    def reserve(allocated: float, pinned: bool = False) -> float:
        held = F.allocator_reserve_bytes(allocated, expandable, peak.transient_block,
                                         peak.layer_block) + growth \
            + peak.stream_pools if fitted is None \
            else fitted * allocated
        if not setup.capacity_bytes:
            return held
        # before raising an OOM the caching allocator frees its cached blocks and retries
        # (c10/cuda/CUDACachingAllocator.cpp @ eb42ad6e, DeviceCachingAllocator::malloc:
        # release_available_cached_blocks, then release_cached_blocks), but a segment with a
        # live block stays: the reserve shrinks to the room left on the device, never below
        # that floor (fmest.allocator.irreducible_reserve_bytes; docs/allocator.md), so a peak
        # whose tensors + floor exceed the device does not fit. Tensors alone past the device:
        # the reserve a device large enough would hold (the answer is the peak such a run has)
        room = setup.capacity_bytes - ctx_bytes - allocated
        if room < 0:
            return held
        # FSDP1's frozen units keep every checkpointed block's input and its gradient to the
        # end of backward (fsdp1_keeps_checkpoint_inputs): each kept gradient is carved out of
        # the segments the block's backward working set had just used, so at that peak every
        # segment holds a live block and no release gives the reserve back (replays:
        # plugins/memory_theory/scripts/replay_fsdp1_kept_floor.py, floor / reserve 0.97-0.99)
        floor = held if pinned else F.irreducible_reserve_bytes(allocated, expandable)
        return min(held, max(room, floor))

    held_reserve = reserve(peak.allocated, peak.pinned and not expandable)
    carried = _carried_reserve(setup, peak, reserve, ctx_bytes)
    components["allocator_reserve"] = int(round(max(held_reserve, carried)))
    total = sum(components.values())
    # the peak phase's entry is the total (its reserve is the one computed just above)
    phase_peaks = {name: total if name == peak.phase else int(round(value + reserve(value)
                                                                   + ctx_bytes))
                   for name, value in peak.phase_allocated.items()}
    # each phase's allocated bytes (max_memory_allocated's figure), before the reserve and
    # its cap: what the planner's probes invert (fmest.plan.calibrate)
    metrics = {_ALLOCATED_METRIC[name]: float(value)
               for name, value in peak.phase_allocated.items()}
    # the reserve's per-layer abscissa (one layer's backward working set): what the planner's
    # probe reads to mirror the two-term reserve (fmest.plan.planner ``_layer_blocks``)
    metrics["allocator_layer_block_bytes"] = float(peak.layer_block)
    # the largest single tensor the step frees besides the logits: what the planner mirrors
    # to test whether DeepSpeed's flat step copies find a cached block
    metrics["allocator_largest_layer_tensor_bytes"] = float(peak.largest_layer_tensor)
    metrics["allocator_largest_grad_tensor_bytes"] = float(peak.largest_grad_tensor)
    return MemoryEstimate(
        total_bytes=total, components=components, phase=peak.phase, metrics=metrics,
        phase_peaks_bytes=phase_peaks, host_bytes=int(_host_bytes(setup)),
        provenance=PROVENANCE,
        notes=_memory_notes(setup, stack, fitted, peak.stage) + _torch_release_notes(setup))


def _torch_release_notes(setup: JobSetup) -> tuple[str, ...]:
    """Say when the run's PyTorch release (``hardware.torch_version``) changed the answer:
    FSDP2 before 2.5 keeps the root's reduce-scatter input in that stream's pool
    (:func:`_stream_pool_bytes`)."""
    if _fsdp_pool_kind(setup) != "fsdp2" or setup.lora is not None \
            or not fsdp2_rs_input_in_side_pool(setup.torch_version):
        return ()
    return (f"FSDP2 on PyTorch {setup.torch_version}: the reduce-scatter input is allocated "
            "in the reduce-scatter stream before 2.5 (pytorch PR #129721); the root unit's "
            "stays cached there, in the allocator reserve",)


_MEMORY_NOTES: dict[tuple, tuple[object, tuple[str, ...]]] = {}


def _memory_notes(setup: JobSetup, stack: Optional[ResolvedStack], fitted: Optional[float],
                  stage: str) -> tuple[str, ...]:
    """The estimate's notes, built once per (resolved stack, and the few job values they
    print or test: every field :func:`_stack_memory_notes` reads besides the stack's own)."""
    sizing, plan = setup.sizing, setup.plan
    key = (sizing.precision, sizing.impl, stage, plan.group_size, sizing.grad_bytes,
           "gradients" in setup.strategy.shards, setup.loss, fitted)

    def build() -> tuple[str, ...]:
        notes: tuple[str, ...] = (
            f"precision={sizing.precision}", f"optimizer_impl={sizing.impl}",
            f"stage={stage}", f"shard_group={plan.group_size}")
        if stack is not None:
            notes += (stack_summary(stack),) + _stack_memory_notes(setup, stack, fitted)
        return notes

    return by_identity(_MEMORY_NOTES, stack, key, build)


_STACK_SUMMARIES: dict[tuple, tuple[object, str]] = {}
#: phase -> the memory answer's metric of its allocated bytes (built once, not per estimate)
_ALLOCATED_METRIC = {phase: f"allocated_bytes_{phase}"
                     for phase in ("forward", "backward", "optimizer")}


def stack_summary(stack: ResolvedStack) -> str:
    """``stack.summary()``, built once per resolved stack (the engine resolves it once per
    context, and every estimate of that context, each micro-batch candidate included, notes
    it)."""
    return by_identity(_STACK_SUMMARIES, stack, (), stack.summary)


def _stack_memory_notes(setup: JobSetup, stack: ResolvedStack,
                        fitted: Optional[float]) -> tuple[str, ...]:
    """What the stack changed in memory, by name (issue 12)."""
    sizing, out = setup.sizing, []
    if sizing.grad_bytes == F.FP32_BYTES and sizing.precision == "master":
        out.append(f"{stack.name}: gradients accumulate in an fp32 buffer (4 B/param)")
    if stack.profile.contiguous_grad_buffer and "gradients" not in setup.strategy.shards \
            and not (setup.strategy.reduce_bucket_elements
                     and setup.sizing.grad_bytes != F.FP32_BYTES):
        out.append(f"{stack.name}: contiguous gradient buffer, no bucket copies")
    if stack.profile.workspace_bytes:
        out.append(f"{stack.name}: framework workspaces "
                   f"{stack.profile.workspace_bytes / 2**20:.0f} MiB")
    if setup.loss == "fused" and stack.fuses("loss"):
        out.append(f"{stack.name}: fused cross-entropy (no fp32 logits)")
    if fitted is not None:
        out.append(f"{stack.name}: allocator reserve {fitted:.3f} x allocated "
                   f"({stack.fitted.origin})")
    return tuple(out)


def estimate_bytes(job: Job, ctx: EstimateContext) -> MemoryEstimate:
    """The :class:`MemoryEstimate` of ``job`` (see module doc): the stage that peaks highest
    (the first of equal peaks)."""
    setup = job_setup(job, ctx)
    training, par = setup.training, setup.parallelism
    stages = pipeline_stages(setup.model.num_layers, setup.layout.pp, par.pp_schedule,
                             training.grad_accum_steps, par.pp_virtual_stages)
    best = max((stage_peak(setup, stage) for stage in stages), key=lambda peak: peak.allocated)
    return assemble(setup, best)


def estimate_memory(job: Job, ctx: EstimateContext) -> MemoryEstimate:
    """Analytic per-GPU peak memory (basis ``analytic``); answers every job (serving memory
    for ``mode: inference``, fmest_memory_theory.inference)."""
    if job.mode == "inference":
        from fmest_memory_theory.inference import estimate_inference_memory

        return estimate_inference_memory(job, ctx)
    return estimate_bytes(job, ctx)
