"""Recipe readers of issue 23: LitGPT, TRL / alignment-handbook, NeMo 1 and Megatron-Bridge YAML,
read from the real files in tests/data/configs/corpus (MANIFEST.tsv gives repo and commit)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
import yaml

from fmest.configs import detect_from_doc, load_configs, parse_text
from fmest.errors import NotTrainingError

CORPUS = Path(__file__).parent / "data" / "configs" / "corpus"
NEMO = CORPUS / "nemo/examples/nlp/language_modeling/conf"


def run_cli(*argv: str) -> dict:
    """``fmest estimate ... --format json`` in-process: the report or ``{"error": ...}``; any
    exception other than the CLI's own exit escapes (a crash)."""
    from fmest.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        try:
            main(["estimate", *argv, "--format", "json"])
        except SystemExit:
            pass
    return json.loads(out.getvalue())


def load(rel: str):
    return load_configs([str(CORPUS / rel)])


def fmt(rel: str) -> str:
    path = CORPUS / rel
    return detect_from_doc(str(path), parse_text(str(path), path.read_text()))


def test_litgpt_lora_recipe():
    rel = "litgpt/config_hub/finetune/llama-2-7b/lora.yaml"
    assert fmt(rel) == "litgpt"
    d = load(rel).data
    assert d["model"] == "meta-llama/Llama-2-7b-hf"
    assert d["training"]["technique"] == "lora"
    assert d["training"]["lora_rank"] == 32
    assert d["training"]["lora_target_modules"] == ["q_proj", "v_proj"]
    assert d["training"]["seq_len"] == 512
    assert (d["training"]["dtype"], d["training"]["precision"]) == ("bf16", "pure")
    # global 8 // 1 GPU // micro 2
    assert d["training"]["micro_batch_size"] == 2 and d["training"]["grad_accum_steps"] == 4
    assert d["hardware"]["gpus_per_node"] == 1


def test_litgpt_qlora_and_full():
    q = load("litgpt/config_hub/finetune/llama-2-7b/qlora.yaml").data
    assert q["training"]["technique"] == "qlora" and q["training"]["quantization_bits"] == 4
    f = load("litgpt/config_hub/finetune/llama-2-7b/full.yaml").data
    assert f["training"]["technique"] == "full"
    assert f["hardware"]["gpus_per_node"] == 4
    assert f["parallelism"]["fsdp"] == "full_shard"
    assert f["training"]["activation_checkpointing"] == "full"


def test_litgpt_pretrain_inline_model():
    d = load("litgpt/config_hub/pretrain/tinystories.yaml").data
    assert d["model_config"]["num_hidden_layers"] == 6
    assert d["model_config"]["vocab_size"] == 32000
    assert d["training"]["technique"] == "full"


def test_alignment_handbook_dpo_qlora():
    rel = "alignment-handbook/recipes/zephyr-7b-beta/dpo/config_qlora.yaml"
    assert fmt(rel) == "trl"
    m = load(rel)
    t = m.data["training"]
    assert m.data["model"] == "alignment-handbook/zephyr-7b-sft-qlora"
    assert (t["technique"], t["lora_rank"], t["seq_len"]) == ("qlora", 128, 1024)
    assert t["attention"] == "flash" and t["activation_checkpointing"] == "full"
    assert "down_proj" in t["lora_target_modules"]
    # PEFT: TRL disables the adapters for the reference pass (dpo_trainer.py): no copy
    assert (t["objective"], t["reference_model"]) == ("dpo", "adapter")
    assert not any("reference" in n for n in m.not_modelled)


def test_alignment_handbook_full_dpo_counts_the_reference_model():
    m = load("alignment-handbook/recipes/zephyr-7b-beta/dpo/config_full.yaml")
    t = m.data["training"]
    assert t["technique"] == "full"
    assert (t["objective"], t["reference_model"]) == ("dpo", "copy")
    assert not any("reference" in n or "rejected" in n for n in m.not_modelled)


def test_alignment_handbook_liger_fused_loss():
    d = load("alignment-handbook/recipes/smollm3/dpo/apo.yaml").data
    assert d["training"]["loss"] == "fused" and d["training"]["seq_len"] == 24576


LLAMA2_7B_PARAMS = 6_738_415_616   # meta-llama/Llama-2-7b-hf (fmest preset, published count)


def test_nemo_llama2_dims_give_6_74b(tmp_path):
    """megatron_llama_config.yaml's 7B dims with a Hugging Face tokenizer: a gated MLP,
    untied head and a 32000 vocabulary, 6.74 B parameters (not the GELU model's 5.26 B)."""
    doc = yaml.safe_load((NEMO / "megatron_llama_config.yaml").read_text())
    doc["model"]["tokenizer"] = {"library": "huggingface", "type": "meta-llama/Llama-2-7b-hf"}
    path = tmp_path / "megatron_llama2_7b.yaml"
    path.write_text(yaml.safe_dump(doc))
    m = load_configs([str(path)])
    cfg = m.data["model_config"]
    assert cfg["model_type"] == "llama" and cfg["vocab_size"] == 32000
    assert cfg["tie_word_embeddings"] is False
    total = run_cli("--config", str(path))["model"]["total_params"]
    assert abs(total - LLAMA2_7B_PARAMS) / LLAMA2_7B_PARAMS < 0.005


def test_nemo_amp_o2_and_null_fields(tmp_path):
    doc = yaml.safe_load((NEMO / "megatron_gpt_config.yaml").read_text())
    assert doc["model"]["num_query_groups"] is None and doc["model"]["megatron_amp_O2"] is True
    m = load_configs([str(NEMO / "megatron_gpt_config.yaml")])
    t = m.data["training"]
    assert (t["stack"], t["dtype"], t["precision"]) == ("megatron-core", "bf16", "master")
    doc["model"]["megatron_amp_O2"] = False   # Lightning native AMP: fp32 params, autocast
    path = tmp_path / "megatron_gpt_no_o2.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert load_configs([str(path)]).data["training"]["precision"] == "amp"


def test_nemo_max_steps_minus_one_is_unset():
    m = load_configs([str(NEMO / "megatron_t5_finetune.yaml")])
    assert "max_steps" not in m.data.get("workload", {})


def test_nemo_not_training_refused():
    with pytest.raises(NotTrainingError, match="quantization"):
        load_configs([str(NEMO / "megatron_gpt_ptq.yaml")])
    with pytest.raises(NotTrainingError, match="export"):
        load_configs([str(NEMO / "megatron_gpt_export.yaml")])


def test_nemo_generation_is_inference():
    m = load_configs([str(NEMO / "megatron_gpt_inference.yaml")])
    assert m.data["mode"] == "inference" and m.data["inference"]["output_tokens"] == 30


def test_megatron_bridge_peft():
    d = load("megatron-bridge/tutorials/recipes/llama/conf/llama32_1b_finetune.yaml").data
    assert d["training"]["technique"] == "lora"
    assert d["training"]["lora_rank"] == 8 and d["training"]["lora_alpha"] == 16.0
    assert d["training"]["seq_len"] == 4096


PROJECTS = ("litgpt", "alignment-handbook", "trl", "nemo", "megatron-bridge", "megatron-lm")
ALL_YAML = sorted(str(p.relative_to(CORPUS)) for proj in PROJECTS
                  for p in (CORPUS / proj).rglob("*") if p.suffix in (".yaml", ".yml"))


def test_corpus_has_the_recipes():
    assert len(ALL_YAML) > 150


@pytest.mark.parametrize("rel", ALL_YAML)
def test_every_corpus_yaml_answers_or_refuses(rel):
    """Each file estimates (with meta-llama/Llama-3.1-8B when it names no model fmest knows)
    or is refused with an InputError (an ``error`` object); nothing else escapes."""
    out = run_cli("--config", str(CORPUS / rel))
    if "error" in out and out["error"]["field"].startswith("model"):
        out = run_cli("--config", str(CORPUS / rel), "--model", "meta-llama/Llama-3.1-8B")
    assert "error" in out or out["model"]["total_params"] > 0


def _trl_sft(tmp_path, **extra) -> dict:
    doc = {"model_name_or_path": "Qwen/Qwen3-8B", "dataset_name": "trl-lib/Capybara",
           "max_length": 4096, "bf16": True, "per_device_train_batch_size": 1, **extra}
    path = tmp_path / "sft" / "config.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(doc))
    return load_configs([str(path)]).data


def test_trl_sft_default_loss_is_chunked_nll(tmp_path):
    """TRL >= 1.7 runs SFT with loss_type chunked_nll unless set (huggingface/trl b58947c7e):
    the lm_head and cross-entropy in 256-token chunks, never the logits (fmest's fused loss);
    nll and dft project every token; Liger keeps its own fused loss."""
    assert _trl_sft(tmp_path)["training"]["loss"] == "fused"
    assert _trl_sft(tmp_path, loss_type="chunked_nll")["training"]["loss"] == "fused"
    assert _trl_sft(tmp_path, loss_type="nll")["training"].get("loss", "standard") == "standard"
    assert _trl_sft(tmp_path, loss_type="dft")["training"].get("loss", "standard") == "standard"
    liger = _trl_sft(tmp_path, use_liger_kernel=True, loss_type="nll")["training"]
    assert liger["loss"] == "fused" and liger["liger"] is True
    with pytest.raises(Exception) as err:
        _trl_sft(tmp_path, use_liger_kernel=True, loss_type="chunked_nll")
    assert "loss_type" in str(err.value)
    with pytest.raises(Exception) as err:
        _trl_sft(tmp_path, loss_type="sigmoid")
    assert "loss_type" in str(err.value) and "chunked_nll" in str(err.value)
