"""LoRA target modules left out = PEFT's default for the model type (peft 0.21.2's
``TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING``, copied to
core/fmest/data/lora_default_targets.json), made explicit in the report's job and exports."""

import json

import attrs
import pytest

from fmest.cli import main
from fmest.configs.export import export_job
from fmest.convert import job_from_dict, job_to_dict
from fmest.errors import InputError
from fmest.job import Job
from fmest.models.presets import load_preset
from fmest.physics.counting import LORA_DEFAULTS_FILE, default_lora_targets, peft_default_targets
from fmest.testing import new_engine


def _json(capsys, *args):
    rc = main(["estimate", *args, "--format", "json"], engine=new_engine(entrypoints=True))
    out = capsys.readouterr().out
    assert rc == 0, out
    return json.loads(out)


@pytest.mark.parametrize("model, targets, trainable", [
    # t5 -> q, v: 24 encoder self-, 24 decoder self- and 24 cross-attention blocks, d 2048, r 16
    ("bigscience/T0_3B", ["q", "v"], 72 * 2 * 16 * (2048 + 2048)),
    # bloom -> query_key_value (4096 -> 3 x 4096) in 30 layers, r 16 (PEFT prints 3,932,160
    # trainable at r 8)
    ("bigscience/bloom-7b1", ["query_key_value"], 30 * 16 * (4096 + 3 * 4096)),
    # llama -> q_proj, v_proj (4096 -> 4096 each) in 32 layers, r 16
    ("llama-2-7b-hf", ["q_proj", "v_proj"], 32 * 2 * 16 * (4096 + 4096)),
])
def test_default_targets_are_peft_defaults(capsys, model, targets, trainable):
    data = _json(capsys, "--model", model, "--technique", "lora", "--gpu", "A100-SXM-80GB")
    assert data["job"]["training"]["lora_target_modules"] == targets
    assert data["model"]["trainable_params"] == trainable
    assert data["memory"]["total_bytes"] > 0
    # the report's job reproduces the answer
    again = _json(capsys, "--model", model, "--technique", "lora", "--gpu", "A100-SXM-80GB",
                  "--lora-target-modules", *targets)
    assert again["memory"]["total_bytes"] == data["memory"]["total_bytes"]
    assert again["job"] == data["job"]


def test_explicit_targets_unchanged_and_round_trip():
    job = job_from_dict({"model": "llama-2-7b-hf", "training": {
        "technique": "lora", "lora_target_modules": ["k_proj"]}})
    eng = new_engine(entrypoints=True)
    assert eng.resolve_job(job) == job
    resolved = eng.resolve_job(job_from_dict({"model": "bigscience/T0_3B",
                                              "training": {"technique": "lora"}}))
    assert resolved.training.lora_target_modules == ("q", "v")
    for j in (job, resolved, Job(model="gpt2")):
        assert job_from_dict(job_to_dict(j)) == j
    # no adapters, nothing to resolve: a full job keeps the empty default
    assert eng.resolve_job(Job(model="gpt2")).training.lora_target_modules == ()


def test_unknown_model_type_falls_back_or_names_the_modules():
    llama = attrs.evolve(load_preset("llama-2-7b-hf"), model_type="not-in-peft")
    assert default_lora_targets(llama) == ("q_proj", "v_proj")
    gpt2 = attrs.evolve(load_preset("gpt2"), model_type="not-in-peft")
    with pytest.raises(InputError) as err:
        default_lora_targets(gpt2)
    assert err.value.field == "training.lora_target_modules"
    assert "c_attn" in str(err.value)


def test_export_writes_resolved_targets():
    job = job_from_dict({"model": "bigscience/bloom-7b1", "training": {"technique": "lora"}})
    text = next(iter(export_job(job, "axolotl").values()))
    assert "lora_target_modules:\n- query_key_value" in text


def test_table_matches_installed_peft():
    data = json.loads(LORA_DEFAULTS_FILE.read_text())
    assert "peft 0.21.2" in data["_source"]
    peft = pytest.importorskip("peft")
    if peft.__version__ != "0.21.2":
        pytest.skip(f"table copied from peft 0.21.2, installed {peft.__version__}")
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as peft_map

    want = {k: tuple(v) for k, v in peft_map.items() if isinstance(v, (list, tuple))}
    assert peft_default_targets() == want
