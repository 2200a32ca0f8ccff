"""Training stacks (issue 12): registry, resolution, and what memory and time do with them."""

from __future__ import annotations

import json

import pytest

import fmest_memory_theory.plugin as memory_plugin
import fmest_time_roofline.plugin as time_plugin
from fmest import to_job
from fmest.convert import job_from_dict
from fmest.errors import InputError
from fmest.hookspecs import hookimpl
from fmest.stacks import FITTED_ENV, StackProfile, load_profiles
from fmest.testing import new_engine

PLUGINS = ((memory_plugin, "memory_theory"), (time_plugin, "time_roofline"))
PROFILES = ("pytorch", "hf-trainer", "deepspeed", "megatron-core", "megatron-deepspeed",
            "torchtitan", "torchtune", "llm-foundry", "unsloth")
NODE = {"gpu": "H100-SXM-80GB", "gpus_per_node": 8}


def _job(training=None, parallelism=None, model="llama-3.1-8b"):
    return job_from_dict({"model": model, "training": {"seq_len": 4096, **(training or {})},
                          "parallelism": parallelism or {}, "hardware": NODE})


def _estimate(job, engine=None):
    return (engine or new_engine(*PLUGINS)).estimate(job)


def test_nine_profiles_each_value_sourced():
    """The contract names exist and every profile cites a source for what it fuses/overlaps."""
    names = {p.name for p in load_profiles()}
    assert set(PROFILES) <= names
    for profile in load_profiles():
        assert profile.sources, profile.name
        if profile.fused:
            assert "fused" in profile.sources, profile.name
        for key in ("auto_precision", "fp32_grads"):
            if getattr(profile, key):
                assert key in profile.sources, (profile.name, key)


@pytest.mark.parametrize("given, canonical", [("NeMo", "megatron-core"),
                                              ("megatron", "megatron-core"),
                                              ("Megatron-Bridge", "megatron-core"),
                                              ("composer", "llm-foundry"),
                                              ("HF-Trainer", "hf-trainer")])
def test_names_case_insensitive_with_aliases(given, canonical):
    ctx = new_engine().context(_job({"stack": given}))
    assert ctx.transforms.stack.name == canonical
    assert "stated" in ctx.transforms.stack.reason


def test_unknown_stack_names_the_field():
    with pytest.raises(InputError) as err:
        new_engine().context(_job({"stack": "jax-levanter"}))
    assert "training.stack" in str(err.value)


def test_megatron_core_default_precision_and_fp32_grads():
    """Megatron: bf16 params + fp32 main params (master) and an fp32 main_grad buffer;
    torchtune: pure bf16 (core/fmest/data/stacks.toml sources)."""
    mega = new_engine().context(_job({"stack": "megatron-core"})).transforms
    assert mega.precision == "master" and mega.optimizer.grad_bytes == 4
    tune = new_engine().context(_job({"stack": "torchtune"})).transforms
    assert tune.precision == "pure" and tune.optimizer.grad_bytes == 2


def test_fp32_grad_buffer_adds_two_bytes_per_param():
    """Same layout and precision: Megatron's fp32 gradient buffer holds 2 more bytes per
    parameter than DDP's bf16 gradients, less the bucket copy DDP keeps (dp > 1)."""
    job_kw = dict(training={"precision": "master", "activation_checkpointing": "full"},
                  parallelism={"tp": 8})
    eager = _estimate(_job(**job_kw))
    mega = _estimate(_job({**job_kw["training"], "stack": "megatron-core"},
                          job_kw["parallelism"]))
    params = eager.context.model.param_counts().total / 8
    grads = mega.memory.components["gradients"] - eager.memory.components["gradients"]
    assert grads == pytest.approx(2 * params, rel=0.05)


def test_megatron_fusion_and_overlap_make_step_faster_and_are_named():
    """Fused elementwise chains, fused fp8 casts, TE attention and TP overlap: the same job
    runs faster under megatron-core than eager, and the notes name the fused/overlapped terms."""
    training = {"dtype": "fp8", "precision": "master", "micro_batch_size": 2}
    eager = _estimate(_job(training, {"tp": 4, "sequence_parallel": True}))
    mega = _estimate(_job({**training, "stack": "megatron-core"},
                          {"tp": 4, "sequence_parallel": True}))
    assert mega.time.breakdown["memory_bound"] < 0.6 * eager.time.breakdown["memory_bound"]
    assert mega.time.breakdown["communication_tp"] < eager.time.breakdown["communication_tp"]
    notes = " ".join(mega.time.notes)
    assert "fused norm" in notes and "fp8_cast" in notes and "overlapped" in notes
    off = _estimate(_job({**training, "stack": "megatron-core"},
                         {"tp": 4, "sequence_parallel": True, "tp_comm_overlap": False}))
    assert off.time.breakdown["communication_tp"] > mega.time.breakdown["communication_tp"]


def test_liger_fuses_the_loss_in_memory():
    plain = _estimate(_job({"micro_batch_size": 4}))
    liger = _estimate(_job({"micro_batch_size": 4, "liger": True}))
    assert liger.memory.components["logits_and_loss"] < plain.memory.components["logits_and_loss"]
    assert liger.time.breakdown["memory_bound"] < plain.time.breakdown["memory_bound"]


def test_distributed_optimizer_shards_states_and_overlaps_gather():
    job = _job({"stack": "megatron-core"}, {"distributed_optimizer": True})
    transforms = new_engine().context(job).transforms
    assert transforms.sharding.optimizer_divisor == 8
    gathers = [c for c in transforms.communication.collectives if c.what == "parameters"]
    assert gathers and all(c.overlappable and c.phase == "forward" for c in gathers)


def test_third_party_stack_through_the_hook():
    class Plugin:
        @hookimpl
        def fmest_register_stacks(self, register):
            register(StackProfile(name="toy-stack", fused=("norm",),
                                  elementwise_bytes={"norm": 0.0},
                                  sources={"fused": "test"}))

    engine = new_engine(*PLUGINS, (Plugin(), "toy_stack"))
    toy = _estimate(_job({"stack": "TOY-STACK"}), engine)
    plain = _estimate(_job(), engine)
    assert toy.context.transforms.stack.profile.plugin == "" and \
        engine.registries.stacks.source_of("toy-stack") == "toy_stack"
    assert toy.time.breakdown["memory_bound"] < plain.time.breakdown["memory_bound"]


def test_fitted_constants_come_from_the_env_file(tmp_path, monkeypatch):
    """The benchmark scores a held-out source with constants fitted without it through
    $FMEST_FITTED_CONSTANTS; the time factor multiplies every part of the step."""
    base = _estimate(_job({"stack": "hf-trainer"}))
    path = tmp_path / "fitted.json"
    path.write_text(json.dumps({"stacks": {"time_factor": {"hf-trainer": 1.5},
                                           "reserve_fraction": {"hf-trainer": 0.0}}}))
    monkeypatch.setenv(FITTED_ENV, str(path))
    scaled = _estimate(_job({"stack": "hf-trainer"}))
    assert scaled.time.step_seconds == pytest.approx(1.5 * base.time.step_seconds, rel=1e-6)
    assert scaled.memory.components["allocator_reserve"] == 0


def test_stacks_command_lists_profiles_with_sources(capsys):
    from fmest.cli import main

    assert main(["stacks", "--sources"]) == 0
    out = capsys.readouterr().out
    for name in PROFILES:
        assert name in out
    assert "source[fused]" in out and "Megatron-LM" in out


def test_cli_stack_flag_and_explain(capsys):
    from fmest.cli import main

    assert main(["estimate", "--model", "llama-3.1-8b", "--gpu", "H100-SXM-80GB",
                 "--tp", "8", "--gpus-per-node", "8", "--stack", "NeMo", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "Training stack: stack megatron-core" in out and "alias of megatron-core" in out


def test_memory_log_line_reads_the_counter_in_the_stacks_unit():
    """A stack whose log prints its peak (LitGPT: max_memory_allocated / 1e9 "GB";
    torchtitan: reserved / 2^30 "GiB") gets the estimate as that line would read it, in the
    report's JSON and text; a stack with no such line gets None."""
    from fmest.estimates import memory_counters
    from fmest.output.report import report_table, report_to_dict
    from fmest.stacks import MEMORY_LOG_UNITS, memory_log_line

    for stack, counter, unit in (("litgpt", "allocated_bytes", 10**9),
                                 ("torchtitan", "reserved_bytes", 2**30)):
        report = _estimate(_job({"stack": stack, "technique": "lora"}))
        counters = memory_counters(report.memory)
        log = report_to_dict(report)["memory"]["stack_log"]
        assert log["stack"] == stack
        assert log["value"] == pytest.approx(counters[counter] / unit)
        assert MEMORY_LOG_UNITS[log["unit"]] == unit
        assert f"{stack}'s own log would print {log['value']:.2f} {log['unit']}" \
            in report_table(report, tty=False)
    report = _estimate(_job({"stack": "hf-trainer"}))
    assert report_to_dict(report)["memory"]["stack_log"] is None
    assert memory_log_line(None, {}) is None
    assert "own log would print" not in report_table(report, tty=False)


def test_memory_log_fields_are_checked_and_sourced():
    for profile in load_profiles():
        if profile.memory_log_counter:
            assert "memory_log_counter" in profile.sources, profile.name
    with pytest.raises(ValueError, match="memory_log_unit"):
        StackProfile(name="x", memory_log_counter="max_memory_allocated", memory_log_unit="MB")
    with pytest.raises(ValueError, match="give both"):
        StackProfile(name="x", memory_log_unit="GB")


def test_maxtext_profile_fuses_like_a_compiled_step():
    """MaxText's step is one XLA program (stacks.toml ``maxtext``, cited to its code): fused
    elementwise chains and fp8 casts, TE's cuDNN attention, meta-device init. So an fp8 step
    of Llama-3-70B under FSDP is faster than the bf16 one (on the eager default stack the
    unfused delayed-scaling casts made it slower)."""
    prof = next(p for p in load_profiles() if p.name == "maxtext")
    assert {"norm", "activation", "rope", "fp8_cast", "loss"} <= set(prof.fused)
    assert prof.attention_kernel == "te-fused" and prof.host_model_copy == "meta_init"
    assert all(prof.sources.get(k) for k in ("fused", "attention_kernel", "overlap",
                                             "fp8_recipe", "host_model_copy"))
    engine = new_engine(entrypoints=True)

    def step(stack: str, dtype: str) -> float:
        job = to_job({"model": "meta-llama/Meta-Llama-3-70B",
                      "training": {"stack": stack, "dtype": dtype, "seq_len": 8192,
                                   "micro_batch_size": 2, "activation_checkpointing": "full"},
                      "parallelism": {"fsdp": "full_shard"},
                      "hardware": {"gpu": "H100-SXM-80GB", "gpus_per_node": 8, "nodes": 16}})
        return engine.estimate(job, quantities=("memory", "time")).time.step_seconds

    assert step("maxtext", "fp8") < step("maxtext", "bf16")
    assert step("maxtext", "fp8") < step("pytorch", "fp8")
