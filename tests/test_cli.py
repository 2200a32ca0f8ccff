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


# -- did you mean (issue 26) ------------------------------------------------------------------

def _refusal(argv: list[str], capsys) -> tuple[str, str]:
    """(stderr, stdout) of a command line argparse refuses: exit code 2."""
    with pytest.raises(SystemExit) as exc:
        main(argv, engine=new_engine())
    assert exc.value.code == 2
    out = capsys.readouterr()
    return out.err, out.out


def test_mistyped_flag_suggests_the_real_one(capsys):
    err, _ = _refusal(["estimate", "--model", "gpt2", "--seq-lenn", "4096"], capsys)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("fmest: error: unknown flag --seq-lenn; did you mean --seq-len?")
    assert "fmest estimate --help" in lines[0]


@pytest.mark.parametrize("typo,flag", [
    ("--gpu-per-node", "--gpus-per-node"), ("--lora_rank", "--lora-rank"),
    ("--technque", "--technique"), ("--grad-ckpt", "--grad-checkpoint"),
    ("--mdoel", "--model"), ("--dataset_tokens=1e9", "--dataset-tokens"),
])
def test_mistyped_flags_name_one_close_flag(typo, flag, capsys):
    err, _ = _refusal(["estimate", "--model", "gpt2", typo, "1"], capsys)
    assert f"did you mean {flag}?" in err and err.count("--") <= 3, err


def test_unrelated_flag_gets_no_suggestion(capsys):
    err, _ = _refusal(["estimate", "--model", "gpt2", "--frobnicate", "1"], capsys)
    assert "unknown flag --frobnicate" in err and "did you mean" not in err


def test_several_unknown_flags_in_one_line(capsys):
    err, _ = _refusal(["estimate", "--seq-lenn", "1", "--zzz", "--lora-rnk", "2"], capsys)
    assert err.count("\n") == 1, err
    assert "unknown flags: --seq-lenn (did you mean --seq-len?), --zzz, --lora-rnk (did you " \
        "mean --lora-rank?)" in err


def test_stray_value_keeps_argparse_words(capsys):
    err, _ = _refusal(["estimate", "--model", "gpt2", "stray"], capsys)
    assert "unrecognized arguments: stray" in err


def test_mistyped_flag_of_other_commands(capsys):
    err, _ = _refusal(["models", "--formt", "json"], capsys)
    assert "unknown flag --formt; did you mean --format?" in err
    err, _ = _refusal(["--verison"], capsys)
    assert "did you mean --version?" in err


def test_mistyped_flag_as_json_error(capsys):
    _, out = _refusal(["estimate", "--model", "gpt2", "--seq-lenn", "9", "--format", "json"],
                      capsys)
    error = json.loads(out)["error"]
    assert error["field"] == "seq_lenn" and error["accepted"] == ["--seq-len"]
    assert error["message"] == "unknown flag --seq-lenn; did you mean --seq-len?"


@pytest.mark.parametrize("name,near", [
    ("llama-3-8bb", "llama-3-8b"), ("mixtrl", "mixtral"), ("mistral-7b-v0.4", "mistral-7b-v0.1"),
    ("some-org/llama-2-7b-hf-typo", "llama-2-7b-hf"),
])
def test_mistyped_model_suggests_close_presets(name, near, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["estimate", "--model", name, "--format", "json"], engine=new_engine()) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["field"] == "model" and near in [a.lower() for a in error["accepted"]]


@pytest.mark.parametrize("name", ["garbagemodel", "xx", "totally-unrelated-thing"])
def test_garbage_model_suggests_nothing_unrelated(name, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["estimate", "--model", name], engine=new_engine()) == 2
    err = capsys.readouterr().err
    assert "accepted:" not in err and "fmest models lists the presets" in err, err


def test_estimate_help_starts_with_the_common_flags(capsys):
    import re

    from fmest.cli import COMMON_FLAGS, build_parser

    with pytest.raises(SystemExit):
        main(["estimate", "--help"], engine=new_engine())
    text = capsys.readouterr().out
    head = text.split("\n\n", 2)
    assert head[0].startswith("usage: fmest estimate [--model NAME]")
    assert len(head[0].splitlines()) <= 6 and "docs/cli.md" in head[1]
    assert max(len(line) for line in head[0].splitlines()) <= 88
    options = build_parser(only="estimate").fmest_commands["estimate"][1]._option_string_actions
    for item in COMMON_FLAGS:   # every flag the short usage names is a real one
        for flag in re.findall(r"(?<![\w-])--?[a-z][\w-]*", item):
            assert flag in options, flag
    assert "--tp-comm-overlap" in text   # the full list still follows
