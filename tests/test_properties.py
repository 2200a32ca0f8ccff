"""Properties over examples (hypothesis): the job round-trips through plain data, a policy's
choice does not depend on the order answers arrive in, and cost never falls as time grows."""

from __future__ import annotations

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from fmest.convert import job_from_dict, job_to_dict
from fmest.estimates import BASES, MemoryEstimate, Provenance, TimeEstimate
from fmest.job import (
    ATTENTIONS,
    CHECKPOINTING,
    CPU_OFFLOAD,
    DTYPES,
    FSDP_STRATEGIES,
    LOSSES,
    PRECISIONS,
    PRICE_TYPES,
    TECHNIQUES,
    Hardware,
    Job,
    Options,
    Parallelism,
    Pricing,
    Training,
    Workload,
)
from fmest.policies import builtin_policies

SETTINGS = settings(max_examples=60, deadline=None)
positive = st.integers(min_value=1, max_value=64)
names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12)
fraction = st.floats(min_value=0.01, max_value=1.0, allow_nan=False)

training = st.builds(
    Training, dtype=st.sampled_from(DTYPES), precision=st.sampled_from(PRECISIONS),
    technique=st.sampled_from(TECHNIQUES), lora_rank=positive,
    lora_alpha=st.floats(min_value=0.5, max_value=256, allow_nan=False),
    lora_target_modules=st.lists(names, min_size=1, max_size=4).map(tuple),
    seq_len=st.integers(min_value=1, max_value=1 << 17), micro_batch_size=positive,
    grad_accum_steps=positive, activation_checkpointing=st.sampled_from(CHECKPOINTING),
    attention=st.sampled_from(ATTENTIONS), loss=st.sampled_from(LOSSES),
    activation_offload=st.booleans(), compile=st.booleans(), optimizer=names)
parallelism = st.builds(
    Parallelism, dp=st.none() | positive, tp=positive, pp=positive, cp=positive, ep=positive,
    sequence_parallel=st.booleans(), zero_stage=st.sampled_from((0, 1, 2, 3)),
    fsdp=st.sampled_from(FSDP_STRATEGIES), cpu_offload=st.sampled_from(CPU_OFFLOAD),
    hsdp_shard_size=st.none() | positive)
jobs = st.builds(
    Job, model=names, training=training, parallelism=parallelism,
    hardware=st.builds(Hardware, gpu=names, gpus_per_node=st.none() | positive, nodes=positive),
    workload=st.builds(Workload, dataset_tokens=st.none() | st.floats(
        min_value=1, max_value=1e13, allow_nan=False), epochs=st.floats(
        min_value=0.1, max_value=10, allow_nan=False), max_steps=st.none() | positive),
    pricing=st.builds(Pricing, provider=st.none() | names, price_type=st.sampled_from(
        PRICE_TYPES), price_per_gpu_hour=st.none() | st.floats(min_value=0.01, max_value=100,
                                                                allow_nan=False)),
    options=st.builds(Options, method=names, mfu=st.none() | fraction),
    model_config=st.none() | st.dictionaries(names, st.integers(), max_size=3))


@SETTINGS
@given(jobs)
def test_job_round_trips_through_plain_data(job):
    assert job_from_dict(job_to_dict(job)) == job


def _answer(basis: str, plugin: str, gib: int, in_domain) -> MemoryEstimate:
    return MemoryEstimate(total_bytes=gib << 30, components={"weights": gib << 30},
                          provenance=Provenance(basis=basis, plugin=plugin,
                                                in_domain=in_domain))


answers = st.lists(
    st.builds(_answer, st.sampled_from(BASES), st.sampled_from(("a", "b", "c", "d")),
              st.integers(min_value=1, max_value=99), st.sampled_from((None, True, False))),
    min_size=0, max_size=6, unique_by=lambda a: (a.provenance.plugin, a.provenance.basis))


@SETTINGS
@given(answers, st.randoms(use_true_random=False))
def test_policies_do_not_depend_on_answer_order(cands, rnd):
    shuffled = list(cands)
    rnd.shuffle(shuffled)
    for policy in builtin_policies():
        first, second = policy.choose("memory", cands), policy.choose("memory", shuffled)
        assert first.chosen == second.chosen and first.rule == second.rule


@SETTINGS
@given(st.floats(min_value=1.0, max_value=1e7, allow_nan=False),
       st.floats(min_value=1.0, max_value=10.0, allow_nan=False),
       st.sampled_from(("on_demand", "spot")))
def test_cost_never_falls_as_time_grows(total_seconds, factor, price_type):
    import fmest_cost_cloud.plugin as cost_cloud
    from fmest.testing import new_engine
    from fmest_cost_cloud.cost import estimate_cost

    engine = _ENGINE.get("e") or _ENGINE.setdefault("e", new_engine((cost_cloud, "cost_cloud")))
    job = Job(model="llama-2-7b", hardware=Hardware(gpu="H100-SXM", gpus_per_node=8),
              pricing=Pricing(price_type=price_type))
    ctx = _CTX.get(price_type) or _CTX.setdefault(price_type, engine.context(job))
    shorter = TimeEstimate(step_seconds=1.0, breakdown={"compute": 1.0}, total_seconds=total_seconds,
                           provenance=Provenance(basis="analytic"))
    longer = attrs.evolve(shorter, total_seconds=total_seconds * factor)
    low, high = estimate_cost(job, ctx, shorter), estimate_cost(job, ctx, longer)
    assert low is not None and high is not None
    assert high.usd >= low.usd > 0
    assert high.usd_per_hour == low.usd_per_hour


_ENGINE: dict = {}
_CTX: dict = {}
