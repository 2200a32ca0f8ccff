"""Errors carry their details as attributes (field, message, value, accepted) from where they
are raised to where they are printed; renaming the field keeps them."""

from __future__ import annotations

import json

from fmest.cli import main
from fmest.errors import InputError, UnknownNameError, error_object


def test_at_renames_the_field_and_keeps_the_rest():
    err = UnknownNameError("training.dtype", "not an accepted value", value="fp7",
                           accepted=["bf16", "fp16"])
    moved = err.at("job.json: training.dtype")
    assert type(moved) is UnknownNameError
    assert (moved.field, moved.message, moved.value, moved.accepted) == \
        ("job.json: training.dtype", "not an accepted value", "fp7", ["bf16", "fp16"])
    assert str(moved) == "job.json: " + str(err)


def test_an_input_file_error_keeps_its_accepted_values(tmp_path, capsys):
    path = tmp_path / "job.json"
    path.write_text(json.dumps({"model": "gpt2", "training": {"dtype": "fp7"}}))
    assert main(["estimate", "-f", str(path), "--format", "json"]) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert "training.dtype" in error["field"]
    assert "bf16" in error["accepted"] and "fp7" in error["message"]


def test_error_object_reads_the_attributes():
    body = error_object(InputError("--seq-len", "expected a whole number", value=0))
    assert body["error"]["field"] == "seq_len"
    assert body["error"]["message"].startswith("expected a whole number")
