"""Trace LitGPT 2024's own fine-tuning step (the ``litgpt`` package at Lightning-AI/litgpt
00af8b0d9b43eaa3f8c812e3e8bd53ef38cbb49d, 2024-09-27, the commit of config_hub/finetune's
tables) on fake tensors and print its live-tensor bytes: what one block saves for backward
per token, the logits/loss held at the end of forward, the optimizer states and the step's
allocated peak (the step's fresh bytes: weights, buffers and the batch are the base).

The step is each finetune script's as written at that commit, on one GPU under bf16-true
(Fabric ``init_module``: the weights built in bf16):

* ``lora`` (finetune/lora.py): ``litgpt.lora.GPT`` with ``lora.Config(lora_r, lora_alpha,
  lora_dropout=0.05, lora_query/key/value/projection/mlp/head)``, ``mark_only_lora_as_trainable``,
  ``logits = model(input_ids, lm_head_chunk_size=128)``; ``logits[-1] = logits[-1][..., :-1, :]``;
  ``chunked_cross_entropy(logits, targets[..., 1:])``; backward; AdamW (foreach) step.
* ``qlora``: the same under ``BitsandbytesPrecision("nf4", bf16)``: every ``torch.nn.Linear``
  (lm_head included) becomes bnb ``Linear4bit``. bitsandbytes has no CPU kernels, so the
  layer is emulated as bitsandbytes 0.42.0 (the version finetune/lora.py requires) runs it:
  ``MatMul4Bit.forward`` dequantizes the packed weight (fp16: Lightning quantizes from an
  fp16 copy), casts it to the input's dtype, ``F.linear``, and keeps ``ctx.tensors = (A, B)``
  when A or B needs a gradient (bitsandbytes/autograd/_functions.py in the 0.42.0 wheel);
  its backward dequantizes again for ``grad_A``. The packed weight is uint8, n/2 bytes.
* ``full`` (finetune/full.py): ``litgpt.model.GPT``, every parameter trainable,
  ``logits = model(input_ids)`` (unchunked head), ``chunked_cross_entropy(logits[..., :-1, :],
  targets[..., 1:])`` (default chunk_size=128: split of the whole logits), backward, AdamW.

Lightning itself is not needed: the names ``litgpt/utils.py`` imports from it are stubbed
(nothing the step runs uses them). Needs a bare git mirror of Lightning-AI/litgpt
(``--mirror``) and torch; no GPU (fake tensors, CPU kernel semantics: SDPA saves its output
and an fp32 logsumexp as the CUDA flash kernel does).

    python scripts/trace_litgpt2024.py --model Llama-2-7b-hf --mode lora --batch 1
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import types
from pathlib import Path

COMMIT = "00af8b0d9b43eaa3f8c812e3e8bd53ef38cbb49d"
FILES = ("model.py", "config.py", "lora.py", "utils.py")
#: LoRA targets: query+value (finetune/lora.py defaults lora_query/lora_value True) and all
TARGETS = {"qv": dict(lora_query=True, lora_key=False, lora_value=True, lora_projection=False,
                      lora_mlp=False, lora_head=False),
           "all": dict(lora_query=True, lora_key=True, lora_value=True, lora_projection=True,
                       lora_mlp=True, lora_head=True)}


def extract(mirror: str, commit: str, dest: Path) -> None:
    """The 2024 ``litgpt`` package's step files (scripts/trace_litgpt_lora.py ``extract``)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from trace_litgpt_lora import extract as extract_package

    extract_package(mirror, commit, dest, package="litgpt", files=FILES)


def stub_lightning() -> None:
    """Stub the names litgpt/utils.py imports from lightning (loggers, FSDPStrategy,
    _lazy_load, instantiate_class: unused by the step)."""
    names = ["lightning", "lightning.fabric", "lightning.fabric.loggers",
             "lightning.fabric.strategies", "lightning.fabric.utilities",
             "lightning.fabric.utilities.load", "lightning.pytorch",
             "lightning.pytorch.loggers", "lightning.pytorch.cli"]
    for name in names:
        sys.modules[name] = types.ModuleType(name)
    m = sys.modules
    m["lightning"].Fabric = object  # type: ignore[attr-defined]
    m["lightning"].LightningModule = object  # type: ignore[attr-defined]
    m["lightning.fabric.loggers"].CSVLogger = object  # type: ignore[attr-defined]
    m["lightning.fabric.loggers"].TensorBoardLogger = object  # type: ignore[attr-defined]
    m["lightning.fabric.strategies"].FSDPStrategy = object  # type: ignore[attr-defined]
    m["lightning.fabric.utilities.load"]._lazy_load = None  # type: ignore[attr-defined]
    m["lightning.pytorch.loggers"].WandbLogger = object  # type: ignore[attr-defined]
    m["lightning.pytorch.cli"].instantiate_class = None  # type: ignore[attr-defined]


def _nf4_linear_class():
    """An emulated bitsandbytes 0.42.0 ``Linear4bit`` (see the module docstring)."""
    import torch

    class MatMul4Bit(torch.autograd.Function):
        @staticmethod
        def forward(ctx, A, B, shape, bias):  # type: ignore[override]
            w = torch.empty(shape, dtype=torch.float16, device=A.device)  # dequantize_4bit
            out = torch.nn.functional.linear(A, w.to(A.dtype), bias)
            ctx.shape = shape
            ctx.save_for_backward(A, B)   # ctx.tensors = (A, B) in 0.42.0
            return out

        @staticmethod
        def backward(ctx, grad):  # type: ignore[override]
            _, B = ctx.saved_tensors
            w = torch.empty(ctx.shape, dtype=torch.float16, device=grad.device)
            return grad @ w.to(grad.dtype), None, None, None

    class Linear4bit(torch.nn.Module):
        def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
            super().__init__()
            self.in_features, self.out_features = in_features, out_features
            self.weight = torch.nn.Parameter(
                torch.empty((in_features * out_features + 1) // 2, 1, dtype=torch.uint8),
                requires_grad=False)
            self.bias = torch.nn.Parameter(torch.empty(out_features)) if bias else None

        def forward(self, x):
            return MatMul4Bit.apply(x, self.weight, (self.out_features, self.in_features),
                                    self.bias)

    return Linear4bit


def cuda_dropout(model) -> None:
    """Run every ``nn.Dropout`` as on CUDA: ``at::dropout`` takes the fused ``native_dropout``
    (output + a bool mask, the mask saved) when ``is_fused_kernel_acceptable`` (input on
    CUDA), and on the CPU multiplies by a bernoulli noise tensor in the input's dtype instead
    (pytorch/pytorch aten/src/ATen/native/Dropout.cpp)."""
    import torch

    for m in model.modules():
        if isinstance(m, torch.nn.Dropout) and m.p > 0:
            m.forward = (lambda x, p=m.p, mod=m:  # type: ignore[method-assign,misc]
                         torch.native_dropout(x, p, mod.training)[0])


def cuda_flash_sdpa() -> None:
    """Run ``F.scaled_dot_product_attention`` (causal, no mask: the training path of
    litgpt/model.py) as the CUDA flash kernel does: pytorch's
    ``_scaled_dot_product_flash_attention`` (aten/src/ATen/native/transformers/cuda/
    attention.cu) calls flash-attn on ``q.transpose(1, 2)`` and returns the output transposed
    back, so it is stored (B, T, nh, hs) and ``y.transpose(1, 2).reshape(B, T, C)`` in
    CausalSelfAttention.forward is a view; it saves q, k, v, the output and an fp32
    logsumexp (B, nh, T). Backward: dq, dk, dv and flash-attn 2's fp32 ``dq_accum`` and
    ``softmax_d`` (csrc/flash_attn/flash_api.cpp mha_bwd). The CPU kernel stores the output
    (B, nh, T, hs), which would make that reshape a copy."""
    import torch

    class FlashSDPA(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):  # type: ignore[override]
            b, h, t, d = q.shape
            out = q.new_empty((b, t, h, d)).transpose(1, 2)
            lse = q.new_empty((b, h, t), dtype=torch.float32)
            ctx.save_for_backward(q, k, v, out, lse)
            return out

        @staticmethod
        def backward(ctx, grad):  # type: ignore[override]
            q, k, v, _, _ = ctx.saved_tensors
            b, h, t, d = q.shape
            softmax_d = q.new_empty((b, h, t), dtype=torch.float32)  # noqa: F841
            dq_accum = q.new_empty((b, t, h, d), dtype=torch.float32)  # noqa: F841
            return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
        assert attn_mask is None and dropout_p == 0.0 and is_causal
        return FlashSDPA.apply(q, k, v)

    torch.nn.functional.scaled_dot_product_attention = sdpa  # type: ignore[assignment]


def trace(model_name: str, mode: str, targets: str, layers: int, seq: int, batch: int,
          rank: int) -> dict:
    import torch
    from litgpt.utils import chunked_cross_entropy  # type: ignore[import-not-found]
    from torch._subclasses.fake_tensor import FakeTensorMode

    from fmest_torch_runner.tracker import StorageTracker  # type: ignore[import-not-found,unused-ignore]

    out: dict = {}
    orig_linear = torch.nn.Linear
    with FakeTensorMode():
        torch.set_default_dtype(torch.bfloat16)   # Fabric init_module under bf16-true
        if mode == "qlora":
            torch.nn.Linear = _nf4_linear_class()  # type: ignore[misc]  # bnb init_context
        try:
            if mode == "full":
                from litgpt.config import Config  # type: ignore[import-not-found]
                from litgpt.model import GPT  # type: ignore[import-not-found]
                config = Config.from_name(model_name, n_layer=layers)
                model = GPT(config)
            else:
                from litgpt.lora import GPT, Config, mark_only_lora_as_trainable  # type: ignore[import-not-found]
                config = Config.from_name(model_name, n_layer=layers, lora_r=rank,
                                          lora_alpha=16, lora_dropout=0.05, **TARGETS[targets])
                model = GPT(config)
                mark_only_lora_as_trainable(model)
        finally:
            torch.set_default_dtype(torch.float32)
            torch.nn.Linear = orig_linear  # type: ignore[misc]
        model.max_seq_length = seq
        cuda_dropout(model)
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=1e-4, foreach=True)
        x = torch.zeros((batch, seq), dtype=torch.int64)
        y = torch.zeros((batch, seq), dtype=torch.int64)
        tracker = StorageTracker()
        tracker.register(model.parameters(), "params")
        tracker.register(model.buffers(), "params")
        tracker.register([x, y], "params")
        with tracker:
            base = tracker.total
            tracker.phase("forward", "forward")
            if mode == "full":
                logits = model(x)
                out["after_model"] = tracker.total - base
                loss = chunked_cross_entropy(logits[..., :-1, :], y[..., 1:])
            else:
                logits = model(x, lm_head_chunk_size=128)
                out["after_model"] = tracker.total - base
                logits[-1] = logits[-1][..., :-1, :]
                loss = chunked_cross_entropy(logits, y[..., 1:])
            out["after_loss"] = tracker.total - base
            tracker.end_phase()
            tracker.phase("backward", "backward")
            loss.backward()
            tracker.end_phase()
            out["after_backward"] = tracker.total - base
            tracker.phase("optimizer", "optimizer")
            optimizer.step()
            tracker.end_phase()
            out["after_optimizer"] = tracker.total - base
            out["peak"] = tracker.overall.total - base
            out["peak_window"] = tracker.overall_window
    out["trainable_bytes"] = sum(p.numel() * p.element_size() for p in trainable)
    out["logits_bf16"] = batch * seq * config.padded_vocab_size * 2
    out["n_layer"] = config.n_layer
    return out


def run(model: str, mode: str, targets: str, seq: int, batch: int, rank: int,
        layers: tuple[int, int], full_layers: int) -> dict:
    """Trace at two depths and extrapolate linearly to the model's ``full_layers``."""
    a, b = (trace(model, mode, targets, n, seq, batch, rank) for n in layers)
    span = layers[1] - layers[0]
    res = {"a": a, "b": b}
    for key in ("after_model", "after_loss", "after_backward", "after_optimizer", "peak",
                "trainable_bytes"):
        per = (b[key] - a[key]) / span
        res[key + "_per_layer"] = per
        res[key] = a[key] + per * (full_layers - layers[0])
    res["logits_bf16"] = a["logits_bf16"]
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mirror", default="/work/.mirror/Lightning-AI+litgpt/repo")
    ap.add_argument("--commit", default=COMMIT)
    ap.add_argument("--model", default="Llama-2-7b-hf")
    ap.add_argument("--mode", choices=("lora", "qlora", "full"), default="lora")
    ap.add_argument("--targets", choices=tuple(TARGETS), default="qv")
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--layers", type=int, nargs=2, default=(2, 4))
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        extract(args.mirror, args.commit, Path(tmp))
        stub_lightning()
        cuda_flash_sdpa()
        sys.path.insert(0, tmp)
        from litgpt.config import Config  # type: ignore[import-not-found]
        full_layers = Config.from_name(args.model).n_layer
        r = run(args.model, args.mode, args.targets, args.seq, args.batch, args.rank,
                tuple(args.layers), full_layers)
    tokens = args.seq * args.batch
    per = r["after_model_per_layer"]
    print(f"litgpt @ {args.commit[:10]} {args.model} {args.mode}"
          f"{'/' + args.targets if args.mode != 'full' else ''} r={args.rank} "
          f"tokens={tokens} (batch {args.batch}); {full_layers} layers (extrapolated from "
          f"{args.layers[0]} and {args.layers[1]})")
    print(f"  saved per block: {per:.0f} B = {per / tokens:.1f} B/token")
    for n, t in zip(args.layers, (r["a"], r["b"]), strict=True):
        print(f"  layers={n}: after model {t['after_model']} B, after loss {t['after_loss']} B, "
              f"peak {t['peak']} B ({t['peak_window']})")
    held = r["a"]["after_loss"] - r["a"]["after_model"]
    print(f"  loss adds {held} B = {held / r['logits_bf16']:.3f} x the bf16 logits")
    gib = 2 ** 30
    print(f"  full depth: end of forward {r['after_loss'] / gib:.3f} GiB, after optimizer "
          f"{r['after_optimizer'] / gib:.3f} GiB (trainable {r['trainable_bytes'] / gib:.3f} "
          f"GiB), step peak over weights {r['peak'] / gib:.3f} GiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
