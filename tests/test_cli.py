"""The CLI contract: flags, JSON fields, one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fmest.cli import main
from fmest.testing import new_engine


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fmest", *args], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("args,field", [
    (["--model", "no-such-model-xyz"], "model"),
    (["--model", "meta-llama/Llama-2-7b-hf", "--tp", "3"], "parallelism.tp"),
    (["--model", "meta-llama/Llama-2-7b-hf", "--per-device-batch", "-4"], "per-device-batch"),
    (["--model", "meta-llama/Llama-2-7b-hf", "--gpu", "H100-SMX"], "hardware.gpu"),
    (["--model", "meta-llama/Llama-2-7b-hf", "--zero", "7"], "--zero"),
    (["--model", "meta-llama/Llama-2-7b-hf", "--grad-checkpoint", "maybe"], "--grad-checkpoint"),
    (["--model", "meta-llama/Llama-2-7b-hf", "--method", "oracle"], "options.method"),
])
def test_bad_input_is_one_line_exit_2(args, field):
    r = run_cli("estimate", *args)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and field in lines[0], r.stderr


def test_malformed_json_input_file(tmp_path):
    bad = tmp_path / "job.json"
    bad.write_text('{"model": "gpt2", "training": {')
    r = run_cli("estimate", "-f", str(bad))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "--input-file" in r.stderr and "malformed JSON" in r.stderr


def test_flags_override_input_file(tmp_path, capsys):
    f = tmp_path / "job.json"
    f.write_text(json.dumps({"model": "gpt2", "training": {"seq_len": 512,
                                                           "micro_batch_size": 2}}))
    rc = main(["estimate", "-f", str(f), "--seq-len", "1024", "--format", "json"],
              engine=new_engine())
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["job"]["training"]["seq_len"] == 1024
    assert out["job"]["training"]["micro_batch_size"] == 2


@pytest.mark.parametrize("flag,section,key,value", [
    (["--lora", "true"], "training", "technique", "lora"),
    (["--qlora"], "training", "technique", "qlora"),
    (["--grad-checkpoint", "true"], "training", "activation_checkpointing", "full"),
    (["--grad-checkpoint", "selective"], "training", "activation_checkpointing", "selective"),
    (["--flashattn"], "training", "attention", "flash"),
    (["--fused-loss", "true"], "training", "loss", "fused"),
    (["--sequence-parallel", "false"], "parallelism", "sequence_parallel", False),
    # LoRA settings need LoRA, offload needs ZeRO/FSDP (fmest.bounds.CONFLICTS)
    (["--lora", "--lora-target-modules", "q_proj", "k_proj,v_proj"], "training",
     "lora_target_modules",
     ["q_proj", "k_proj", "v_proj"]),
    (["--dataset-tokens", "2e10"], "workload", "dataset_tokens", 2e10),
    (["--zero", "2", "--cpu-offload", "optimizer"], "parallelism", "cpu_offload", "optimizer"),
])
def test_seed_compatible_flags(flag, section, key, value, capsys):
    rc = main(["estimate", "--model", "meta-llama/Llama-2-7b-hf", *flag, "--format", "json"],
              engine=new_engine())
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["job"][section][key] == value


def test_json_contract_fields_present(capsys):
    rc = main(["estimate", "--model", "meta-llama/Llama-2-7b-hf", "--format", "json"],
              engine=new_engine())
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"]["total_params"] == 6_738_415_616
    assert out["model"]["trainable_params"] == 6_738_415_616
    assert "provenance" in out and "memory" in out


def test_models_gpus_plugins_commands(capsys):
    eng = new_engine()
    assert main(["models"], engine=eng) == 0
    assert "meta-llama/Llama-2-7b-hf" in capsys.readouterr().out
    assert main(["gpus"], engine=eng) == 0
    assert "H100" in capsys.readouterr().out
    assert main(["plugins", "--format", "json"], engine=eng) == 0
    out = json.loads(capsys.readouterr().out)
    assert "policies" in out["plugins"] and isinstance(out["learned_models"], dict)


def test_explain_lists_candidates_without_crashing(capsys):
    rc = main(["estimate", "--model", "gpt2", "--explain"], engine=None)
    assert rc == 0
    out = capsys.readouterr().out
    assert "How each answer was chosen" in out and "memory:" in out
