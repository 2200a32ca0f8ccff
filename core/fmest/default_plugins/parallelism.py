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
* ``reduce_bucket_elements``/``allgather_bucket_elements``: DeepSpeed ZeRO-1/2 defaults,
  ``reduce_bucket_size`` = ``allgather_bucket_size`` = 5e8 elements (DeepSpeed config docs).
* ``native_tensor_parallel``, ``pp_unsharded_params``, ``fp32_grad_accum``: FSDP2 composes with
  DTensor TP (loss_parallel, ``PrepareModuleInput`` gathers), keeps parameters unsharded under
  pipeline parallelism (torchtitan ``reshard_after_forward=False``) and upcasts unsharded
  accumulated gradients to ``reduce_dtype`` (``FSDPParam.to_accumulated_grad_if_needed``).
"""

import functools
from typing import TYPE_CHECKING, Any, TypedDict

from fmest.hookspecs import hookimpl

if TYPE_CHECKING:
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
#: DeepSpeed ``reduce_bucket_size`` / ``allgather_bucket_size`` defaults (DeepSpeed config docs)
DEEPSPEED_BUCKET_ELEMENTS = 500_000_000
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
                         reduce_bucket_elements=DEEPSPEED_BUCKET_ELEMENTS,
                         allgather_bucket_elements=DEEPSPEED_BUCKET_ELEMENTS, **_ZERO,
                         source="Rajbhandari et al. 2020, ZeRO stage 1"),
        ShardingStrategy(name="zero2", shards=frozenset({"optimizer", "gradients"}),
                         grad_collective="reduce_scatter",
                         reduce_bucket_elements=DEEPSPEED_BUCKET_ELEMENTS,
                         allgather_bucket_elements=DEEPSPEED_BUCKET_ELEMENTS, **_ZERO,
                         source="Rajbhandari et al. 2020, ZeRO stage 2"),
        ShardingStrategy(name="zero3", shards=_ALL, param_gather=True,
                         grad_collective="reduce_scatter", **_ZERO,
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


def __getattr__(name: str) -> Any:
    if name == "BUILTIN_STRATEGIES":   # the table, as a module attribute (tests, docs)
        return builtin_strategies()
    raise AttributeError(name)


@hookimpl
def fmest_register_parallelism(register):
    for strategy in builtin_strategies():
        register(strategy)
