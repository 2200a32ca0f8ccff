"""axolotl, LLaMA-Factory and TrainingArguments read faithfully (issue 23): the model and sequence
length wherever each tool names them, attention and Liger switches, every transformers optimizer
name, regex LoRA targets, OFT/freeze/GaLore-style methods as not-modelled warnings, and recipes
that do not train (merge, export, evaluation) refused or answered as serving. Fixtures are the
real files of tests/data/configs/corpus/ (MANIFEST.tsv: repository, commit, path)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fmest.cli import main
from fmest.configs import load_configs
from fmest.configs.axolotl import resolve_regex
from fmest.default_plugins.optimizers import builtin_optimizers
from fmest.errors import InputError, NotTrainingError
from fmest.testing import new_engine

CORPUS = Path(__file__).parent / "data" / "configs" / "corpus"
AX = CORPUS / "axolotl" / "examples"
LF = CORPUS / "llama-factory" / "examples"


def _load(path, fmt=None):
    return load_configs([str(path)], force_format=fmt)


def _field(m, path):
    section, name = path.split(".", 1) if "." in path else (path, None)
    return m.data[section] if name is None else m.data.get(section, {}).get(name)


def _warned(m, key: str) -> list[str]:
    return [w for w in m.not_modelled if f": {key}: " in w or w.split(": ", 2)[1] == key]


def _write(tmp_path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# -- the model and the sequence length --------------------------------------------------------
def test_axolotl_base_model_config_names_the_architecture(tmp_path):
    p = _write(tmp_path, "ax.yaml", "base_model: some/weights\nbase_model_config: "
               "meta-llama/Llama-3.1-8B\nsequence_len: 1024\nmicro_batch_size: 1\n")
    m = _load(p, "axolotl")
    assert m.data["model"] == "meta-llama/Llama-3.1-8B"
    assert m.origins["model"].endswith(": base_model_config")
    assert m.data["training"]["seq_len"] == 1024


def test_llama_factory_v1_model_key_and_cutoff_len():
    m = _load(LF / "v1" / "train_lora" / "train_lora_sft.yaml")
    assert m.data["model"] == "Qwen/Qwen3-4B"
    tr = m.data["training"]
    assert (tr["technique"], tr["lora_rank"], tr["lora_alpha"]) == ("lora", 16, 32.0)
    assert tr["lora_target_modules"] == ["all-linear"]
    assert tr["seq_len"] == 2048 and tr["micro_batch_size"] == 1
    assert tr["activation_checkpointing"] == "full"     # v1 default, stated in the origin
    assert "unset" in m.origins["training.activation_checkpointing"]
    assert m.data["parallelism"]["fsdp"] == "full_shard"
    assert m.data["workload"]["max_steps"] == 10


def test_training_args_style_file_names_model_seq_len_and_attention():
    path = CORPUS / "alignment-handbook" / "recipes" / "smollm2" / "sft" / "config.yaml"
    m = _load(path, "training-args")
    assert m.data["model"] == "HuggingFaceTB/SmolLM2-1.7B"
    assert m.data["training"]["seq_len"] == 8192
    assert m.data["training"]["attention"] == "flash"


def test_trl_max_length_and_flex_attention(tmp_path):
    p = _write(tmp_path, "t.json", json.dumps({"model_name_or_path": "meta-llama/Llama-3.1-8B",
                                               "max_length": 4096, "output_dir": "o",
                                               "attn_implementation": "flex_attention"}))
    m = _load(p, "training-args")
    assert m.data["training"]["seq_len"] == 4096
    assert m.data["training"]["attention"] == "flash"
    assert _warned(m, "attn_implementation")


def test_unknown_attention_implementation_names_the_key(tmp_path):
    p = _write(tmp_path, "t.json", json.dumps({"attn_implementation": "magic", "output_dir": "o"}))
    with pytest.raises(InputError) as exc:
        _load(p, "training-args")
    assert "attn_implementation" in str(exc.value) and "flash_attention_2" in str(exc.value)


# -- attention and Liger ----------------------------------------------------------------------
@pytest.mark.parametrize("line, attention, warned", [
    ("sdp_attention: true", "sdpa", False), ("flash_attention: true", "flash", False),
    ("eager_attention: true", "eager", False), ("xformers_attention: true", "flash", True),
    ("attn_implementation: flex_attention", "flash", True),
    ("attn_implementation: sage", "flash", True),
    ("attn_implementation: flash_attention_3", "flash", False)])
def test_axolotl_attention_switches(tmp_path, line, attention, warned):
    p = _write(tmp_path, "ax.yaml", f"base_model: meta-llama/Llama-3.1-8B\n{line}\n")
    m = _load(p, "axolotl")
    assert m.data["training"]["attention"] == attention
    assert bool(_warned(m, line.split(":")[0])) == warned


def test_axolotl_liger_plugin_sets_liger_and_fused_loss():
    m = _load(AX / "orpheus" / "finetune.yml")
    assert m.data["training"]["liger"] is True
    assert m.data["training"]["loss"] == "fused"


def test_axolotl_liger_switches_without_the_plugin_do_nothing(tmp_path):
    p = _write(tmp_path, "ax.yaml", "base_model: meta-llama/Llama-3.1-8B\nliger_rms_norm: true\n"
               "liger_fused_linear_cross_entropy: true\n")
    m = _load(p, "axolotl")
    assert "liger" not in m.data.get("training", {}) and "loss" not in m.data["training"]
    assert any("liger_rms_norm: no effect" in i for i in m.ignored)


def test_use_liger_kernel_sets_liger(tmp_path):
    p = _write(tmp_path, "t.json", json.dumps({"use_liger_kernel": True, "output_dir": "o"}))
    m = _load(p, "training-args")
    assert m.data["training"]["liger"] is True and m.data["training"]["loss"] == "fused"


def test_llama_factory_v1_liger_kernel_and_attention():
    m = _load(LF / "v1" / "train_full" / "train_full_liger_kernel.yaml")
    assert m.data["training"]["liger"] is True
    m = _load(LF / "v1" / "train_full" / "train_full_ulysses_cp.yaml")
    assert m.data["training"]["attention"] == "flash"
    assert m.data["parallelism"]["cp"] == 2
    assert m.data["training"]["dtype"] == "fp32"      # bf16: false


# -- optimizers -------------------------------------------------------------------------------
def _spec(name):
    for s in builtin_optimizers():
        if name == s.name or name in s.aliases:
            return s
    raise AssertionError(name)


@pytest.mark.parametrize("name, states, element, overhead", [
    ("adamw_torch_8bit", 2, 1.0, 4 / 256), ("adamw_torch_4bit", 2, 0.5, 4 / 128),
    ("ao_adamw_8bit", 2, 1.0, 4 / 256), ("rmsprop", 1, None, 0.0), ("adagrad", 1, None, 0.0),
    ("rmsprop_bnb_8bit", 1, 1.0, 4 / 2048), ("ademamix", 3, None, 0.0),
    ("paged_ademamix_8bit", 3, 1.0, 4 / 2048), ("schedule_free_adamw", 2, None, 0.0),
    ("schedule_free_sgd", 1, None, 0.0), ("paged_lion_32bit", 1, None, 0.0),
    ("adamw_anyprecision", 2, None, 0.0), ("stable_adamw", 2, None, 0.0)])
def test_optimizer_state_table(name, states, element, overhead):
    spec = _spec(name)
    assert spec.states == states and spec.state_bytes_per_element == element
    assert spec.quant_overhead_bytes_per_element == pytest.approx(overhead)
    assert spec.source


def test_every_transformers_optimizer_name_is_answered():
    names = pytest.importorskip("transformers.training_args").OptimizerNames
    from fmest.configs._base import Sink
    from fmest.configs.training_args import map_optimizer

    known = {n for s in builtin_optimizers() for n in (s.name, *s.aliases)}
    for opt in names:
        sink = Sink("f", None, "training-args")
        map_optimizer(sink, "optim", opt.value)
        assert sink.get("training.optimizer") in known, opt.value
        if opt.value.startswith(("galore", "apollo", "lomo", "adalomo", "grokadamw")):
            assert sink.not_modelled and "upper bound" in sink.not_modelled[0]
        else:
            assert not sink.not_modelled, opt.value


def test_torchao_4bit_optimizer_memory_end_to_end(capsys):
    def states(opt):
        rc = main(["estimate", "--format", "json", "--model", "meta-llama/Llama-3.1-8B",
                   "--optimizer", opt], engine=new_engine(entrypoints=True))
        out = json.loads(capsys.readouterr().out)
        assert rc == 0, out
        return out["memory"]["components"]["optimizer_states"]

    # pure bf16: AdamW keeps 2 x 2 B; torchao AdamW4bit 2 x (0.5 B + 4 B / 128)
    assert states("adamw_torch_4bit") / states("adamw") == pytest.approx(2 * (0.5 + 4 / 128) / 4)


def test_galore_optim_is_estimated_as_adamw_with_a_warning(tmp_path):
    p = _write(tmp_path, "t.json", json.dumps({"optim": "galore_adamw_8bit", "output_dir": "o"}))
    m = _load(p, "training-args")
    assert m.data["training"]["optimizer"] == "adamw_8bit"
    assert "upper bound" in _warned(m, "optim")[0]


def test_axolotl_muon_is_not_modelled_not_refused():
    m = _load(AX / "qwen2" / "muon-pretrain-fsdp2.yaml")
    assert m.data["training"]["optimizer"] == "adamw"
    assert _warned(m, "optimizer")


@pytest.mark.parametrize("switch", ["galore", "badam", "apollo"])
def test_llama_factory_low_memory_optimizers_warn(switch):
    path = next((LF / "extras" / switch).glob("*.yaml"))
    m = _load(path)
    assert _warned(m, f"use_{switch}"), m.not_modelled
    # their settings (galore_rank, badam_mode, ...) are reported as part of the switch
    assert any(f"a use_{switch} setting" in i for i in m.ignored), m.ignored


# -- LoRA targets -----------------------------------------------------------------------------
def test_axolotl_regex_targets_resolve_to_module_names():
    m = _load(AX / "gemma3" / "gemma-3-4b-vision-qlora.yml")
    assert set(m.data["training"]["lora_target_modules"]) == {
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    assert not _warned(m, "lora_target_modules")


def test_axolotl_regex_on_some_layers_warns():
    m = _load(AX / "ebft" / "qwen35-4b-ebft-structured.yaml")
    assert "q_proj" in m.data["training"]["lora_target_modules"]
    assert "some layers" in _warned(m, "lora_target_modules")[0]


def test_axolotl_regex_matching_nothing_is_all_linear_with_the_pattern(tmp_path):
    p = _write(tmp_path, "ax.yaml", "base_model: meta-llama/Llama-3.1-8B\nadapter: lora\n"
               "lora_target_modules: 'foo\\.(bar|baz)'\n")
    m = _load(p, "axolotl")
    assert m.data["training"]["lora_target_modules"] == ["all-linear"]
    assert "foo" in _warned(m, "lora_target_modules")[0]


def test_resolve_regex():
    assert resolve_regex(r"model.layers.[\d]+.self_attn.(q|v)_proj") == (["q_proj", "v_proj"],
                                                                          False)
    assert resolve_regex("(") == ([], False)


def test_axolotl_list_targets_are_peft_suffixes():
    m = _load(AX / "llama-4" / "do-no-use-fa2" / "scout-qlora-fsdp1.yaml")
    targets = m.data["training"]["lora_target_modules"]
    assert "q_proj" in targets and not any("." in t for t in targets)


def test_axolotl_lora_keys_without_adapter_are_ignored():
    m = _load(AX / "archived" / "falcon" / "config-7b.yml")
    assert m.data["training"]["technique"] == "full"
    assert "lora_rank" not in m.data["training"]
    assert any("lora_r: no adapter" in i for i in m.ignored)


# -- PEFT methods -----------------------------------------------------------------------------
def test_llama_factory_oft_is_lora_like_with_a_warning():
    m = _load(LF / "extras" / "oft" / "llama3_oft_sft.yaml")
    assert m.data["training"]["technique"] == "lora"
    assert "OFT" in _warned(m, "finetuning_type")[0]


def test_llama_factory_qoft_is_quantised():
    m = _load(LF / "extras" / "qoft" / "llama3_oft_sft_bnb_npu.yaml")
    assert m.data["training"]["technique"] == "qlora"


def test_llama_factory_freeze_is_full_with_a_warning():
    m = _load(LF / "v1" / "train_freeze" / "train_freeze_sft.yaml")
    assert m.data["training"]["technique"] == "full"
    assert "upper bound" in _warned(m, "peft_config.name")[0]


def test_llama_factory_v1_quantised_lora():
    m = _load(LF / "v1" / "train_qlora" / "quantization.yaml")
    assert m.data["training"]["technique"] == "qlora"
    assert m.data["training"]["quantization_bits"] == 4


def test_dora_is_not_modelled(tmp_path):
    p = _write(tmp_path, "ax.yaml", "base_model: meta-llama/Llama-3.1-8B\nadapter: lora\n"
               "peft_use_dora: true\n")
    assert _warned(_load(p, "axolotl"), "peft_use_dora")


# -- recipes that do not train ----------------------------------------------------------------
@pytest.mark.parametrize("path, kind, key", [
    ("merge_lora/qwen3_lora_sft.yaml", "merge", "export_dir"),
    ("merge_lora/qwen3_gptq.yaml", "quantization", "export_quantization_bit"),
    ("merge_lora/qwen3_full_sft.yaml", "export", "export_dir"),
    ("extras/nlg_eval/llama3_lora_predict.yaml", "evaluation", "do_predict")])
def test_llama_factory_non_training_recipes_are_refused(path, kind, key):
    with pytest.raises(NotTrainingError) as exc:
        _load(LF / path)
    assert re.search(rf"an? {kind} recipe", str(exc.value)) and f": {key}:" in str(exc.value)


def test_llama_factory_v1_export_is_a_merge():
    with pytest.raises(NotTrainingError, match="peft_config.export_dir: a merge recipe"):
        _load(LF / "v1" / "train_lora" / "export_lora.yaml", "llama-factory")


def test_llama_factory_do_train_false_is_evaluation(tmp_path):
    p = _write(tmp_path, "lf.yaml", "model_name_or_path: meta-llama/Llama-3.1-8B\n"
               "stage: sft\ndo_train: false\ncutoff_len: 512\n")
    with pytest.raises(NotTrainingError, match="evaluation"):
        _load(p, "llama-factory")


def test_llama_factory_inference_recipe_is_serving():
    m = _load(LF / "inference" / "qwen3_lora_sft.yaml")
    assert m.data["mode"] == "inference"
    assert m.data["inference"]["runtime"] == "transformers"
    assert m.data["inference"]["output_tokens"] == 1024
    assert m.data["model"] == "Qwen/Qwen3-4B-Instruct-2507"
    assert _warned(m, "adapter_name_or_path")


# -- the whole corpus -------------------------------------------------------------------------
FILES = sorted(p for proj in ("axolotl", "llama-factory") for p in (CORPUS / proj).rglob("*")
               if p.suffix in (".yaml", ".yml", ".json"))


@pytest.fixture(scope="module")
def engine():
    return new_engine(entrypoints=True)


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(CORPUS)))
def test_every_corpus_file_answers_or_refuses_naming_a_field(path, engine, capsys):
    rc = main(["estimate", "--format", "json", "--config", str(path)], engine=engine)
    out = json.loads(capsys.readouterr().out)
    if rc != 0:
        assert set(out) == {"error"} and out["error"]["message"], out
    else:
        assert out["memory"]["total_bytes"] > 0


def test_axolotl_some_liger_switches_become_fused_kernels(tmp_path):
    p = _write(tmp_path, "ax.yaml", "base_model: meta-llama/Llama-3.1-8B\nplugins:\n"
               "  - axolotl.integrations.liger.LigerPlugin\nliger_rms_norm: true\n"
               "liger_rope: true\n")
    m = _load(p, "axolotl")
    assert "liger" not in m.data["training"]
    assert m.data["training"]["fused_kernels"] == ["norm", "rope"]
    assert not any("liger" in w for w in m.not_modelled)


def _fms(tmp_path, **over):
    doc = {"model_name_or_path": "mistralai/Mistral-7B-v0.1", "per_device_train_batch_size": 4,
           "bf16": True, "max_seq_length": 4096, "output_dir": "o", **over}
    return _load(_write(tmp_path, "fms.json", json.dumps(doc)), "training-args")


def test_fms_hf_tuning_lora_keys_are_read(tmp_path):
    # fms-hf-tuning's flat sft_trainer JSON: peft_method + LoraConfig fields (defaults r 8,
    # alpha 32, dropout 0.05) and the fused-ops-and-kernels switches
    m = _fms(tmp_path, peft_method="lora", r=16, target_modules=["q_proj", "v_proj"],
             fast_kernels=["True", "True", "True"], fused_lora=["bitsandbytes", "True"],
             bnb_qlora=["nf4"])
    tr = m.data["training"]
    assert tr["technique"] == "qlora" and tr["quantization_method"] == "bnb"
    assert tr["lora_rank"] == 16 and tr["lora_alpha"] == 32.0 and tr["lora_dropout"] == 0.05
    assert tr["lora_target_modules"] == ["q_proj", "v_proj"]
    assert tr["fused_kernels"] == ["lora", "loss", "norm", "rope"]
    assert not any(k in " ".join(m.ignored) for k in ("peft_method", ": r:", "fast_kernels"))


def test_fms_hf_tuning_full_and_prompt_tuning(tmp_path):
    full = _fms(tmp_path, peft_method=None, r=16)
    assert full.data["training"].get("technique", "full") == "full"
    assert any("r: peft_method is not lora" in i for i in full.ignored)
    pt = _fms(tmp_path, peft_method="pt")
    assert any("prompt tuning is not modelled" in w for w in pt.not_modelled)
    # without peft_method the keys are not fms-hf-tuning's: reported unused, as before
    plain = _fms(tmp_path, r=16)
    assert "technique" not in plain.data["training"]


def test_fms_hf_tuning_bad_fast_kernels_names_the_key(tmp_path):
    with pytest.raises(InputError, match="fast_kernels"):
        _fms(tmp_path, peft_method="lora", fast_kernels=["True", "True"])
