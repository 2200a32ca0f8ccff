"""The searches a report shows (fmest.searches): the affine guess of the largest micro-batch
and the A + B/n guess of the fewest GPUs give the exhaustive search's answer, and fall back to
it when memory is not affine."""

from __future__ import annotations

import pytest

from fmest import searches, to_job
from fmest.estimates import MemoryEstimate, Provenance
from fmest.hookspecs import hookimpl
from fmest.testing import new_engine

GIB = 1024**3
JOB = to_job({"model": "gpt2", "training": {"seq_len": 512},
           "hardware": {"gpu": "A100-80GB"}})


def _plugin(peak_gib, calls):
    class Mem:
        @hookimpl
        def fmest_register_estimators(self, register):
            register("analytic")

        @hookimpl
        def fmest_estimate_memory(self, job, ctx):
            calls.append(job.training.micro_batch_size)
            total = int(peak_gib(job.training.micro_batch_size, ctx.layout.world_size) * GIB)
            return MemoryEstimate(total_bytes=total, components={"weights": total},
                                  provenance=Provenance(plugin="", basis="analytic"))
    return Mem()


def _exhaustive(peak_gib, cap_gib=80, limit=4096):
    fitting = [b for b in range(1, limit + 1) if peak_gib(b, 1) <= cap_gib]
    return max(fitting) if fitting else 0


@pytest.mark.parametrize("peak_gib", [
    lambda b, n: 10 + 3 * b,                 # affine: the guess is right
    lambda b, n: 10 + 0.5 * b ** 1.5,        # not affine: the fallback finds it
    lambda b, n: 2 + 0.001 * b,              # everything up to the limit fits
    lambda b, n: 90 + b,                     # nothing fits
    lambda b, n: 10 + 3 * b + (b % 7 == 0) * 0.01,   # a small wobble
])
def test_max_micro_batch_is_the_exhaustive_answer(peak_gib):
    calls: list[int] = []
    eng = new_engine((_plugin(peak_gib, calls), "mem"))
    ctx = eng.context(JOB)
    assert searches.max_micro_batch(eng, JOB, ctx) == _exhaustive(peak_gib)


def test_an_affine_memory_costs_four_decisions():
    calls: list[int] = []
    eng = new_engine((_plugin(lambda b, n: 10 + 3 * b, calls), "mem"))
    assert searches.max_micro_batch(eng, JOB, eng.context(JOB)) == 23
    assert sorted(calls) == [1, 2, 23, 24]


def test_min_gpus_matches_a_scan_and_probes_few_counts():
    calls: list[int] = []
    # sharded state: 300 GiB spread over n GPUs plus 20 GiB that does not shrink
    eng = new_engine((_plugin(lambda b, n: 20 + 300 / n, calls), "mem"))
    job = JOB.evolve(parallelism={"zero_stage": 3}, hardware={"gpus_per_node": 8})
    found = searches.min_gpus(eng, job)
    assert found.gpus == 5          # 20 + 300/5 = 80 <= 80; 4 GPUs: 95
    assert found.fewer is not None and found.reason.startswith("fewest A100-80GB GPUs")
    assert len(calls) <= 5


def test_min_gpus_says_why_when_no_count_fits():
    calls: list[int] = []
    eng = new_engine((_plugin(lambda b, n: 81 + 1 / n, calls), "mem"))
    job = JOB.evolve(parallelism={"zero_stage": 3})
    found = searches.min_gpus(eng, job)
    assert found.gpus is None and "does not fit" in found.reason and "81." in found.reason


def test_runnable_counts_are_within_a_node_or_whole_nodes():
    for mp in (1, 2, 3, 4, 6, 8, 16):
        for gpn in (1, 2, 4, 8):
            most = 4096 // mp
            scan = [d for d in range(1, most + 1)
                    if d * mp <= gpn or (d * mp) % gpn == 0]
            assert searches._runnable_dp(mp, gpn, most) == scan


def test_min_gpus_under_expert_parallelism_searches_only_layouts_the_ep_rule_accepts():
    """Mixtral with ep 8 and tp 2: dp must be a multiple of 8, and 16 GPUs (dp 8) fit. Layouts
    the ep rule refuses are not candidates (counted as 'does not fit' they broke the search's
    order: it answered 4,080 GPUs)."""
    from fmest.engine import Engine

    engine = Engine()
    job = to_job({"model": "mistralai/Mixtral-8x7B-v0.1",
                  "training": {"seq_len": 4096, "stack": "megatron-core"},
                  "parallelism": {"tp": 2, "ep": 8, "distributed_optimizer": True},
                  "hardware": {"gpu": "H100-SXM", "gpus_per_node": 8, "nodes": 8}})
    found = searches.min_gpus(engine, engine.resolve_job(job))
    scan = next(n for n in (16, 32, 48, 64)
                if searches._fits_at(engine, searches._with_world(
                    engine.resolve_job(job), dp=n // 2, tp=2, pp=1, gpus_per_node=8))[0])
    assert found.gpus == scan == 16


@pytest.mark.parametrize("data", [
    {"model": "meta-llama/Llama-2-7b-hf", "training": {"seq_len": 4096, "micro_batch_size": 4},
     "parallelism": {"zero_stage": 3}, "hardware": {"gpu": "A100-80GB", "gpus_per_node": 8}},
    {"model": "mistralai/Mixtral-8x7B-v0.1", "parallelism": {"fsdp": "full_shard"},
     "hardware": {"gpu": "H100-SXM", "gpus_per_node": 8, "nodes": 2}},
    {"model": "meta-llama/Llama-3.1-70B", "training": {"activation_checkpointing": "full"},
     "parallelism": {"zero_stage": 3}, "hardware": {"gpu": "A100-80GB", "gpus_per_node": 8,
                                                    "nodes": 4}},
])
def test_the_reports_own_verdict_seeds_the_search_without_moving_it(data):
    from fmest.api import estimate_jobs
    from fmest.engine import Engine

    engine = Engine()
    report = estimate_jobs([(to_job(data), None)], engine=engine)
    assert report.min_gpus.gpus == searches.min_gpus(engine, report.job).gpus
