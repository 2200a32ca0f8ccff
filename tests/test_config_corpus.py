"""The config corpus (issue 23): every real config file through ``fmest estimate --config``.

The classifier is the benchmark's (benchmarks/configs_corpus.py); its own checks run on
hand-made files first, so that a broken classifier fails here too. The issue's targets are
one xfail test the lead hardens once they are met.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import configs_corpus as cc  # noqa: E402


@pytest.fixture(scope="module")
def runner():
    return cc.Runner()


@pytest.fixture(scope="module")
def corpus(runner):
    recs, _wall = cc.run(progress=False, runner=runner)
    return recs


# -- the classifier on hand-made files -------------------------------------------------------
def test_refusal_is_counted_with_its_field(runner, tmp_path):
    f = tmp_path / "bad.yml"
    f.write_text("base_model: meta-llama/Llama-3.1-8B\nsequence_len: -5\nmicro_batch_size: 1\n")
    rec = cc.classify(runner, str(f))
    assert rec["category"] == "refused", rec
    assert rec["one_line"] and rec["names_key"], rec
    assert rec["field"] == f"{f}: sequence_len"


def test_malformed_file_is_one_line_naming_the_file(runner, tmp_path):
    f = tmp_path / "broken.yaml"
    f.write_text("base_model: [unclosed\n")
    rec = cc.classify(runner, str(f))
    assert rec["category"] == "refused" and rec["one_line"] and rec["names_key"], rec
    assert "malformed YAML at line" in rec["reason"]
    assert not cc.select([rec], "bad-refusal")


def test_a_refusal_naming_no_key_is_a_bad_refusal(runner, tmp_path):
    rec = cc.classify(runner, str(tmp_path / "broken.yaml"))   # no such file
    rec.update(category="refused", one_line=True, names_key=False)
    assert cc.select([rec], "bad-refusal")


def test_missing_model_is_answered_with_the_default_preset(runner, tmp_path):
    f = tmp_path / "ds_config.json"
    f.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2,
                             "zero_optimization": {"stage": 2}}))
    rec = cc.classify(runner, str(f))
    assert rec["category"] == "answered-with-model", rec
    assert rec["model"] == cc.DEFAULT_MODEL
    assert rec["label"] == "fragment"


def test_model_rule_takes_the_preset_of_the_short_name(runner):
    assert runner.model_for("someone/Llama-3.2-1B") == "meta-llama/Llama-3.2-1B"
    assert runner.model_for("someone/not-a-model-xyz") == cc.DEFAULT_MODEL
    assert runner.model_for(None) == cc.DEFAULT_MODEL


def test_an_answered_file_with_an_unnamed_key_has_a_silent_drop(runner, tmp_path):
    f = tmp_path / "lora.yml"
    f.write_text("base_model: meta-llama/Llama-3.1-8B\nsequence_len: 2048\n"
                 "micro_batch_size: 1\n")
    rec = cc.classify(runner, str(f))
    assert rec["category"] == "answered", rec
    assert rec["dropped"] == [], rec    # every key is named in the answer
    # the same answer, and a key the answer names nowhere
    items = cc.leaf_items({"base_model": "m", "sequence_len": 2048, "lora_r": 8,
                           "datasets": [{"path": "x"}], "wandb": {"project": "p"}})
    config = {"origins": {"model": f"{f}: base_model", "training.seq_len":
                          f"{f}: sequence_len (same as other.yml: x)"},
              "ignored": [f"{f}: datasets: data", f"{f}: wandb.project: logging"],
              "not_modelled": []}
    dropped = cc.silent_drops(items, "tree", cc.reported_keys(str(f), config))
    assert dropped == ["lora_r"]
    assert [k for k in dropped if cc.is_decisive(k)] == ["lora_r"]
    # the model key a first refusal named counts as read when --model was given
    config["origins"].pop("model")
    assert cc.silent_drops(items, "tree", cc.reported_keys(str(f), config), "m") == ["lora_r"]


def test_shell_flags_and_their_drops():
    text = ("#!/bin/bash\npip install --upgrade foo\nGPUS=8\n"
            "torchrun --nproc_per_node $GPUS pretrain_gpt.py \\\n  --tensor-model-parallel-size 2"
            " \\\n  --seq-length 4096  # --not-this\n")
    flags = cc.shell_flags(text)
    assert flags == ["nproc_per_node", "tensor-model-parallel-size", "seq-length"]
    reported = cc.reported_keys("run.sh", {"origins": {
        "hardware.gpus_per_node": "run.sh: torchrun --nproc_per_node",
        "parallelism.tp": "run.sh: --tensor-model-parallel-size"}})
    assert cc.silent_drops([(k, None) for k in flags], "flags", reported) == ["seq-length"]
    assert cc.is_decisive("seq-length")


def test_a_crash_is_recorded_with_its_last_frame(runner, tmp_path):
    class Broken(cc.Runner):
        def __init__(self, inner):
            self.__dict__.update(inner.__dict__)

        def estimate(self, path, model=None):
            raise RuntimeError("boom")

    f = tmp_path / "x.yml"
    f.write_text("base_model: meta-llama/Llama-3.1-8B\n")
    rec = cc.classify(Broken(runner), str(f))
    assert rec["category"] == "crash"
    assert rec["reason"].startswith("RuntimeError: boom at ") and "(estimate)" in rec["reason"]


def test_layout_check():
    out = {"config": {"origins": {}}, "warnings": []}
    assert cc.layout_guessed(out)
    out["warnings"] = ["layout: no config file or flag gives the GPU count: 1 GPU assumed"]
    assert not cc.layout_guessed(out)
    assert not cc.layout_guessed({"config": {"origins": {"hardware.gpus_per_node": "f: x"}}})


@pytest.mark.parametrize("path, expected", [
    ("torchtune/recipes/configs/llama3/8B_lora.yaml", "training"),
    ("torchtune/recipes/configs/llama3_1/evaluation.yaml", "not-training"),
    ("torchtune/recipes/configs/generation.yaml", "inference"),
    ("llama-factory/examples/merge_lora/qwen3_lora_sft.yaml", "not-training"),
    ("llama-factory/examples/train_qlora/llama3_lora_sft_gptq.yaml", "training"),
    ("ms-swift/examples/train/grpo/internal/vllm_lora_qwenvl72b.sh", "training"),
    ("ms-swift/examples/infer/vllm/mllm_tp.sh", "inference"),
    ("megatron-lm/examples/rl/model_configs/qwen3_8b.sh", "fragment"),
    ("axolotl/examples/llama-3/lora-1b-sample-packing-sequentially.yml", "training"),
])
def test_label_rule(path, expected):
    assert cc.label(path)[0] == expected


def test_label_reads_deepspeed_and_accelerate_schemas():
    assert cc.label("x/train.json", {"zero_optimization": {"stage": 3}})[0] == "fragment"
    assert cc.label("x/multi.yaml", {"distributed_type": "MULTI_GPU"})[0] == "fragment"
    assert cc.label("x/train.json", {"zero_optimization": {}, "model": "m"})[0] == "training"


# -- the corpus --------------------------------------------------------------------------
def test_every_manifest_file_is_classified(corpus):
    assert len(corpus) == len(cc.manifest(cc.CORPUS)) > 1000
    assert {r["category"] for r in corpus} <= set(cc.CATEGORIES)


def test_no_crash(corpus):
    crashes = cc.select(corpus, "crash")
    assert not crashes, f"{len(crashes)} crashes, first: {crashes[:5]}"


def test_every_refusal_is_one_line_naming_the_file_and_a_key(corpus):
    bad = cc.select(corpus, "bad-refusal")
    assert not bad, f"{len(bad)} refusals not one line or not naming FILE: key, first: {bad[:5]}"


def test_issue_23_targets(corpus):
    summ = cc.summary(corpus)
    total = summ["total"]
    assert summ["target"]["percent"] >= 90, summ["target"]
    assert total["decisive"] == 0, cc.select(corpus, "decisive-drop")[:10]
    assert total["layout"] == 0, cc.select(corpus, "layout-guessed")[:10]
