"""What would make it fit (fmest.fit_advice, ``memory.to_make_it_fit``): every change offered
for a job that does not fit makes it fit when its flags are given, a job that fits gets ``[]``,
the list follows the module's ranking rule, and the JSON field is there for every job."""

from __future__ import annotations

import json
import time

import pytest

from fmest import api, fit_advice
from fmest.cli import main
from fmest.engine import Engine

L7 = ["--model", "meta-llama/Llama-2-7b-hf"]
#: Llama-2-7B full fine-tuning on one A100-80GB at seq 4096, micro-batch 4: 154 GiB
NO_FIT = [*L7, "--gpu", "A100-80GB", "--seq-len", "4096", "--per-device-batch", "4",
          "--fit-confidence", "0.5"]
#: the same at micro-batch 1 judged at P(fit) >= 90 %, the default (86 % by the interval
#: refitted on the open sources, 2026-11-26): many changes fit, each kind among them
NO_FIT_AT_90 = [*L7, "--gpu", "A100-80GB", "--seq-len", "4096"]
#: eight GPUs under ZeRO-1 with micro-batch 8 x accumulation 2: a smaller micro-batch fits
NO_FIT_SHARDED = [*L7, "--gpu", "A100-80GB", "--seq-len", "4096", "--per-device-batch", "8",
                  "--grad-accum", "2", "--gpus-per-node", "8", "--zero", "1",
                  "--fit-confidence", "0.5"]
#: Megatron (selective checkpointing is offered first), over the memory by the interval
NO_FIT_MEGATRON = ["--model", "meta-llama/Llama-3.1-70B", "--stack", "megatron-core", "--gpu",
                   "H100-SXM", "--nodes", "8", "--tp", "4", "--pp", "2",
                   "--distributed-optimizer", "--seq-len", "8192", "--fit-confidence", "0.5"]
#: LoRA at seq 1024 on one H100: ~20 GiB of 80, P(fit) ~1 (full fine-tuning there is 65 GiB,
#: P(fit) 0.86: short of the default 0.9, so it would get changes)
FITS = [*L7, "--gpu", "H100-SXM", "--seq-len", "1024", "--technique", "lora"]


@pytest.fixture(scope="module")
def engine():
    return Engine()


def _json(engine, argv, capsys) -> dict:
    capsys.readouterr()
    assert main(["estimate", *argv, "--format", "json"], engine=engine) == 0
    return json.loads(capsys.readouterr().out)


def _fails(memory: dict, confidence: float) -> bool:
    p = memory["fits_probability"]
    return not memory["fits"] if p is None else p < confidence


@pytest.mark.parametrize("argv,confidence", [(NO_FIT, 0.5), (NO_FIT_AT_90, 0.9),
                                             (NO_FIT_SHARDED, 0.5), (NO_FIT_MEGATRON, 0.5)])
def test_every_change_offered_fits_when_applied(engine, capsys, argv, confidence):
    out = _json(engine, argv, capsys)
    assert _fails(out["memory"], confidence)
    advice = out["memory"]["to_make_it_fit"]
    assert advice, "a job that does not fit gets at least one change here"
    assert len(advice) <= fit_advice.MAX_ESTIMATES
    for item in advice:
        assert item["change"] == " ".join(item["flags"])
        changed = _json(engine, [*argv, *item["flags"]], capsys)
        mem = changed["memory"]
        assert not _fails(mem, confidence), item["change"]
        assert mem["total_bytes"] == item["peak_bytes"]
        assert mem["to_make_it_fit"] == []
        assert changed["layout"]["world_size"] == item["gpus"]
        assert changed["time"]["step_seconds"] == pytest.approx(item["step_seconds"])


def test_the_issue_example_offers_the_expected_kinds(engine, capsys):
    advice = _json(engine, NO_FIT_AT_90, capsys)["memory"]["to_make_it_fit"]
    changes = [a["change"] for a in advice]
    # the 8-bit optimizer lands at P(fit) 0.8995 under the interval refitted with parts r9/r10
    # (2026-11-27): offered when judged at 85 %, not at the default 90 %
    eight_bit = _json(engine, [*NO_FIT_AT_90, "--fit-confidence", "0.85"],
                      capsys)["memory"]["to_make_it_fit"]
    assert "--optimizer adamw_8bit" in [a["change"] for a in eight_bit]
    assert "--technique lora" in changes
    assert any(c.startswith("--zero 3 --gpus-per-node") for c in changes)   # shard + GPUs
    assert any(c.startswith("--gpu ") for c in changes)
    # the global batch is kept when the micro-batch is lowered
    sharded = _json(engine, NO_FIT_SHARDED, capsys)["memory"]["to_make_it_fit"]
    batch = next(a for a in sharded if a["flags"][0] == "--per-device-batch")
    b, accum = int(batch["flags"][1]), int(batch["flags"][3])
    assert b * accum == 8 * 2 and b < 8


def test_selective_checkpointing_first_where_the_stack_has_it(engine):
    report = api.estimate_jobs(api.read_jobs({"model": "meta-llama/Llama-3.1-70B",
                                              "stack": "megatron-core", "gpu": "H100-SXM",
                                              "nodes": 8, "tp": 4, "pp": 2,
                                              "distributed_optimizer": True, "seq_len": 8192}),
                               engine=engine, searches=("max_micro_batch", "min_gpus"))
    groups = fit_advice._groups(engine, report)
    assert [o.flags for o in groups[0]] == [("--grad-checkpoint", "selective"),
                                            ("--grad-checkpoint", "full")]
    plain = api.estimate_jobs(api.read_jobs({"model": "meta-llama/Llama-2-7b-hf",
                                             "gpu": "A100-80GB", "seq_len": 4096,
                                             "per_device_batch": 4}), engine=engine)
    assert [o.flags for o in fit_advice._groups(engine, plain)[0]] == [
        ("--grad-checkpoint", "full")]


@pytest.mark.parametrize("argv", [NO_FIT, NO_FIT_AT_90, NO_FIT_SHARDED, NO_FIT_MEGATRON])
def test_ordering_follows_the_stated_rule(engine, capsys, argv):
    advice = _json(engine, argv, capsys)["memory"]["to_make_it_fit"]
    tiers = [fit_advice.TIERS[a["kind"]] for a in advice]
    assert tiers == sorted(tiers), "settings, then hardware, then what is trained"
    for tier in set(tiers):
        ratios = [a["step_ratio"] for a in advice if fit_advice.TIERS[a["kind"]] == tier]
        known = [r for r in ratios if r is not None]
        assert known == sorted(known), "least slowdown first within a tier"
        assert ratios[:len(known)] == known, "unknown step time after known ones"
    kinds = {a["change"]: a["kind"] for a in advice}
    for change, kind in kinds.items():
        if change.startswith("--technique"):
            assert kind == "training"
        elif change.startswith("--gpu ") or "--gpus-per-node" in change:
            assert kind == "hardware"
        else:
            assert kind == "setting"


def test_rank_key_orders_tiers_then_slowdown():
    def item(kind, ratio, peak=1, change="x"):
        return fit_advice.FitChange(change=change, flags=(change,), kind=kind, peak_bytes=peak,
                                    fits_probability=None, step_seconds=None, step_ratio=ratio,
                                    gpus=1, gpu="g")
    items = [item("training", 0.5, change="lora"), item("hardware", 0.2, change="gpu"),
             item("setting", None, change="unknown"), item("setting", 1.3, change="ckpt"),
             item("setting", 0.9, change="8bit")]
    assert [i.change for i in sorted(items, key=fit_advice.rank_key)] == [
        "8bit", "ckpt", "unknown", "gpu", "lora"]


def test_a_fitting_job_gets_an_empty_list(engine, capsys):
    mem = _json(engine, FITS, capsys)["memory"]
    assert mem["fits"] is True and mem["to_make_it_fit"] == []


@pytest.mark.parametrize("argv", [
    FITS, NO_FIT, ["--params", "7e9", "--gpu", "A100-80GB"],
    ["--mode", "inference", *L7, "--gpu", "L4", "--batch", "64", "--context", "8192"],
    ["--model", "gpt2", "--lora", "--gpu", "A10G"],
])
def test_the_json_field_exists_for_every_job(engine, capsys, argv):
    mem = _json(engine, argv, capsys)["memory"]
    assert "to_make_it_fit" in mem
    value = mem["to_make_it_fit"]
    assert value is None or isinstance(value, list)
    if "inference" in argv:
        assert value is None      # not computed: training jobs only


def test_the_table_lists_the_changes_under_the_verdict(engine, capsys):
    capsys.readouterr()
    assert main(["estimate", *NO_FIT_AT_90], engine=engine) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    verdict = next(i for i, ln in enumerate(lines) if "verdict:" in ln)
    head = next(i for i, ln in enumerate(lines) if ln.strip().startswith("to make it fit"))
    assert head > verdict
    first = _json(engine, NO_FIT_AT_90, capsys)["memory"]["to_make_it_fit"][0]["change"]
    assert lines[head + 1].strip().startswith(f"1. {first} (")
    assert "step " in lines[head + 1] and "GiB" in lines[head + 1]
    capsys.readouterr()
    assert main(["estimate", *FITS], engine=engine) == 0
    assert "to make it fit" not in capsys.readouterr().out


def test_the_added_time_is_small(engine):
    """The advice for a job that does not fit costs a few ms on the theory path (about 4-5 ms
    on the development machine; the bound here only catches a runaway)."""
    pairs = api.read_jobs({"model": "meta-llama/Llama-2-7b-hf", "gpu": "A100-80GB",
                           "seq_len": 4096, "fit_confidence": 0.9})
    report = api.estimate_jobs(pairs, engine=engine, searches=("max_micro_batch", "min_gpus"))
    fit_advice.to_make_it_fit(engine, report)   # warm the caches
    start = time.perf_counter()
    for _ in range(5):
        fit_advice.to_make_it_fit(engine, report)
    assert (time.perf_counter() - start) / 5 < 0.25


def _golden_cases() -> dict:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "golden.py"
    spec = importlib.util.spec_from_file_location("fmest_golden_cases", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {k: v[1:] for k, v in module.CASES.items() if v[0] == "estimate"}


GOLDEN = _golden_cases()


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_jobs_advice_fits_when_applied(engine, capsys, monkeypatch, name):
    """Over the golden command lines (configs, stacks, several nodes, inference): the field is
    there, and every change offered fits when its flags are added."""
    from pathlib import Path

    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    argv = GOLDEN[name]
    out = _json(engine, argv, capsys)
    mem = out["memory"]
    assert "to_make_it_fit" in mem
    if out["job"]["mode"] != "training":
        assert mem["to_make_it_fit"] is None
        return
    confidence = out["job"]["options"]["fit_confidence"]
    if not _fails(mem, confidence):
        assert mem["to_make_it_fit"] == []
    for item in mem["to_make_it_fit"]:
        changed = _json(engine, [*argv, *item["flags"]], capsys)["memory"]
        assert not _fails(changed, confidence), (name, item["change"])
        assert changed["total_bytes"] == item["peak_bytes"]


def test_changes_are_combined_when_no_single_one_fits(engine, capsys):
    """Llama-3.1-70B full fine-tuning on two A100-80GB at seq 4096: no single change fits (QLoRA
    alone keeps the unsharded activations), so the strongest settings and QLoRA are tried
    together and every change not needed is dropped; applying the flags fits."""
    argv = ["--model", "meta-llama/Llama-3.1-70B", "--gpu", "A100-80GB", "--gpus-per-node", "2",
            "--seq-len", "4096"]
    advice = _json(engine, argv, capsys)["memory"]["to_make_it_fit"]
    assert [a["kind"] for a in advice] == ["combined"]
    flags = advice[0]["flags"]
    assert "--technique" in flags and len(flags) >= 4
    after = _json(engine, [*argv, *flags], capsys)["memory"]
    assert after["fits"] and after["to_make_it_fit"] == []
    # dropping any one of the combined changes no longer fits at the job's fit confidence,
    # the level the advice judges at (nothing unneeded is kept): advice is offered again
    pairs = list(zip(flags[::2], flags[1::2], strict=True))
    for i in range(len(pairs)):
        rest = [x for j, p in enumerate(pairs) if j != i for x in p]
        assert _json(engine, [*argv, *rest], capsys)["memory"]["to_make_it_fit"] != []


def test_reusing_the_fewest_gpu_search_changes_no_advice(monkeypatch):
    """The "more GPUs" candidate reuses the fewest-GPU search's memory answer
    (Engine.searched_memory); switched off, the advice and the search answer the same."""
    import fmest

    job = fmest.to_job({"model": "mistralai/Mixtral-8x7B-v0.1",
                        "parallelism": {"fsdp": "full_shard"},
                        "hardware": {"gpu": "H100-SXM", "gpus_per_node": 8, "nodes": 2}})

    def answer(engine):
        report = api.estimate_jobs([(job, None)], engine=engine)
        memory = report.to_dict()["memory"]
        return memory["to_make_it_fit"], memory["min_gpus"]

    reused = answer(Engine())
    assert any("gpus" in " ".join(c["flags"]).lower() or c["kind"] == "hardware"
               for c in reused[0]), reused[0]
    monkeypatch.setattr(Engine, "searched_memory", lambda self, job: None)
    assert answer(Engine()) == reused
