"""Registers the built-in data-parallel sharding strategies (the parallelism transform).

Sources: Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
Parameter Models" (stages 1-3 partition optimizer states, + gradients, + parameters);
Zhao et al. 2023, "PyTorch FSDP" (FULL_SHARD = ZeRO-3, SHARD_GRAD_OP = ZeRO-2, NO_SHARD = DDP,
HYBRID_SHARD shards within a node and replicates across nodes); PyTorch DDP (Li et al. 2020).
"""

from fmest.hookspecs import hookimpl
from fmest.transforms import ShardingStrategy

_ALL = frozenset({"optimizer", "gradients", "parameters"})

BUILTIN_STRATEGIES = (
    ShardingStrategy(name="zero0", aliases=("ddp", "none"), framework="ddp",
                     source="Li et al. 2020 (PyTorch DDP)"),
    ShardingStrategy(name="zero1", shards=frozenset({"optimizer"}), framework="deepspeed",
                     source="Rajbhandari et al. 2020, ZeRO stage 1"),
    ShardingStrategy(name="zero2", shards=frozenset({"optimizer", "gradients"}),
                     grad_collective="reduce_scatter", framework="deepspeed",
                     source="Rajbhandari et al. 2020, ZeRO stage 2"),
    ShardingStrategy(name="zero3", shards=_ALL, param_gather=True,
                     grad_collective="reduce_scatter", framework="deepspeed",
                     source="Rajbhandari et al. 2020, ZeRO stage 3"),
    ShardingStrategy(name="fsdp_full_shard", aliases=("fsdp", "full_shard", "fsdp2"),
                     shards=_ALL, param_gather=True, grad_collective="reduce_scatter",
                     framework="fsdp", source="Zhao et al. 2023, FSDP FULL_SHARD"),
    ShardingStrategy(name="fsdp_shard_grad_op", aliases=("shard_grad_op",),
                     shards=frozenset({"optimizer", "gradients", "parameters"}),
                     param_gather=False, grad_collective="reduce_scatter", framework="fsdp",
                     source="Zhao et al. 2023, FSDP SHARD_GRAD_OP (parameters stay "
                            "unsharded between forward and backward)"),
    ShardingStrategy(name="fsdp_hybrid_shard", aliases=("hybrid_shard", "hsdp"), shards=_ALL,
                     hybrid=True, param_gather=True, grad_collective="reduce_scatter",
                     framework="fsdp", source="Zhao et al. 2023, FSDP HYBRID_SHARD"),
    ShardingStrategy(name="fsdp_no_shard", aliases=("no_shard",), framework="fsdp",
                     source="Zhao et al. 2023, FSDP NO_SHARD (= DDP)"),
)


@hookimpl
def fmest_register_parallelism(register):
    for strategy in BUILTIN_STRATEGIES:
        register(strategy)
