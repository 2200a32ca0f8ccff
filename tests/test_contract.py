"""The plugin contract and the input door, as a third party meets them (issue 10).

Calling: implementations declare a subset of a spec's arguments; broken plugins are named,
unregistered and reported with the variable that disables them. Input: every door (-f, --config,
the Python API) reads the same EstimateInput into the same jobs and the same ignored report;
string booleans are never truthy. Plugins: the declared basis decides who is asked; corrections
see the candidates; no plugin imports another.
"""

from __future__ import annotations

import ast
import json
import types
from pathlib import Path

import attrs
import pytest

import fmest
from fmest.api import estimate_jobs
from fmest.cli import main
from fmest.errors import InputError
from fmest.estimates import MemoryEstimate, Provenance, TimeEstimate
from fmest.hookspecs import hookimpl
from fmest.inputs import read_input
from fmest.job import Job
from fmest.testing import new_engine

ROOT = Path(__file__).resolve().parents[1]
GIB = 1024**3
JOB = Job(model="llama-2-7b")


# -- calling ------------------------------------------------------------------------------------
def test_a_hook_declaring_only_job_answers():
    class JobOnly:
        @hookimpl
        def fmest_estimate_memory(self, job):  # no ctx: pluggy's binding passes only `job`
            return MemoryEstimate(total_bytes=job.training.seq_len * 1000,
                                  components={"activations": job.training.seq_len * 1000},
                                  provenance=Provenance(basis="analytic"))

    report = new_engine((JobOnly(), "job_only")).estimate(JOB, quantities=("memory",))
    assert report.memory.total_bytes == 2048 * 1000
    assert report.memory.provenance.plugin == "job_only"
    assert report.decisions["memory"].failures == ()


def _entry_point_plugins(monkeypatch, **plugins):
    import fmest.plugins as plugins_module

    class EP:
        def __init__(self, name, obj):
            self.name, self._obj = name, obj

        def load(self):
            return self._obj

    monkeypatch.setattr(plugins_module, "entry_points",
                        lambda group: [EP(n, o) for n, o in plugins.items()])


def test_misspelled_hookimpl_is_named_unregistered_and_reported(monkeypatch, capsys):
    typo = types.ModuleType("typo_plugin")
    typo.fmest_estimate_memroy = hookimpl(lambda job, ctx: None)  # misspelled hook name
    good = types.ModuleType("good_plugin")
    good.fmest_estimate_memory = hookimpl(lambda job: MemoryEstimate(
        total_bytes=GIB, components={"weights": GIB}, provenance=Provenance(basis="analytic")))
    _entry_point_plugins(monkeypatch, typo=typo, good=good)
    from fmest.plugins import new_plugin_manager

    pm = new_plugin_manager(entrypoints=True, disable=set(), only=None)
    (err,) = pm.fmest_load_errors
    assert err.plugin == "typo" and "fmest_estimate_memroy" in err.error
    assert "FMEST_DISABLE_PLUGINS=typo" in str(err)
    assert pm.get_plugin("typo") is None and pm.get_plugin("good") is good
    # the estimate goes on, with the load error among its warnings
    report = fmest.Engine(pm).estimate(JOB, quantities=("memory",))
    assert report.memory.provenance.plugin == "good"
    assert any("FMEST_DISABLE_PLUGINS=typo" in w for w in report.warnings)
    # a hookimpl taking an argument the spec does not have is named the same way
    extra = types.ModuleType("extra_plugin")
    extra.fmest_estimate_memory = hookimpl(lambda job, ctx, gpu_count: None)
    _entry_point_plugins(monkeypatch, extra=extra)
    (err,) = new_plugin_manager(entrypoints=True, disable=set(), only=None).fmest_load_errors
    assert err.plugin == "extra" and "gpu_count" in err.error
    assert new_plugin_manager(entrypoints=True, disable={"extra"}, only=None) \
        .fmest_load_errors == []


def test_registration_that_raises_or_registers_garbage_names_the_plugin():
    class Raises:
        @hookimpl
        def fmest_register_gpus(self, register):
            raise RuntimeError("table missing")

    class Garbage:
        @hookimpl
        def fmest_register_optimizers(self, register):
            register({"name": "not-a-spec"})

        @hookimpl
        def fmest_register_policies(self, register):
            register("theory")

    eng = new_engine((Raises(), "raises"), (Garbage(), "garbage"))
    errors = [(e.plugin, e.error) for e in eng.load_errors]
    assert any(p == "raises" and "table missing" in e for p, e in errors)
    assert any(p == "garbage" and "dict" in e and "OptimizerSpec" in e for p, e in errors)
    assert any(p == "garbage" and "str as a policy" in e for p, e in errors)
    report = eng.estimate(JOB, quantities=("memory",))  # estimation is not crashed
    assert any("FMEST_DISABLE_PLUGINS=garbage" in w for w in report.warnings)


# -- who is asked -------------------------------------------------------------------------------
def _answer(basis, gib, *, declare=None, calls=None, searchable=True):
    class P:
        if declare:
            @hookimpl
            def fmest_register_estimators(self, register):
                register(declare, searchable=searchable)

        @hookimpl
        def fmest_estimate_memory(self, job):
            if calls is not None:
                calls.append(job.training.micro_batch_size)
            total = int(gib * GIB * job.training.micro_batch_size)
            return MemoryEstimate(total_bytes=total, components={"activations": total},
                                  provenance=Provenance(basis=basis))
    return P()


def test_the_policy_decides_whom_to_ask_by_declared_basis():
    calls: list[int] = []
    traced = _answer("traced", 30, declare="traced", calls=calls, searchable=False)
    theory = _answer("analytic", 10)

    class AnyBasis:  # a third-party policy: the traced plugin answers for it too
        name, description = "mine", "prefers traced answers"

        def asks(self, basis):
            return True

        def choose(self, quantity, candidates):
            from fmest.policies import Decision

            pick = min(candidates, key=lambda c: c.provenance.basis != "traced")
            return Decision(quantity=quantity, chosen=pick, rule="mine", candidates=tuple(
                candidates), policy="mine")

    class Policy:
        @hookimpl
        def fmest_register_policies(self, register):
            register(AnyBasis())

    eng = new_engine((traced, "tracer"), (theory, "theory_plugin"), (Policy(), "policy"))
    r = eng.estimate(JOB, quantities=("memory",))  # policy "theory": the tracer is not asked
    assert r.memory.provenance.plugin == "theory_plugin" and calls == []
    r = estimate_jobs([(JOB.evolve(options={"method": "mine", "fit_confidence": 0.5}), None)],
                      engine=eng, quantities=("memory",))
    assert r.memory.provenance.plugin == "tracer"
    # the batch search asked only the searchable plugin: one trace, not one per candidate
    assert calls == [1]
    # theory's point estimate (10 GiB a sample) at fit confidence 0.5, against the capacity CUDA
    # reports (gpus.csv cuda_total_gib)
    assert r.max_micro_batch == eng.context(JOB).gpu.capacity_bytes // (10 * GIB)
    assert any("cheap enough to search" in w for w in r.warnings)


def test_corrections_see_the_candidates_and_theory_runs_once():
    calls: list[int] = []
    theory = _answer("analytic", 10, calls=calls)

    class Corrector:
        @hookimpl
        def fmest_register_estimators(self, register):
            register("learned")

        @hookimpl
        def fmest_correct_memory(self, candidates):
            (base,) = [c for c in candidates if c.provenance.basis == "analytic"]
            total = base.total_bytes // 2
            return MemoryEstimate(total_bytes=total, components={"activations": total},
                                  provenance=Provenance(basis="learned", in_domain=True))

    eng = new_engine((theory, "theory_plugin"), (Corrector(), "corrector"))
    r = eng.estimate(JOB.evolve(options={"method": "hybrid"}), quantities=("memory",))
    assert r.memory.provenance.plugin == "corrector" and r.memory.total_bytes == 5 * GIB
    assert calls == [1]  # the analytic answer was computed once and shared


# -- one input door -----------------------------------------------------------------------------
TWO_JOBS = {
    "estimator_metadata": {"method": "theory", "base_data_path": "data.csv"},
    "job_configs": [
        {"fm": {"base_model_path": "llama-2-7b", "block_size": 1024,
                "flash_attention_v2": "false", "torch_dtype": "bfloat16"},
         "hf_training": {"per_device_train_batch_size": 2, "gradient_checkpointing": "false",
                         "output_dir": "./out"},
         "infra": {"numGpusPerPod": 1, "gpu_model": "A100", "gpu_memory_in_gb": 80}},
        {"fm": {"base_model_path": "gpt2", "block_size": 512, "flash_attention_v2": "true",
                "technique": "lora"},
         "hf_training": {"per_device_train_batch_size": 4, "gradient_checkpointing": "true"},
         "peft_lora": {"r": 8, "lora_dropout": 0.1, "target_modules": "[c_attn]"},
         "infra": {"numGpusPerPod": 1, "gpu_model": "A100", "gpu_memory_in_gb": 80}},
    ],
}


def _ignored_keys(report) -> list[tuple[str, str]]:
    return [(i.key, i.reason) for i in report.input.ignored]


def _theory_engine():
    import fmest_memory_theory.plugin as memory_theory

    return new_engine((memory_theory, "memory_theory"))


def test_two_job_estimate_input_is_the_same_through_every_door(tmp_path, capsys):
    path = tmp_path / "estimate_input.json"
    path.write_text(json.dumps(TWO_JOBS))
    eng = _theory_engine()
    api = fmest.estimate(TWO_JOBS, engine=eng, quantities=("memory",))
    assert len(api.all_reports) == 2
    jobs = [r.job for r in api.all_reports]
    assert [j.model for j in jobs] == ["llama-2-7b", "gpt2"]
    keys = _ignored_keys(api)
    assert any(k == "estimator.base_data_path" and "--learned-model" in why
               for k, why in keys)
    assert any(k == "job_configs[1].peft_lora.lora_dropout" for k, _ in keys)
    assert all(_ignored_keys(r) == keys for r in api.all_reports)
    outputs = []
    for flags in (["-f", str(path)], ["--config", str(path)]):
        assert main(["estimate", *flags, "--format", "json"], engine=eng) == 0
        out = json.loads(capsys.readouterr().out)
        outputs.append(out)
        assert [fmest.to_job(o["job"]) for o in out["jobs"]] == jobs
        ignored = [o["input"]["ignored"] for o in out["jobs"]]
        assert ignored[0] == ignored[1] == [f"{path}: {k}: {r}" for k, r in keys]
    assert outputs[0]["jobs"][1]["memory"]["total_bytes"] > 0
    assert outputs[0]["jobs"][0]["memory"] == outputs[1]["jobs"][0]["memory"]
    assert [r.memory.total_bytes for r in api.all_reports] == \
        [o["memory"]["total_bytes"] for o in outputs[0]["jobs"]]
    # the table shows each job
    assert main(["estimate", "-f", str(path)], engine=eng) == 0
    text = capsys.readouterr().out
    assert "== job 1 of 2: llama-2-7b ==" in text and "== job 2 of 2: gpt2 ==" in text


def test_one_job_input_keeps_the_single_object(tmp_path, capsys):
    one = dict(TWO_JOBS, job_configs=TWO_JOBS["job_configs"][:1])
    path = tmp_path / "one.json"
    path.write_text(json.dumps(one))
    assert main(["estimate", "-f", str(path), "--format", "json"], engine=_theory_engine()) == 0
    out = json.loads(capsys.readouterr().out)
    assert "jobs" not in out and out["memory"]["total_bytes"] > 0
    assert out["input"]["job_count"] == 1


def test_false_strings_are_false_everywhere(tmp_path, capsys):
    (first, second), _ = zip(*read_input(TWO_JOBS), strict=True)
    assert (first.training.attention, first.training.activation_checkpointing) == \
        ("sdpa", "none")
    assert (second.training.attention, second.training.activation_checkpointing) == \
        ("flash", "full")
    for text in ("false", "no", "0", "off", "False"):
        job = fmest.to_job({"model": "gpt2", "training": {"compile": text},
                            "parallelism": {"sequence_parallel": text}})
        assert job.training.compile is False and job.parallelism.sequence_parallel is False
    args = tmp_path / "training_args.json"
    args.write_text(json.dumps({"gradient_checkpointing": "false", "bf16": "false",
                                "per_device_train_batch_size": 1}))
    (job, _), = read_input_cli(["--config", str(args), "--model", "gpt2"])
    assert job.training.activation_checkpointing == "none" and job.training.dtype == "bf16" \
        and job.training.precision == "auto"  # bf16 "false" sets nothing
    lf = tmp_path / "llama_factory.yaml"
    lf.write_text("stage: sft\nfinetuning_type: full\ndisable_gradient_checkpointing: 'false'\n"
                  "model_name_or_path: gpt2\n")
    (job, _), = read_input_cli(["--config", str(lf)])
    assert job.training.activation_checkpointing == "full"
    with pytest.raises(InputError, match="expected a boolean"):
        fmest.to_job({"model": "gpt2", "training": {"compile": "maybe"}})


def read_input_cli(argv):
    from fmest.api import read_jobs
    from fmest.cli import build_parser

    return read_jobs(build_parser().parse_args(["estimate", *argv]))


def test_bad_values_name_their_source(tmp_path):
    path = tmp_path / "estimate_input.json"
    bad = json.loads(json.dumps(TWO_JOBS))
    bad["job_configs"][1]["hf_training"]["per_device_train_batch_size"] = 0
    path.write_text(json.dumps(bad))
    with pytest.raises(InputError) as exc:
        read_input_cli(["-f", str(path)])
    assert str(exc.value).startswith(f"{path}: job_configs[1] (-> training.micro_batch_size)")
    with pytest.raises(InputError, match=r"^--seq-len \(-> training.seq_len\)"):
        from fmest.cli import build_parser
        from fmest.flags import read_flags
        from fmest.inputs import build_job

        ns = build_parser().parse_args(["estimate", "--model", "gpt2"])
        ns.seq_len = -4  # argparse would refuse it; the door names the flag all the same
        build_job([read_flags(ns)])


# -- imports ------------------------------------------------------------------------------------
def _imports(path: Path, modules=()) -> set[str]:
    """Every module ``path`` imports, at module level or inside functions (``from pkg import
    sub`` counts as importing ``pkg.sub`` when that is one of ``modules``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = {f"{node.module}.{a.name}" for a in node.names} & set(modules)
            names |= subs or {node.module}
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "import_module" \
                and node.args and isinstance(node.args[0], ast.Constant):
            names.add(str(node.args[0].value))
    return names


def _plugin_packages() -> dict[str, Path]:
    out = {}
    for pyproject in sorted((ROOT / "plugins").glob("*/pyproject.toml")):
        for init in pyproject.parent.rglob("__init__.py"):
            pkg = init.parent
            if pkg.name.startswith("fmest_") and pkg.parent.name in (
                    pyproject.parent.name, "src"):
                out[pkg.name] = pkg
    return out


def test_no_plugin_imports_another_plugins_package():
    packages = _plugin_packages()
    assert {"fmest_learned_lgbm", "fmest_cost_cloud"} <= set(packages)
    for name, pkg in packages.items():
        for source in pkg.rglob("*.py"):
            for imported in _imports(source):
                top = imported.split(".")[0]
                assert top not in packages or top == name, \
                    f"{source.relative_to(ROOT)} imports {imported} (another plugin's package)"


def test_no_import_cycle_in_core():
    core = ROOT / "core" / "fmest"
    modules = {}
    for source in core.rglob("*.py"):
        rel = source.relative_to(core.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = source
    # the package fmest itself only re-exports lazily (fmest/__init__.py's __getattr__)
    graph = {m: {i for i in _imports(p, modules) if i in modules and i != m and i != "fmest"}
             for m, p in modules.items()}
    for start in graph:
        stack, seen = [(start, (start,))], set()
        while stack:
            node, trail = stack.pop()
            for nxt in graph[node]:
                assert nxt != start, "import cycle: " + " -> ".join(trail + (nxt,))
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, trail + (nxt,)))


# -- registries ---------------------------------------------------------------------------------
def test_models_come_from_registries_only(capsys, monkeypatch):
    from fmest.models.spec import ModelSpec

    base = new_engine().resolve_model(JOB)

    class Zoo:
        @hookimpl
        def fmest_register_models(self, register):
            register("acme/zoo-7b", lambda: base, aliases=("zoo-7b",), source="acme zoo",
                     model_type="llama")

    eng = new_engine((Zoo(), "zoo"))
    assert main(["models", "--format", "json"], engine=eng) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["acme/zoo-7b"]["plugin"] == "zoo" and rows["acme/zoo-7b"]["aliases"] == ["zoo-7b"]
    assert isinstance(eng.resolve_model(Job(model="zoo-7b")), ModelSpec)
    from fmest.configs.export import export_job

    text = export_job(Job(model="zoo-7b"), "axolotl", registries=eng.registries)
    assert "base_model: acme/zoo-7b" in next(iter(text.values()))
    # FMEST_DISABLE_PLUGINS=models: no presets, local paths still resolve
    from fmest.plugins import new_plugin_manager

    bare = fmest.Engine(new_plugin_manager(entrypoints=False, disable={"models"}, only=None))
    assert len(bare.registries.models) == 0
    with pytest.raises(InputError, match="no preset"):
        bare.resolve_model(JOB)


def test_a_resolver_plugin_answers_before_the_core_default():
    base = new_engine().resolve_model(JOB)

    class Resolver:
        @hookimpl
        def fmest_resolve_model(self, name):
            return base if name.startswith("internal://") else None

    eng = new_engine((Resolver(), "resolver"))
    assert eng.resolve_model(Job(model="internal://llama")) is base
    assert eng.resolve_model(JOB).name == base.name  # other names reach the core default


def test_time_answers_can_be_corrected_too():
    class Time:
        @hookimpl
        def fmest_estimate_time(self, job):
            return TimeEstimate(step_seconds=2.0, breakdown={"compute": 2.0},
                                provenance=Provenance(basis="analytic"))

    class Half:
        @hookimpl
        def fmest_register_estimators(self, register):
            register("learned")

        @hookimpl
        def fmest_correct_time(self, candidates):
            (base,) = candidates
            return TimeEstimate(step_seconds=base.step_seconds / 2, breakdown={"compute": 1.0},
                                provenance=Provenance(basis="learned", in_domain=True))

    eng = new_engine((Time(), "time_plugin"), (Half(), "half"), (_answer("analytic", 1), "m"))
    r = eng.estimate(JOB.evolve(options={"method": "learned"}), quantities=("memory", "time"))
    assert r.time.step_seconds == 1.0 and r.time.provenance.plugin == "half"
    r = eng.estimate(JOB, quantities=("memory", "time"))
    assert r.time.step_seconds == 2.0


def test_a_registered_strategy_is_selected_by_name():
    from fmest.errors import UnknownNameError
    from fmest.transforms import ShardingStrategy

    zero3 = new_engine().registries.parallelism.get("zero3")

    class Strategy:
        @hookimpl
        def fmest_register_parallelism(self, register):
            register(attrs.evolve(zero3, name="acme_shard", aliases=()))

    eng = new_engine((Strategy(), "acme"))
    ctx = eng.context(JOB.evolve(parallelism={"sharding": "acme_shard"}))
    assert isinstance(ctx.sharding, ShardingStrategy) and ctx.sharding.name == "acme_shard"
    assert eng.context(JOB.evolve(parallelism={"sharding": "zero2", "zero_stage": 2})) \
        .sharding.name == "zero2"
    with pytest.raises(InputError, match="parallelism.sharding.*zero3"):
        eng.context(JOB.evolve(parallelism={"sharding": "acme_shard", "zero_stage": 3}))
    with pytest.raises(UnknownNameError, match="accepted: .*acme_shard"):
        eng.context(JOB.evolve(parallelism={"sharding": "nope"}))


def test_every_plugin_is_packaged_the_same_way():
    """One packaging style: flat layout, an explicit package list, an entry point of group
    ``fmest`` named after the folder, a ``test`` extra, a README and a tests/ folder."""
    import tomllib

    root = Path(__file__).resolve().parents[1]
    for folder in sorted((root / "plugins").iterdir()):
        if not (folder / "pyproject.toml").exists():
            continue
        meta = tomllib.loads((folder / "pyproject.toml").read_text())
        package = f"fmest_{folder.name}"
        assert meta["build-system"]["requires"] == ["setuptools>=68", "wheel"], folder.name
        assert meta["tool"]["setuptools"]["packages"][0] == package, folder.name
        assert (folder / package / "__init__.py").exists(), folder.name
        assert not (folder / "src").exists(), folder.name
        assert folder.name in meta["project"]["entry-points"]["fmest"], folder.name
        assert "test" in meta["project"]["optional-dependencies"], folder.name
        assert (folder / "README.md").exists() and (folder / "tests").is_dir(), folder.name
