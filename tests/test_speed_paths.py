"""The shortcuts a report's searches take (issue 20/27 speed work) give the answers the
straightforward path gives: the fewest-GPU search reading the report's own context instead of
resolving the job again, and the fit advice judging the report's answer once (shared by its
"does it fit" test and the larger-GPU filter). No timing is asserted here (timings are
measured by benchmarks/speed.py, never tested)."""

from __future__ import annotations

import attrs
import pytest

import fmest
from fmest import fit_advice, searches
from fmest.api import estimate_jobs, with_searches
from fmest.engine import Engine, usable_memory_bytes

#: jobs that do not fit (advice with several groups, one through the combined change), one
#: that fits, and the three jobs of benchmarks/speed.py
JOBS = {
    "7b-zero3-x8": {"model": "meta-llama/Llama-2-7b-hf",
                    "training": {"seq_len": 4096, "micro_batch_size": 4},
                    "parallelism": {"zero_stage": 3},
                    "hardware": {"gpu": "A100-80GB", "gpus_per_node": 8}},
    "70b-qlora": {"model": "meta-llama/Llama-3.1-70B",
                  "training": {"technique": "qlora", "seq_len": 2048,
                               "activation_checkpointing": "full"},
                  "hardware": {"gpu": "H100-SXM"}},
    "mixtral-fsdp-x16": {"model": "mistralai/Mixtral-8x7B-v0.1",
                         "parallelism": {"fsdp": "full_shard"},
                         "hardware": {"gpu": "H100-SXM", "gpus_per_node": 8, "nodes": 2}},
    "7b-ddp-a100-40": {"model": "meta-llama/Llama-2-7b-hf",
                       "training": {"seq_len": 8192, "micro_batch_size": 16},
                       "hardware": {"gpu": "A100-40GB", "gpus_per_node": 4}},
    "8b-l4-hybrid": {"model": "meta-llama/Llama-3.1-8B",
                     "training": {"seq_len": 4096, "micro_batch_size": 2},
                     "parallelism": {"fsdp": "hybrid_shard"},
                     "hardware": {"gpu": "L4", "gpus_per_node": 2}},
    "gpt2-fits": {"model": "gpt2", "training": {"seq_len": 1024, "micro_batch_size": 2},
                  "hardware": {"gpu": "A100-80GB"}},
}


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine()


@pytest.mark.parametrize("name", sorted(JOBS))
def test_min_gpus_with_the_reports_context_is_the_plain_search(engine, name):
    report = engine.estimate(fmest.to_job(JOBS[name]))
    known = (report.context.layout, searches.judge(
        report.job, report.memory, usable_memory_bytes(report.job, report.context)))
    shared = searches.min_gpus(engine, report.job, known=known, ctx=report.context)
    plain = searches.min_gpus(engine, report.job, known=known)
    fresh = searches.min_gpus(engine, report.job)
    assert shared == plain
    assert shared[:4] == fresh[:4] and shared[5:] == fresh[5:]     # jobs equal by value


@pytest.mark.parametrize("name", sorted(JOBS))
def test_advice_with_the_report_judged_once_is_the_plain_advice(engine, name, monkeypatch):
    report = estimate_jobs([(fmest.to_job(JOBS[name]), None)], engine=engine)
    fast = report.to_make_it_fit
    # the straightforward path: every step judges the report's answer itself
    plain_groups = fit_advice._groups
    monkeypatch.setattr(fit_advice, "_groups",
                        lambda eng, rep, judged=None: plain_groups(eng, rep))
    base = attrs.evolve(report, to_make_it_fit=None)
    plain = fit_advice.to_make_it_fit(engine, base)
    assert fast == plain
    if name == "gpt2-fits":
        assert fast == []
    elif name in ("7b-zero3-x8", "mixtral-fsdp-x16"):
        assert fast, "a job that does not fit gets advice"


def test_report_searches_match_each_search_run_alone(engine):
    """with_searches' shortcuts (the report's context and verdict handed to the searches)
    give what each search gives on its own."""
    for name in ("7b-zero3-x8", "mixtral-fsdp-x16"):
        job = fmest.to_job(JOBS[name])
        bare = engine.estimate(job)
        full = with_searches(bare, engine)
        assert full.min_gpus == searches.min_gpus(engine, bare.job) or \
            full.min_gpus.gpus == searches.min_gpus(engine, bare.job).gpus
        assert full.max_micro_batch == searches.max_micro_batch(engine, bare.job, bare.context)
        only_searches = with_searches(bare, engine, ("max_micro_batch", "min_gpus"))
        assert full.to_make_it_fit == fit_advice.to_make_it_fit(engine, only_searches)
