"""Trace Lit-GPT's own LoRA fine-tuning step (lit_gpt package at Lightning-AI/litgpt
8641822b3249bb94f068c254aa5d13decbc9f0a0, the commit of LitGPT's 2023 resource tables) on fake
tensors and print its live-tensor bytes: what one block saves for backward per token, the
logits/loss held at the end of forward and the step's peak.

It runs finetune/lora.py's step as written at that commit: bf16-true weights (Fabric
``init_module`` under ``bf16-true``), ``lora.Config`` with the script's defaults (r=8,
alpha=16, dropout=0.05, query+value), ``model(input_ids, lm_head_chunk_size=128)``, the
last chunk shifted, ``chunked_cross_entropy`` and ``backward``. Lightning itself is not
needed: the few names ``lit_gpt/utils.py`` imports from it are stubbed (nothing the step
runs uses them). Needs a bare git mirror of Lightning-AI/litgpt (``--mirror``, default
/work/.mirror/Lightning-AI+litgpt/repo) and torch; no GPU (fake tensors, CPU kernel
semantics: SDPA saves its output and fp32 logsumexp as the CUDA flash kernel does).

    python scripts/trace_litgpt_lora.py --model Llama-2-7b-hf --seq 1304 --layers 2 4
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import types
from pathlib import Path

COMMIT = "8641822b3249bb94f068c254aa5d13decbc9f0a0"
FILES = ("model.py", "config.py", "lora.py", "utils.py", "rmsnorm.py")


def extract(mirror: str, commit: str, dest: Path, package: str = "lit_gpt",
            files: tuple = FILES) -> None:
    """Write ``package``'s ``files`` at ``commit`` of the Lit-GPT/LitGPT mirror under ``dest``
    with a bare ``__init__`` (the real one imports the tokenizer, the API and checks the
    lightning version: not needed by the step). scripts/trace_litgpt2024.py reuses it."""
    pkg = dest / package
    pkg.mkdir(parents=True, exist_ok=True)
    for name in files:
        text = subprocess.run(["git", "-C", mirror, "show", f"{commit}:{package}/{name}"],
                              check=True, capture_output=True, text=True).stdout
        (pkg / name).write_text(text)
    (pkg / "__init__.py").write_text(f"from {package}.model import GPT\n"
                                     f"from {package}.config import Config\n")


def stub_lightning() -> None:
    """Stub the names lit_gpt/model.py and utils.py import (RequirementCache: flash-attn
    absent, as on a CPU trace; lightning.L, FSDPStrategy, _lazy_load: unused by the step)."""
    lu = types.ModuleType("lightning_utilities")
    core = types.ModuleType("lightning_utilities.core")
    imports = types.ModuleType("lightning_utilities.core.imports")

    class RequirementCache:
        def __init__(self, *a, **k):
            pass

        def __bool__(self):
            return False

    imports.RequirementCache = RequirementCache  # type: ignore[attr-defined]
    sys.modules.update({"lightning_utilities": lu, "lightning_utilities.core": core,
                        "lightning_utilities.core.imports": imports})
    names = ["lightning", "lightning.fabric", "lightning.fabric.strategies",
             "lightning.fabric.utilities", "lightning.fabric.utilities.load"]
    for name in names:
        sys.modules[name] = types.ModuleType(name)
    sys.modules["lightning"].Fabric = object  # type: ignore[attr-defined]
    sys.modules["lightning"].LightningModule = object  # type: ignore[attr-defined]
    sys.modules["lightning.fabric.strategies"].FSDPStrategy = object  # type: ignore[attr-defined]
    sys.modules["lightning.fabric.utilities.load"]._lazy_load = None  # type: ignore[attr-defined]


def trace(model_name: str, layers: int, seq: int, batch: int, chunk: int) -> dict:
    import torch
    from lit_gpt.lora import (  # type: ignore[import-not-found]
        GPT,
        Config,
        mark_only_lora_as_trainable,
    )
    from lit_gpt.utils import chunked_cross_entropy  # type: ignore[import-not-found]
    from torch._subclasses.fake_tensor import FakeTensorMode

    from fmest_torch_runner.tracker import StorageTracker  # type: ignore[import-not-found,unused-ignore]

    config = Config.from_name(model_name, n_layer=layers, r=8, alpha=16, dropout=0.05,
                              to_query=True, to_key=False, to_value=True, to_projection=False,
                              to_mlp=False, to_head=False)
    out: dict = {}
    with FakeTensorMode():
        torch.set_default_dtype(torch.bfloat16)   # Fabric init_module under bf16-true
        try:
            model = GPT(config)
        finally:
            torch.set_default_dtype(torch.float32)
        model.max_seq_length = seq
        mark_only_lora_as_trainable(model)
        x = torch.zeros((batch, seq), dtype=torch.int64)
        y = torch.zeros((batch, seq), dtype=torch.int64)
        tracker = StorageTracker()
        tracker.register(model.parameters(), "params")
        tracker.register(model.buffers(), "params")
        tracker.register([x, y], "params")
        with tracker:
            base = tracker.total
            tracker.phase("forward", "forward")
            logits = model(x, lm_head_chunk_size=chunk)
            after_model = tracker.total
            logits[-1] = logits[-1][..., :-1, :]
            loss = chunked_cross_entropy(logits, y[..., 1:])
            out["saved_blocks_and_logits"] = after_model - base
            out["after_loss"] = tracker.total - base
            tracker.end_phase()
            tracker.phase("backward", "backward")
            loss.backward()
            tracker.end_phase()
            out["peak"] = tracker.overall.total - base
            out["peak_window"] = tracker.overall_window
    out["logits_bf16"] = batch * seq * config.padded_vocab_size * 2
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mirror", default="/work/.mirror/Lightning-AI+litgpt/repo")
    ap.add_argument("--commit", default=COMMIT)
    ap.add_argument("--model", default="Llama-2-7b-hf")
    ap.add_argument("--seq", type=int, default=1304)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--chunk", type=int, default=128)
    ap.add_argument("--layers", type=int, nargs=2, default=(2, 4))
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        extract(args.mirror, args.commit, Path(tmp))
        stub_lightning()
        sys.path.insert(0, tmp)
        a, b = (trace(args.model, n, args.seq, args.batch, args.chunk) for n in args.layers)
    tokens = args.seq * args.batch
    per_layer = (b["saved_blocks_and_logits"] - a["saved_blocks_and_logits"]) / (
        args.layers[1] - args.layers[0])
    print(f"lit_gpt @ {args.commit[:10]} {args.model} tokens={tokens} (batch {args.batch})")
    for n, r in zip(args.layers, (a, b), strict=True):
        print(f"  layers={n}: end of model forward {r['saved_blocks_and_logits']} B, after loss "
              f"{r['after_loss']} B, peak {r['peak']} B ({r['peak_window']})")
    print(f"  saved per block: {per_layer:.0f} B = {per_layer / tokens:.1f} B/token")
    held = a["after_loss"] - a["saved_blocks_and_logits"]
    print(f"  loss adds {held} B = {held / a['logits_bf16']:.3f} x the bf16 logits")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
