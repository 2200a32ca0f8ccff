"""Golden answers: ``fmest estimate --format json`` (and one ``fmest plan``) for a fixed set of
command lines, written to ``tests/data/golden/answers.json``.

A refactor must leave these answers unchanged (``tests/test_golden.py`` compares them, floats
to 1e-9 relative). Regenerate only for a change that means to move an answer, and say which
and why in the commit message:

    python scripts/golden.py            # compare, print the differences
    python scripts/golden.py --update   # rewrite the file
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "data" / "golden" / "answers.json"

_L7 = ["--model", "meta-llama/Llama-2-7b-hf"]
#: name -> argv of ``fmest`` (each answer printed with ``--format json``)
CASES: dict[str, list[str]] = {
    "readme-main": ["estimate", *_L7, "--gpu", "A100-80GB", "--gpus-per-node", "8", "--zero",
                    "3", "--seq-len", "4096", "--per-device-batch", "4", "--grad-checkpoint",
                    "true", "--dataset-tokens", "2e9", "--provider", "cheapest"],
    "defaults": ["estimate", *_L7],
    "qlora-70b": ["estimate", "--model", "meta-llama/Llama-3.1-70B", "--technique", "qlora",
                  "--lora-rank", "16", "--lora-target-modules", "all-linear", "--seq-len",
                  "2048", "--grad-checkpoint", "true", "--gpu", "H100-SXM"],
    "lora-default-targets": ["estimate", "--model", "gpt2", "--lora", "--gpu", "A10G",
                             "--seq-len", "1024", "--per-device-batch", "8"],
    "mixtral-fsdp": ["estimate", "--model", "mistralai/Mixtral-8x7B-v0.1", "--fsdp",
                     "full_shard", "--gpus-per-node", "8", "--nodes", "2", "--gpu", "H100-SXM"],
    "mixtral-ep": ["estimate", "--model", "mistralai/Mixtral-8x7B-v0.1", "--stack",
                   "megatron-core", "--gpu", "H100-SXM", "--gpus-per-node", "8", "--nodes", "8",
                   "--tp", "2", "--ep", "8", "--distributed-optimizer", "--seq-len", "4096"],
    "megatron-70b": ["estimate", "--model", "meta-llama/Llama-3.1-70B", "--stack",
                     "megatron-core", "--gpu", "H100-SXM", "--nodes", "8", "--tp", "4", "--pp",
                     "2", "--distributed-optimizer", "--tp-comm-overlap", "--seq-len", "8192",
                     "--dataset-tokens", "1e10"],
    "fp8-torchtitan": ["estimate", "--model", "meta-llama/Llama-3.1-8B", "--stack",
                       "torchtitan", "--dtype", "fp8", "--fsdp", "full_shard", "--gpu",
                       "H100-SXM", "--gpus-per-node", "8", "--compile", "--seq-len", "8192"],
    "torchtune-pure": ["estimate", "--model", "meta-llama/Llama-3.1-8B", "--stack",
                       "torchtune", "--fsdp", "full_shard", "--gpus-per-node", "4",
                       "--gpu", "A100-80GB", "--optimizer", "adamw_8bit"],
    "hf-trainer-offload": ["estimate", *_L7, "--stack", "hf-trainer", "--zero", "3",
                           "--cpu-offload", "optimizer", "--gpu", "A10G", "--gpus-per-node",
                           "4", "--optimizer", "paged_adamw_8bit", "--liger"],
    "inference": ["estimate", "--mode", "inference", "--model", "meta-llama/Llama-3.1-70B",
                  "--dtype", "fp8", "--tp", "4", "--gpu", "H100-SXM", "--batch", "32",
                  "--context", "8192"],
    "inference-awq": ["estimate", "--mode", "inference", *_L7, "--quantization", "awq",
                      "--gpu", "L4", "--runtime", "transformers"],
    "vlm": ["estimate", "--model", "Qwen/Qwen2-VL-7B-Instruct", "--images-per-sample", "2",
            "--gpu", "H100-SXM"],
    "raw-dimensions": ["estimate", "--hidden-size", "4096", "--num-layers", "32",
                       "--num-heads", "32", "--intermediate-size", "11008", "--vocab-size",
                       "32000", "--gpu", "A100-80GB"],
    "weights-only": ["estimate", "--params", "7e9", "--gpu", "A100-80GB"],
    "calibration-knobs": ["estimate", *_L7, "--activation-factor", "1.3", "--fragmentation-gib",
                          "2", "--misc-overhead-gib", "1", "--safety-margin", "0.1",
                          "--gpu", "H100-PCIe", "--mfu", "0.45", "--num-samples", "10000",
                          "--avg-seq-len", "900", "--epochs", "3", "--price-per-gpu-hour", "2.5"],
    "eager-no-fit": ["estimate", *_L7, "--attn", "eager", "--seq-len", "8192",
                     "--per-device-batch", "8", "--gpu", "A100-40GB"],
    "config-torchtitan": ["estimate", "--config",
                          "tests/data/configs/torchtitan/llama3_8b.toml", "--explain"],
    "plan": ["plan", *_L7, "--dataset-tokens", "1e9", "--gpus", "H100-SXM,A100-80GB",
             "--max-gpus", "8", "--objective", "cost", "--top", "3"],
}


#: wall-clock figures of the planner's answer (not answers)
VOLATILE = ("seconds", "configs_per_second")


def answer(argv: list[str]) -> object:
    """What ``fmest ARGV --format json`` prints, parsed (or the error it prints)."""
    from fmest.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*argv, "--format", "json"])
    text = out.getvalue()
    got = json.loads(text) if text.strip() else None
    if isinstance(got, dict):
        for key in VOLATILE:
            got.pop(key, None)
    return {"exit": code, "answer": got, "stderr": err.getvalue().strip()}


def answers() -> dict[str, object]:
    return {name: answer(argv) for name, argv in CASES.items()}


def differences(want: object, got: object, path: str = "$", rel: float = 1e-9) -> list[str]:
    """Where ``got`` departs from ``want`` (floats within ``rel``)."""
    if isinstance(want, dict) and isinstance(got, dict):
        out = []
        for k in sorted(set(want) | set(got), key=str):
            if k not in got:
                out.append(f"{path}.{k}: missing")
            elif k not in want:
                out.append(f"{path}.{k}: new")
            else:
                out += differences(want[k], got[k], f"{path}.{k}", rel)
        return out
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return [f"{path}: {len(want)} items -> {len(got)}"]
        return [d for i, (a, b) in enumerate(zip(want, got, strict=True))
                for d in differences(a, b, f"{path}[{i}]", rel)]
    if isinstance(want, float) and isinstance(got, (int, float)) and \
            not isinstance(got, bool):
        if math.isclose(want, got, rel_tol=rel, abs_tol=1e-12):
            return []
    elif want == got and type(want) is type(got):
        return []
    return [f"{path}: {want!r} -> {got!r}"]


def main() -> int:
    os.chdir(ROOT)   # config paths in CASES are relative to the repository
    got = answers()
    if "--update" in sys.argv:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        print(f"wrote {GOLDEN.relative_to(ROOT)} ({len(got)} answers)")
        return 0
    want = json.loads(GOLDEN.read_text())
    diffs = differences(want, got)
    for d in diffs:
        print(d)
    print(f"{len(diffs)} differences in {len(got)} answers")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
