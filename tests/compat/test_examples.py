"""IBM fm-training-estimator's own examples (foundation-model-stack/fm-training-estimator @
1d04f05), run against the drop-in ``fmest.compat.fm_training_estimator``:

* the README example (``fm_training_estimator/sdk/examples/ex1.py``, also
  ``docs/source/index.rst``), unchanged except its two import lines;
* the example configs ``config/test_configs/config1..4.json`` through ``ui.core.run``, the CLI
  (``fmest fm-training-estimator`` and ``python -m fmest.compat.fm_training_estimator.ui.cli``
  with ``ui/README.md``'s ``-l``/``-m`` flags) and the REST route ``POST /api/estimate``
  (``curl localhost:3000/api/estimate -d@config.json``, ``ui/README.md``) of both ``fmest
  serve``'s app and the stand-alone ``ui.api.api()`` app;
* the ADR's ``EstimateInput`` (``adrs/001-resource-estimator-library.md``) through the CLI's
  ``-f`` flag.

The inputs are copies under ``tests/compat/data/original/`` (``SOURCE.md``).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from fmest.compat.fm_training_estimator.ui.core import run
from fmest.compat.fm_training_estimator.utils import fmt_size

HERE = Path(__file__).parent
DATA = HERE / "data"
ORIGINAL = DATA / "original"
CONFIGS = {name: ORIGINAL / f"{name}.json" for name in ("config1", "config2", "config3",
                                                          "config4")}
TE_TEST1 = ORIGINAL / "te_test1.jsonl"
ADR_EXAMPLE = HERE.parent / "data" / "adr_estimate_input_example.jsonc"
ROUTE = "/api/estimate"
#: the keys of the original's flat answer (fm_training_estimator/ui/core.py)
FLAT_KEYS = ("total_mem_estimate_og", "activation_memory_og", "gradient_memory_og",
             "model_memory_og", "optimizer_memory_og", "total_mem_estimate",
             "activation_memory", "gradient_memory", "model_memory", "optimizer_memory",
             "num_gpus", "tps")
INFEASIBLE = "Input configuration is infeasible!"
GiB = 1024**3


@pytest.fixture(scope="module")
def answers(engine) -> dict:
    """``ui.core.run`` of each example config: what every other door must answer."""
    return {name: run(str(path), engine=engine) for name, path in CONFIGS.items()}


def lookup_csv(name: str) -> str:
    pytest.importorskip("fmest.compat.fm_training_estimator.lookup",
                        reason="the lookup port (lookup.py) is not there yet")
    path = DATA / name
    if not path.is_file():
        pytest.skip(f"{path} is not there yet (copied by the lookup port)")
    return str(path)


def adr_example() -> dict:
    """The ADR's EstimateInput as a user pasting it must read it: no // comments, JSON false."""
    text = ADR_EXAMPLE.read_text()
    return json.loads(re.sub(r"//[^\n]*", "", text).replace("False", "false"))


def curl_body(path: Path) -> bytes:
    """What ``curl URL -d@path`` sends: the file with CR and LF removed, as
    ``application/x-www-form-urlencoded``."""
    return path.read_bytes().replace(b"\r", b"").replace(b"\n", b"")


FORM = {"Content-Type": "application/x-www-form-urlencoded"}


# -- the README example -------------------------------------------------------------------
def readme_source() -> str:
    """ex1.py with ``from fm_training_estimator.`` switched on its two import lines."""
    text = (ORIGINAL / "ex1.py.txt").read_text()
    switched = text.replace("from fm_training_estimator.",
                            "from fmest.compat.fm_training_estimator.")
    changed = [(a, b) for a, b in zip(text.splitlines(), switched.splitlines(), strict=True)
               if a != b]
    assert len(changed) == 2 and all(b.startswith("from fmest.compat.") for _, b in changed)
    return switched


@pytest.fixture(scope="module")
def readme_example(tmp_path_factory):
    """Run ex1.py once in an empty directory: its ``workdir/model.json`` and
    ``workdir/data.csv`` are absent there. Returns (its globals, what it printed)."""
    folder = tmp_path_factory.mktemp("readme")
    script = folder / "ex1.py"
    script.write_text(readme_source())
    printed = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(printed):
        mp.chdir(folder)
        namespace = runpy.run_path(str(script), run_name="__main__")
    return namespace, printed.getvalue()


def test_readme_example_runs(readme_example):
    """Every call answers; the records' warnings name the missing files and the Hub dataset.
    (The original downloads "imdb" from the Hub, then, once ``fsdp`` is set, reads the absent
    ``workdir/data.csv`` with pandas: FileNotFoundError.)"""
    ns, printed = readme_example
    lines = printed.splitlines()
    assert [line for line in lines if not line.startswith("With ")] == [
        "Estimating Memory:....", "Using fsdp full shard", "Estimating Time:....",
        "Estimating Tokens:...."]
    theory, reg, sharded, time_, tokens = [line for line in lines if line.startswith("With ")]
    assert theory.startswith("With only theory:  MemoryEstimate(total_mem_estimate='")
    assert ns["lookup_data_path"] in theory and "no lookup" in theory      # workdir/data.csv
    assert reg.startswith("With reg model:  MemoryEstimate(")
    assert ns["model_path"] in reg and ns["lookup_data_path"] in reg        # workdir/model.json
    assert "num_gpus=1" in theory
    # fsdp full_shard on the example's one GPU shards nothing
    assert sharded.split("warnings=")[0] == theory.split("warnings=")[0]
    # dataset "imdb" is a Hugging Face Hub name: time None (the original downloads it)
    assert time_.startswith("With only theory:  TimeEstimate(time=None, train_time=None")
    assert "data.dataset 'imdb'" in time_
    assert re.match(r"With only theory:  TokensEstimate\(tps=\d+\.\d+", tokens)

    mem = ns["estimate_memory"](ns["est_input"], ns["model_path"])
    assert mem.num_gpus == 1 and mem.model_memory == "12.6 GiB"    # 6.74e9 params x 2 bytes
    assert ns["estimate_time"](ns["est_input"]).time is None


def test_readme_example_warns_only_of_what_it_sets(readme_example):
    """``EstimatorMetadata(base_data_path=...)`` leaves ``token_estimation_version`` at its
    default 0: no record warns about it (the dataclass is read with every field)."""
    ns, printed = readme_example
    assert "token_estimation_version" not in printed
    assert not any("token_estimation_version" in w
                   for w in ns["estimate_memory"](ns["est_input"]).warnings)


def test_readme_example_with_a_local_dataset_names_the_missing_lookup(readme_example):
    ns, _ = readme_example
    job = ns["JobConfig"](ns["HFTrainingArguments"](per_device_train_batch_size=1),
                          ns["FMArguments"](base_model_path="ibm-granite/granite-7b-base",
                                            torch_dtype="bfloat16", block_size=1024),
                          ns["DataArguments"](dataset=str(TE_TEST1), te_approach=0),
                          ns["InfraArguments"](numGpusPerPod=1))
    est_input = ns["EstimateInput"](
        estimator_metadata=ns["EstimatorMetadata"](base_data_path=ns["lookup_data_path"]),
        job_configs=[job])
    t = ns["estimate_time"](est_input)
    assert t.time is not None and t.time > t.train_time > 0
    assert any(ns["lookup_data_path"] in w for w in t.warnings)


# -- config1..4.json through ui.core.run ----------------------------------------------------
def test_configs_through_run(answers):
    """config1 (only max_seq_length): the defaults (granite-3b-code-base, float32, batch 8,
    2048 tokens, no checkpointing) need 161.6 GiB per GPU at any count, as FSDP does not
    shard a GPU's activations: the original's infeasible answer, with fmest's reason.
    config2/3 (granite-7b-base, float16, FSDP on 2 GPUs, batch 4/5): the original's keys.
    config4 (config3 + dataset "imdb"): the same memory, time absent, the Hub name and the
    unused dataset_config_file in the warnings. The original answers none of these without
    -l/-m: its ui/core.py builds a HybridSpeedEstimator, which raises RuntimeError then."""
    one = answers["config1"]
    assert one["error"] == INFEASIBLE and "80 GiB" in one["reason"]

    two, three, four = answers["config2"], answers["config3"], answers["config4"]
    for out in (two, three, four):
        assert set(FLAT_KEYS) <= set(out)
        assert out["num_gpus"] == 2 and out["tps"] > 0
        for key in FLAT_KEYS[5:10]:
            assert out[key] == fmt_size(out[key + "_og"]), key
        # the parts add up to the total (docs/compat.md)
        assert out["total_mem_estimate_og"] == pytest.approx(
            sum(out[k] for k in FLAT_KEYS[1:5]))
        assert out["total_mem_estimate_og"] < 80 * GiB
    # 6.74e9 params x 2 bytes / 2 GPUs
    assert two["model_memory"] == three["model_memory"] == "6.3 GiB"
    assert three["total_mem_estimate_og"] > two["total_mem_estimate_og"]    # batch 5 > 4
    assert {k: four[k] for k in FLAT_KEYS} == {k: three[k] for k in FLAT_KEYS}
    assert "time" not in four and "total_tokens" not in four
    text = "\n".join(four["warnings"])
    assert "data.dataset 'imdb'" in text and "data.dataset_config_file" in text


# -- the CLI --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_configs_through_fmest_cli(engine, answers, name, capsys):
    from fmest.cli import main

    assert main(["fm-training-estimator", str(CONFIGS[name])], engine=engine) == 0
    assert json.loads(capsys.readouterr().out) == answers[name]


def test_cli_flags_in_process(tmp_path, capsys):
    """ui/README.md: ``cli <config> -l <lookup file> -m <model file>``; config3.json is its
    example where the lookup fails (batch 5 is no row of data2.csv). The model here is
    absent: named in the warnings, theory answers."""
    from fmest.compat.fm_training_estimator.ui import cli

    data2 = lookup_csv("data2.csv")
    model = tmp_path / "test.model.json"
    assert cli.main([str(CONFIGS["config3"]), "-l", data2, "-m", str(model),
                     "--log_level", "warning"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["num_gpus"] == 2 and out["tps"] > 0
    text = "\n".join(out["warnings"])
    assert f"model_path {model}" in text and "has 7 rows" in text


def test_cli_module_with_every_flag(tmp_path):
    """``python -m ...ui.cli config2.json -l data2.csv -m MODEL -o OUT --log_level debug``:
    config2.json is ui/README.md's example where the lookup works (data2.csv's row: 2 GPUs,
    batch 4, 512 tokens -> memory 20, 500 tokens/s); the output's folder is created, as the
    original's ``output_path.parent.mkdir(parents=True)``."""
    data2 = lookup_csv("data2.csv")
    answer = tmp_path / "out" / "answer.json"
    proc = subprocess.run(
        [sys.executable, "-m", "fmest.compat.fm_training_estimator.ui.cli",
         str(CONFIGS["config2"]), "-l", data2, "-m", str(tmp_path / "test.model.json"),
         "-o", str(answer), "--log_level", "debug"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    out = json.loads(answer.read_text())
    assert out["tps"] == 500 and out["num_gpus"] == 2
    assert out["total_mem_estimate"] == "20.0 B"
    assert any("lookup: " in w for w in out["warnings"])


def test_adr_estimate_input_through_cli_file_flag(engine, tmp_path, capsys):
    """The ADR's EstimateInput (method theory, one GPU) with ``-f``, both CLIs."""
    from fmest.cli import main
    from fmest.compat.fm_training_estimator.ui import cli

    path = tmp_path / "estimate_input.json"
    path.write_text(json.dumps(adr_example()))
    assert main(["fm-training-estimator", "-f", str(path)], engine=engine) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(FLAT_KEYS) <= set(out) and out["num_gpus"] == 1
    assert out == run(str(path), engine=engine)
    assert any("method is theory" in w for w in out["warnings"])    # base_data_path unused

    assert cli.main(["--input_file_path", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["total_mem_estimate"] == out["total_mem_estimate"]


# -- the REST route -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def serve_client(engine):
    pytest.importorskip("fastapi", reason="needs the serve extra: pip install 'fmest[serve]'")
    pytest.importorskip("httpx", reason="needs the serve extra")
    from fastapi.testclient import TestClient

    from fmest.serve.app import create_app

    return TestClient(create_app(engine), raise_server_exceptions=False)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_configs_through_fmest_serve(serve_client, answers, name):
    """``curl localhost:3000/api/estimate -d@configN.json`` against ``fmest serve``: the answer
    is a JSON string holding the flat answer (the original returns ``json.dumps(output)``).
    config4 names a dataset "imdb", which ``fmest serve`` reads as a file a request names: it
    is not read outside ``--allow-path`` (docs/serve.md: a local service is not a public one),
    and the answer says so instead of a run length."""
    r = serve_client.post(ROUTE, content=curl_body(CONFIGS[name]), headers=FORM)
    assert r.status_code == 200, r.text
    if name == "config4":
        out = json.loads(r.json())
        assert "time" not in out and out["num_gpus"] == answers[name]["num_gpus"]
        assert any(w.startswith("job_configs[0].data.dataset: not read") for w in out["warnings"])
        return
    assert r.headers["content-type"].startswith("application/json")
    text = r.json()
    assert isinstance(text, str)
    assert json.loads(text) == answers[name]


def test_fmest_serve_reads_a_json_string_body(serve_client, answers):
    """FastAPI's ``Body()`` in the original takes the config as a JSON string too."""
    r = serve_client.post(ROUTE, json=CONFIGS["config2"].read_text())
    assert r.status_code == 200, r.text
    assert json.loads(r.json()) == answers["config2"]


def test_fmest_serve_with_the_operators_lookup(engine):
    """``fmest serve --fmte-lookup-data data2.csv`` (the original's ``run_api(data_path)``)."""
    pytest.importorskip("fastapi", reason="needs the serve extra")
    from fastapi.testclient import TestClient

    from fmest.serve.app import create_app

    client = TestClient(create_app(engine, fmte_paths=(lookup_csv("data2.csv"), None)),
                        raise_server_exceptions=False)
    r = client.post(ROUTE, content=curl_body(CONFIGS["config2"]), headers=FORM)
    assert r.status_code == 200, r.text
    out = json.loads(r.json())
    assert out["tps"] == 500 and out["total_mem_estimate"] == "20.0 B"


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_configs_through_the_standalone_api(engine, answers, name):
    """``python -m ...ui.api`` (the original's ``make run-api``): no file policy, so config4's
    Hub name is answered as the CLI answers it (time absent, a warning)."""
    pytest.importorskip("fastapi", reason="needs the serve extra")
    from fastapi.testclient import TestClient

    from fmest.compat.fm_training_estimator.ui.api import api

    client = TestClient(api(None, None, engine=engine), raise_server_exceptions=False)
    r = client.post(ROUTE, content=curl_body(CONFIGS[name]), headers=FORM)
    assert r.status_code == 200, r.text
    assert json.loads(r.json()) == answers[name]
