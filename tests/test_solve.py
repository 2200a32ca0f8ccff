"""``fmest solve FIELD`` (issue 26): the largest seq_len, micro_batch, context or lora_rank that
fits, exact at the boundary (``fmest.estimate`` says it fits and the next value does not),
bounded by fmest.bounds, with a clear answer when nothing fits."""

from __future__ import annotations

import json

import pytest

import fmest
from fmest.testing import new_engine, run_cli

LLAMA = ["--model", "meta-llama/Llama-2-7b-hf", "--gpu", "A100-80GB"]


@pytest.fixture(scope="module")
def engine():
    return new_engine(entrypoints=True)


def run(engine, argv, capsys) -> tuple[int, str, str]:
    return run_cli(engine, argv, capsys)


def solve_json(engine, argv, capsys) -> dict:
    rc, out, err = run(engine, ["solve", *argv, "--format", "json"], capsys)
    assert rc == 0, err
    return json.loads(out)


def _fits_at_confidence(report) -> bool:
    """The report's verdict at its job's fit confidence (default 0.9): P(fit) >= it, the point
    verdict for an answer without an interval (the rule of the report's --fail-if-no-fit)."""
    from fmest.output.report import _fails_at_confidence

    return report.fits is not None and not _fails_at_confidence(report)


def _fits(engine, job: dict, path: str, value: int) -> bool:
    section, name = path.split(".")
    job = {**job, section: {**job[section], name: value}}
    return _fits_at_confidence(fmest.estimate(job, engine=engine, quantities=("memory",)))


@pytest.mark.parametrize("argv", [
    ["seq_len", *LLAMA, "--zero", "3", "--gpus-per-node", "8"],
    ["seq_len", *LLAMA, "--zero", "3", "--gpus-per-node", "8", "--cp", "2"],
    ["micro_batch", "--model", "gpt2", "--seq-len", "512", "--gpu", "A10G"],
    ["context", *LLAMA, "--mode", "inference", "--batch", "8"],
    # QLoRA 7B at seq 1024 on 24 GB: the rank the adapters' memory allows at P(fit) >= 90 %
    ["lora_rank", "--model", "meta-llama/Llama-2-7b-hf", "--qlora", "--gpu", "A10G",
     "--seq-len", "1024", "--lora-target-modules", "all-linear"],
])
def test_the_answer_fits_and_the_next_value_does_not(engine, capsys, argv):
    out = solve_json(engine, argv, capsys)
    assert out["limit"] == "memory" and out["fits"] is True
    value, step, path = out["value"], out["step"], out["path"]
    assert out["at"]["value"] == value and out["at"]["fits"] is True
    assert out["next"] == {**out["next"], "value": value + step, "fits": False, "refused": None}
    assert out["next"]["peak_bytes"] > out["at"]["peak_bytes"]
    # the job at the answer, through the public API: fits, and the next value does not
    assert out["job"][path.split(".")[0]][path.split(".")[1]] == value
    assert _fits(engine, out["job"], path, value) is True
    assert _fits(engine, out["job"], path, value + step) is False
    assert value % step == 0
    # bisection: about two probes per bit of the bound
    assert out["probes"] <= 2 * out["bound"].bit_length() + 2


def test_micro_batch_agrees_with_the_reports_search(engine, capsys):
    argv = ["--model", "gpt2", "--seq-len", "512", "--gpu", "A10G"]
    out = solve_json(engine, ["micro_batch", *argv], capsys)
    rc, text, _ = run(engine, ["estimate", *argv, "--format", "json"], capsys)
    assert json.loads(text)["memory"]["max_micro_batch"] == out["value"]


def test_cp_keeps_seq_len_a_multiple(engine, capsys):
    out = solve_json(engine, ["seq_len", *LLAMA, "--zero", "3", "--gpus-per-node", "8",
                              "--cp", "4"], capsys)
    assert out["step"] == 4 and out["value"] % 4 == 0 and out["next"]["value"] == out["value"] + 4


def test_a_value_the_model_refuses_stops_the_search(engine, capsys):
    out = solve_json(engine, ["seq_len", "--model", "gpt2", "--gpu", "A100-80GB"], capsys)
    assert out["value"] == 1024 and out["limit"] == "refused"
    assert out["next"]["value"] == 1025 and "position table" in out["next"]["refused"]
    out = solve_json(engine, ["lora_rank", "--model", "gpt2", "--lora", "--seq-len", "512",
                              "--gpu", "A100-80GB"], capsys)
    assert out["value"] == 768 and out["limit"] == "refused"
    assert "hidden size" in out["next"]["refused"]


def test_the_bound_stops_the_search(engine, capsys):
    out = solve_json(engine, ["seq_len", "--params", "1e6", "--gpu", "A100-80GB"], capsys)
    assert out["limit"] == "bound" and out["value"] == out["bound"] == 2**24
    assert out["next"] is None and "bound" in out["reason"]


def test_nothing_fits_is_an_answer(engine, capsys):
    argv = ["solve", "seq_len", "--model", "meta-llama/Llama-2-70b-hf", "--gpu", "A10G"]
    rc, text, _ = run(engine, argv, capsys)
    assert rc == 0
    assert "largest seq_len that fits: none" in text and "even seq_len 1 does not fit" in text
    out = solve_json(engine, argv[1:], capsys)
    assert out["value"] is None and out["fits"] is False and out["limit"] == "none"
    assert out["at"]["value"] == 1 and out["next"] is None
    rc, _, err = run(engine, [*argv, "--fail-if-no-fit"], capsys)
    assert rc == 3 and "nothing fits" in err


def test_table_shows_value_peaks_and_gpu(engine, capsys):
    rc, text, _ = run(engine, ["solve", "micro_batch", "--model", "gpt2", "--seq-len", "512",
                               "--gpu", "A10G"], capsys)
    assert rc == 0
    value = _largest_fitting_micro_batch(engine)
    assert f"largest micro_batch that fits: {value}" in text
    assert "A10G" in text and "peak GiB/GPU" in text
    assert "does not fit" in text and "limit: memory" in text


def test_the_given_value_is_replaced_with_a_note(engine, capsys):
    out = solve_json(engine, ["micro_batch", "--model", "gpt2", "--seq-len", "512", "--gpu",
                              "A10G", "--micro-batch", "4"], capsys)
    assert out["value"] == _largest_fitting_micro_batch(engine)
    assert any("replaced by the search" in w for w in out["warnings"])


def _largest_fitting_micro_batch(engine) -> int:
    """GPT-2 at 512 tokens on an A10G: the micro-batch that fits whose next does not, asked of
    the engine directly, at the default fit confidence (0.9)."""
    from fmest.convert import job_from_dict

    def fits(mb: int) -> bool:
        job = job_from_dict({"model": "gpt2", "hardware": {"gpu": "A10G"},
                             "training": {"seq_len": 512, "micro_batch_size": mb}})
        return _fits_at_confidence(engine.estimate(job, quantities=("memory",)))

    mb = 1
    while fits(mb + 1):
        mb += 1
    assert mb > 8   # a 124M model at 512 tokens fits many sequences on 24 GB
    return mb


@pytest.mark.parametrize("argv,field", [
    (["context", *LLAMA], "mode"),                       # context is an inference field
    (["seq_len", *LLAMA, "--mode", "inference"], "mode"),
    (["lora_rank", *LLAMA], "technique"),                # a rank needs a LoRA job
    (["seq_len", "--gpu", "A10G"], "model"),
])
def test_bad_input_names_the_flag(engine, capsys, argv, field):
    rc, out, err = run(engine, ["solve", *argv, "--format", "json"], capsys)
    assert rc == 2
    assert json.loads(out)["error"]["field"] == field
    assert err.startswith("fmest: error: ")


def test_unknown_field_is_refused(engine, capsys):
    rc, _, err = run(engine, ["solve", "hidden_size", *LLAMA], capsys)
    assert rc == 2 and "seq_len" in err and "lora_rank" in err


def test_smallest_seq_len_is_the_average_sample(engine, capsys):
    out = solve_json(engine, ["seq_len", *LLAMA, "--avg-seq-len", "300", "--zero", "3",
                              "--gpus-per-node", "8", "--dataset-tokens", "1e9"], capsys)
    assert out["smallest"] == 300 and out["value"] >= 300
