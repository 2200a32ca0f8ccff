"""Core engine, policies and plugin loading, with throwaway plugins (no installed plugins)."""

from __future__ import annotations

import types

import pytest

from fmest.api import estimate_jobs
from fmest.errors import DuplicateRegistrationError, InputError, UnknownNameError
from fmest.estimates import MemoryEstimate, Provenance
from fmest.hookspecs import hookimpl
from fmest.job import Job, Training
from fmest.testing import new_engine, new_pm

GIB = 1024**3


def _memory_plugin(basis: str, gib: float, *, in_domain=None, per_batch_gib: float = 0.0):
    class P:
        @hookimpl
        def fmest_estimate_memory(self, job, ctx):
            total = int((gib + per_batch_gib * job.training.micro_batch_size) * GIB)
            return MemoryEstimate(total_bytes=total, components={"weights": total},
                                  provenance=Provenance(basis=basis, in_domain=in_domain))
    return P()


JOB = Job(model="meta-llama/Llama-2-7b-hf", training=Training(seq_len=1024))


def test_engine_stamps_plugin_name_and_policy_prefers_basis():
    eng = new_engine((_memory_plugin("analytic", 10), "theoryish"),
                     (_memory_plugin("learned", 12, in_domain=True), "learnedish"))
    rep = eng.estimate(JOB.evolve(options={"method": "theory"}), quantities=("memory",))
    assert rep.memory.provenance.plugin == "theoryish"
    assert rep.memory.total_bytes == 10 * GIB
    rep = eng.estimate(JOB.evolve(options={"method": "hybrid"}), quantities=("memory",))
    assert rep.memory.provenance.plugin == "learnedish"
    assert "learned" in rep.decisions["memory"].rule


def test_hybrid_skips_out_of_domain_learned_and_says_so():
    eng = new_engine((_memory_plugin("analytic", 10), "theory"),
                     (_memory_plugin("learned", 12, in_domain=False), "lgbm"))
    d = eng.estimate_memory(JOB.evolve(options={"method": "hybrid"}))
    assert d.chosen.provenance.plugin == "theory"
    assert "outside its training domain" in d.rule
    # so does the learned policy (issue 13: out of domain -> theory under every policy)
    d = eng.estimate_memory(JOB.evolve(options={"method": "learned"}))
    assert d.chosen.provenance.plugin == "theory"
    assert "outside its training domain" in d.rule


def test_ties_break_on_plugin_name_not_install_order():
    a = (_memory_plugin("analytic", 10), "b_plugin")
    b = (_memory_plugin("analytic", 11), "a_plugin")
    for order in ((a, b), (b, a)):
        d = new_engine(*order).estimate_memory(JOB)
        assert d.chosen.provenance.plugin == "a_plugin"


def test_broken_plugin_is_named_and_spares_the_others():
    class Broken:
        @hookimpl
        def fmest_estimate_memory(self, job, ctx):
            raise RuntimeError("boom")

    eng = new_engine((Broken(), "broken"), (_memory_plugin("analytic", 10), "ok"))
    rep = eng.estimate(JOB, quantities=("memory",))
    assert rep.memory.provenance.plugin == "ok"
    assert any("broken" in w and "boom" in w and "FMEST_DISABLE_PLUGINS=broken" in w
               for w in rep.warnings)


def test_wrong_return_type_is_a_failure_not_a_crash():
    class Wrong:
        @hookimpl
        def fmest_estimate_memory(self, job, ctx):
            return 42

    d = new_engine((Wrong(), "wrong")).estimate_memory(JOB)
    assert d.chosen is None and d.failures[0].plugin == "wrong"


def test_max_micro_batch_binary_search():
    # 10 GiB + 3 GiB per sample on an 80 GiB GPU: 10 + 3*23 = 79 fits, 24 does not (judged by
    # the point estimate: fit confidence 0.5)
    eng = new_engine((_memory_plugin("analytic", 10, per_batch_gib=3), "lin"))
    job = JOB.evolve(hardware={"gpu": "A100-80GB"}, options={"fit_confidence": 0.5})
    rep = estimate_jobs([(job, None)], engine=eng, quantities=("memory",))
    assert rep.max_micro_batch == 23
    # the engine answers quantities only: the search is the use case's
    assert eng.estimate(JOB, quantities=("memory",)).max_micro_batch is None
    assert rep.fits is True


def test_duplicate_registration_names_both_plugins():
    from fmest.gpus import GpuSpec

    class G:
        def __init__(self, name):
            self.name = name

        @hookimpl
        def fmest_register_gpus(self, register):
            register(GpuSpec(name="Toy-GPU", vendor="x", memory_bytes=GIB))

    with pytest.raises(DuplicateRegistrationError, match="one.*two|two.*one"):
        new_engine((G("one"), "one"), (G("two"), "two"))


def test_third_party_gpu_plugin_registers_a_gpu():
    from fmest.gpus import GpuSpec

    class Gpu:
        @hookimpl
        def fmest_register_gpus(self, register):
            register(GpuSpec(name="Acme-X1", vendor="Acme", memory_bytes=64 * GIB,
                             aliases=("x1",), source="https://example.invalid/x1",
                             checked="2026-11-22"))

    eng = new_engine((Gpu(), "acme"), (_memory_plugin("analytic", 10), "m"))
    ctx = eng.context(JOB.evolve(hardware={"gpu": "X1"}))
    assert ctx.gpu.name == "Acme-X1" and eng.registries.gpus.source_of("x1") == "acme"


def test_unknown_names_list_near_names():
    eng = new_engine()
    with pytest.raises(UnknownNameError) as e:
        eng.context(JOB.evolve(hardware={"gpu": "H100-SMX"}))
    assert e.value.field == "hardware.gpu" and "H100" in str(e.value)
    with pytest.raises(UnknownNameError, match="training.optimizer"):
        eng.context(JOB.evolve(training={"optimizer": "adamx"}))
    with pytest.raises(UnknownNameError, match="options.method"):
        eng.context(JOB.evolve(options={"method": "oracle"}))


def test_cross_field_checks():
    eng = new_engine()
    with pytest.raises(InputError, match="parallelism.tp"):
        eng.context(JOB.evolve(parallelism={"tp": 3}))
    with pytest.raises(InputError, match="parallelism.ep"):
        eng.context(JOB.evolve(parallelism={"ep": 2}))
    with pytest.raises(InputError, match="zero_stage.*fsdp|either"):
        eng.context(JOB.evolve(parallelism={"zero_stage": 3, "fsdp": "full_shard"}))
    with pytest.raises(InputError, match="parallelism.dp"):
        eng.context(JOB.evolve(parallelism={"dp": 3}, hardware={"gpus_per_node": 8}))


def test_layout_resolution():
    eng = new_engine()
    lay = eng.context(JOB.evolve(parallelism={"tp": 2, "pp": 2},
                                 hardware={"gpus_per_node": 8, "nodes": 2})).layout
    assert (lay.world_size, lay.dp, lay.gpus_per_node) == (16, 4, 8)
    lay = eng.context(JOB.evolve(parallelism={"dp": 4})).layout
    assert (lay.world_size, lay.dp, lay.nodes) == (4, 4, 1)


def test_sharding_strategy_lookup():
    eng = new_engine()
    assert eng.context(JOB.evolve(parallelism={"zero_stage": 2})).sharding.name == "zero2"
    s = eng.context(JOB.evolve(parallelism={"fsdp": "hybrid_shard"},
                               hardware={"gpus_per_node": 8, "nodes": 4})).sharding
    assert s.name == "fsdp_hybrid_shard"
    assert s.shard_group_size(dp=32, gpus_per_node=8) == 8


def test_entrypoint_plugin_that_fails_to_import_is_named(monkeypatch):
    import fmest.plugins as plugins

    class EP:
        name = "kaputt"
        group = "fmest"

        def load(self):
            raise ImportError("No module named 'kaputt_dep'")

    monkeypatch.setattr(plugins, "entry_points", lambda group: [EP()])
    pm = plugins.new_plugin_manager(entrypoints=True, disable=set(), only=None)
    (err,) = pm.fmest_load_errors
    assert "kaputt" in str(err) and "FMEST_DISABLE_PLUGINS=kaputt" in str(err)
    pm2 = plugins.new_plugin_manager(entrypoints=True, disable={"kaputt"}, only=None)
    assert pm2.fmest_load_errors == []


def test_entrypoint_plugin_is_loaded_and_filtered(monkeypatch):
    import fmest.plugins as plugins

    mod = types.ModuleType("toy_plugin")
    mod.fmest_estimate_memory = hookimpl(lambda job, ctx: None)

    class EP:
        def __init__(self, name):
            self.name = name

        def load(self):
            return mod

    monkeypatch.setattr(plugins, "entry_points", lambda group: [EP("toy")])
    pm = plugins.new_plugin_manager(entrypoints=True, disable=set(), only=None)
    assert pm.get_plugin("toy") is mod
    pm = plugins.new_plugin_manager(entrypoints=True, disable=set(), only={"other"})
    assert pm.get_plugin("toy") is None
    assert "toy" in plugins.plugin_hooks(new_pm((mod, "toy")))


def test_builtin_registries_are_filled():
    eng = new_engine()
    assert "adamw_bnb_8bit" in eng.registries.optimizers
    assert {"theory", "traced", "learned", "hybrid"} <= set(eng.registries.policies.names())
    for alias in ("A100-40GB", "A100-80GB", "H100-SXM", "H200", "RTX-4090", "L40S"):
        assert alias in eng.registries.gpus
    assert len(eng.registries.models) >= 40


def test_one_estimate_resolves_the_job_once_and_asks_each_plugin_once(monkeypatch):
    """The engine answers quantities only: one estimate checks and resolves the job once and
    asks each plugin once per quantity (the searches a report shows are the use case's)."""
    import fmest.engine as engine_module
    from fmest.engine import Engine

    eng = Engine()
    calls: dict[str, int] = {}

    def counted(name, fn):
        def wrapper(*args, **kwargs):
            calls[name] = calls.get(name, 0) + 1
            return fn(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(engine_module, "check_job", counted("check_job", engine_module.check_job))
    monkeypatch.setattr(eng, "resolve_job", counted("resolve_job", eng.resolve_job))
    for name in ("ask_memory", "correct_memory", "ask_time", "correct_time", "ask_tokens",
                 "ask_cost"):
        monkeypatch.setattr(eng, name, counted(name, getattr(eng, name)))
    job = JOB.evolve(training={"technique": "lora"}, hardware={"gpu": "A100-80GB"})
    report = eng.estimate(job)
    assert report.cost is not None
    assert calls == {"check_job": 1, "resolve_job": 1, "ask_memory": 1, "correct_memory": 1,
                     "ask_time": 1, "correct_time": 1, "ask_tokens": 1, "ask_cost": 1}
