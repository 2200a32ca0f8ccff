"""``fmest plan`` and ``memory.min_gpus`` (issue 17): the done-when cases, constraints,
pruning counts, output formats, and that every plan's job reproduces with ``fmest estimate -f``.
"""

from __future__ import annotations

import csv
import io
import json

import pytest

import fmest
from fmest.cli import main
from fmest.engine import Engine
from fmest.errors import InputError
from fmest.plan import Constraints, plan
from fmest.searches import min_gpus
from fmest.testing import new_pm

DONE_WHEN = ["plan", "--model", "meta-llama/Llama-3.1-8B", "--dataset-tokens", "1e9",
             "--gpus", "H100-SXM,A100-80GB", "--max-gpus", "16", "--objective", "cost",
             "--format", "json"]


@pytest.fixture(scope="module")
def engine():
    """The installed estimators plus the plan command (registered by the default plugin when
    the core wires it; added here otherwise)."""
    from fmest.default_plugins import plan as plan_plugin
    from fmest.engine import Engine

    pm = new_pm(entrypoints=True)
    if not pm.has_plugin("plan") and not pm.is_registered(plan_plugin):
        pm.register(plan_plugin, name="plan")
    return Engine(pm)


def _run(engine, argv, capsys) -> tuple[int, str, str]:
    rc = main(argv, engine=engine)
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture(scope="module")
def done_when(engine):
    import contextlib

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(DONE_WHEN, engine=engine)
    assert rc == 0
    return json.loads(buf.getvalue())


def test_done_when_plans_fit_and_the_first_is_cheapest(done_when):
    plans = done_when["plans"]
    assert plans, done_when["rejected"]
    for p in plans:
        assert p["memory_bytes"] <= p["gpu_memory_bytes"]
        assert p["headroom_bytes"] >= 0
        assert p["gpu"] in ("H100-SXM-80GB", "A100-SXM-80GB") or p["gpu"].startswith(
            ("H100", "A100"))
        assert p["gpus"] <= 16
        assert p["usd"] is not None
    assert all(plans[0]["usd"] <= p["usd"] for p in plans[1:])
    assert done_when["configs_per_second"] > 0
    assert done_when["evaluated"] >= 10_000
    assert done_when["rejected"]["does not fit"] > 0
    assert isinstance(done_when["plans"][0]["pareto"], bool)


def test_every_plan_reproduces_with_estimate_f(done_when, engine, tmp_path, capsys):
    for p in done_when["plans"][:3]:
        path = tmp_path / "job.json"
        path.write_text(json.dumps(p["job"]))
        rc, out, err = _run(engine, ["estimate", "-f", str(path), "--format", "json"], capsys)
        assert rc == 0, err
        got = json.loads(out)
        got = got["jobs"][0] if "jobs" in got else got
        assert got["memory"]["total_bytes"] == p["memory_bytes"]
        assert got["memory"]["fits"] is True
        assert got["time"]["step_seconds"] == pytest.approx(p["step_seconds"], rel=1e-9)
        assert got["cost"]["usd"] == pytest.approx(p["usd"], rel=1e-9)


def test_time_objective_puts_the_fastest_first(engine):
    job = _job("meta-llama/Llama-3.1-8B", dataset_tokens=1e9)
    res = plan(job, Constraints(gpus="H100-SXM", max_gpus=16, objective="time", top=5),
               engine=engine)
    secs = [p.total_seconds for p in res.plans]
    assert secs and secs[0] == min(secs)


def test_pareto_plans_are_not_dominated(engine):
    job = _job("meta-llama/Llama-3.1-8B", dataset_tokens=1e9)
    res = plan(job, Constraints(gpus="H100-SXM,A100-80GB", max_gpus=32, top=8), engine=engine)
    front = [p for p in res.plans if p.pareto]
    assert front
    for p in front:
        assert not any(q.usd <= p.usd and q.total_seconds <= p.total_seconds
                       and (q.usd < p.usd or q.total_seconds < p.total_seconds)
                       for q in res.plans)
    # the front comes first
    assert [p.pareto for p in res.plans] == sorted((p.pareto for p in res.plans), reverse=True)


def test_budget_and_deadline_prune_with_a_reason(engine):
    job = _job("meta-llama/Llama-3.1-8B", dataset_tokens=1e9)
    res = plan(job, Constraints(gpus="H100-SXM", max_gpus=16, objective="cost",
                                budget_usd=1.0), engine=engine)
    assert res.plans == ()
    assert res.rejected["over budget"] > 0
    res = plan(job, Constraints(gpus="H100-SXM", max_gpus=16, objective="cost",
                                deadline_hours=2.5), engine=engine)
    assert res.rejected["over deadline"] > 0
    assert res.plans and all(p.total_seconds <= 2.5 * 3600 for p in res.plans)


def test_heads_rule_is_counted(engine):
    # GPT-2 has 12 heads: tp = 8 divides none of them
    job = _job("gpt2", dataset_tokens=1e8)
    res = plan(job, Constraints(gpus="A100-80GB", max_gpus=8, objective="cost", top=3),
               engine=engine)
    assert res.rejected["tp does not divide the attention heads"] > 0
    assert all(p.job.parallelism.tp != 8 for p in res.plans)


def test_global_batch_is_kept(engine):
    job = _job("meta-llama/Llama-3.1-8B", dataset_tokens=1e9)
    res = plan(job, Constraints(gpus="H100-SXM", max_gpus=16, objective="cost",
                                global_batch_tokens=2**19, top=5), engine=engine)
    assert res.global_batch_tokens == 2**19
    for p in res.plans:
        tr, par = p.job.training, p.job.parallelism
        assert tr.micro_batch_size * tr.grad_accum_steps * par.dp * tr.seq_len == 2**19


def test_bad_constraints_name_the_flag():
    with pytest.raises(InputError, match="--max-gpus"):
        Constraints(max_gpus=0)
    with pytest.raises(InputError, match="--objective"):
        Constraints(objective="fastest")


def test_unknown_gpu_names_the_field(engine):
    with pytest.raises(InputError):
        plan(_job("meta-llama/Llama-3.1-8B"), Constraints(gpus="H1000"), engine=engine)


def test_csv_export_and_table(engine, tmp_path, capsys):
    argv = ["plan", "--model", "meta-llama/Llama-3.2-1B", "--dataset-tokens", "1e8",
            "--gpus", "A100-80GB", "--max-gpus", "8", "--objective", "cost", "--top", "3"]
    rc, out, err = _run(engine, argv + ["--format", "csv", "--export", "deepspeed",
                                        "--export-dir", str(tmp_path / "exp")], capsys)
    assert rc == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert 1 <= len(rows) <= 3 and rows[0]["rank"] == "1"
    assert list((tmp_path / "exp").iterdir())
    rc, out, err = _run(engine, argv, capsys)
    assert rc == 0 and "GPU x n" in out and "configurations in" in out


def test_plot_writes_a_file_or_says_why(engine, tmp_path, capsys):
    argv = ["plan", "--model", "meta-llama/Llama-3.2-1B", "--dataset-tokens", "1e8",
            "--gpus", "A100-80GB", "--max-gpus", "8", "--top", "3", "--format", "json",
            "--plot", str(tmp_path / "front.png")]
    rc, out, err = _run(engine, argv, capsys)
    assert rc == 0
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "needs matplotlib" in err
    else:
        assert (tmp_path / "front.png").stat().st_size > 0


# ---------------------------------------------------------------------------------------------
# memory.min_gpus
# ---------------------------------------------------------------------------------------------

def _job(model, **workload):
    from fmest import to_job

    return to_job({"model": model, "workload": workload} if workload else {"model": model})


def _fits(engine, job) -> bool:
    """Fits as min_gpus judges it: P(fit) >= the job's options.fit_confidence (0.9) from the
    report's answer and its interval, the point verdict without one."""
    from fmest.output.report import fit_probability

    report = engine.estimate(job, quantities=("memory",))
    p = fit_probability(report)
    return bool(report.fits) if p is None else p >= job.options.fit_confidence


def test_min_gpus_zero3_fits_and_one_step_fewer_does_not(engine):
    from fmest import to_job

    # full checkpointing: without it the activations alone keep P(fit) below 0.9 at any count
    job = to_job({"model": "meta-llama/Llama-2-70b-hf", "hardware": {"gpu": "A100-80GB"},
                  "training": {"seq_len": 4096, "activation_checkpointing": "full"},
                  "parallelism": {"zero_stage": 3}})
    found = min_gpus(engine, job)
    assert found.gpus is not None and found.gpus > 8
    assert _fits(engine, found.job)
    assert found.fewer is not None and not _fits(engine, found.fewer)


def test_min_gpus_keeps_the_tp_pp_ratio(engine):
    from fmest import to_job

    job = to_job({"model": "meta-llama/Llama-2-70b-hf", "hardware": {"gpu": "A100-80GB"},
                  "parallelism": {"tp": 1, "pp": 2}})
    found = min_gpus(engine, job)
    par = found.job.parallelism
    assert par.pp == 2 * par.tp
    assert _fits(engine, found.job) and not _fits(engine, found.fewer)


def test_min_gpus_is_null_with_a_reason_for_unsharded_replicas(engine):
    from fmest import to_job

    found = min_gpus(engine, to_job({"model": "meta-llama/Llama-2-70b-hf",
                                     "hardware": {"gpu": "A100-80GB"}}))
    assert found.gpus is None and "replica" in found.reason


def test_estimate_json_has_min_gpus(engine, capsys):
    argv = ["estimate", "--model", "meta-llama/Llama-2-70b-hf", "--gpu", "A100-80GB", "--zero",
            "3", "--seq-len", "4096", "--grad-checkpoint", "full", "--format", "json",
            "--fit-confidence", "0.9"]
    rc, out, err = _run(engine, argv, capsys)
    assert rc == 0, err
    mem = json.loads(out)["memory"]
    assert "min_gpus" in mem, "memory.min_gpus is not wired into the report yet"
    n = mem["min_gpus"]
    assert isinstance(n, int) and mem["min_gpus_reason"]
    # min_gpus is the fewest GPUs (any count; past one node, the fewest even nodes: 18 GPUs
    # are 3 nodes of 6), judged at P(fit) >= 0.9 (--fit-confidence); the next smaller count
    # that splits evenly over its fewest nodes (the only counts the search considers,
    # fmest.searches._even_on_fewest_nodes) does not
    from fmest.searches import _even_on_fewest_nodes, node_split

    smaller = max(c for c in range(1, n) if _even_on_fewest_nodes(c, 8))
    for count, fits in ((n, True), (smaller, False)):
        gpn, nodes = node_split(count, 8)
        rc, out, _ = _run(engine, [*argv, "--gpus-per-node", str(gpn), "--nodes", str(nodes)],
                          capsys)
        assert (json.loads(out)["memory"]["fits_probability"] >= 0.9) is fits


def test_plan_reads_an_estimate_input_file(engine, tmp_path, capsys):
    import re as _re
    from pathlib import Path

    text = (Path(__file__).parent / "data" / "adr_estimate_input_example.jsonc").read_text()
    path = tmp_path / "input.json"
    path.write_text(_re.sub(r"//[^\n]*", "", text).replace("False", "false"))
    rc, out, err = _run(engine, ["plan", "-f", str(path), "--gpus", "A100-80GB", "--max-gpus",
                                 "8", "--top", "2", "--format", "json"], capsys)
    assert rc == 0, err
    got = json.loads(out)
    assert got["plans"] and all(p["job"]["model"] == got["plans"][0]["job"]["model"]
                                for p in got["plans"])
    assert got["plans"][0]["job"]["training"]["dtype"] == "fp32"   # the example's torch_dtype


def test_refine_uses_the_jobs_method_for_the_best_k(engine):
    from fmest import to_job

    job = to_job({"model": "meta-llama/Llama-3.2-1B", "workload": {"dataset_tokens": 1e8},
                  "options": {"method": "learned"}})
    cons = dict(gpus="A100-80GB", max_gpus=8, objective="cost", top=1)
    refined = plan(job, Constraints(**cons, refine=100), engine=engine)
    plain = plan(job, Constraints(**cons), engine=engine)
    assert refined.plans and {p.method for p in refined.plans} == {"learned"}
    assert plain.plans and {p.method for p in plain.plans} == {"theory"}
    # the refined plan's job keeps the job's method, so fmest estimate -f reproduces it
    assert refined.plans[0].job.options.method == "learned"


def test_pareto_layers_property():
    import numpy as np
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from fmest.plan.planner import pareto_layers, pareto_mask

    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 20)), min_size=1,
                    max_size=30))
    def check(points):
        cost = np.array([p[0] for p in points], dtype=float)
        secs = np.array([p[1] for p in points], dtype=float)
        front = pareto_mask(cost, secs)

        def dominated(i):
            return any(cost[j] <= cost[i] and secs[j] <= secs[i]
                       and (cost[j] < cost[i] or secs[j] < secs[i]) for j in range(len(points)))

        for i in range(len(points)):
            assert front[i] != dominated(i) or (not front[i] and any(
                cost[j] == cost[i] and secs[j] == secs[i] and front[j]
                for j in range(len(points))))
        layers = pareto_layers(cost, secs)
        assert (layers >= 0).all() and ((layers == 0) == front).all()

    check()


def test_a_registered_strategy_is_searched_by_its_behaviour():
    """A third party's strategy (registered through the hook, named by
    ``parallelism.sharding``) is planned with the sharding it declares."""
    import attrs

    from fmest import to_job
    from fmest.engine import Engine
    from fmest.hookspecs import hookimpl
    from fmest.plan.planner import config_job, evaluate_space

    class Acme:
        @hookimpl
        def fmest_register_parallelism(self, register):
            zero3 = Engine(new_pm()).registries.parallelism.get("zero3")
            # a behaviour of its own (a copy of zero3 is the same job: a duplicate)
            register(attrs.evolve(zero3, name="acme_shard", aliases=(), framework="acme",
                                  backward_prefetch=False))

    eng = Engine(new_pm((Acme(), "acme"), entrypoints=True))
    job = to_job({"model": "meta-llama/Llama-3.1-8B", "workload": {"dataset_tokens": 1e9}})
    res, _, _, _, ctx = evaluate_space(job, Constraints(gpus="H100-SXM", max_gpus=8,
                                                        objective="time"), engine=eng)
    names = [name for name, _ in ctx["shardings"]]
    rows = [i for i in range(len(res["mb"])) if names[int(res["hidx"][i])] == "acme_shard"]
    assert rows
    j = config_job(job, res, rows[0], ctx["shardings"], method="theory")
    assert j.parallelism.sharding == "acme_shard"
    report = eng.estimate(j)
    assert report.fits and report.context.sharding.name == "acme_shard"
    assert res["memory"][rows[0]] == pytest.approx(report.memory.total_bytes, rel=0.15)


# -- a GPU that cannot run the job is skipped with its reason (not a failed plan) ----------

def test_gpus_lacking_a_capability_are_rejected_by_name(engine):
    """The default search (every priced GPU) meets V100s, which have no bf16 units: they are
    rejected with the reason and the plan goes on (it failed with the engine's refusal)."""
    job = _job("meta-llama/Llama-2-7b-hf", dataset_tokens=1e9)
    res = plan(job, Constraints(max_gpus=8, objective="cost", top=3), engine=engine)
    reason = "V100-SXM2-16GB: no BF16 matrix units (training.dtype bf16)"
    assert res.rejected[reason] > 0
    assert res.plans and all(not p.gpu.startswith("V100") for p in res.plans)


def test_a_job_refused_on_its_own_gpu_is_planned_elsewhere(engine, capsys):
    # FlashAttention-2 asked on a V100 (the engine refuses it there): planned on the A100
    rc, out, err = _run(engine, ["plan", "--model", "meta-llama/Llama-2-7b-hf", "--attn",
                                 "flash", "--dtype", "fp16", "--gpu", "V100-SXM2-16GB", "--gpus",
                                 "V100-SXM2-16GB,A100-80GB", "--max-gpus", "8",
                                 "--dataset-tokens", "1e9", "--top", "2", "--format", "json"],
                        capsys)
    assert rc == 0, err
    got = json.loads(out)
    assert {p["gpu"] for p in got["plans"]} == {"A100-SXM-80GB"}
    assert any(k.startswith("V100-SXM2-16GB: no FlashAttention-2") for k in got["rejected"])
    # a field wrong on every GPU is still the job's error, naming the field
    with pytest.raises(InputError, match="micro_batch_size"):
        plan(_job("gpt2").evolve(training={"micro_batch_size": 0}),
             Constraints(gpus="A100-80GB", max_gpus=1), engine=engine)


# -- the same job under two strategy names is one plan ---------------------------------------

def _layout_key(p):
    return (p.gpu, p.gpus, p.layout, p.micro_batch_size, p.grad_accum_steps, p.checkpointing,
            p.job.parallelism.cpu_offload)


def test_equivalent_strategies_are_one_plan(engine):
    """On one GPU FSDP NO_SHARD and ZeRO-0 are the same run: one plan, the other counted as a
    duplicate (issue 17 review: the plan view listed both, same cost and memory)."""
    # at the point estimate (fit confidence 0.5): at the default 0.9 no full fine-tune of
    # Mistral-7B fits one H100, and this test is about duplicates, not the confidence
    job = _job("mistralai/Mistral-7B-v0.1", dataset_tokens=1e9).evolve(
        options={"fit_confidence": 0.5})
    res = plan(job, Constraints(gpus="H100-SXM", max_gpus=1, objective="cost", top=20),
               engine=engine)
    assert res.rejected["duplicate of an equivalent layout"] > 0
    keys = [_layout_key(p) for p in res.plans]
    assert len(res.plans) > 1 and len(keys) == len(set(keys))
    assert {p.strategy for p in res.plans} == {"zero0"}    # the plainest strategy is named


def test_duplicates_are_the_same_job_by_the_engine(engine):
    """Every strategy the planner calls equivalent on a layout gives the engine's memory and
    step time of the one it keeps; strategies it keeps apart on that layout do not all."""
    import random

    from fmest.physics.precision import resolve_precision
    from fmest.plan.planner import config_job, effective_behaviour, evaluate_space

    job = _job("meta-llama/Llama-3.1-8B", dataset_tokens=1e9)
    res, _, _, rejected, ctx = evaluate_space(job, Constraints(gpus="H100-SXM", max_gpus=16),
                                              engine=engine)
    assert rejected["duplicate of an equivalent layout"] > 0
    shardings = ctx["shardings"]

    def behaviour(h, i):
        st = shardings[h][1]
        return effective_behaviour(st, precision=resolve_precision(job.training, st),
                                   data_parallel=res["dp"][i] > 1,
                                   tensor_parallel=res["tp"][i] > 1,
                                   pipeline=res["pp"][i] > 1)

    def numbers(j):
        report = engine.estimate(j)
        return report.memory.total_bytes, report.time.step_seconds

    def twins(i):
        kept_h = int(res["hidx"][i])
        return [h for h in range(len(shardings))
                if h != kept_h and behaviour(h, i) == behaviour(kept_h, i)]

    with_twins = [i for i in range(len(res["mb"])) if twins(i)]
    assert with_twins
    compared = 0
    for i in random.Random(17).sample(with_twins, min(30, len(with_twins))):
        kept_h = int(res["hidx"][i])
        kept = config_job(job, res, i, shardings, method="theory")
        for h in twins(i):
            res["hidx"][i] = h
            other = config_job(job, res, i, shardings, method="theory")
            res["hidx"][i] = kept_h
            assert numbers(other) == numbers(kept), (shardings[h][0], shardings[kept_h][0])
            compared += 1
    assert compared > 0
    # kept apart where the engine tells them apart: PyTorch-native TP saves differently
    apart = [job.evolve(parallelism={"dp": 4, "tp": 2, "fsdp": fsdp, "zero_stage": 0},
                        hardware={"gpu": "H100-SXM", "gpus_per_node": 8, "nodes": 1},
                        training={"micro_batch_size": 1, "grad_accum_steps": 8})
             for fsdp in ("none", "no_shard")]
    assert numbers(apart[0]) != numbers(apart[1])
    named = dict(shardings)
    assert len({effective_behaviour(named[n], precision="pure", data_parallel=True,
                                    tensor_parallel=True, pipeline=False)
                for n in ("zero0", "fsdp_no_shard")}) == 2


def test_a_strategy_copied_under_another_name_is_a_duplicate():
    """Equivalence is read from behaviour, not names: zero3 registered again as
    ``acme_shard`` adds no plan (its rows are counted as duplicates)."""
    import attrs

    from fmest import to_job
    from fmest.engine import Engine
    from fmest.hookspecs import hookimpl
    from fmest.plan.planner import evaluate_space

    class Acme:
        @hookimpl
        def fmest_register_parallelism(self, register):
            zero3 = Engine(new_pm()).registries.parallelism.get("zero3")
            register(attrs.evolve(zero3, name="acme_shard", aliases=(), framework="acme"))

    cons = Constraints(gpus="H100-SXM", max_gpus=8, objective="time")
    job = to_job({"model": "meta-llama/Llama-3.1-8B", "workload": {"dataset_tokens": 1e9}})
    plain = evaluate_space(job, cons, engine=Engine(new_pm(entrypoints=True)))
    twin = evaluate_space(job, cons, engine=Engine(new_pm((Acme(), "acme"),
                                                          entrypoints=True)))
    # (at pp > 1 the twin is searched where zero3 is not: DeepSpeed's pipeline engine limit
    # is DeepSpeed's, named rule zero_pp)
    assert (twin[0]["pp"] == 1).sum() == (plain[0]["pp"] == 1).sum() > 0
    dup = "duplicate of an equivalent layout"
    assert twin[3][dup] - plain[3].get(dup, 0) > 0


@pytest.mark.parametrize("stack,sharding", [("torchtune", {"fsdp": "full_shard"}),
                                            ("megatron-core", {"fsdp": "full_shard"}),
                                            ("llm-foundry", {"zero_stage": 3}),
                                            ("pytorch", {"zero_stage": 2})])
def test_planner_resolves_precision_as_the_engine_does(stack, sharding):
    """One precision rule: the planner's array formulas take the training stack's policy, as
    the engine's transforms do (torchtune + FSDP is pure bf16, not FSDP's amp)."""
    from fmest.plan.planner import _precision_bytes
    from fmest.stacks import resolve_job_stack

    engine = Engine()
    job = fmest.to_job({"model": "meta-llama/Llama-2-7b-hf", "training": {"stack": stack},
                        "parallelism": sharding,
                        "hardware": {"gpu": "A100-80GB", "gpus_per_node": 8}})
    ctx = engine.context(job)
    wire, per_param, _ = _precision_bytes(job, ctx.sharding,
                                          resolve_job_stack(job, engine.registries.stacks))
    precision = ctx.transforms.precision
    assert wire == (4.0 if precision in ("amp", "master") else 2.0)
    assert per_param == (4.0 if precision == "amp" else 2.0)


# ---------------------------------------------------------------------------------------------
# issue 26: --plot checked before the search; stale prices flagged per plan
# ---------------------------------------------------------------------------------------------

SMALL = ["plan", "--model", "meta-llama/Llama-3.2-1B", "--dataset-tokens", "1e8",
         "--gpus", "A100-80GB", "--max-gpus", "8", "--top", "3"]


def _no_search(monkeypatch):
    import fmest.plan.planner as planner

    def refuse(*a, **k):
        raise AssertionError("the search ran before --plot was checked")
    monkeypatch.setattr(planner, "plan", refuse)


@pytest.mark.parametrize("name", ["out.jpg", "out", "folder.png"])
def test_a_bad_plot_file_name_fails_before_the_search(engine, tmp_path, capsys, monkeypatch,
                                                      name):
    _no_search(monkeypatch)
    (tmp_path / "folder.png").mkdir()
    rc, out, err = _run(engine, SMALL + ["--plot", str(tmp_path / name)], capsys)
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert "--plot" in err and ".png, .svg, .pdf" in err


def test_an_unwritable_plot_folder_fails_before_the_search(engine, tmp_path, capsys,
                                                          monkeypatch):
    _no_search(monkeypatch)
    (tmp_path / "a-file").write_text("x")
    rc, out, err = _run(engine, SMALL + ["--plot", str(tmp_path / "a-file" / "p.png")], capsys)
    assert rc == 2 and out == "" and "--plot" in err


def test_plot_pdf_is_drawn(engine, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    pdf = tmp_path / "new-folder" / "front.pdf"   # a missing folder is made
    rc, out, err = _run(engine, SMALL + ["--plot", str(pdf)], capsys)
    assert rc == 0, err
    assert pdf.read_bytes()[:5] == b"%PDF-" and f"wrote {pdf}" in err


def test_stale_prices_are_flagged_per_plan(engine, capsys, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)    # one line per row
    monkeypatch.setenv("FMEST_PRICE_TODAY", "2030-01-01")
    monkeypatch.setenv("FMEST_PRICE_MAX_AGE_DAYS", "1")     # every quote is old by then
    rc, out, err = _run(engine, SMALL + ["--format", "json"], capsys)
    assert rc == 0, err
    plans = json.loads(out)["plans"]
    assert plans and all(p["price_stale"] is True for p in plans if p["usd"] is not None)
    rc, table, err = _run(engine, SMALL, capsys)
    rows = [ln for ln in table.splitlines() if ln[:1].isdigit()]
    assert rows and all(ln.rstrip().endswith(" !") for ln in rows)
    assert "! priced from a STALE quote" in table
    rc, text, err = _run(engine, SMALL + ["--format", "csv"], capsys)
    assert {r["price_stale"] for r in csv.DictReader(io.StringIO(text))} == {"True"}

    monkeypatch.setenv("FMEST_PRICE_TODAY", "2026-01-01")
    monkeypatch.setenv("FMEST_PRICE_MAX_AGE_DAYS", "100000")   # none is
    rc, out, err = _run(engine, SMALL + ["--format", "json"], capsys)
    assert {p["price_stale"] for p in json.loads(out)["plans"]} == {False}
    rc, table, err = _run(engine, SMALL, capsys)
    assert "STALE" not in table and not any(ln.rstrip().endswith(" !")
                                            for ln in table.splitlines())
