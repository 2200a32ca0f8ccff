"""Transforms: named strategy objects the core applies once, in a fixed order, per job.

1. **optimizer** (:class:`OptimizerSpec`, sized by :meth:`OptimizerSpec.sizing` under the
   precision policy): bytes per element of the weights, trainable parameters, gradients,
   master copies, optimizer states and step temporaries (:class:`OptimizerSizing`);
2. **sharding** (:class:`ShardingStrategy`, planned by :meth:`ShardingStrategy.plan`): how
   many ranks split parameters, gradients and optimizer states (:class:`ShardingPlan`) plus
   the framework behaviour the strategy brings (flat buckets, PyTorch-native TP, ...);
3. **communication** (:meth:`ShardingStrategy.collectives`): the data-parallel collectives of
   one step, per phase, with bytes, group and whether they may overlap compute
   (:class:`CommunicationPlan`).

:func:`resolve_transforms` runs the three in that order; the engine puts the result on the
estimation context (``ctx.transforms``), so every estimator (analytic memory, roofline time,
traced memory) reads the same answer instead of re-deriving it. A third party registers an
optimizer or a sharding strategy through ``fmest_register_optimizers`` /
``fmest_register_parallelism`` (or subclasses these classes to override a method) and is
modelled everywhere. The training stack (:mod:`fmest.stacks`, issue 12) is applied first:
it sets the default precision, the optimizer's ``auto`` implementation, fp32 gradient
buffers and the overlap of the collectives; it rides on the result as ``stack``.

The element-size rule is :data:`DTYPES`, the only dtype table of the product.
"""

from __future__ import annotations

import functools
from typing import Any, Optional

import attrs
from attrs import field, frozen

from fmest.errors import InputError

# ---------------------------------------------------------------------------------------------
# dtypes: one table
# ---------------------------------------------------------------------------------------------

FP32_BYTES = 4


@frozen(kw_only=True)
class DtypeInfo:
    """Sizes of one training dtype: ``storage_bytes`` per stored element (weights, gradients,
    saved activations) and ``operand_bytes`` per matmul operand (what a GEMM reads)."""

    storage_dtype: str
    storage_bytes: int
    operand_bytes: int


#: Element sizes of ``training.dtype`` (IEEE 754 / OCP FP8 sizes). The fp8 storage rule:
#: float8 training (torchao float8, Transformer Engine) keeps weights, gradients and saved
#: activations in bf16 and casts to fp8 inside the matmul only, so fp8 *stores* 2 bytes and
#: its GEMM operands are 1 byte (torchao float8 README: "weights ... stay in high precision";
#: measured: torchtitan Llama-3.1-8B FSDP 77.0 GiB bf16 vs 76.8 GiB float8).
DTYPES = {
    "fp32": DtypeInfo(storage_dtype="fp32", storage_bytes=4, operand_bytes=4),
    "bf16": DtypeInfo(storage_dtype="bf16", storage_bytes=2, operand_bytes=2),
    "fp16": DtypeInfo(storage_dtype="fp16", storage_bytes=2, operand_bytes=2),
    "fp8": DtypeInfo(storage_dtype="bf16", storage_bytes=2, operand_bytes=1),
}


def dtype_info(dtype: str) -> DtypeInfo:
    """The :data:`DTYPES` row of ``dtype``; an unknown dtype is an :class:`InputError`."""
    try:
        return DTYPES[dtype]
    except KeyError:
        raise InputError("training.dtype", "unknown dtype", value=dtype,
                         accepted=sorted(DTYPES)) from None


# ---------------------------------------------------------------------------------------------
# 1. optimizer state sizing
# ---------------------------------------------------------------------------------------------

@frozen(kw_only=True)
class OptimizerSizing:
    """Bytes per element of everything the optimizer transform sizes, for one job.

    ``weight_bytes``: every stored base weight (fp32 under full ``amp`` training, else the
    compute dtype's storage). ``trainable_bytes``: each trainable parameter (LoRA adapters:
    fp32 under amp/master, peft ``autocast_adapter_dtype``). ``grad_bytes``: each gradient.
    ``master_bytes``: the fp32 master copy per trainable parameter (``master`` precision, else
    0). ``state_bytes``: each optimizer state element, ``state_overhead_bytes`` its block-scale
    overhead (8-bit optimizers). ``temp_states``: parameter-sized temporaries the update
    allocates with implementation ``impl``.
    """

    precision: str
    compute_bytes: int
    weight_bytes: int
    trainable_bytes: int
    grad_bytes: int
    master_bytes: int
    states: float
    state_bytes: float
    state_overhead_bytes: float
    temp_states: float
    impl: str
    factored: bool
    paged: bool


@frozen(kw_only=True)
class OptimizerSpec:
    """What an optimizer keeps per trainable parameter.

    ``states`` is the number of parameter-sized state tensors (AdamW: 2, SGD with momentum: 1,
    Lion: 1). ``state_bytes_per_element`` fixes their element size (``1`` for 8-bit optimizers,
    plus ``quant_overhead_bytes_per_element`` for block-wise scales); ``None`` means the precision
    policy decides (fp32 states under amp/master, the compute dtype under pure). ``factored``
    (Adafactor) keeps row and column statistics for matrices instead of full-size second
    moments. ``step_temp_states`` is how many parameter-sized temporaries the update allocates
    per implementation (the foreach AdamW ``_foreach_sqrt`` buffer is one whole parameter copy;
    fused and for-loop implementations hold ~none). ``paged`` optimizers may be evicted to host
    memory under pressure. ``own_kernel`` optimizers (bitsandbytes', torchao's) run their own
    update kernel whatever ``training.optimizer_impl`` or a stack asks of torch's optimizers:
    their ``default_impl`` names that kernel's shape (``fused``: one pass per tensor).
    """

    name: str
    aliases: tuple[str, ...] = ()
    states: float = 2.0
    state_bytes_per_element: Optional[float] = None
    quant_overhead_bytes_per_element: float = 0.0
    factored: bool = False
    paged: bool = False
    step_temp_states: dict[str, float] = field(factory=lambda: {"foreach": 1.0, "fused": 0.0,
                                                                  "for_loop": 0.0})
    default_impl: str = "foreach"
    own_kernel: bool = False
    source: str = ""

    def implementation(self, training) -> str:
        """``training.optimizer_impl``, or this optimizer's default for ``auto`` (always the
        default for an ``own_kernel`` optimizer)."""
        if self.own_kernel or training.optimizer_impl == "auto":
            return self.default_impl
        return training.optimizer_impl

    def sizing(self, training, precision: str) -> OptimizerSizing:
        """Per-element bytes under ``precision`` (``pure``/``amp``/``master``, see
        :mod:`fmest.physics.precision`): ZeRO paper (Rajbhandari et al. 2020, section 3.1) mixed
        precision: compute-dtype weights and grads + fp32 master, momentum and variance;
        ``amp`` keeps fp32 weights and grads (torch.autocast); ``pure`` keeps everything in
        the compute dtype. LoRA trains fp32 adapters under amp/master (peft
        ``autocast_adapter_dtype=True``) on a compute-dtype base."""
        compute = dtype_info(training.dtype).storage_bytes
        lora = training.technique in ("lora", "qlora")
        fp32_weights = (precision == "amp" and not lora) or training.dtype == "fp32"
        weight = FP32_BYTES if fp32_weights else compute
        if lora:
            trainable = FP32_BYTES if precision in ("amp", "master") else compute
            grad = trainable
        else:
            trainable = weight
            grad = FP32_BYTES if precision == "amp" else weight
        if self.state_bytes_per_element is not None:
            state = self.state_bytes_per_element
        else:
            state = FP32_BYTES if precision in ("amp", "master") else weight
        impl = self.implementation(training)
        return OptimizerSizing(
            precision=precision, compute_bytes=compute, weight_bytes=weight,
            trainable_bytes=trainable, grad_bytes=grad,
            master_bytes=FP32_BYTES if precision == "master" else 0, states=self.states,
            state_bytes=state, state_overhead_bytes=self.quant_overhead_bytes_per_element,
            temp_states=self.step_temp_states.get(impl, 0.0), impl=impl,
            factored=self.factored, paged=self.paged)


# ---------------------------------------------------------------------------------------------
# 2. sharding and 3. communication
# ---------------------------------------------------------------------------------------------

PHASES = ("forward", "backward", "step")
COLLECTIVE_KINDS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all")


def _one_of(values):
    def check(inst, attribute, value):
        if value not in values:
            raise ValueError(f"Collective.{attribute.name} must be one of {values}, got {value!r}")
    return check


@frozen(kw_only=True)
class Collective:
    """One data-parallel collective of a training step.

    ``kind``: one of :data:`COLLECTIVE_KINDS`. ``what``: what it carries (``gradients``,
    ``parameters``). ``payload_bytes``: the full (unsharded) buffer per rank it reduces or
    produces. ``group_size`` ranks ``group_stride``
    apart (ranks are laid out tp fastest). ``phase``: ``forward``/``backward`` (per micro-batch
    when ``per_micro_batch``) or ``step`` (once, after the update). ``overlappable``: it may
    hide behind the compute of its phase (bucketed/prefetched); otherwise it is exposed.
    """

    kind: str = field(validator=_one_of(COLLECTIVE_KINDS))
    what: str
    payload_bytes: float
    group_size: int
    group_stride: int
    phase: str = field(validator=_one_of(PHASES))
    per_micro_batch: bool
    overlappable: bool
    #: carries expert (MoE) weights over the expert-data-parallel group (expert parallelism)
    expert: bool = False


@frozen(kw_only=True)
class CommunicationPlan:
    """The data-parallel collectives of one optimizer step, in issue order."""

    collectives: tuple[Collective, ...] = ()
    grad_bytes_per_element: float = 0.0

    def in_phase(self, phase: str) -> tuple[Collective, ...]:
        """The collectives issued in ``phase`` (one of :data:`PHASES`)."""
        return tuple(coll for coll in self.collectives if coll.phase == phase)


@frozen(kw_only=True)
class ShardingPlan:
    """Divisors of per-GPU model state under one strategy and layout.

    ``group_size``: ranks one copy of the sharded state is split over (data x context
    parallel ranks, or the HSDP shard group). ``params_divisor``/``grads_divisor``/
    ``optimizer_divisor``: ``group_size`` for what the strategy shards, else 1."""

    strategy: "ShardingStrategy"
    group_size: int
    params_divisor: int
    grads_divisor: int
    optimizer_divisor: int
    replicas: int


@frozen(kw_only=True)
class ShardingStrategy:
    """How data-parallel ranks split model state, what they communicate, and what framework
    behaviour comes with it. Estimators ask these fields and methods; none matches names.

    ``shards``: a subset of ``{"optimizer", "gradients", "parameters"}``. ``hybrid``: shard
    within ``hsdp_shard_size`` ranks (default: GPUs per node), replicate across. ``param_gather``:
    parameters are all-gathered per layer for forward and again for backward (ZeRO-3 / FSDP
    FULL_SHARD). ``grad_collective``: ``all_reduce`` or ``reduce_scatter``.

    Behaviour flags (each with what it changes):

    * ``auto_precision``: the precision ``precision="auto"`` resolves to for full training in
      half precision (``None``: the dtype decides; :func:`fmest.physics.precision.resolve_precision`).
    * ``ddp_bucket``: unsharded gradients are copied into persistent flat all-reduce buckets
      (PyTorch DDP, FSDP NO_SHARD): one more copy of the gradients in memory.
    * ``reduce_bucket_elements``/``allgather_bucket_elements``: DeepSpeed's bucket sizes; the
      IPG reduce buffers they size (ZeRO-1/2/3; the all-gather has no buffer of its own) are
      counted by :func:`fmest.default_plugins.parallelism.zero_reduce_buffer_elements`.
    * ``native_tensor_parallel``: composes with PyTorch-native (DTensor) TP, as torchtitan does:
      vocabulary-parallel loss and separately all-gathered sequence-parallel inputs.
    * ``pp_unsharded_params``: under pipeline parallelism parameters stay unsharded from forward
      to backward and gradients accumulate unsharded (torchtitan ``reshard_after_forward=False``).
    * ``fp32_grad_accum``: those unsharded gradients accumulate in the fp32 reduce dtype under
      ``amp`` (FSDP2 ``to_accumulated_grad_if_needed``).
    * ``backward_prefetch``: backward parameter gathers may be prefetched behind compute
      (``parallelism.fsdp_backward_prefetch`` ``pre``); without it they are exposed.
    * ``framework``: a descriptive label only (shown to users; never compared by estimators).
    """

    name: str
    aliases: tuple[str, ...] = ()
    shards: frozenset[str] = frozenset()
    hybrid: bool = False
    param_gather: bool = False
    grad_collective: str = "all_reduce"
    auto_precision: Optional[str] = None
    ddp_bucket: bool = False
    reduce_bucket_elements: int = 0
    allgather_bucket_elements: int = 0
    native_tensor_parallel: bool = False
    pp_unsharded_params: bool = False
    fp32_grad_accum: bool = False
    backward_prefetch: bool = True
    framework: str = ""
    source: str = ""

    def shard_group_size(self, *, dp: int, gpus_per_node: int,
                         hsdp_shard_size: Optional[int] = None) -> int:
        """How many ranks one copy of the sharded state is split over."""
        if not self.shards:
            return 1
        if self.hybrid:
            return max(1, min(dp, hsdp_shard_size or gpus_per_node))
        return dp

    @property
    def gathers_full_shard(self) -> bool:
        """Shards everything and gathers parameters per layer without replicas: what FSDP2
        ``fully_shard`` executes (ZeRO-3, FSDP FULL_SHARD)."""
        return (self.shards >= {"optimizer", "gradients", "parameters"} and self.param_gather
                and not self.hybrid)

    def plan(self, layout, parallelism) -> ShardingPlan:
        """Divisors for ``layout``: context-parallel ranks hold the same weights and shard
        with the data-parallel ones (torchtitan's ``dp_shard_cp`` mesh)."""
        return self.plan_group(layout.dp * layout.cp, layout, parallelism)

    def expert_plan(self, layout, parallelism) -> ShardingPlan:
        """Divisors of the expert (MoE) weights: with expert parallelism each rank holds
        ``experts / ep`` of them and they are replicated, reduced and sharded over the
        expert-data-parallel group of :func:`expert_data_parallel_size` ranks (Megatron-Core
        ``intra_expt_dp_group`` buffers; torchtitan ``dp_shard_mod_ep``)."""
        return self.plan_group(expert_data_parallel_size(layout), layout, parallelism)

    def plan_group(self, group: int, layout, parallelism) -> ShardingPlan:
        """Divisors when ``group`` ranks hold copies of the same weights."""
        shard_n = self.shard_group_size(dp=group, gpus_per_node=layout.gpus_per_node,
                                        hsdp_shard_size=parallelism.hsdp_shard_size)
        return ShardingPlan(
            strategy=self, group_size=shard_n,
            params_divisor=shard_n if "parameters" in self.shards else 1,
            grads_divisor=shard_n if "gradients" in self.shards else 1,
            optimizer_divisor=shard_n if "optimizer" in self.shards else 1,
            replicas=max(1, group // shard_n))

    def collectives(self, *, grad_bytes: float, param_bytes: float, group: int,
                    plan: ShardingPlan, stride: int, prefetch: str) -> tuple[Collective, ...]:
        """The data-parallel collectives of one step (Rajbhandari et al. 2020 section 7 for
        ZeRO's communication volume; Zhao et al. 2023 section 3.3 for FSDP's per-unit
        all-gather/reduce-scatter and prefetching; Li et al. 2020 for DDP's bucketed
        all-reduce during backward). ``grad_bytes``/``param_bytes``: gradient and parameter
        bytes of one rank's model-parallel slice; ``group``: data x context parallel ranks;
        ``prefetch``: ``parallelism.fsdp_backward_prefetch``."""
        if group <= 1:
            return ()

        def make(kind, what, payload, size, at_stride, phase, per_mb, overlap=True):
            return Collective(kind=kind, what=what, payload_bytes=payload, group_size=size,
                              group_stride=at_stride, phase=phase, per_micro_batch=per_mb,
                              overlappable=overlap)

        if not self.shards or (self.grad_collective == "all_reduce"
                               and "gradients" not in self.shards):
            out = [make("all_reduce", "gradients", grad_bytes, group, stride, "backward", False)]
            if "optimizer" in self.shards:   # ZeRO-1: updated parameters gathered after the step
                out.append(make("all_gather", "parameters", param_bytes, group, stride, "step",
                                False, overlap=False))
            return tuple(out)
        shard_n = plan.group_size
        reduce = [make("reduce_scatter", "gradients", grad_bytes, shard_n, stride, "backward",
                       True)]
        if plan.replicas > 1:   # HSDP: all-reduce the gradient shard across replicas
            reduce.append(make("all_reduce", "gradients", grad_bytes / shard_n, plan.replicas,
                               stride * shard_n, "backward", True))
        gather = dict(kind="all_gather", what="parameters", payload=param_bytes, size=shard_n,
                      at_stride=stride)
        if self.param_gather:   # gathered for forward and again for backward
            hidden = self.backward_prefetch and prefetch not in ("post", "none")
            return (make(**gather, phase="forward", per_mb=True),
                    make(**gather, phase="backward", per_mb=True, overlap=hidden), *reduce)
        if "parameters" in self.shards:   # SHARD_GRAD_OP: gathered once per forward
            return (make(**gather, phase="forward", per_mb=True), *reduce)
        # ZeRO-2: gradients reduce-scattered per micro-batch, parameters gathered per step
        return (*reduce, make(**gather, phase="step", per_mb=False, overlap=False))


# ---------------------------------------------------------------------------------------------
# resolution
# ---------------------------------------------------------------------------------------------

@frozen(kw_only=True)
class Transforms:
    """The resolved transforms of one job, in application order (``ctx.transforms``)."""

    precision: str
    optimizer: OptimizerSizing
    sharding: ShardingPlan
    communication: CommunicationPlan
    #: divisors of the expert (MoE) weights (the expert-data-parallel group; = ``sharding``
    #: without expert parallelism)
    expert_sharding: Optional[ShardingPlan] = None
    stack: Any = None   # the fmest.stacks.ResolvedStack (None: eager PyTorch)
    #: the job fields the transforms depend on (micro-batch and sequence length are not)
    job_key: tuple = field(default=(), eq=False, repr=False)


def _job_key(job) -> tuple:
    training = job.training
    return (training.dtype, training.precision, training.technique, training.optimizer,
            training.optimizer_impl, tuple(training.lora_target_modules), training.lora_rank,
            job.parallelism, job.hardware, getattr(training, "stack", None),
            getattr(training, "liger", False), getattr(training, "main_grads_dtype", None),
            getattr(training, "lora_adapter_dtype", None),
            tuple(getattr(training, "fused_kernels", ()) or ()))


def expert_data_parallel_size(layout) -> int:
    """Ranks holding the same expert weights: Megatron-Core ``initialize_model_parallel``
    (megatron/core/parallel_state.py) sets ``expert_data_parallel_size = world_size //
    (expert_tensor_parallel_size * expert_model_parallel_size * pipeline_model_parallel_size)``;
    with ``world = tp * cp * dp * pp`` that is ``tp * cp * dp / (expert_tp * ep)`` (``dp * cp /
    ep`` at expert TP = TP, its default; expert_tp x ep divides tp x cp x dp,
    :func:`fmest.job.resolve_layout`)."""
    from fmest.job import expert_tp_of

    return max(1, (layout.tp * layout.dp * layout.cp)
               // (expert_tp_of(layout) * max(1, getattr(layout, "ep", 1))))


def grad_reduce_bytes_per_element(sizing: OptimizerSizing) -> float:
    """Gradient bytes on the wire: fp32 under amp/master (FSDP ``reduce_dtype`` fp32,
    Megatron's fp32 gradient all-reduce), the compute dtype's storage under pure."""
    return float(FP32_BYTES) if sizing.precision in ("amp", "master") else \
        float(sizing.compute_bytes)


@functools.lru_cache(maxsize=256)
def _param_totals(model, technique: str, targets: tuple, rank: int) -> tuple[int, int]:
    """(trainable, total) parameters of a model under a technique (fmest.physics.counting), cached:
    ``ModelSpec`` is frozen and hashable, and the batch search resolves many contexts."""
    from fmest.job import Training
    from fmest.physics.counting import total_params, trainable_params

    training = Training(technique=technique, lora_target_modules=targets, lora_rank=rank)
    return trainable_params(model, training), total_params(model, training)


@functools.lru_cache(maxsize=256)
def _expert_param_totals(model, technique: str, targets: tuple, rank: int) -> tuple[int, int]:
    """(trainable, total) parameters of a model's expert (MoE) linears: their weights under
    full training; under LoRA the adapters on expert linears (trainable) plus the frozen
    expert weights (total)."""
    from fmest.job import Training
    from fmest.physics.counting import lora_modules

    experts = model.param_counts().experts
    if technique == "full":
        return experts, experts
    training = Training(technique=technique, lora_target_modules=targets, lora_rank=rank)
    adapters = sum(rank * (mod.in_features + mod.out_features) * mod.layers * mod.copies
                   for mod in lora_modules(model, training) if mod.kind == "expert")
    return adapters, experts + adapters


def data_parallel_collectives(sharding: ShardingStrategy, *, layout, parallelism,
                              plan: ShardingPlan, expert_plan: ShardingPlan, sizing,
                              reduce_bytes: float, trainable: float, total: float,
                              expert_trainable: float, expert_total: float):
    """The data-parallel collectives of one step, by parameter kind: dense (non-expert)
    parameters over the data x context parallel group (stride tp); under expert parallelism
    the expert parameters (``experts / ep`` of them per rank) over the expert-data-parallel
    group (:func:`expert_data_parallel_size` ranks, stride tp x ep: Megatron-Core's expert rank
    generator orders tp-ep-dp). Megatron-Core ``DistributedDataParallel``
    (megatron/core/distributed/distributed_data_parallel.py) keeps expert parameters
    (``allreduce=False``) in their own buffers reduced over ``intra_expt_dp_group``. Without
    expert parallelism every parameter is in one set of collectives."""
    model_parallel = layout.tp * layout.pp
    ep = max(1, getattr(layout, "ep", 1))
    common = dict(stride=layout.tp, prefetch=parallelism.fsdp_backward_prefetch)
    group = layout.dp * layout.cp
    if ep == 1 or not expert_total:
        return sharding.collectives(
            grad_bytes=reduce_bytes * trainable / model_parallel,
            param_bytes=sizing.compute_bytes * total / model_parallel, group=group, plan=plan,
            **common)
    dense = sharding.collectives(
        grad_bytes=reduce_bytes * (trainable - expert_trainable) / model_parallel,
        param_bytes=sizing.compute_bytes * (total - expert_total) / model_parallel,
        group=group, plan=plan, **common)
    # the expert weights are split over expert_tp x ep (not tp x ep) within a stage, and the
    # expert-data-parallel group's ranks are expert_tp x ep apart (Megatron-Core expert grid)
    from fmest.job import expert_tp_of

    etp = expert_tp_of(layout)
    expert = sharding.collectives(
        grad_bytes=reduce_bytes * expert_trainable / (etp * layout.pp * ep),
        param_bytes=sizing.compute_bytes * expert_total / (etp * layout.pp * ep),
        group=expert_data_parallel_size(layout), plan=expert_plan,
        stride=etp * ep, prefetch=parallelism.fsdp_backward_prefetch)
    return (*dense, *(attrs.evolve(coll, expert=True) for coll in expert))


#: (the inputs :func:`resolve_transforms` reads, the records by id) -> (those records, the
#: result): equal inputs give the same record, so the estimators' caches keyed on the identity
#: of its parts (the time model's priced collectives) hit across the jobs of one report; the
#: entry keeps the records alive and checks identity, so an id cannot name another record
_RESOLVED: dict[tuple, tuple[tuple, Transforms]] = {}


def resolve_transforms(job, *, model, layout, optimizer: OptimizerSpec,
                       sharding: ShardingStrategy, stack: Any = None) -> Transforms:
    """Apply the transforms in order: the stack (its default precision policy), optimizer
    sizing (under that policy; the stack's ``auto`` optimizer implementation and fp32
    gradient buffer), then sharding, then communication (this module's doc; the stack's
    overlap of data-parallel collectives, :func:`fmest.stacks.apply_to_collectives`).
    ``stack``: the job's :class:`fmest.stacks.ResolvedStack` (``None``: eager PyTorch),
    carried on the result. Memoised (:data:`_RESOLVED`) for the built-in optimizer and
    sharding classes, whose methods read only the fields of the key (a subclass registered
    by a plugin may read more: resolved every time)."""
    from fmest.stacks import ResolvedStack

    if type(optimizer) is not OptimizerSpec or type(sharding) is not ShardingStrategy or \
            (stack is not None and type(stack) is not ResolvedStack):
        return _resolve_transforms(job, model=model, layout=layout, optimizer=optimizer,
                                   sharding=sharding, stack=stack)
    # every job field read below and by the stack and precision rules it calls
    # (fmest.physics.precision.resolve_precision, fmest.stacks.apply_to_sizing), with
    # _job_key whole so the cached record's job_key equals this job's
    key = (_job_key(job), layout, id(model),
           id(optimizer), id(sharding), id(stack))
    hit = _RESOLVED.get(key)
    if hit is not None:
        held, value = hit
        if held[0] is model and held[1] is optimizer and held[2] is sharding and \
                held[3] is stack:
            return value
    value = _resolve_transforms(job, model=model, layout=layout, optimizer=optimizer,
                                sharding=sharding, stack=stack)
    if len(_RESOLVED) >= 256:
        _RESOLVED.clear()
    _RESOLVED[key] = ((model, optimizer, sharding, stack), value)
    return value


def _resolve_transforms(job, *, model, layout, optimizer: OptimizerSpec,
                        sharding: ShardingStrategy, stack: Any = None) -> Transforms:
    """:func:`resolve_transforms`, computed."""
    from fmest.physics.precision import resolve_precision
    from fmest.stacks import apply_to_collectives, apply_to_sizing

    training, par = job.training, job.parallelism
    precision = resolve_precision(training, sharding, stack)
    sizing = apply_to_sizing(stack, optimizer.sizing(training, precision), training, sharding,
                             optimizer, storage_dtype=dtype_info(training.dtype).storage_dtype)
    plan = sharding.plan(layout, par)
    expert_plan = sharding.expert_plan(layout, par)
    reduce_bytes = grad_reduce_bytes_per_element(sizing)
    key = (model, training.technique, tuple(training.lora_target_modules), training.lora_rank)
    trainable, total = _param_totals(*key)
    expert_trainable, expert_total = _expert_param_totals(*key) if model.is_moe else (0, 0)
    comm = CommunicationPlan(
        collectives=apply_to_collectives(stack, data_parallel_collectives(
            sharding, layout=layout, parallelism=par, plan=plan, expert_plan=expert_plan,
            sizing=sizing, reduce_bytes=reduce_bytes, trainable=trainable, total=total,
            expert_trainable=expert_trainable, expert_total=expert_total)),
        grad_bytes_per_element=reduce_bytes)
    return Transforms(precision=precision, optimizer=sizing, sharding=plan, communication=comm,
                      expert_sharding=expert_plan, stack=stack, job_key=_job_key(job))


def transforms_of(job, ctx) -> Transforms:
    """``ctx.transforms`` (filled by the engine), resolved here for a context built without
    them (a hand-made context) or for a job that differs from the context's in a field the
    transforms depend on (the batch search varies only the micro-batch, which they do not)."""
    from fmest.stacks import resolve_builtin_stack, resolve_job_stack

    resolved = getattr(ctx, "transforms", None)
    if resolved is not None and resolved.job_key == _job_key(job):
        return resolved
    registries = getattr(ctx, "registries", None)
    stack = (resolve_job_stack(job, registries.stacks) if registries is not None
             and hasattr(registries, "stacks") else resolve_builtin_stack(job))
    return resolve_transforms(job, model=ctx.model, layout=ctx.layout, optimizer=ctx.optimizer,
                              sharding=ctx.sharding, stack=stack)
