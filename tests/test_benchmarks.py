"""The evidence set and the out-of-source accuracy benchmark (issue 11): the data validate, the
row -> job rules hold, LOSO refits per held-out source, and ``--json`` keeps its contract.
Reads only the repository's data (benchmarks/data)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "data"))

import accuracy  # noqa: E402
import build  # noqa: E402
import fitting  # noqa: E402
import measured  # noqa: E402


@pytest.fixture(autouse=True)
def _repo_data(monkeypatch):
    monkeypatch.delenv("FMEST_MEASURED_CSV", raising=False)


def _row(**over) -> dict:
    """A complete, valid schema row (an 8-GPU Llama-2-7B FSDP run) with ``over`` applied."""
    row = {c: "" for c in build.COLUMNS}
    row.update(id="t-row", source="test-source", kind="throughput",
               model="meta-llama/Llama-2-7b-hf", params_b="6.74", gpu="H100-SXM-80GB",
               num_gpus="8", dtype="bf16", technique="full", optimizer="adamw", seq_len="4096",
               micro_batch="2", zero_or_fsdp="fsdp", activation_checkpointing="full",
               flash_attention="true", stack="pytorch", measured_value="3000",
               unit="tokens_per_sec_per_gpu", source_url="https://example.org/x",
               date_read="2026-11-23")
    row.update(over)
    return row


# -- the data -----------------------------------------------------------------------------
def test_measured_csv_validates_against_the_schema():
    header, rows = build.read_csv(build.OUT_CSV)
    assert header == build.COLUMNS
    sources_text = build.OUT_SOURCES.read_text(encoding="utf-8")
    good, bad = build.validate(rows, sources_text)
    assert bad == []
    assert len(good) == len(rows) and len({r["id"] for r in rows}) == len(rows)
    for source in {r["source"] for r in rows}:  # every source described in SOURCES.md
        assert source in sources_text, source
    assert all(r["date_read"] for r in rows)


def test_validation_rejects_bad_rows():
    ok = _row()
    text = "test-source"
    assert build.row_errors(ok, text) == []
    assert any("unit" in e for e in build.row_errors(_row(unit="GiB"), text))
    assert any("measure_type" in e for e in build.row_errors(_row(kind="memory", unit="GiB",
                                                                   measure_type="peak"), text))
    assert any("seq_len" in e for e in build.row_errors(_row(seq_len="4k"), text))
    assert any("not described" in e for e in build.row_errors(_row(source="elsewhere"), text))
    assert build.row_errors(_row(oom="true", measured_value=""), text) == []
    _, bad = build.validate([ok, dict(ok)], text)
    assert len(bad) == 1 and "duplicate id" in bad[0]


def test_dev_rows_are_in_the_repo_with_a_source_and_stack():
    rows = [r for r in measured.load_rows() if r["id"].startswith("dev-")]
    assert len(rows) == 97
    assert {r["stack"] for r in rows} >= {"torchtune", "torchtitan", "llm-foundry"}
    assert all(r["source"] and r["stack"] for r in rows)


# -- the mapping rules ------------------------------------------------------------------------
def test_mapping_rules_sharding_layout_and_batch():
    job = measured.map_row(_row(zero_or_fsdp="distopt", tp="2", num_gpus="16",
                                global_batch="64", micro_batch="2", stack="megatron-core")).job
    par, tr = job["parallelism"], job["training"]
    assert par["zero_stage"] == 1 and par["dp"] == 8 and par["sequence_parallel"] is True
    assert tr["grad_accum_steps"] == 64 // (2 * 8)
    hybrid = measured.map_row(_row(zero_or_fsdp="fsdp-hybrid", num_gpus="16")).job
    assert hybrid["parallelism"]["fsdp"] == "hybrid_shard"
    assert hybrid["parallelism"]["hsdp_shard_size"] == 8
    assert hybrid["hardware"] == {"gpu": "H100-SXM-80GB", "gpus_per_node": 8, "nodes": 2}
    assert measured.map_row(_row(zero_or_fsdp="fsdp-grad-op")).job["parallelism"]["fsdp"] \
        == "shard_grad_op"
    assert measured.map_row(_row(num_gpus="8", dp="4")).reason.startswith("dp*tp*pp*cp")


def test_mapping_rules_precision_technique_and_unsupported():
    lora = measured.map_row(_row(technique="lora", lora_rank="8",
                                 other="targets=query+value; precision=bf16-true")).job
    assert lora["training"]["lora_target_modules"] == ["q_proj", "v_proj"]
    assert lora["training"]["precision"] == "pure" and lora["training"]["lora_rank"] == 8
    pure = measured.map_row(_row(other="torch_dtype=bfloat16; trainer bf16=unset")).job
    assert pure["training"]["precision"] == "pure"
    assert measured.map_row(_row(dtype="bf16+float8")).job["training"]["dtype"] == "fp8"
    gptq = measured.map_row(_row(technique="gptq-lora", model="TheBloke/Llama-2-7B-GPTQ"))
    # rule 4: a GPTQ base is 4-bit weights with double-quantized NF4's bytes; rule 1 drops -GPTQ
    assert gptq.job["training"]["technique"] == "qlora" and "QLoRA" in gptq.features
    assert gptq.job["training"].get("double_quantization", True) is True
    assert gptq.job["model"] == "meta-llama/Llama-2-7b-hf"
    # LitGPT's LLaMA-Adapter is a technique of its own (adapter, adapter_v2, their 4-bit forms)
    adapter = measured.map_row(_row(technique="adapter"))
    assert adapter.job is not None and adapter.job["training"]["technique"] == "adapter"
    unknown_technique = measured.map_row(_row(technique="prefix-tuning"))
    assert unknown_technique.job is None and unknown_technique.reason == \
        "technique 'prefix-tuning'"
    unknown = measured.map_row(_row(model="acme/never-heard-of-it-9b"))
    assert unknown.job is None and "no preset" in unknown.reason
    assert measured.map_row(_row(micro_batch="")).reason == "micro-batch size not stated"
    mapped = measured.map_row(_row(stack="deepspeed", tp="2", pp="2", cp="2", ep="1"))
    assert mapped.stack == "deepspeed"
    assert set(mapped.features) >= {"TP", "PP", "CP", "ZeRO-3/FSDP"}


def test_mapping_reads_stated_virtual_stages_and_zero_buffers():
    """Rule 8: a stated vp (``vp=5``, a copied table's ``VP=8``, a launcher's ``-vp 12``)
    interleaves the pipeline; ``vp=NA`` states none. Rule 15: DeepSpeed buffer keys stated in
    ``other`` set the job's ``zero_*`` fields (stage-3 keys only at stage 3)."""
    def par(**over):
        return measured.map_row(_row(**over)).job["parallelism"]
    pp = dict(pp="2", tp="1", num_gpus="8", zero_or_fsdp="none")
    assert par(**pp, other="vp=5")["pp_virtual_stages"] == 5
    assert par(**pp, other="table: TP=1, PP=2, VP=8, FSDP=4")["pp_virtual_stages"] == 8
    assert par(**pp, other="vp: the table says NA but launch.sh passes -vp 12")[
        "pp_virtual_stages"] == 12
    assert "pp_virtual_stages" not in par(**pp, other="vp=NA")
    assert par(**pp, other="virtual_pipeline_stages=3; vp=5")["pp_virtual_stages"] == 3
    z3 = par(zero_or_fsdp="3", other="ds_config: sub_group_size 1e8, "
                                     "stage3_max_live_parameters 1e8, reduce_bucket_size=2e8")
    assert z3["zero3_sub_group_elems"] == 100_000_000
    assert z3["zero3_max_live_params"] == 100_000_000
    assert z3["zero_reduce_bucket_elems"] == 200_000_000
    z2 = par(zero_or_fsdp="2", other="sub_group_size 1e8, reduce_bucket_size 2e8")
    assert "zero3_sub_group_elems" not in z2 and z2["zero_reduce_bucket_elems"] == 200_000_000


def test_mapping_cpu_offload_reads_negations():
    assert measured._cpu_offload("fsdp, no cpu offload; x") == ""
    assert measured._cpu_offload("activation cpu offload false; gbs 48") == ""
    assert measured._cpu_offload("fsdp with cpu offload (offload=params/grads)") == "params"
    assert measured._cpu_offload("zero-3 with cpu offload of optimizer states") == "optimizer"
    assert measured._cpu_offload("cpu_offload=true", fsdp=True) == "params"


def test_mapping_cpu_offload_reads_other_phrasings():
    # ALST / Ulysses documents: "optimizer states offloaded to CPU", "CPU optimizer offloading"
    assert measured._cpu_offload("deepspeed zero-3 with optimizer states offloaded to cpu; x") \
        == "optimizer"
    assert measured._cpu_offload("zero-3, cpu optimizer offloading, gradient checkpointing") \
        == "optimizer"
    assert measured._cpu_offload("zero-3 with optimizer and parameters offloaded to cpu)") \
        == "params"
    assert measured._cpu_offload("model weights offload to cpu (zero-3 offload_param)") \
        == "params"
    # an offload of the activation checkpoints moves no model state (rule 9)
    assert measured._cpu_offload("liger + tiledmlp + activation-checkpoint offload to cpu") == ""
    assert measured._cpu_offload("recipe (tiled_mlp_compute, activation_checkpoint_cpu_offload)") \
        == ""


def test_mapping_reads_prime_rl_fused_lm_head_as_a_fused_loss():
    # prime-rl's RL trainer computes log-probs over vocabulary chunks (FusedOutputLinear);
    # its SFT trainer disables that head and materializes the logits
    rl = measured.map_row(_row(other="fused chunked LM head (fused_lm_head_chunk_size "
                                     "auto=2048)"))
    sft = measured.map_row(_row(other="fused LM head disabled for SFT, full logits + torch "
                                      "CrossEntropyLoss"))
    assert rl.job["training"]["loss"] == "fused"
    assert sft.job["training"].get("loss", "standard") == "standard"


def test_a_timed_step_that_writes_the_weights_to_disk_is_unsupported():
    text = ("each RL step (steps 1-3) also writes the updated weights to disk (filesystem "
            "weight broadcast, safetensors), inside the timed step")
    assert measured.map_row(_row(other=text)).job is None
    assert measured.map_row(_row(other=text, kind="memory", unit="GiB",
                                 measure_type="max_memory_reserved")).job is not None


def test_arctic_training_flops_reproduces_the_alst_papers_figure():
    # ALST paper Table 1, last row: Llama-3.1-8B, recipe max_length 3,800,000, one sequence
    # over 8 H100 (Ulysses SP 8), 1:47:35 per iteration, 590.6 TFLOPS per GPU printed
    from fmest.models.presets import load_preset

    model = load_preset("meta-llama/Llama-3.1-8B")
    flops = accuracy.arctic_training_flops(model, seq=3_800_000, sequences=1)
    assert flops / (6455 * 8) / 1e12 == pytest.approx(590.6, rel=0.01)
    job = measured.map_row(_row(other="lightning fsdp, no cpu offload")).job
    assert "cpu_offload" not in job["parallelism"]


def test_mapping_gpu_and_model_names():
    assert measured.gpu_name("A100-SXM-80GB") == "A100-SXM-80GB"
    assert measured.gpu_name("H100-96GB") == "H100-SXM-96GB"
    assert measured.gpu_name("80GB GPU (model not stated)") == "A100-SXM-80GB"
    assert measured.gpu_name("Abacus-9000") is None
    job = measured.map_row(_row(model="mistralai/Mixtral-8x7B-Instruct-v0.1")).job
    assert job["model"] == "mistralai/Mixtral-8x7B-v0.1"
    assert measured.gpu_name("RTX6000Ada-48GB (not in schema list)") == "RTX6000-ADA-48GB"
    gpt3 = measured.map_row(_row(model="GPT3-175B (NeMo/Megatron GPT-3 config)")).job
    assert (gpt3["model_config"]["n_layer"], gpt3["model_config"]["n_embd"]) == (96, 12288)
    bloom = measured.map_row(_row(
        model="bigscience custom GPT (n_layers=8; hidden=14400; n_heads=32; vocab=250k)")).job
    assert bloom["model_config"]["model_type"] == "bloom"
    assert bloom["model_config"]["n_embed"] == 14400 and bloom["model_config"]["n_layer"] == 8
    shape = measured.map_row(_row(model="llama2-arch-34b (CodeLlama-34B shape)")).job
    assert shape["model"] == "codellama/CodeLlama-34b-hf"
    phi3 = measured.map_row(_row(model="microsoft/Phi-3-mini-4k-instruct", technique="lora",
                                 other="targets=q_proj+k_proj+v_proj+o_proj")).job
    assert phi3["training"]["lora_target_modules"] == ["o_proj", "qkv_proj"]


def test_dev_torchtune_row_keeps_its_rules():
    row = next(r for r in measured.load_rows("memory")
               if r["id"] == "dev-tt32-3b-packed-mem")
    job = measured.map_row(row).job
    assert job["training"]["precision"] == "pure"
    assert job["training"]["optimizer_impl"] == "fused"
    assert row["measure_type"] == "active_bytes"


# -- baselines --------------------------------------------------------------------------------
def test_korthikanti_activation_formula():
    args = dict(seq_len=2048, micro_batch=1, hidden=4096, heads=32, layers=2, tp=1)
    sbh = 2048 * 4096
    no_ac = accuracy.korthikanti_activation_bytes(checkpointing="none", flash=False, **args)
    assert no_ac == pytest.approx(2 * sbh * (34 + 5 * 32 * 2048 / 4096))
    assert accuracy.korthikanti_activation_bytes(checkpointing="none", flash=True, **args) \
        == pytest.approx(2 * sbh * 34)
    full = accuracy.korthikanti_activation_bytes(checkpointing="full", flash=False,
                                                 **dict(args, tp=2))
    assert full == pytest.approx(2 * 2 * sbh / 2)


# -- LOSO --------------------------------------------------------------------------------------
def _items():
    # source a: measured = 2 x predicted; b and c: 1 x and 1.5 x
    out = []
    for source, ratio in (("a", 2.0), ("b", 1.0), ("c", 1.5)):
        for n in range(3):
            out.append(fitting.Scored(id=f"{source}{n}", source=source, stack="s",
                                      quantity="memory", measured=ratio * (10 + n),
                                      predicted=10.0 + n))
    return out


def test_loso_refits_per_held_out_source():
    items = _items()
    fitter = fitting.RatioFitter(quantity="memory")
    preds, folds = fitting.leave_one_source_out(items, [fitter])
    assert {k: v[0]["all"] for k, v in folds.items()} == {"a": 1.25, "b": 1.75, "c": 1.5}
    assert preds["a0"] == pytest.approx(10.0 * 1.25)  # a's own ratio (2) never used for a
    inside = fitting.in_sample(items, [fitter])
    assert inside["a0"] == pytest.approx(10.0 * 1.5)
    # no fitters: LOSO == in-sample == the raw prediction
    assert fitting.leave_one_source_out(items, [])[0] == {i.id: i.predicted for i in items}


def test_loso_passes_product_overrides_through_the_environment():
    seen = []

    class ProductConstant(fitting.RatioFitter):
        def overrides(self, params):
            return {"scale": params["all"]}

    def reestimate(item):
        path = os.environ[fitting.ENV_VAR]
        seen.append((item.source, json.loads(Path(path).read_text())))
        return item.predicted

    fitting.leave_one_source_out(_items(), [ProductConstant(quantity="memory")], reestimate)
    assert fitting.ENV_VAR not in os.environ
    by_source = {s: v for s, v in seen}
    assert by_source["a"]["ratio-memory-by-all"]["scale"] == 1.25
    assert by_source["b"]["ratio-memory-by-all"]["scale"] == 1.75


def test_summary_weights_sources_equally():
    items = [{"id": f"a{n}", "source": "a"} for n in range(9)] + \
        [{"id": "b0", "source": "b"}, {"id": "c0", "source": "c"}]
    errors = {f"a{n}": 1.0 for n in range(9)} | {"b0": 50.0, "c0": -60.0}
    s = accuracy.summary(items, errors)
    assert s["median_abs_pct"] == 1.0 and s["worst_id"] == "c0" and s["worst_pct"] == -60.0
    assert s["source_weighted_median_abs_pct"] == 50.0  # a's nine rows weigh as one
    assert s["within10_share"] == pytest.approx(9 / 11, abs=1e-3)


# -- the --json contract -----------------------------------------------------------------------
def test_accuracy_json_contract():
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
        assert accuracy.main(["--json"]) == 0
    out = json.loads(buf.getvalue())
    assert out["rows"] > 0 and out["sources"] > 0
    for quantity in ("memory", "throughput"):
        assert {"in_sample", "loso", "per_stack"} <= set(out[quantity])
        for key in ("in_sample", "loso"):
            assert {"rows", "median_abs_pct", "p90_abs_pct", "within10_share", "worst_id"} \
                <= set(out[quantity][key])
        assert out[quantity]["loso"]["rows"] > 0


def test_implied_peak_share_flags_rates_above_the_dense_peak():
    res = {"kind": "throughput", "unit": "tokens_per_sec_per_gpu", "measured": 1000.0,
           "row": {"technique": "full"}, "baselines": {accuracy.BASE_6N: 1000.0}}
    assert accuracy.implied_peak_share(res) == pytest.approx(0.40)
    res["measured"] = 3000.0  # 3x "6N at 40 % of peak" = 120 % of peak
    assert accuracy.implied_peak_share(res) > 1.0
    step = dict(res, unit="seconds_per_step", measured=2.0, baselines={accuracy.BASE_6N: 1.0})
    assert accuracy.implied_peak_share(step) == pytest.approx(0.20)


def test_an_unaccepted_stack_name_is_dropped_not_fatal():
    from fmest.errors import InputError

    seen = []

    def fake_job_from_dict(job):
        seen.append(dict(job["training"]))
        if "stack" in job["training"]:
            raise InputError("training.stack", "not an accepted value", value="litgpt")
        return "job"

    assert accuracy._job_with_known_stack(
        fake_job_from_dict, {"training": {"stack": "litgpt", "seq_len": 8}}) == "job"
    assert seen == [{"stack": "litgpt", "seq_len": 8}, {"seq_len": 8}]
    assert measured.STACK_PROFILES["ms-swift"] == "hf-trainer"
