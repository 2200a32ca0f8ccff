"""Issue 26: numbers the report printed that contradicted its own inputs.

* ``--mfu X`` reported another MFU and a slower step than X implies;
* ``--params N`` (no dimensions) claimed a largest micro-batch and printed a 0.0 % MFU step;
* an encoder-decoder's tokens/s, total steps and sample length counted different tokens;
* the fm-training-estimator output's memory parts and what it does not know.
"""

from __future__ import annotations

import json
import math

import pytest

from fmest.gpus import shipped_gpus
from fmest.testing import new_engine, run_cli


@pytest.fixture(scope="module")
def engine():
    return new_engine(entrypoints=True)


def _json(engine, capsys, *argv: str) -> dict:
    rc, out, err = run_cli(engine, ["estimate", *argv, "--format", "json"], capsys)
    assert rc == 0, err
    return json.loads(out)


def _peak(gpu_name: str, dtype: str) -> float:
    spec = next(g for g in shipped_gpus() if g.name == gpu_name)
    return spec.peak_flops_per_s(dtype)


# -- 1. --mfu ---------------------------------------------------------------------------------

@pytest.mark.parametrize("mfu, layout", [
    (0.5, ()),
    (0.35, ("--gpus-per-node", "8", "--zero", "3", "--per-device-batch", "2")),
])
def test_mfu_override_is_what_is_reported(engine, capsys, mfu, layout):
    out = _json(engine, capsys, "--model", "meta-llama/Llama-2-7b-hf", "--gpu", "H100-SXM",
                "--mfu", str(mfu), *layout)
    t, world = out["time"], out["layout"]["world_size"]
    assert world == (8 if layout else 1)
    assert t["mfu"] == pytest.approx(mfu, rel=1e-9)
    assert out["tokens"]["mfu"] == pytest.approx(mfu, rel=1e-9)
    expected = t["flops_per_step"] / (mfu * _peak(out["memory"]["gpu"], "bf16") * world)
    assert t["step_seconds"] == pytest.approx(expected, rel=0.01)
    # the breakdown still adds up to the step, and HFU >= MFU
    assert sum(t["breakdown"].values()) == pytest.approx(t["step_seconds"], rel=1e-9)
    assert t["hfu"] >= t["mfu"]
    assert any(n.startswith(f"--mfu {mfu:g} sets the step") for n in t["notes"])


def test_mfu_override_leaves_the_roofline_alone_without_it(engine, capsys):
    """Without --mfu the step is the roofline's; with it the step scales as 1/MFU."""
    base = _json(engine, capsys, "--model", "meta-llama/Llama-2-7b-hf", "--gpu", "H100-SXM")
    half = _json(engine, capsys, "--model", "meta-llama/Llama-2-7b-hf", "--gpu", "H100-SXM",
                 "--mfu", "0.5")
    quarter = _json(engine, capsys, "--model", "meta-llama/Llama-2-7b-hf", "--gpu", "H100-SXM",
                    "--mfu", "0.25")
    assert base["time"]["mfu"] < 0.5
    assert quarter["time"]["step_seconds"] == pytest.approx(2 * half["time"]["step_seconds"])
    assert base["time"]["flops_per_step"] == half["time"]["flops_per_step"]


# -- 2. --params N ----------------------------------------------------------------------------

def test_weights_only_claims_no_batch_and_no_time(engine, capsys):
    out = _json(engine, capsys, "--params", "7e9", "--gpu", "H100-SXM")
    assert out["memory"]["max_micro_batch"] is None
    assert out.get("time") is None and out.get("tokens") is None and out.get("cost") is None
    assert any("largest micro-batch not estimated" in w for w in out["warnings"])
    assert any("weights-only model" in w for w in out["warnings"])
    rc, text, err = run_cli(engine, ["estimate", "--params", "7e9", "--gpu", "H100-SXM"], capsys)
    assert rc == 0, err
    flat = " ".join(text.split())
    assert "largest micro-batch that fits" not in flat and "MFU" not in flat
    assert "largest micro-batch: not estimated" in flat
    assert "Step time, throughput and cost: not estimated" in flat
    assert "activations not modelled" in flat


def test_weights_only_serving_keeps_its_decode_time(engine, capsys):
    """Inference of a weights-only model still times decode by weight streaming."""
    out = _json(engine, capsys, "--mode", "inference", "--params", "7e9", "--gpu", "H100-SXM")
    assert out["time"]["step_seconds"] > 0


# -- 3. encoder-decoder tokens ----------------------------------------------------------------

@pytest.mark.parametrize("lengths, per_sample", [
    (("--source-len", "512", "--target-len", "128"), 640),
    (("--seq-len", "256"), 512),  # both default to --seq-len
])
def test_encdec_tokens_have_one_definition(engine, capsys, lengths, per_sample):
    dataset = 1e6
    out = _json(engine, capsys, "--model", "google/flan-t5-xl", "--gpu", "A100-SXM-80GB",
                *lengths, "--per-device-batch", "2", "--dataset-tokens", f"{dataset:g}")
    t, k = out["time"], out["tokens"]
    tokens_per_step = 2 * per_sample
    assert k["tokens_per_second"] * t["step_seconds"] == pytest.approx(tokens_per_step)
    assert k["provenance"]["detail"].startswith(f"{tokens_per_step:,} tokens per step")
    assert t["total_steps"] == math.ceil(dataset / tokens_per_step)
    # the run is the dataset at the reported tokens/s (up to the last step's rounding)
    assert t["total_seconds"] == pytest.approx(dataset / k["tokens_per_second"],
                                               rel=tokens_per_step / dataset)


def test_encdec_num_samples_count_whole_samples(engine, capsys):
    out = _json(engine, capsys, "--model", "google/flan-t5-xl", "--gpu", "A100-SXM-80GB",
                "--source-len", "512", "--target-len", "128", "--num-samples", "1000")
    assert out["time"]["total_steps"] == 1000  # one sample a step


def test_decoder_tokens_unchanged(engine, capsys):
    out = _json(engine, capsys, "--model", "meta-llama/Llama-2-7b-hf", "--gpu", "H100-SXM",
                "--seq-len", "1024", "--dataset-tokens", "1e6")
    assert out["tokens"]["tokens_per_second"] * out["time"]["step_seconds"] == \
        pytest.approx(1024)
    assert out["time"]["total_steps"] == math.ceil(1e6 / 1024)


# -- 4. fm-training-estimator output ------------------------------------------------------------

def _adr(engine, capsys, *argv: str) -> dict:
    rc, out, err = run_cli(engine, ["estimate", *argv, "--format", "fm-training-estimator"],
                           capsys)
    assert rc == 0, err
    return json.loads(out)


@pytest.mark.parametrize("argv", [
    ("--model", "meta-llama/Llama-2-7b-hf", "--gpu", "H100-SXM", "--gpus-per-node", "1"),
    ("--model", "meta-llama/Llama-2-7b-hf", "--gpu", "H100-SXM", "--zero", "3",
     "--gpus-per-node", "8", "--per-device-batch", "4"),
])
def test_adr_memory_parts_add_up(engine, capsys, argv):
    m = _adr(engine, capsys, *argv)["memory"]
    assert m["phase"] in ("forward", "backward", "optimizer")
    total = sum(m["parts"].values())
    report = _json(engine, capsys, *argv)["memory"]
    assert total == report["total_bytes"]
    # activation_memory is the rest of the peak: activations, logits, buffers, context, reserve
    rest = total - sum(m["parts"][k] for k in ("weights", "lora_adapters", "gradients",
                                               "optimizer_states", "master_weights",
                                               "optimizer_temporaries"))
    assert rest > 0 and m["activation_memory"] != "0.0 B"


def test_adr_says_what_a_weights_only_answer_does_not_know(engine, capsys):
    out = _adr(engine, capsys, "--params", "7e9", "--gpu", "H100-SXM", "--gpus-per-node", "1")
    assert out["time"]["time"] is None and out["tokens"]["tps"] is None
    for record in ("memory", "time", "tokens"):
        assert any("weights-only model" in w for w in out[record]["warnings"])
