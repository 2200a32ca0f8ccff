"""``fmest estimate --compare KEY=V1,V2`` (issue 26): the variants of a job side by side, each
the answer a separate ``fmest estimate`` gives; bad keys and values refused on one line naming
the flag; the number of variants capped; the service refuses the CLI-only flag."""

from __future__ import annotations

import json

import pytest

import fmest
from fmest import api
from fmest.errors import InputError
from fmest.testing import new_engine, run_cli

BASE = ["estimate", "--model", "meta-llama/Llama-2-7b-hf", "--gpu", "A100-80GB",
        "--gpus-per-node", "8", "--dataset-tokens", "1e9"]


@pytest.fixture(scope="module")
def engine():
    return new_engine(entrypoints=True)


def run(engine, argv, capsys) -> tuple[int, str, str]:
    return run_cli(engine, argv, capsys)


def test_variants_are_the_product_in_order():
    assert api.compare_variants(["zero=2,3", "technique=lora,full"]) == [
        {"zero": 2, "technique": "lora"}, {"zero": 2, "technique": "full"},
        {"zero": 3, "technique": "lora"}, {"zero": 3, "technique": "full"}]
    # values go through the flag's own parser
    assert api.compare_variants(["micro_batch=1,2k", "compile=true,no"]) == [
        {"micro_batch": 1, "compile": True}, {"micro_batch": 1, "compile": False},
        {"micro_batch": 2000, "compile": True}, {"micro_batch": 2000, "compile": False}]


def test_each_variant_is_a_separate_estimate(engine, capsys):
    rc, out, err = run(engine, [*BASE, "--compare", "zero=2,3", "--compare",
                                "technique=lora,full", "--format", "json"], capsys)
    assert rc == 0, err
    variants = json.loads(out)
    assert [v["settings"] for v in variants] == api.compare_variants(
        ["zero=2,3", "technique=lora,full"])
    for v in variants:
        s = v["settings"]
        rc, alone, _ = run(engine, [*BASE, "--zero", str(s["zero"]), "--technique",
                                    s["technique"], "--format", "json"], capsys)
        assert {k: x for k, x in v.items() if k != "settings"} == json.loads(alone)
        # and through the Python API, from the variant's own job
        report = fmest.estimate(v["job"], engine=engine)
        assert report.memory.total_bytes == v["memory"]["total_bytes"]
        assert report.fits == v["memory"]["fits"]
        assert report.time.step_seconds == v["time"]["step_seconds"]
        assert report.cost.usd == v["cost"]["usd"]
    assert len({v["memory"]["total_bytes"] for v in variants}) == 4


def test_table_has_one_column_per_variant(engine, capsys):
    rc, out, _ = run(engine, [*BASE, "--compare", "zero=2,3", "--compare",
                              "technique=lora,full"], capsys)
    assert rc == 0
    lines = out.splitlines()
    for label in ("zero=2, technique=lora", "zero=3, technique=full"):
        assert label in lines[0]
    for row in ("peak memory/GPU", "verdict", "step time", "tokens/s", "total time", "cost"):
        line = next(line for line in lines if line.startswith(row))
        assert len(line.split("  ")) > 1
    verdicts = next(line for line in lines if line.startswith("verdict")).split()[1:]
    assert verdicts == ["FITS"] * 4


def test_fail_if_no_fit_counts_every_variant(engine, capsys):
    argv = ["estimate", "--model", "meta-llama/Llama-2-7b-hf", "--gpu", "A100-80GB",
            "--compare", "micro_batch=1,512", "--fail-if-no-fit"]
    rc, out, _ = run(engine, argv, capsys)
    assert rc == 3 and "DOES NOT FIT" in out


@pytest.mark.parametrize("spec,words,accepted", [
    (["zeroo=1,2"], ["'zeroo' is not a flag", "did you mean zero"], "zero"),
    (["zero=1,5"], ["zero: not an accepted value"], 3),
    (["zero"], ["expected KEY=V1,V2"], None),
    (["zero=1,"], ["empty value"], None),
    (["technique=lora,full,lora"], ["a value given twice"], None),
    (["zero=1", "zero=2"], ["compared twice"], None),
    (["micro_batch=1", "per_device_batch=2"], ["compared twice"], None),  # one flag, two names
    (["seq_len=0"], ["seq_len: expected a whole number"], None),
    (["seq_len=1,2,3,4,5,6,7,8,9", "micro_batch=1,2,3,4,5,6,7,8"], ["72 variants", "at most 64"],
     None),
])
def test_bad_compare_is_one_line_naming_the_flag(engine, capsys, spec, words, accepted):
    argv = [*BASE] + [a for s in spec for a in ("--compare", s)]
    rc, _, err = run(engine, argv, capsys)
    assert rc == 2 and err.count("\n") == 1 and err.startswith("fmest: error: --compare: ")
    for w in words:
        assert w in err
    rc, out, _ = run(engine, [*argv, "--format", "json"], capsys)
    error = json.loads(out)["error"]
    assert rc == 2 and error["field"] == "compare"
    if accepted is not None:
        assert accepted in error["accepted"]


def test_a_refused_variant_is_named(engine, capsys):
    rc, _, err = run(engine, [*BASE, "--pp", "2", "--compare", "zero=1,3"], capsys)
    assert rc == 2 and "(--compare variant zero=3)" in err


@pytest.mark.parametrize("extra", [["--format", "csv"], ["--plot", "x.png"]])
def test_other_outputs_are_refused(engine, capsys, extra):
    rc, _, err = run(engine, [*BASE, "--compare", "zero=2,3", *extra], capsys)
    assert rc == 2 and "--compare" in err


def test_compare_output_from_a_mapping(engine):
    from fmest import flags

    given = {**flags.defaults(flags.ESTIMATE_FLAGS), "model": "gpt2", "seq_len": 512,
             "gpu": "A10G", "compare": ["micro_batch=1,2"]}
    out = api.compare_output(given, engine)
    assert [v["settings"] for v in out] == [{"micro_batch": 1}, {"micro_batch": 2}]
    assert out[0]["memory"]["total_bytes"] < out[1]["memory"]["total_bytes"]
    with pytest.raises(InputError) as exc:
        api.compare_variants(["nope=1"])
    assert exc.value.field == "--compare" and "zero" in exc.value.accepted


def test_the_service_refuses_compare():
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from fmest.serve.app import create_app

    client = TestClient(create_app())
    answer = client.post("/v1/estimate", json={"model": "gpt2", "seq_len": 512,
                                               "compare": ["zero=1,2"]})
    assert answer.status_code == 422
    assert answer.json()["error"]["field"] == "compare"
    schema = client.get("/openapi.json").json()
    body = schema["paths"]["/v1/estimate"]["post"]["requestBody"]["content"][
        "application/json"]["schema"]
    assert "compare" not in body["properties"]
