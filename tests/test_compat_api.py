"""The fm-training-estimator drop-in API (issue 17), fed the ADR's own example input
(tests/data/adr_estimate_input_example.jsonc; its source in the .SOURCE file beside it)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fmest.compat import fm_training_estimator as adr
from fmest.compat import fm_training_estimator_api as api

DATA = Path(__file__).parent / "data"
SIZE = re.compile(r"^-?\d+\.\d (|Ki|Mi|Gi|Ti)B$")


def adr_example() -> dict:
    """The ADR's example as a user pasting it must read it: no // comments, JSON false."""
    text = (DATA / "adr_estimate_input_example.jsonc").read_text()
    return json.loads(re.sub(r"//[^\n]*", "", text).replace("False", "false"))


@pytest.fixture(scope="module")
def engine():
    from fmest.testing import new_engine

    return new_engine(entrypoints=True)


def test_estimate_returns_the_adr_fields_and_units(engine):
    est = adr.estimate(adr_example(), engine=engine)
    assert set(est) == {"memory", "time", "tokens", "cost"}
    mem = est["memory"]
    assert set(mem) == {"total_mem_estimate", "activation_memory", "gradient_memory",
                        "model_memory", "optimizer_memory", "num_gpus"}
    for key in set(mem) - {"num_gpus"}:
        assert SIZE.match(mem[key]), (key, mem[key])
    assert mem["num_gpus"] == 1                      # infra.numGpusPerPod
    assert est.memory.total_mem_estimate == mem["total_mem_estimate"]   # dataclass-style
    assert isinstance(est["tokens"]["tps"], float) and est["tokens"]["tps"] > 0
    assert set(est["time"]) == {"time", "train_time"}
    assert set(est["cost"]) == {"usd"}


def test_numbers_are_fmest_estimates_of_the_same_job(engine):
    import fmest

    report = fmest.estimate(adr_example(), engine=engine)
    mem = adr.estimate_memory(adr_example(), engine=engine)
    assert mem.total_mem_estimate == api.fmt_size(report.memory.total_bytes)
    # granite-3b-code-base in fp32 (the example's torch_dtype): 3.5e9 params x 4 bytes
    assert mem.model_memory == api.fmt_size(report.memory.components["weights"])
    tokens = adr.estimate_tokens(adr_example(), engine=engine)
    assert tokens.tps == pytest.approx(report.tokens.tokens_per_second)


def test_fmt_size_matches_the_library():
    # fm_training_estimator/utils/utils.py fmt_size
    assert api.fmt_size(44.6 * 2**30) == "44.6 GiB"
    assert api.fmt_size(512) == "512.0 B"
    assert api.fmt_seconds(40.2) == "40s"


def test_time_with_a_dataset_is_seconds(engine, tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text("\n".join(json.dumps({"text": "hello world " * 200}) for _ in range(50)))
    doc = adr_example()
    doc["job_configs"][0]["data"]["dataset"] = str(data)
    t = adr.estimate_time(doc, engine=engine)
    assert re.match(r"^\d+s$", t.time) and t.train_time == t.time


def test_zero_gpus_means_recommend(engine):
    doc = adr_example()
    doc["job_configs"][0]["infra"]["numGpusPerPod"] = 0
    doc["job_configs"][0]["fm"]["base_model_path"] = "meta-llama/Llama-2-70b-hf"
    doc["job_configs"][0]["fm"]["torch_dtype"] = "bfloat16"
    doc["job_configs"][0]["hf_training"]["fsdp"] = "full_shard"
    mem = adr.estimate_memory(doc, engine=engine)
    assert mem.num_gpus > 1
    doc["job_configs"][0]["hf_training"].pop("fsdp")
    with pytest.raises(ValueError, match="infeasible"):
        adr.estimate_memory(doc, engine=engine)


def test_accepts_text_and_paths(engine, tmp_path):
    path = tmp_path / "input.json"
    path.write_text(json.dumps(adr_example()))
    a = adr.estimate_memory(str(path), engine=engine)
    b = adr.estimate_memory(json.dumps(adr_example()), engine=engine)
    assert a == b


def test_cli_format_prints_the_same(engine, tmp_path, capsys):
    from fmest.cli import main

    path = tmp_path / "input.json"
    path.write_text(json.dumps(adr_example()))
    rc = main(["estimate", "-f", str(path), "--format", "fm-training-estimator"], engine=engine)
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert json.loads(out.out) == adr.estimate(adr_example(), engine=engine)
    rc = main(["estimate", "-f", str(path), "--format", "json"], engine=engine)
    assert rc == 0 and "memory" in json.loads(capsys.readouterr().out)
