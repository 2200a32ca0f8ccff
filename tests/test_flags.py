"""The flag table (fmest.flags): one row is a flag of the command line, a property of the
service's schema (with x-flag/x-group, from which the page builds its form) and a field of the
job, with nothing else to edit."""

from __future__ import annotations

import argparse
import json

import pytest

from fmest import flags
from fmest.cli import build_parser, main
from fmest.errors import InputError
from fmest.flags import Flag

GIB = 1024**3
NEW = Flag(names=("--extra-overhead-gib",), group="calibration knobs (docs/inference.md)",
           path="calibration.misc_overhead_gib", parse=float,
           help="a flag added in one row (test)")


@pytest.fixture
def with_new_row(monkeypatch):
    for table in ("JOB_FLAGS", "ESTIMATE_FLAGS", "PLAN_FLAGS"):
        monkeypatch.setattr(flags, table, getattr(flags, table) + (NEW,))


def _json(argv, capsys):
    assert main([*argv, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_one_row_is_a_flag_a_schema_property_and_a_page_field(with_new_row, capsys):
    estimate = build_parser().fmest_commands["estimate"][1]
    assert "--extra-overhead-gib" in estimate.format_help()
    base = ["estimate", "--model", "gpt2", "--seq-len", "512", "--gpu", "A10G"]
    plain = _json(base, capsys)
    more = _json([*base, "--extra-overhead-gib", "2", "--explain"], capsys)
    assert more["memory"]["total_bytes"] - plain["memory"]["total_bytes"] == 2 * GIB
    assert more["input"]["origins"]["calibration.misc_overhead_gib"] == "--extra-overhead-gib"

    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from fmest.serve.app import create_app

    client = TestClient(create_app())
    schema = client.get("/openapi.json").json()
    body = schema["paths"]["/v1/estimate"]["post"]["requestBody"]["content"][
        "application/json"]["schema"]
    prop = body["properties"]["extra_overhead_gib"]
    # the page (serve/static/app.js) builds one labelled input per property with an x-group
    assert prop["x-flag"] == "--extra-overhead-gib" and prop["x-group"].startswith("calibration")
    assert prop["type"] == "number"
    answer = client.post("/v1/estimate", json={"model": "gpt2", "seq_len": 512, "gpu": "A10G",
                                               "extra_overhead_gib": 2}).json()
    assert answer["memory"]["total_bytes"] == more["memory"]["total_bytes"]


def test_every_job_row_sets_a_real_job_field():
    from fmest.convert import job_from_dict

    job = job_from_dict({"model": "gpt2"})
    for flag in flags.JOB_FLAGS:
        if flag.path is None or flag.path == "model":
            continue
        section, _, name = flag.path.partition(".")
        assert hasattr(getattr(job, section), name), f"{flag.name} -> {flag.path}"


def test_names_are_unique_and_json_names_do_not_collide():
    for table in (flags.ESTIMATE_FLAGS, flags.EXPORT_FLAGS, flags.PLAN_FLAGS):
        names = [n for f in table for n in f.names]
        assert len(names) == len(set(names))
        dests = [f.dest for f in table]
        assert len(dests) == len(set(dests))


def test_read_flags_gives_the_origin_and_maps_values():
    ns = build_parser().parse_args(["estimate", "--model", "gpt2", "--micro-batch", "3",
                                    "--fused-loss", "--lora-target-modules", "q_proj,v_proj",
                                    "--grad-checkpoint", "yes", "--dtype", "nf4"])
    layer = flags.read_flags(ns)
    assert layer.values["training.micro_batch_size"] == (3, "--per-device-batch")
    assert layer.values["training.loss"] == ("fused", "--fused-loss")
    assert layer.values["training.lora_target_modules"][0] == ["q_proj", "v_proj"]
    assert layer.values["training.activation_checkpointing"] == ("full", "--grad-checkpoint")
    assert layer.values["training.technique"] == ("qlora", "--dtype")
    assert layer.values["training.quantization_bits"] == (4, "--dtype")


def test_read_flags_takes_a_plain_mapping():
    layer = flags.read_flags({"model": "gpt2", "seq_len": 128, "zero": 2})
    assert layer.values["parallelism.zero_stage"] == (2, "--zero")


@pytest.mark.parametrize("name,value,field,accepted", [
    ("seq_len", 0, "seq_len", None),
    ("zero", 5, "zero", [0, 1, 2, 3]),
    ("compile", "maybe", "compile", [True, False]),
    ("lora_target_modules", [], "lora_target_modules", None),
    ("seq_len", {"a": 1}, "seq_len", None),
])
def test_convert_names_the_json_field(name, value, field, accepted):
    flag = flags.json_flags(flags.ESTIMATE_FLAGS)[name]
    with pytest.raises(InputError) as exc:
        flags.convert(name, flag, value)
    assert exc.value.field == field
    if accepted is not None:
        assert exc.value.accepted == accepted


def test_convert_reads_what_the_command_line_reads():
    table = flags.json_flags(flags.ESTIMATE_FLAGS)
    assert flags.convert("micro_batch", table["micro_batch"], "2") == 2
    assert flags.convert("dataset_tokens", table["dataset_tokens"], "300M") == 3e8
    assert flags.convert("compile", table["compile"], True) is True
    assert flags.convert("lora_target_modules", table["lora_target_modules"], "q_proj") == \
        ["q_proj"]
    assert "input_file" not in table and "format" not in table   # server-side rows


def test_job_path_maps_flag_names_and_keeps_paths():
    assert flags.job_path("micro_batch") == "training.micro_batch_size"
    assert flags.job_path("zero") == "parallelism.zero_stage"
    assert flags.job_path("training.seq_len") == "training.seq_len"
    assert flags.job_path("unknown_key") == "unknown_key"


def test_parsers_refuse_with_argparse_errors():
    for parse, text in ((flags.parse_positive_int, "0"), (flags.parse_count, "x"),
                        (flags.parse_bool, "maybe"), (flags.parse_positive_int, "1.5")):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(text)
    assert flags.parse_count("1.5B") == 1.5e9 and flags.parse_positive_int("2k") == 2000
