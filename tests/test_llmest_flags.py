"""The LLM/VLM GPU Memory Estimator's flags on ``fmest estimate`` (docs/compat.md): each maps
onto fmest's field of the same meaning, or is named in a warning; its README's command lines run
unchanged."""

from __future__ import annotations

import json
import shlex

import pytest

from fmest.cli import main

GIB = 1 << 30
_BASE = ["estimate", "--model", "Qwen/Qwen2.5-7B-Instruct", "--seq-len", "2048",
         "--per-device-batch", "1", "--format", "json"]


def run(capsys, *flags: str) -> dict:
    code = main([*_BASE, *flags])
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)


def parts(answer: dict) -> dict:
    return answer["memory"]["components"]


def test_activation_factors_scale_by_the_ratio_of_its_formula(capsys):
    base = run(capsys)
    # no FlashAttention, no checkpointing: (4 + 12) / (4 + 6) = 1.6
    mlp = run(capsys, "--mlp-act-factor", "12")
    assert mlp["job"]["calibration"]["activation_factor"] == pytest.approx(1.6)
    assert parts(mlp)["activations"] == pytest.approx(1.6 * parts(base)["activations"], rel=1e-6)
    # FlashAttention and checkpointing: (0.8 x 0.2 + 6) x 0.7 / ((0.8 x 0.2 + 6) x 0.35) = 2
    gc = run(capsys, "--flashattn", "true", "--grad-checkpoint", "true",
             "--grad-ckpt-reduction", "0.7", "--activation-factor", "1.5")
    assert gc["job"]["calibration"]["activation_factor"] == pytest.approx(3.0)


def test_a_factor_that_does_not_apply_is_named(capsys):
    out = run(capsys, "--grad-ckpt-reduction", "0.5", "--attn-act-factor-fa", "2")
    assert out["job"]["calibration"]["activation_factor"] == 1.0
    said = "\n".join(out["warnings"])
    assert "--grad-ckpt-reduction: has no effect here" in said
    assert "--attn-act-factor-fa: has no effect here" in said
    assert "--grad-ckpt-reduction" in "\n".join(out["input"]["not_modelled"])


def test_logits_cuda_and_overhead_knobs(capsys):
    out = run(capsys, "--logits-factor", "0", "--cuda-libs-gib", "2.5",
              "--deepspeed-overhead-gib", "1", "--misc-overhead-gib", "2")
    c = parts(out)
    assert c["logits_and_loss"] == 0
    assert c["cuda_context"] == int(2.5 * GIB)
    assert c["misc_overhead"] == 3 * GIB
    assert out["memory"]["total_bytes"] == sum(c.values())


def test_offload_bits_and_master_weights(capsys):
    out = run(capsys, "--zero", "2", "--dp-offload-optimizer", "true", "--optimizer-bits", "8",
              "--master-weights", "false")
    assert out["job"]["parallelism"]["cpu_offload"] == "optimizer"
    assert out["job"]["training"]["optimizer"] == "adamw_8bit"
    assert out["job"]["training"]["precision"] == "pure"
    assert run(capsys, "--zero", "2", "--cpu-offload-optimizer")["job"]["parallelism"][
        "cpu_offload"] == "optimizer"


def test_flags_fmest_does_not_use_are_warned(capsys):
    out = run(capsys, "--kv-cache", "true", "--is-seq2seq", "true", "--use-vision", "true",
              "--vision-hidden", "1024", "--lora-params-override", "1000")
    flagged = "\n".join(w for w in out["warnings"] if w.startswith("flag not modelled"))
    for flag in ("--kv-cache", "--is-seq2seq", "--use-vision", "--vision-hidden",
                 "--lora-params-override"):
        assert f"{flag}:" in flagged


def test_bad_values_name_the_flag(capsys):
    assert main([*_BASE, "--grad-ckpt-reduction", "1.5"]) == 2
    assert "--grad-ckpt-reduction: must be in (0, 1]" in capsys.readouterr().err
    assert main([*_BASE, "--optimizer-bits", "8", "--optimizer", "lion"]) == 2
    assert "--optimizer-bits" in capsys.readouterr().err


def test_probe_refuses_a_device_this_machine_lacks(capsys, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main([*_BASE, "--probe", "true"]) == 2
    err = capsys.readouterr().err
    assert "--probe-device: no CUDA device on this machine" in err and "accepted: cpu, fake" in err
    assert main([*_BASE, "--probe", "true", "--probe-device", "tpu"]) == 2
    assert "--probe-device: not a device" in capsys.readouterr().err
    # --estimate-only skips the probe: no device needed
    assert "probe" not in run(capsys, "--probe", "true", "--estimate-only", "true")


def test_probe_measures_beside_the_estimate(capsys):
    pytest.importorskip("fmest_torch_runner")
    tiny = ["--hidden-size", "64", "--num-layers", "2", "--num-heads", "4",
            "--intermediate-size", "128", "--vocab-size", "256"]
    code = main(["estimate", *tiny, "--seq-len", "32", "--probe", "true", "--probe-device",
                 "fake", "--probe-steps", "1", "--probe-warmup", "1", "--format", "json"])
    out = capsys.readouterr().out
    assert code == 0
    probe = json.loads(out)["probe"]
    assert probe["status"] == "ok" and probe["steps_run"] == 2 and probe["device"] == "fake"
    assert probe["peak_allocated_bytes"] > 0 and probe["step_seconds"] > 0


# the README of MiaoDX/llm_vlm_memory_estimator @61cdbab, "Examples" (uv run llm-memory-estimator)
README_LINES = [
    "--model Qwen/Qwen2.5-7B-Instruct --dtype bf16 --seq-len 2048 --per-device-batch 2 "
    "--grad-accum 128 --zero 2 --dp 8 --flashattn true --grad-checkpoint true",
    "--model Qwen/Qwen2.5-7B-Instruct --dtype bf16 --qlora true --lora-rank 8 --seq-len 2048 "
    "--per-device-batch 1 --grad-accum 64 --zero 3 --dp 4 --tp 2 --flashattn true "
    "--grad-checkpoint true",
    "--model Qwen/Qwen2.5-72B-Instruct --dtype bf16 --lora true --lora-rank 64 --seq-len 2048 "
    "--per-device-batch 1 --grad-accum 512 --zero 3 --dp 32 --tp 4 --flashattn true "
    "--grad-checkpoint true",
    "--model Qwen/Qwen2.5-VL-7B-Instruct --dtype bf16 --seq-len 2048 --per-device-batch 1 "
    "--grad-accum 64 --zero 2 --dp 4 --flashattn true --grad-checkpoint true --use-vision true "
    "--vision-hidden 1024 --vision-layers 24 --vision-image-size 448 --vision-patch 14",
]


@pytest.mark.parametrize("line", README_LINES)
def test_its_readme_command_lines_run_unchanged(capsys, line):
    code = main(["estimate", *shlex.split(line), "--format", "json"])
    out = capsys.readouterr().out
    assert code == 0
    assert json.loads(out)["memory"]["total_bytes"] > 0
