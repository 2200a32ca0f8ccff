"""fp32 matmuls as TF32 (``training.tf32``, ``--tf32``; TrainingArguments and axolotl ``tf32``):
an fp32 job's GEMMs run at the GPU's TF32 tensor-core peak where it has one, its fp32 rate
otherwise (fmest_time_roofline.estimator.matmul_dtype)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import fmest
from fmest.configs import load_configs
from fmest.engine import Engine
from fmest_time_roofline import estimator as E

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


def _job(gpu: str, dtype: str = "fp32", tf32=None) -> fmest.Job:
    return fmest.to_job({"model": "openai-community/gpt2",
                         "training": {"dtype": dtype, "seq_len": 1024, "micro_batch_size": 8,
                                      "tf32": tf32, "stack": "pytorch"},
                         "hardware": {"gpu": gpu}})


@pytest.fixture(scope="module")
def engine():
    return Engine()


def _time(engine, job):
    return engine.estimate(job, quantities=("memory", "time")).time


def test_tf32_runs_fp32_gemms_on_tensor_cores(engine):
    plain, tf32 = _time(engine, _job("A100-SXM-80GB")), _time(engine, _job("A100-SXM-80GB",
                                                                          tf32=True))
    assert tf32.step_seconds < plain.step_seconds / 1.5
    assert any("fp32 GEMMs as TF32" in n for n in tf32.notes)
    a100 = engine.context(_job("A100-SXM-80GB")).gpu
    assert E.matmul_dtype(_job("A100-SXM-80GB", tf32=True).training, a100) == "tf32"
    # off by default (PyTorch's allow_tf32 for matmuls since 1.12), and a no-op for bf16
    assert E.matmul_dtype(_job("A100-SXM-80GB").training, a100) == "fp32"
    assert E.matmul_dtype(_job("A100-SXM-80GB", "bf16", tf32=True).training, a100) == "bf16"
    bf16 = _job("A100-SXM-80GB", "bf16")
    assert _time(engine, _job("A100-SXM-80GB", "bf16", tf32=True)).step_seconds == \
        pytest.approx(_time(engine, bf16).step_seconds)


def test_a_gpu_without_tf32_keeps_its_fp32_rate_and_says_so(engine):
    plain, tf32 = _time(engine, _job("V100-SXM2-32GB")), _time(engine, _job("V100-SXM2-32GB",
                                                                          tf32=True))
    assert tf32.step_seconds == pytest.approx(plain.step_seconds)
    assert any("has no TF32 units" in n for n in tf32.notes)


def test_readers_and_the_evidence_harness_read_tf32(tmp_path):
    path = tmp_path / "training_args.json"
    path.write_text(json.dumps({"per_device_train_batch_size": 4, "tf32": True}))
    m = load_configs([str(path)], force_format="training-args")
    assert m.data["training"]["tf32"] is True
    ax = tmp_path / "axolotl.yaml"
    ax.write_text("base_model: openai-community/gpt2\nsequence_len: 1024\ntf32: false\n")
    assert load_configs([str(ax)], force_format="axolotl").data["training"]["tf32"] is False
    import measured

    stated = "step=2 adds tensor cores: torch.set_float32_matmul_precision('high') i.e. TF32"
    assert measured._TF32_STATED.search(stated)
    assert not measured._TF32_STATED.search("tf32 disabled; fp32 weights")
