"""The fm-training-estimator drop-in SDK (fmest.compat.fm_training_estimator.sdk), fed the ADR's
own example input (tests/data/adr_estimate_input_example.jsonc; its source in the .SOURCE file
beside it) and the original's README code."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from fmest.compat import fm_training_estimator as adr
from fmest.compat.fm_training_estimator import sdk
from fmest.compat.fm_training_estimator.utils import fmt_size

DATA = Path(__file__).parent.parent / "data"
SIZE = re.compile(r"^-?\d+\.\d (|Ki|Mi|Gi|Ti)B$")


def adr_example() -> dict:
    """The ADR's example as a user pasting it must read it: no // comments, JSON false."""
    text = (DATA / "adr_estimate_input_example.jsonc").read_text()
    return json.loads(re.sub(r"//[^\n]*", "", text).replace("False", "false"))


def _bytes(size: str) -> float:
    number, unit = size.split()
    return float(number) * 1024 ** ["B", "KiB", "MiB", "GiB", "TiB"].index(unit)


def test_estimate_returns_the_original_records(engine):
    est = adr.estimate(adr_example(), engine=engine)
    assert dataclasses.is_dataclass(est)
    d = dataclasses.asdict(est)            # the original's records are dataclasses
    assert set(d) == {"memory", "time", "tokens", "cost"}
    mem = est.memory
    for key in ("total_mem_estimate", "activation_memory", "gradient_memory", "model_memory",
                "optimizer_memory"):
        assert SIZE.match(getattr(mem, key)), (key, getattr(mem, key))
    assert mem.num_gpus == 1                      # infra.numGpusPerPod
    assert isinstance(est.tokens.tps, float) and est.tokens.tps > 0
    assert est.time.time is None                  # no dataset: no run length, and it says so
    assert any("data.dataset absent" in w for w in est.time.warnings)


def test_memory_parts_add_up_to_the_total(engine):
    mem = adr.estimate_memory(adr_example(), engine=engine)
    parts = sum(_bytes(getattr(mem, k)) for k in ("activation_memory", "gradient_memory",
                                                  "model_memory", "optimizer_memory"))
    assert parts == pytest.approx(_bytes(mem.total_mem_estimate), rel=0.002)
    assert sum(mem.parts.values()) == pytest.approx(_bytes(mem.total_mem_estimate), rel=0.001)
    assert mem.phase in ("forward", "backward", "optimizer")


def test_numbers_are_fmest_estimates_of_the_same_job(engine):
    import fmest

    report = fmest.estimate(adr_example(), engine=engine)
    mem = adr.estimate_memory(adr_example(), engine=engine)
    assert mem.total_mem_estimate == fmt_size(report.memory.total_bytes)
    # granite-3b-code-base in fp32 (the example's torch_dtype): 3.5e9 params x 4 bytes
    assert mem.model_memory == fmt_size(report.memory.components["weights"])
    tokens = adr.estimate_tokens(adr_example(), engine=engine)
    assert tokens.tps == pytest.approx(report.tokens.tokens_per_second)


def test_fmt_size_matches_the_library():
    # fm_training_estimator/utils/utils.py fmt_size
    assert fmt_size(44.6 * 2**30) == "44.6 GiB"
    assert fmt_size(512) == "512.0 B"


def test_time_with_a_dataset_is_float_seconds(engine, tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text("\n".join(json.dumps({"text": "hello world " * 200}) for _ in range(50)))
    doc = adr_example()
    doc["job_configs"][0]["data"]["dataset"] = str(data)
    doc["job_configs"][0]["hf_training"]["save_strategy"] = "epoch"
    doc["job_configs"][0]["hf_training"]["num_train_epochs"] = 2
    t = adr.estimate_time(doc, engine=engine)
    assert isinstance(t.time, float) and isinstance(t.train_time, float) and t.train_time > 0
    # fm_training_estimator/time/time.py: load + training + (1 + epochs) checkpoints
    assert t.time == pytest.approx(t.train_time + sdk.MODEL_LOAD_SECONDS
                                   + 3 * sdk.CHECKPOINT_SECONDS)


def test_absent_fields_take_the_originals_defaults(engine):
    """The original: float32, batch 8, 3 epochs, FSDP full_shard whenever numGpusPerPod is not
    1 (fm_training_estimator/memory/hybrid/hybrid.py), 0 GPUs = search."""
    (job,), _ = adr.jobs_from_estimate_input(
        {"job_configs": [{"fm": {"base_model_path": "ibm-granite/granite-3b-code-base"},
                          "data": {"dataset": "train.jsonl"},
                          "infra": {"numGpusPerPod": 8}}]})
    t = job.training
    assert (t.dtype, t.precision, t.micro_batch_size, t.seq_len) == ("fp32", "pure", 8, 2048)
    assert job.workload.epochs == 3 and job.parallelism.fsdp == "full_shard"
    assert job.hardware.gpu == "A100-80GB" and job.hardware.gpus_per_node == 8
    (one,), _ = adr.jobs_from_estimate_input({"job_configs": [{"infra": {"numGpusPerPod": 1}}]})
    assert one.parallelism.fsdp == "none"


def test_defaults_are_named_in_the_warnings(engine):
    mem = adr.estimate_memory({"job_configs": [{"infra": {"numGpusPerPod": 2}}]}, engine=engine)
    text = "\n".join(mem.warnings)
    assert "per_device_train_batch_size absent: fm-training-estimator's default 8" in text
    assert "FSDP full_shard" in text


def test_zero_gpus_means_search(engine):
    doc = adr_example()
    doc["job_configs"][0]["infra"]["numGpusPerPod"] = 0
    doc["job_configs"][0]["fm"]["base_model_path"] = "meta-llama/Llama-2-70b-hf"
    doc["job_configs"][0]["fm"]["torch_dtype"] = "bfloat16"
    doc["job_configs"][0]["hf_training"].update(per_device_train_batch_size=1,
                                                gradient_checkpointing=True)
    mem = adr.estimate_memory(doc, engine=engine)
    assert mem.num_gpus > 1 and _bytes(mem.total_mem_estimate) <= 80 * 2**30
    doc["job_configs"][0]["fm"]["block_size"] = 10_000_000
    with pytest.raises(ValueError, match="Input configuration is infeasible!"):
        adr.estimate_memory(doc, engine=engine)


def test_accepts_text_and_paths(engine, tmp_path):
    path = tmp_path / "input.json"
    path.write_text(json.dumps(adr_example()))
    a = adr.estimate_memory(str(path), engine=engine)
    b = adr.estimate_memory(json.dumps(adr_example()), engine=engine)
    assert a == b


def test_dataclasses_with_transformers_objects_are_read_field_by_field(engine):
    """The original's README code: its dataclasses, a TrainingArguments subclass (whose
    nested AcceleratorConfig made a to_dict() conversion raise), fsdp set after the fact."""
    a = pytest.importorskip("fmest.compat.fm_training_estimator.config.arguments")
    fm = a.FMArguments(base_model_path="ibm-granite/granite-3b-code-base",
                       torch_dtype="bfloat16", block_size=1024)
    hf = a.HFTrainingArguments(per_device_train_batch_size=1, gradient_checkpointing=False,
                               bf16=True)     # bf16 on a CPU-only machine: not refused
    job_conf = a.JobConfig(hf, fm, a.DataArguments(dataset="imdb", te_approach=0),
                           a.InfraArguments(numGpusPerPod=2))
    est_input = a.EstimateInput(estimator_metadata=a.EstimatorMetadata(method=a.EstimatorMethod.THEORY),
                                job_configs=[job_conf])
    sharded = adr.estimate_memory(est_input, engine=engine)
    hf.fsdp = "no_shard"
    replicated = adr.estimate_memory(est_input, engine=engine)
    assert _bytes(replicated.total_mem_estimate) > _bytes(sharded.total_mem_estimate)
    t = adr.estimate_time(est_input, engine=engine)
    assert t.time is None and any("'imdb'" in w for w in t.warnings)
    assert isinstance(est_input.to_dict(), dict)
    again = a.EstimateInput.from_dict(json.loads(est_input.to_json()))
    assert adr.estimate_memory(again, engine=engine) == replicated


def test_cli_format_prints_the_same(engine, tmp_path, capsys):
    from fmest.cli import main

    path = tmp_path / "input.json"
    path.write_text(json.dumps(adr_example()))
    rc = main(["estimate", "-f", str(path), "--format", "fm-training-estimator"], engine=engine)
    out = capsys.readouterr()
    assert rc == 0, out.err
    printed = json.loads(out.out)
    direct = dataclasses.asdict(adr.estimate(adr_example(), engine=engine))
    assert printed["memory"]["total_mem_estimate"] == direct["memory"]["total_mem_estimate"]
    assert printed["tokens"]["tps"] == pytest.approx(direct["tokens"]["tps"])
    rc = main(["estimate", "-f", str(path), "--format", "json"], engine=engine)
    assert rc == 0 and "memory" in json.loads(capsys.readouterr().out)
