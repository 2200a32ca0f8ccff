"""The search space of ``fmest plan`` and the rules that prune it.

A configuration is: GPU type x GPU count (whole instances) x tp x pp x cp x virtual pipeline
stages x sequence parallel x sharding strategy x optimizer offload x activation
checkpointing x micro-batch, with gradient accumulation fixed by the global batch
(``global samples = micro-batch x accum x dp``). The structural axes (everything but
sharding, offload, checkpointing and micro-batch) are enumerated in Python, a few hundred at
most per GPU type; the rest is a numpy cross product evaluated in one pass per GPU count.

Every rule that removes configurations has a name; the planner counts how many each removed
(``rejected`` in the JSON). Rules are applied in the order of :data:`RULES`; a configuration
is counted once, under the first rule it breaks.
"""

from __future__ import annotations

import math
from typing import Iterator, Optional

from attrs import frozen

#: Rejection reasons by key, in the order they are applied.
RULE = {
    "heads": "tp does not divide the attention heads",
    "tp_nodes": "tp spans nodes",
    "pp_layers": "more pipeline stages than layers",
    "vstages": "virtual stages do not divide the layers per stage",
    "cp_seq": "cp does not divide the sequence",
    "ep": "ep does not divide the experts or dp x cp",
    "batch": "global batch not divisible by micro-batch x dp",
    "pipeline_fill": "fewer micro-batches than pipeline stages x virtual stages "
                     "(the pipeline never fills)",
    "no_dp": "sharding without data parallelism (same as zero0)",
    "hybrid_node": "hybrid shard within one node (same as full shard)",
    "zero_pp": "ZeRO-2/3 with pipeline parallelism (DeepSpeed's pipeline engine runs ZeRO-1 "
               "only)",
    "offload": "optimizer offload needs a sharded optimizer",
    "refused": "refused by the engine's input rules (the probe job was refused)",
    "duplicate": "duplicate of an equivalent layout",
    "fit": "does not fit",
    "nodes": "over max nodes",
    "price": "no price for this GPU count",
    "budget": "over budget",
    "deadline": "over deadline",
}
RULES = tuple(RULE.values())

#: Counted, after the GPU's name, when the installed time estimators cannot time a GPU (no peak FLOP/s or HBM
#: bandwidth in its table row). A GPU the engine refuses the job on for a capability it lacks
#: is counted under its own reason instead ("V100-SXM2-32GB: no BF16 matrix units ...",
#: :func:`fmest.plan.planner.hardware_refusal`).
NO_TIME = ("no step time (its GPU table row lacks peak FLOP/s or bandwidth, or the engine "
           "refuses a timing probe on it)")

CHECKPOINTING = ("none", "selective", "full")
MICRO_BATCHES = (1, 2, 4, 8, 16, 32)
TP_DEGREES = (1, 2, 4, 8)
CP_DEGREES = (1, 2, 4, 8)
#: Context parallelism is searched only from this sequence length on: below it each rank
#: would attend over fewer than 4k tokens and the ring's exposed K,V traffic outweighs the
#: activation saving (torchtitan enables CP for long-context training, 32k-128k+).
CP_MIN_SEQ_LEN = 16384


@frozen(kw_only=True)
class Shape:
    """One structural layout: every parallel degree of a GPU count."""

    count: int
    gpus_per_node: int
    nodes: int
    tp: int
    pp: int
    cp: int
    dp: int
    ep: int
    vstages: int
    sp: bool


def divisors_pow2(limit: int) -> list[int]:
    out, d = [], 1
    while d <= limit:
        out.append(d)
        d *= 2
    return out


def pipeline_degrees(limit: int, layers: int) -> list[int]:
    """Pipeline sizes to try for ``limit`` GPUs per tensor-parallel group: powers of two, and
    any divisor of ``limit`` that splits the layers evenly (Megatron's GPT-3 175B layout uses 12
    stages of 8 layers; Narayanan et al. 2021, Table 2)."""
    out = set(divisors_pow2(limit))
    out.update(d for d in range(3, min(limit, layers) + 1) if limit % d == 0 and layers % d == 0)
    return sorted(out)


def gpu_counts(instance_sizes: list[int], max_gpus: int) -> list[int]:
    """GPU counts in whole instances up to ``max_gpus``: every multiple of an instance size,
    thinned to powers of two and three-times-powers-of-two multiples when there are many."""
    counts: set[int] = set()
    for size in instance_sizes:
        k_max = max_gpus // size
        if k_max <= 32:
            counts.update(size * k for k in range(1, k_max + 1))
        else:
            k = 1
            while k <= k_max:
                counts.add(size * k)
                if 3 * k <= k_max and k >= 1:
                    counts.add(size * 3 * k)
                k *= 2
    return sorted(c for c in counts if c <= max_gpus)


def shapes(count: int, *, gpus_per_node: int, heads: int, kv_heads: int, layers: int,
           seq_len: int, rejected: dict, inner: int, experts: int = 0) -> Iterator[Shape]:
    """The valid layouts of ``count`` GPUs; invalid ones are counted in ``rejected`` times
    ``inner`` (the configurations each structural layout stands for)."""
    gpn = min(count, gpus_per_node)
    nodes = max(1, math.ceil(count / gpn))
    cps = [c for c in CP_DEGREES if c == 1 or seq_len >= CP_MIN_SEQ_LEN]

    def reject(rule: str, n: int = 1) -> None:
        rejected[rule] = rejected.get(rule, 0) + n * inner

    for tp in TP_DEGREES:
        if tp > count:
            break
        for pp in pipeline_degrees(count // tp, layers):
            for cp in cps:
                if count % (tp * pp * cp):
                    continue
                dp = count // (tp * pp * cp)
                for ep, vstages, sp in _inner_shape_axes(experts, dp * cp, tp, pp):
                    rule = _broken_rule(tp=tp, pp=pp, cp=cp, ep=ep, dp=dp, vstages=vstages,
                                        gpn=gpn, heads=heads, kv_heads=kv_heads, layers=layers,
                                        seq_len=seq_len, experts=experts)
                    if rule is not None:
                        reject(rule)
                    else:
                        yield Shape(count=count, gpus_per_node=gpn, nodes=nodes, tp=tp,
                                    pp=pp, cp=cp, dp=dp, ep=ep, vstages=vstages, sp=sp)


def _broken_rule(*, tp, pp, cp, ep, dp, vstages, gpn, heads, kv_heads, layers, seq_len,
                 experts) -> Optional[str]:
    """The first structural rule a layout breaks (None when it is valid)."""
    if heads % tp or (kv_heads % tp and tp % kv_heads):
        return RULE["heads"]
    if tp > gpn:
        return RULE["tp_nodes"]
    if pp > layers:
        return RULE["pp_layers"]
    if vstages > 1 and layers % (pp * vstages):
        return RULE["vstages"]
    if seq_len % cp:
        return RULE["cp_seq"]
    if ep > 1 and (experts % ep or (dp * cp) % ep):
        return RULE["ep"]
    return None


def _inner_shape_axes(experts: int, data_ranks: int, tp: int, pp: int):
    """(ep, virtual stages, sequence parallel) combinations of one tp x pp x cp layout: ep
    only for mixture-of-experts models (powers of two up to the experts and the data ranks),
    virtual stages with pipeline parallelism, sequence parallelism with tensor parallelism."""
    eps = [1] + ([e for e in divisors_pow2(min(experts, data_ranks)) if e > 1]
                 if experts > 1 else [])
    for ep in eps:
        for vstages in ((1, 2) if pp > 1 else (1,)):
            for sp in ((False, True) if tp > 1 else (False,)):
                yield ep, vstages, sp


def global_samples(global_batch_tokens: Optional[float], seq_len: int) -> int:
    """Samples per optimizer step for a global batch of tokens (at least one)."""
    return max(1, int(round((global_batch_tokens or seq_len) / seq_len)))
