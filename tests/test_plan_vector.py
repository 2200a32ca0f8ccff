"""The planner's array formulas against the full engine (issue 17: VALIDATE).

Forty configurations drawn at random from the feasible space of each case are re-estimated by
the engine with the theory policy; the vectorized per-GPU memory and step time must agree.
Tolerances: median |error| <= 10 % (memory) and <= 5 % (time), 90th percentile <= 25 % and
<= 10 %. Measured (seed 0, at the commit that added this test): Llama-3.1-8B s2048 on
H100/A100 up to 16 GPUs memory median 4.8 %, time median 1.0 % (max 2.2 %); Llama-2-70B s4096
on H100 up to 64 GPUs memory median 3.3 %, time median 0.5 % (max 1.1 %). The plans the
planner prints carry the engine's numbers; these formulas only rank candidates.
"""

from __future__ import annotations

import numpy as np
import pytest

from fmest.plan.planner import Constraints, config_job, evaluate_space
from fmest.testing import new_engine

CASES = [
    ({"model": "meta-llama/Llama-3.1-8B", "workload": {"dataset_tokens": 1e9}},
     dict(gpus="H100-SXM,A100-80GB", max_gpus=16)),
    ({"model": "meta-llama/Llama-2-70b-hf", "training": {"seq_len": 4096},
      "workload": {"dataset_tokens": 1e9}}, dict(gpus="H100-SXM", max_gpus=64)),
]


@pytest.fixture(scope="module")
def engine():
    return new_engine(entrypoints=True)


@pytest.mark.parametrize("job_dict,cons", CASES, ids=["llama3.1-8b", "llama2-70b"])
def test_vectorized_agrees_with_engine(engine, job_dict, cons):
    from fmest import to_job

    job = to_job(job_dict)
    res, evaluated, _, _, ctx = evaluate_space(job, Constraints(**cons, objective="time"),
                                               engine=engine)
    n = len(res["mb"])
    assert evaluated > n > 40
    pick = np.random.default_rng(0).choice(n, size=40, replace=False)
    mem_err, time_err = [], []
    for i in pick:
        j = config_job(job, res, int(i), ctx["shardings"], method="theory")
        report = engine.estimate(j, quantities=("memory", "time"), search_batch=False)
        mem_err.append(abs(res["memory"][i] / report.memory.total_bytes - 1))
        time_err.append(abs(res["step"][i] / report.time.step_seconds - 1))
    assert np.median(mem_err) <= 0.10 and np.percentile(mem_err, 90) <= 0.25, mem_err
    assert np.median(time_err) <= 0.05 and np.percentile(time_err, 90) <= 0.10, time_err
