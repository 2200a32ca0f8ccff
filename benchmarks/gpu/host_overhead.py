"""Host (CPU) seconds per eager op of a transformers training step, measured on a GPU's host.

fmest's host-dispatch floor (``fmest_time_roofline.formulas.host_dispatch_seconds``) is the
traced op counts of a decoder layer (``EAGER_FORWARD/BACKWARD_OPS_*``, ``benchmarks/count_eager_ops.py``)
times a per-op host time (``HOST_SECONDS_PER_EAGER_OP``). This script measures that per-op time
where it matters, on a GPU host: a ``LlamaForCausalLM`` so narrow (hidden 64, seq 16) that every
kernel finishes before the host has issued the next one, so the wall time of a pass is its host
time; on CUDA also at hidden 2048 (real tensor sizes for the allocator and the kernels'
arguments, still 16 tokens: short kernels). It times forward and backward separately (the forward runs Python modules, the backward the
autograd engine's C++ thread) at 2 and 10 layers; the difference over 8 is one layer's host time (the first run,
2026-11-27, used 2 and 6).
The same passes are counted with a ``TorchDispatchMode`` (the count script's method), so each
mode's seconds per op is (time difference) / (op difference). Modes: full fine-tuning, PEFT
LoRA (q/k/v/o, r 8, dropout 0.05, the count script's setting) and, on CUDA with bitsandbytes,
QLoRA (the same LoRA on NF4 ``Linear4bit`` decoder linears), without and with non-reentrant
activation checkpointing. ``gpu_wait_s`` (the wait in ``torch.cuda.synchronize`` after the
backward) shows whether the GPU kept up: near zero means the pass was host-bound.

    python benchmarks/gpu/host_overhead.py --out $OUT            # on the device
    python benchmarks/gpu/host_overhead.py --device cpu --steps 5 # CPU smoke run
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/

from count_eager_ops import _Count  # noqa: E402  the count script's op counter

LAYERS = (2, 10)


def quantize_4bit(model, device) -> int:
    """Replace the decoder layers' linears by bitsandbytes NF4 ``Linear4bit`` (double
    quantization, bf16 compute: ``memory_probe.nf4_linear``, as its QLoRA cases); the LM head
    stays."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from memory_probe import nf4_linear

    n = 0
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear) and "layers" in f"{name}.{child_name}":
                setattr(module, child_name, nf4_linear(child, device))
                n += 1
    return n


def build(layers: int, *, lora: bool, ckpt: bool, device, dtype, hidden: int = 64,
          qlora: bool = False):
    import transformers

    heads = max(4, hidden // 64)
    cfg = transformers.LlamaConfig(hidden_size=hidden, intermediate_size=2 * hidden,
                                   num_attention_heads=heads, num_key_value_heads=heads,
                                   num_hidden_layers=layers, vocab_size=128,
                                   attn_implementation="sdpa")
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).to(device=device, dtype=dtype)
    if qlora:
        quantize_4bit(model, device)
        lora = True
    if lora:
        import peft

        model = peft.get_peft_model(model, peft.LoraConfig(
            r=8, lora_dropout=0.05, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
    if ckpt:
        inner = model.get_base_model() if lora else model
        enable = getattr(inner, "activation_checkpointing_enable", None)
        if enable is not None:
            enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            inner.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if lora:
            model.enable_input_require_grads()
    model.train()
    return model


def sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(layers: int, *, lora: bool, ckpt: bool, device, dtype, steps: int, warmup: int,
            hidden: int = 64, qlora: bool = False) -> dict:
    model = build(layers, lora=lora, ckpt=ckpt, device=device, dtype=dtype, hidden=hidden,
                  qlora=qlora)
    ids = torch.randint(0, 128, (1, 16), device=device)
    fwd_s, bwd_s, wait_s = [], [], []
    for i in range(warmup + steps):
        sync(device)
        t0 = time.perf_counter()
        out = model(input_ids=ids, labels=ids)
        t1 = time.perf_counter()
        out.loss.backward()
        t2 = time.perf_counter()
        sync(device)
        t3 = time.perf_counter()
        model.zero_grad(set_to_none=True)
        del out
        if i >= warmup:
            fwd_s.append(t1 - t0)
            bwd_s.append(t2 - t1)
            wait_s.append(t3 - t2)
    with _Count() as cf:
        out = model(input_ids=ids, labels=ids)
    with _Count() as cb:
        out.loss.backward()
    sync(device)
    del model, out
    return {"layers": layers, "forward_s": statistics.median(fwd_s),
            "backward_s": statistics.median(bwd_s), "gpu_wait_s": statistics.median(wait_s),
            "forward_ops": cf.ops, "backward_ops": cb.ops}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--out", default=None)
    ap.add_argument("--tiny", action="store_true", help="CPU smoke run: 3 steps, 1 warm-up")
    ap.add_argument("--hidden", type=int, nargs="+", default=None,
                    help="model widths (default: 64 and 2048 on cuda, 64 on cpu); at 2048 the "
                         "layers' tensors have real sizes while 16 tokens keep the kernels short")
    ap.add_argument("--budget-s", type=float, default=120.0,
                    help="stop starting new modes after this many seconds")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    if args.tiny:
        args.steps, args.warmup = 3, 1
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    out_dir = Path(args.out or os.environ.get("OUT") or "/tmp/fmest_gpu_out")
    out_dir.mkdir(parents=True, exist_ok=True)
    import transformers

    try:
        import peft
        peft_v = peft.__version__
    except ImportError:
        peft_v = "absent"
    label = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    env = {"device": label, "torch": torch.__version__, "transformers": transformers.__version__,
           "peft": peft_v, "python": platform.python_version(), "cpu": platform.processor(),
           "cpu_count": os.cpu_count(), "date": time.strftime("%Y-%m-%d")}
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                env["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    print(json.dumps(env), flush=True)
    try:
        import bitsandbytes as bnb
        bnb_v = getattr(bnb, "__version__", "present")
    except Exception as exc:  # noqa: BLE001 - ImportError or a CUDA setup error
        bnb_v = f"absent ({type(exc).__name__})"
    env["bitsandbytes"] = bnb_v
    rows, summary = [], []
    widths = args.hidden or ([64, 2048] if device.type == "cuda" else [64])
    # technique: full, PEFT LoRA, and QLoRA (PEFT LoRA on bitsandbytes NF4 linears: its
    # per-linear Python autograd function and dequantize ops; CUDA and bitsandbytes only).
    # The narrow model's modes first, then 2048 with the adapters first (the H100 run's
    # budget ended before its 2048-wide LoRA modes).
    techs = [t for t in ("full", "lora", "qlora") if not (t != "full" and peft_v == "absent")
             and not (t == "qlora" and (device.type != "cuda" or bnb_v.startswith("absent")))]
    modes = []
    for hidden in widths:
        order = techs if hidden == widths[0] else [t for t in techs if t != "full"] + ["full"]
        modes += [(hidden, t, ckpt) for t in order for ckpt in (False, True)]
    for hidden, tech, ckpt in modes:
        lora = tech != "full"
        if time.perf_counter() - started > args.budget_s:
            print(f"budget {args.budget_s:.0f} s spent: hidden={hidden} {tech} ckpt={ckpt} "
                  "not run", flush=True)
            continue
        res = {n: measure(n, lora=lora, ckpt=ckpt, device=device, dtype=dtype,
                          steps=args.steps, warmup=args.warmup, hidden=hidden,
                          qlora=tech == "qlora") for n in LAYERS}
        for r in res.values():
            rows.append(dict(r, hidden=hidden, lora=lora, technique=tech, checkpointing=ckpt))
        lo, hi = res[LAYERS[0]], res[LAYERS[-1]]
        span = LAYERS[-1] - LAYERS[0]
        s = {"hidden": hidden, "lora": lora, "technique": tech, "checkpointing": ckpt}
        for part in ("forward", "backward"):
            dt = (hi[f"{part}_s"] - lo[f"{part}_s"]) / span
            dops = (hi[f"{part}_ops"] - lo[f"{part}_ops"]) / span
            s[f"{part}_ops_per_layer"] = dops
            s[f"{part}_s_per_layer"] = dt
            s[f"{part}_us_per_op"] = 1e6 * dt / dops if dops else None
        tot_dt = s["forward_s_per_layer"] + s["backward_s_per_layer"]
        tot_ops = s["forward_ops_per_layer"] + s["backward_ops_per_layer"]
        s["us_per_op"] = 1e6 * tot_dt / tot_ops
        outside_ops = lo["forward_ops"] + lo["backward_ops"] - LAYERS[0] * tot_ops
        s["outside_ops"] = outside_ops
        s["outside_s"] = lo["forward_s"] + lo["backward_s"] - LAYERS[0] * tot_dt
        s["max_gpu_wait_s"] = max(lo["gpu_wait_s"], hi["gpu_wait_s"])
        summary.append(s)
        print(f"hidden={hidden:<5d} {tech:5s} ckpt={ckpt!s:5s} per layer: fwd {s['forward_ops_per_layer']:5.0f} ops "
              f"{1e3 * s['forward_s_per_layer']:6.3f} ms ({s['forward_us_per_op']:5.1f} us/op)  "
              f"bwd {s['backward_ops_per_layer']:5.0f} ops {1e3 * s['backward_s_per_layer']:6.3f} ms "
              f"({s['backward_us_per_op']:5.1f} us/op)  all {s['us_per_op']:5.1f} us/op; "
              f"outside {outside_ops:.0f} ops {1e3 * s['outside_s']:.2f} ms; "
              f"gpu wait {1e3 * s['max_gpu_wait_s']:.3f} ms", flush=True)
    if not rows:
        print("host_overhead: no mode ran", file=sys.stderr)
        return 1
    tag = label.replace(" ", "-")
    with open(out_dir / f"host_overhead_{tag}.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    (out_dir / f"host_overhead_{tag}.json").write_text(
        json.dumps({"env": env, "steps": args.steps, "warmup": args.warmup, "layers": LAYERS,
                    "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
