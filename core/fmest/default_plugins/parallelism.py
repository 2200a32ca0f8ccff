"""Registers the built-in data-parallel sharding strategies (the sharding transform).

Sources: Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
Parameter Models" (stages 1-3 partition optimizer states, + gradients, + parameters);
Zhao et al. 2023, "PyTorch FSDP" (FULL_SHARD = ZeRO-3, SHARD_GRAD_OP = ZeRO-2, NO_SHARD = DDP,
HYBRID_SHARD shards within a node and replicates across nodes); PyTorch DDP (Li et al. 2020).
Behaviour flags (see :class:`fmest.transforms.ShardingStrategy`), each with its source:

* ``auto_precision``: FSDP strategies that shard parameters train ``amp`` (fp32 sharded
  parameters + ``MixedPrecisionPolicy``, torchtitan); DeepSpeed ZeRO trains ``master`` (bf16/fp16
  optimizer with fp32 master weights and states, DeepSpeed ``BF16_Optimizer``).
* ``ddp_bucket``: DDP copies gradients into flat all-reduce buckets that persist across steps
  unless ``gradient_as_bucket_view=True`` (torch.nn.parallel.DistributedDataParallel docs);
  FSDP NO_SHARD all-reduces the same way.
* ``reduce_bucket_elements``: DeepSpeed's ``reduce_bucket_size`` default, 5e8 elements, for
  ZeRO-1, 2 and 3: the size of the IPG reduce buffer(s) each rank allocates
  (:func:`zero_reduce_buffer_elements`). ``allgather_bucket_elements`` is 0: DeepSpeed
  all-gathers updated partitions straight into the flat parameter groups, no buffer of its own
  (deepspeedai/DeepSpeed edaa7221 ``deepspeed/runtime/utils.py`` ``all_gather_dp_groups``).
* ``native_tensor_parallel``, ``pp_unsharded_params``, ``fp32_grad_accum``: FSDP2 composes with
  DTensor TP (loss_parallel, ``PrepareModuleInput`` gathers), keeps parameters unsharded under
  pipeline parallelism (torchtitan ``reshard_after_forward=False``) and upcasts unsharded
  accumulated gradients to ``reduce_dtype`` (``FSDPParam.to_accumulated_grad_if_needed``).
"""

import functools
from typing import TYPE_CHECKING, Any, Optional, TypedDict

from fmest.hookspecs import hookimpl

if TYPE_CHECKING:
    from fmest.job import Parallelism
    from fmest.transforms import ShardingStrategy


class _FsdpFlags(TypedDict):
    """The :class:`ShardingStrategy` flags every FSDP strategy shares."""

    framework: str
    native_tensor_parallel: bool
    pp_unsharded_params: bool
    fp32_grad_accum: bool


class _ZeroFlags(TypedDict):
    """The :class:`ShardingStrategy` flags every DeepSpeed ZeRO strategy shares."""

    framework: str
    auto_precision: str


_ALL = frozenset({"optimizer", "gradients", "parameters"})
#: DeepSpeed ``reduce_bucket_size`` default, ``Field(pp_int(5e8))`` (deepspeedai/DeepSpeed
#: edaa7221 ``deepspeed/runtime/zero/config.py`` ``DeepSpeedZeroConfig.reduce_bucket_size``)
DEEPSPEED_BUCKET_ELEMENTS = 500_000_000
#: ``contiguous_gradients`` default True (same file, ``DeepSpeedZeroConfig``)
DEEPSPEED_CONTIGUOUS_GRADIENTS = True
_FSDP = _FsdpFlags(framework="fsdp", native_tensor_parallel=True, pp_unsharded_params=True,
                   fp32_grad_accum=True)
_ZERO = _ZeroFlags(framework="deepspeed", auto_precision="master")

@functools.lru_cache(maxsize=1)
def builtin_strategies() -> tuple["ShardingStrategy", ...]:
    """The built-in strategies, built on first use (loading the default plugins, as
    ``fmest --help`` does, builds nothing)."""
    from fmest.transforms import ShardingStrategy

    return (
        ShardingStrategy(name="zero0", aliases=("ddp", "none"), framework="ddp", ddp_bucket=True,
                         source="Li et al. 2020 (PyTorch DDP)"),
        ShardingStrategy(name="zero1", shards=frozenset({"optimizer"}),
                         reduce_bucket_elements=DEEPSPEED_BUCKET_ELEMENTS, **_ZERO,
                         source="Rajbhandari et al. 2020, ZeRO stage 1"),
        ShardingStrategy(name="zero2", shards=frozenset({"optimizer", "gradients"}),
                         grad_collective="reduce_scatter",
                         reduce_bucket_elements=DEEPSPEED_BUCKET_ELEMENTS, **_ZERO,
                         source="Rajbhandari et al. 2020, ZeRO stage 2"),
        ShardingStrategy(name="zero3", shards=_ALL, param_gather=True,
                         grad_collective="reduce_scatter",
                         reduce_bucket_elements=DEEPSPEED_BUCKET_ELEMENTS, **_ZERO,
                         source="Rajbhandari et al. 2020, ZeRO stage 3"),
        ShardingStrategy(name="fsdp_full_shard", aliases=("fsdp", "full_shard", "fsdp2"),
                         shards=_ALL, param_gather=True, grad_collective="reduce_scatter",
                         auto_precision="amp", **_FSDP,
                         source="Zhao et al. 2023, FSDP FULL_SHARD"),
        ShardingStrategy(name="fsdp_shard_grad_op", aliases=("shard_grad_op",),
                         shards=frozenset({"optimizer", "gradients", "parameters"}),
                         param_gather=False, grad_collective="reduce_scatter",
                         auto_precision="amp", **_FSDP,
                         source="Zhao et al. 2023, FSDP SHARD_GRAD_OP (parameters stay "
                                "unsharded between forward and backward)"),
        ShardingStrategy(name="fsdp_hybrid_shard", aliases=("hybrid_shard", "hsdp"), shards=_ALL,
                         hybrid=True, param_gather=True, grad_collective="reduce_scatter",
                         auto_precision="amp", **_FSDP,
                         source="Zhao et al. 2023, FSDP HYBRID_SHARD"),
        ShardingStrategy(name="fsdp_no_shard", aliases=("no_shard",), ddp_bucket=True, **_FSDP,
                         source="Zhao et al. 2023, FSDP NO_SHARD (= DDP)"),
    )


def zero_reduce_buffer_elements(strategy: "ShardingStrategy", parallelism: "Parallelism", *,
                                pipeline: bool, offload_optimizer: bool) -> int:
    """Elements of DeepSpeed's IPG gradient-reduce buffers on each rank (0 for a strategy
    without ``reduce_bucket_elements``), from the job's ``zero_*`` fields or DeepSpeed's
    defaults, as deepspeedai/DeepSpeed edaa7221 allocates them (whatever dp is: the ZeRO
    optimizer and its buffers exist on one rank too):

    * ZeRO-1/2 (``deepspeed/runtime/zero/stage_1_and_2.py`` ``setup_buckets``): with
      ``contiguous_gradients`` (forced on by optimizer offload: ``self.contiguous_gradients =
      contiguous_gradients or self.cpu_offload``), ``buf_0`` of ``reduce_bucket_size``
      elements in the optimizer's low-precision dtype, and ``buf_1`` of the same size when
      ``overlap_comm`` is on ("double buffers"), allocated at full size whatever the model's
      size. ``overlap_comm`` defaults to ``stage == 3`` (``deepspeed/runtime/zero/config.py``
      ``overlap_comm_valid``), so off here, and a ``PipelineModule`` turns it off
      (``deepspeed/runtime/engine.py`` ``_configure_zero_optimizer``).
    * ZeRO-3 (``deepspeed/runtime/zero/stage3.py`` ``_setup_for_real_optimizer``): one buffer
      of ``reduce_bucket_size`` elements in the communication dtype with
      ``contiguous_gradients``, whatever ``overlap_comm`` says. Gathered parameters are the
      memory plugin's gathered-layer term, not counted here.
    """
    size = strategy.reduce_bucket_elements
    if not size:
        return 0
    if parallelism.zero_reduce_bucket_elems is not None:
        size = parallelism.zero_reduce_bucket_elems
    contiguous = (DEEPSPEED_CONTIGUOUS_GRADIENTS if parallelism.zero_contiguous_gradients is None
                  else parallelism.zero_contiguous_gradients)
    stage3 = "parameters" in strategy.shards
    if stage3:
        return size if contiguous else 0
    if not (contiguous or offload_optimizer):
        return 0
    overlap = stage3 if parallelism.zero_overlap_comm is None else parallelism.zero_overlap_comm
    return size * (2 if overlap and not pipeline else 1)


def __getattr__(name: str) -> Any:
    if name == "BUILTIN_STRATEGIES":   # the table, as a module attribute (tests, docs)
        return builtin_strategies()
    raise AttributeError(name)


@hookimpl
def fmest_register_parallelism(register):
    for strategy in builtin_strategies():
        register(strategy)


#: DeepSpeed ZeRO-3 steps the optimizer one sub-group of at most ``sub_group_size`` partition
#: elements at a time; ``zero_optimization.sub_group_size`` defaults to 1e9
#: (``deepspeed/runtime/zero/config.py`` ``sub_group_size: int = Field(pp_int(1e9))``; a
#: sub-group closes once it reaches the size, ``stage3.py`` ``_create_fp16_sub_groups``),
#: deepspeedai/DeepSpeed edaa7221; Qwen's ``finetune/ds_config_zero3.json`` sets the same 1e9.
DEEPSPEED_SUB_GROUP_ELEMENTS = 1_000_000_000
FP32_BYTES = 4.0


def zero_step_grad_copy_rule(strategy: "ShardingStrategy", stack: Any,
                             grad_bytes: float, sub_group_elements: Optional[int] = None
                             ) -> tuple[float, float | None]:
    """(bytes per partition element, element cap or None) of the gradient copy DeepSpeed's
    ZeRO optimizers make at the step; (0, None) where there is none. One rule for the memory
    plugin (``fmest_memory_theory.estimator._zero_step_grad_copy``) and the planner's mirror.

    A strategy with DeepSpeed's reduce buckets that shards the optimizer (``stage_1_and_2.py``
    runs stages 1 and 2, ``stage3.py`` stage 3) flattens each group's (ZeRO-3: sub-group's,
    capped at ``sub_group_elements``, the job's ``parallelism.zero3_sub_group_elems``, else
    :data:`DEEPSPEED_SUB_GROUP_ELEMENTS`) gradient partition into a new
    ``grad_bytes`` buffer and casts it to a new fp32 tensor, both alive at the cast
    (``step``: ``self.flatten(self.averaged_gradients[i])`` then ``.to(fp32)``;
    ``_prepare_fp32_grad_for_sub_group``), deepspeedai/DeepSpeed edaa7221; fp32 gradients: the
    cast returns the flat buffer itself. None when the gradients already accumulate in the
    framework's flat fp32 buffer (a stack with ``contiguous_grad_buffer`` and fp32 gradients
    on unsharded gradients: Megatron's distributed optimizer, DeepSpeed's ``BF16_Optimizer``
    that fmest's deepspeed stack models for bf16 ZeRO-0/1)."""
    if not strategy.reduce_bucket_elements or "optimizer" not in strategy.shards:
        return 0.0, None
    if stack is not None and stack.profile.contiguous_grad_buffer \
            and "gradients" not in strategy.shards and grad_bytes == FP32_BYTES:
        return 0.0, None
    cap = float(sub_group_elements or DEEPSPEED_SUB_GROUP_ELEMENTS) \
        if "parameters" in strategy.shards else None
    return grad_bytes + (FP32_BYTES if grad_bytes != FP32_BYTES else 0.0), cap
