"""The documented bounds and conflict rules (fmest.bounds) and the GPU table's capabilities:
each rule refuses its case naming the field, and lets the neighbouring valid case through."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from fmest import bounds
from fmest.errors import InputError
from fmest.estimates import CostEstimate, MemoryEstimate, Provenance, TimeEstimate
from fmest.gpus import shipped_gpus
from fmest.job import Job, resolve_layout

ROOT = Path(__file__).resolve().parents[1]


def job(**sections) -> Job:
    return Job(model="llama-2-7b-hf").evolve(**sections)


def refused(check, *args, field: str, **kwargs) -> InputError:
    with pytest.raises(InputError) as info:
        check(*args, **kwargs)
    assert info.value.field == field, str(info.value)
    return info.value


# -- bounds -----------------------------------------------------------------------------------
@pytest.mark.parametrize("bound", bounds.BOUNDS, ids=lambda b: b.path)
def test_each_bound_refuses_above_and_accepts_at_the_limit(bound):
    section, name = bound.path.split(".")
    # neighbours that other rules need for the value to be otherwise valid
    extra = {"parallelism": {"fsdp": "hybrid_shard"}} if name == "hsdp_shard_size" else {}
    at_limit = int(bound.maximum) if float(bound.maximum).is_integer() else bound.maximum
    ok = job(**{section: {name: at_limit}})
    ok = ok.evolve(**{k: {**v, name: at_limit} for k, v in extra.items()}) if extra else ok
    bounds.check_bounds(ok)
    bad = ok.evolve(**{section: {name: at_limit * 2}})
    err = refused(bounds.check_bounds, bad, field=bound.path)
    assert "bound" in str(err)


# -- conflicts ---------------------------------------------------------------------------------
CONFLICT_CASES = {
    "lora settings without lora": ({"training": {"lora_rank": 64}}, "training.lora_rank",
                                   {"training": {"lora_rank": 64, "technique": "lora"}}),
    "quantization without qlora": ({"training": {"technique": "lora", "quantization_bits": 8}},
                                   "training.quantization_bits",
                                   {"training": {"technique": "qlora", "quantization_bits": 8}}),
    "virtual stages without interleaving": (
        {"parallelism": {"pp": 2, "pp_virtual_stages": 2}}, "parallelism.pp_virtual_stages",
        {"parallelism": {"pp": 2, "pp_virtual_stages": 2, "pp_schedule": "interleaved"}}),
    "hsdp shard size without hybrid_shard": (
        {"parallelism": {"fsdp": "full_shard", "hsdp_shard_size": 4}},
        "parallelism.hsdp_shard_size",
        {"parallelism": {"fsdp": "hybrid_shard", "hsdp_shard_size": 4}}),
    "sequence parallel without tensor parallel": (
        {"parallelism": {"sequence_parallel": True}}, "parallelism.sequence_parallel",
        {"parallelism": {"sequence_parallel": True, "tp": 2}}),
    "fsdp prefetch without fsdp": ({"parallelism": {"fsdp_backward_prefetch": "post"}},
                                   "parallelism.fsdp_backward_prefetch",
                                   {"parallelism": {"fsdp_backward_prefetch": "post",
                                                    "fsdp": "full_shard"}}),
    "optimizer offload without sharding": ({"parallelism": {"cpu_offload": "optimizer"}},
                                           "parallelism.cpu_offload",
                                           {"parallelism": {"cpu_offload": "optimizer",
                                                            "zero_stage": 2}}),
    "parameter offload with zero 1/2": ({"parallelism": {"cpu_offload": "params",
                                                         "zero_stage": 2}},
                                        "parallelism.cpu_offload",
                                        {"parallelism": {"cpu_offload": "params",
                                                         "zero_stage": 3}}),
    "zero 2/3 with pipeline parallelism": ({"parallelism": {"zero_stage": 3, "pp": 2}},
                                           "parallelism.zero_stage",
                                           {"parallelism": {"zero_stage": 1, "pp": 2}}),
    "optimizer in backward with accumulation": (
        {"training": {"optimizer_in_backward": True, "grad_accum_steps": 4}},
        "training.optimizer_in_backward", {"training": {"optimizer_in_backward": True}}),
    "max steps with a dataset size": ({"workload": {"max_steps": 10, "dataset_tokens": 1e9}},
                                      "workload.max_steps", {"workload": {"max_steps": 10}}),
    "average sample longer than the sequence": (
        {"workload": {"avg_seq_len": 4096, "num_samples": 10}}, "workload.avg_seq_len",
        {"workload": {"avg_seq_len": 2048, "num_samples": 10}}),
    "zero and fsdp together": ({"parallelism": {"zero_stage": 3, "fsdp": "full_shard"}},
                               "parallelism.zero_stage", {"parallelism": {"zero_stage": 3}}),
    "output longer than the context": (
        {"mode": "inference", "inference": {"context": 1024, "output_tokens": 4096}},
        "inference.output_tokens",
        {"mode": "inference", "inference": {"context": 8192, "output_tokens": 4096}}),
}


def job_of(sections: dict) -> Job:
    """:func:`job` with top-level fields (``mode``) beside the sections."""
    top = {k: v for k, v in sections.items() if not isinstance(v, dict)}
    return attrs.evolve(job(**{k: v for k, v in sections.items() if k not in top}), **top)


def test_every_conflict_rule_has_a_case():
    assert set(CONFLICT_CASES) == {c.name for c in bounds.CONFLICTS}


@pytest.mark.parametrize("name", sorted(CONFLICT_CASES))
def test_conflict_refused_with_its_reason_and_neighbour_accepted(name):
    bad, field, good = CONFLICT_CASES[name]
    rule = next(c for c in bounds.CONFLICTS if c.name == name)
    err = refused(bounds.check_conflicts, job_of(bad), field=field)
    assert rule.reason in str(err)
    bounds.check_conflicts(job_of(good))


# -- found by the bad-input fuzz (benchmarks/fuzz.py) -------------------------------------------
@pytest.mark.parametrize("sections,field", [
    ({"training": {"lora_alpha": 64}}, "training.lora_alpha"),          # LoRA alpha, full FT
    ({"training": {"technique": "lora", "double_quantization": False}},
     "training.double_quantization"),                                      # QLoRA-only setting
])
def test_lora_and_qlora_settings_without_their_technique_are_refused(sections, field):
    refused(bounds.check_conflicts, job(**sections), field=field)


@pytest.mark.parametrize("path", bounds.NAMED_FIELDS)
def test_an_empty_name_is_refused(path):
    section, name = path.split(".")
    refused(bounds.check_bounds, job(**{section: {name: ""}}), field=path)


@pytest.mark.parametrize("path", ["training.image_size", "training.source_len",
                                  "inference.batch", "inference.context",
                                  "inference.max_num_seqs", "calibration.activation_factor",
                                  "calibration.fragmentation_gib"])
def test_fields_once_unbounded_refuse_1e30(path):
    """1e30 images, sequences or GiB was answered as if fine (a unit slip, never a run)."""
    section, name = path.split(".")
    refused(bounds.check_bounds, job(**{section: {name: 10**30}}), field=path)


def test_tiny_token_counts_and_utilization_are_refused_naming_the_field():
    import fmest

    for path, value in (("workload.dataset_tokens", 1e-300), ("workload.avg_seq_len", 0.5)):
        section, name = path.split(".")
        with pytest.raises(InputError) as info:
            fmest.to_job({"model": "gpt2", section: {name: value}})
        assert info.value.field == path, str(info.value)
    # 1 - 1e-300 == 1.0: the fits margin was refused as calibration.safety_margin, a field
    # the user never set
    with pytest.raises(InputError) as info:
        fmest.to_job({"model": "gpt2", "mode": "inference",
                      "inference": {"gpu_memory_utilization": 1e-300}})
    assert info.value.field == "inference.gpu_memory_utilization", str(info.value)


def test_dtype_int8_with_another_technique_is_a_flag_conflict():
    from fmest.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(["estimate", "--model", "gpt2", "--dtype", "int8",
                              "--technique", "full"])
    refused(bounds.check_flags, args, field="--technique")
    for argv in (["--dtype", "nf4", "--technique", "qlora"], ["--dtype", "int8"],
                 ["--dtype", "int8", "--technique", "full", "--mode", "inference"]):
        bounds.check_flags(parser.parse_args(["estimate", "--model", "gpt2", *argv]))


ODDITY_CASES = {
    "epochs with max steps": ({"workload": {"epochs": 3, "max_steps": 10}}, "workload.epochs"),
    "epochs without a dataset": ({"workload": {"epochs": 3}}, "workload.epochs"),
    "average length without a sample count": ({"workload": {"avg_seq_len": 512,
                                                             "dataset_tokens": 1e9}},
                                              "workload.avg_seq_len"),
    "pipeline schedule without a pipeline": ({"parallelism": {"pp_schedule": "gpipe"}},
                                             "parallelism.pp_schedule"),
    "tensor-parallel overlap without tensor parallelism": (
        {"parallelism": {"async_tp": True}}, "parallelism.async_tp"),
    "distributed optimizer with ZeRO or FSDP": (
        {"parallelism": {"distributed_optimizer": True, "zero_stage": 3}},
        "parallelism.distributed_optimizer"),
    "image settings on a text model": ({"training": {"images_per_sample": 2}},
                                       "training.images_per_sample"),
    "encoder/decoder lengths on a decoder-only model": ({"training": {"source_len": 512}},
                                                        "training.source_len"),
    "inference settings in a training job": ({"inference": {"batch": 32}}, "inference.batch"),
    "group size without GPTQ/AWQ": ({"mode": "inference", "inference": {"group_size": 64}},
                                    "inference.group_size"),
    "flat price with a provider": ({"pricing": {"provider": "aws", "price_per_gpu_hour": 2.0}},
                                   "pricing.provider"),
    "main grads dtype without master precision": (
        {"training": {"main_grads_dtype": "compute", "precision": "amp"}},
        "training.main_grads_dtype"),
    "learned model without a learned method": ({"options": {"learned_model": "x"}},
                                               "options.learned_model"),
    "lora dropout without lora": ({"training": {"lora_dropout": 0.1}}, "training.lora_dropout"),
    "lora adapter dtype without lora": ({"training": {"lora_adapter_dtype": "compute"}},
                                        "training.lora_adapter_dtype"),
    "fused lora kernel without lora": ({"training": {"fused_kernels": ["norm", "lora"]}},
                                       "training.fused_kernels"),
    "MoE capacity on a dense model": ({"training": {"moe_expert_capacity_factor": 1.0}},
                                      "training.moe_expert_capacity_factor"),
    "CUDA graph scope outside Megatron-Core": ({"training": {"cuda_graph_scope": ["attn"]}},
                                               "training.cuda_graph_scope"),
    "checkpoint fraction without full checkpointing": (
        {"training": {"checkpoint_fraction": 0.5}}, "training.checkpoint_fraction"),
    "compiled loss without compile": ({"training": {"compile_loss": True}},
                                      "training.compile_loss"),
    "modules to save without LoRA": (
        {"training": {"lora_modules_to_save": ["lm_head"]}}, "training.lora_modules_to_save"),
    "masked softmax fusion without Megatron eager attention": (
        {"training": {"masked_softmax_fusion": False}}, "training.masked_softmax_fusion"),
    "k-bit preparation without a quantized base": (
        {"training": {"technique": "lora", "kbit_prep": "peft"}}, "training.kbit_prep"),
}


def test_every_oddity_has_a_case():
    assert set(ODDITY_CASES) == {o.name for o in bounds.ODDITIES}


@pytest.mark.parametrize("name", sorted(ODDITY_CASES))
def test_oddity_is_answered_with_a_warning_naming_the_field(name, engine):
    """Legal but odd (a setting the run ignores): answered, warned naming the field; the
    plain job is not warned."""
    sections, field = ODDITY_CASES[name]
    model = engine.resolve_model(Job(model="llama-2-7b-hf"))
    warnings = bounds.check_oddities(job_of(sections), model)
    assert len(warnings) == 1 and warnings[0].startswith(f"{field}: "), warnings
    assert bounds.check_oddities(job(), model) == ()


def test_a_field_at_its_default_contradicts_nothing():
    """A job exported with every field (job_to_dict) reads back: default LoRA settings on a
    full fine-tune are not a conflict."""
    from fmest.convert import job_from_dict, job_to_dict

    plain = job()
    bounds.check_conflicts(job_from_dict(job_to_dict(plain)))
    refused(bounds.check_conflicts, job(parallelism={"fsdp_backward_prefetch": "none"}),
            field="parallelism.fsdp_backward_prefetch")


def test_flag_conflicts():
    from fmest.cli import build_parser

    parser = build_parser()
    for argv, field in ((["--lora", "--qlora"], "--qlora"),
                        (["--flashattn", "--attn", "eager"], "--attn"),
                        (["--fused-loss", "--loss", "chunked"], "--loss"),
                        (["--lora", "--technique", "full"], "--technique")):
        args = parser.parse_args(["estimate", "--model", "gpt2", *argv])
        refused(bounds.check_flags, args, field=field)
    for argv in (["--lora"], ["--flashattn", "--attn", "flash"], ["--fused-loss", "--loss",
                                                                   "fused"]):
        bounds.check_flags(parser.parse_args(["estimate", "--model", "gpt2", *argv]))


# -- hardware ----------------------------------------------------------------------------------
GPUS = {g.name: g for g in shipped_gpus()}
# the lists (architecture whitepapers; FlashAttention-2 README)
FP8_YES = ("H100-SXM-80GB", "H200-SXM-141GB", "B200-SXM-180GB", "L40S-48GB", "L4-24GB",
           "RTX4090-24GB", "MI300X-192GB")
FP8_NO = ("A100-SXM-80GB", "V100-SXM2-16GB", "A10-24GB", "T4-16GB", "RTX3090-24GB")


def test_gpu_table_capabilities_match_the_architectures():
    assert all(GPUS[n].fp8_units is True for n in FP8_YES)
    assert all(GPUS[n].fp8_units is False for n in FP8_NO)
    assert GPUS["V100-SXM2-16GB"].bf16_units is False and GPUS["T4-16GB"].bf16_units is False
    for g in GPUS.values():
        if g.compute_capability:
            assert g.flash_attention_2 is (float(g.compute_capability) >= 8.0), g.name
        if any(v is not None for v in (g.bf16_units, g.fp8_units, g.flash_attention_2)):
            assert g.capability_source.startswith("https://"), g.name
        if g.fp8_units is False:
            assert g.fp8_flops_per_s is None, g.name  # no FP8 units, no FP8 peak


@pytest.mark.parametrize("gpu,training,field", [
    ("A100-SXM-80GB", {"dtype": "fp8"}, "training.dtype"),
    ("RTX3090-24GB", {"dtype": "fp8"}, "training.dtype"),
    ("V100-SXM2-16GB", {"dtype": "fp8"}, "training.dtype"),
    ("T4-16GB", {"dtype": "fp16", "attention": "flash"}, "training.attention"),
    ("V100-SXM2-32GB", {"dtype": "fp16", "attention": "flash"}, "training.attention"),
])
def test_hardware_refusals(gpu, training, field):
    err = refused(bounds.check_hardware, job(training=training), GPUS[gpu], field=field)
    assert gpu in str(err) and "https://" in str(err)


def test_default_dtype_on_a_gpu_without_bf16_is_answered_with_a_warning():
    """bf16 is the default dtype: a user who names a T4 and no dtype gets an answer (the fp16
    figures) and a warning naming the field (bf16 and fp16 store the same bytes; the time
    plugins read the fp16 peak, GpuSpec.peak_flops_per_s)."""
    (warning,) = bounds.check_hardware(job(), GPUS["T4-16GB"])
    assert warning.startswith("training.dtype:") and "T4" in warning


@pytest.mark.parametrize("gpu,training", [
    ("H100-SXM-80GB", {"dtype": "fp8"}), ("L4-24GB", {"dtype": "fp8"}),
    ("A100-SXM-80GB", {"dtype": "bf16", "attention": "flash"}),
    ("T4-16GB", {"dtype": "fp16", "attention": "sdpa"}), ("TPU-v5e", {"dtype": "fp8"}),
])
def test_hardware_accepts(gpu, training):
    bounds.check_hardware(job(training=training), GPUS[gpu])


# -- model --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def engine():
    from fmest.testing import new_engine

    return new_engine()


def test_learned_position_table(engine):
    gpt2 = engine.resolve_model(Job(model="gpt2"))
    four_k = Job(model="gpt2").evolve(training={"seq_len": 4096})
    err = refused(bounds.check_model_job, four_k, gpt2, resolve_layout(four_k),
                  field="training.seq_len")
    assert "1024" in str(err)
    ok = Job(model="gpt2").evolve(training={"seq_len": 1024})
    assert bounds.check_model_job(ok, gpt2, resolve_layout(ok)) == ()
    # the default length the user did not choose: answered, with a warning naming the field
    default = Job(model="gpt2")
    (warning,) = bounds.check_model_job(default, gpt2, resolve_layout(default))
    assert warning.startswith("training.seq_len:") and "1024" in warning
    llama = engine.resolve_model(Job(model="llama-2-7b-hf"))  # rotary: no table to run off
    long = job(training={"seq_len": 65536})
    bounds.check_model_job(long, llama, resolve_layout(long))


def test_model_ranges(engine):
    llama = engine.resolve_model(Job(model="llama-2-7b-hf"))
    bounds.check_model(llama)
    for name, value in (("hidden_size", -4096), ("num_attention_heads", 0),
                        ("num_layers", 0), ("vocab_size", 10**12)):
        refused(bounds.check_model, attrs.evolve(llama, **{name: value}),
                field=f"model.{name}")
    refused(bounds.check_model, attrs.evolve(llama, num_kv_heads=3), field="model.num_kv_heads")


def test_pipeline_chunks_and_hsdp_groups(engine):
    llama = engine.resolve_model(Job(model="llama-2-7b-hf"))  # 32 layers
    bad = job(parallelism={"pp": 4, "pp_virtual_stages": 9, "pp_schedule": "interleaved"})  # 36 > 34
    refused(bounds.check_model_job, bad, llama, resolve_layout(bad),
            field="parallelism.pp_virtual_stages")
    for v in (2, 3):  # 8 even chunks; 12 uneven ones (Llama 3 405B style) are real too
        ok = job(parallelism={"pp": 4, "pp_virtual_stages": v, "pp_schedule": "interleaved"})
        bounds.check_model_job(ok, llama, resolve_layout(ok))
    hsdp = job(parallelism={"fsdp": "hybrid_shard", "hsdp_shard_size": 3, "dp": 8})
    refused(bounds.check_model_job, hsdp, llama, resolve_layout(hsdp),
            field="parallelism.hsdp_shard_size")


# -- answers -------------------------------------------------------------------------------------
def _memory(total, components):
    return MemoryEstimate(total_bytes=total, components=components,
                          provenance=Provenance(basis="analytic"))


@pytest.mark.parametrize("answer,word", [
    (_memory(-1, {"weights": -1}), "total_bytes"),
    (_memory(100, {"weights": 4, "gradients": 4}), "sum"),
    (_memory(8, {"weights": float("nan")}), "components"),
    (TimeEstimate(step_seconds=float("nan"), breakdown={}, provenance=Provenance(
        basis="analytic")), "step_seconds"),
    (TimeEstimate(step_seconds=1.0, breakdown={"compute": -1.0}, provenance=Provenance(
        basis="analytic")), "breakdown"),
    (CostEstimate(usd=float("inf"), usd_per_hour=1.0, provenance=Provenance(basis="quoted")),
     "usd"),
])
def test_answer_problems_are_named(answer, word):
    assert word in bounds.answer_problem(answer)


def test_sound_answer_passes():
    assert bounds.answer_problem(_memory(8, {"weights": 4, "gradients": 4})) is None


def test_docs_list_every_bound_and_rule():
    text = (ROOT / "docs" / "cli.md").read_text()
    assert bounds.markdown() in text


# -- layout defaults and unanswerable GPUs -----------------------------------------------------
@pytest.mark.parametrize("parallelism,hardware,world,nodes,per_node", [
    ({"dp": 16}, {}, 16, 2, 8),          # docs: "up to 8 per node"
    ({}, {"nodes": 2}, 16, 2, 8),        # nodes without a GPU count: nodes of 8
    ({"dp": 12}, {}, 12, 2, 6),
    ({"tp": 8, "pp": 2}, {}, 16, 2, 8),
    ({"dp": 4}, {}, 4, 1, 4),
    ({"dp": 4}, {"gpus_per_node": 2, "nodes": 2}, 4, 2, 2),
])
def test_layout_defaults(parallelism, hardware, world, nodes, per_node):
    layout = resolve_layout(job(parallelism=parallelism, hardware=hardware))
    assert (layout.world_size, layout.nodes, layout.gpus_per_node) == (world, nodes, per_node)


def test_a_gpu_without_flop_figures_says_why_time_is_missing():
    import fmest
    import fmest_memory_theory.plugin as memory_theory
    import fmest_time_roofline.plugin as time_roofline
    from fmest.testing import new_engine

    engine = new_engine((memory_theory, "memory_theory"), (time_roofline, "time_roofline"))
    report = fmest.estimate({"model": "llama-2-7b-hf", "training": {"seq_len": 512},
                             "hardware": {"gpu": "A10G"}}, engine=engine)
    assert report.memory is not None and report.time is None
    assert any(w.startswith("hardware.gpu: A10G-24GB has no bf16 FLOP/s figure")
               for w in report.warnings), report.warnings
