"""Measured peak memory and step time of single-GPU fine-tuning steps (issue 21).

    python benchmarks/gpu/memory_probe.py --budget-s 330          # on a CUDA device
    python benchmarks/gpu/memory_probe.py --device cpu --tiny      # smoke run, a few seconds

A grid of cases on fmest's presets (``core/fmest/models/presets/<name>.json``, the "config"
mapping; default Qwen2.5-0.5B, Llama-3.2-1B, Qwen2.5-3B, Llama-3.1-8B) with random weights, no
download: ``transformers.AutoModelForCausalLM.from_config`` (attn_implementation "sdpa") built
directly on the device in bf16, or, when transformers is absent (or ``--impl native``), the
self-contained Llama-style model below (RMSNorm, GQA attention through SDPA with RoPE, SwiGLU MLP,
optional q/k/v bias as Qwen2 has, tied or untied LM head; RoPE without the Llama-3.1 frequency
scaling, which changes neither memory nor time).

Settings per case: technique ``full`` (every weight trained, pure bf16: weights, gradients and
AdamW states in bf16, ``precision=pure``), ``lora`` (PEFT ``LoraConfig`` r=16, alpha=32, dropout
0 on the seven projections q/k/v/o/gate/up/down; without peft, ``LoRALinear`` below does what
PEFT's ``lora.Linear`` does: fp32 A (kaiming-uniform) and B (zeros) beside the frozen bf16 base,
``y = base(x) + B(A(x.float())) * alpha/r``, PEFT's adapter upcast to fp32) or ``qlora`` (the
same LoRA on a base whose projections are ``bitsandbytes.nn.Linear4bit`` NF4 with double
quantisation and bf16 compute: skipped with the reason when bitsandbytes is absent); micro-batch;
sequence length; activation checkpointing (HF ``gradient_checkpointing_enable`` non-reentrant,
or ``torch.utils.checkpoint`` per layer); optimizer ``adamw_fused`` / ``adamw_foreach``
(``torch.optim.AdamW``) or ``adamw_8bit`` (``bitsandbytes.optim.AdamW8bit``).

Each case: free memory (del, gc, ``empty_cache``), ``reset_peak_memory_stats``, then 3 steps of
forward (SDPA restricted to the flash / memory-efficient backends on CUDA), backward,
``optimizer.step()``, ``zero_grad(set_to_none=True)``; then ``torch.cuda.max_memory_allocated``,
``max_memory_reserved``, the device memory in use (pynvml, else ``nvidia-smi
--query-gpu=memory.used``, else ``torch.cuda.mem_get_info``; sampled after every step: the caching
allocator keeps its peak pool until ``empty_cache``, so the sample after the steps sees it), the
step time (median of steps 2-3: step 1 allocates the optimizer states) and every setting. An
out-of-memory error is caught and written as an ``oom`` row (data too). One
``torch.cuda.memory._snapshot()`` pickle is saved for one representative case (``--snapshot-case``).
The grid is ordered so the most informative cases run first; ``--budget-s`` is checked before
every case and the rest are recorded as skipped with the reason.

Outputs (``--out``, default ``$OUT`` or /tmp/fmest_gpu_out):

* ``memory_probe_<gpu>.csv``: rows in the evidence-set layout (``benchmarks/data/build.py``
  ``COLUMNS``, ``benchmarks/data/SOURCES.md`` conventions): per finished case three ``memory``
  rows (``measure_type`` max_memory_allocated / max_memory_reserved / nvidia-smi, GiB = 2^30)
  and one ``throughput`` row (tokens_per_sec_per_gpu); per OOM case one ``memory`` row with
  ``oom`` true. Written row by row (a killed run keeps them).
* ``memory_probe_<gpu>.json``: the environment (versions, which optional packages were missing)
  and every case with its status (ok / oom / skipped / error), reason and raw numbers.
* ``memory_snapshot_<gpu>.pickle`` (or ``.pickle.gz`` when large): open it at
  https://pytorch.org/memory_viz.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from microbench import (  # noqa: E402 - the shared helpers live beside this file
    DEFAULT_PRESETS,
    Budget,
    RowWriter,
    env_info,
    free_memory,
    is_oom,
    load_preset,
    out_dir,
)

#: The evidence-set layout, ``benchmarks/data/build.py`` ``COLUMNS`` (kept equal by
#: tests/test_gpu_scripts.py; this script must run where fmest's benchmarks are not importable).
COLUMNS = ("id,source,kind,model,params_b,gpu,num_gpus,dtype,technique,lora_rank,optimizer,seq_len,"
           "micro_batch,grad_accum,global_batch,dp,tp,pp,cp,ep,zero_or_fsdp,"
           "activation_checkpointing,flash_attention,stack,stack_version,oom,suspect,other,"
           "measured_value,unit,measure_type,source_url,source_quote,date_read").split(",")
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
OPTIMIZERS = ("adamw_fused", "adamw_foreach", "adamw_8bit")
GIB = 2**30


# ------------------------------------------------------------------ the native model

class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        var = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(var + self.eps)).to(x.dtype) * self.weight


def _rope(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, h, heads, kv, hd, bias):
        super().__init__()
        self.heads, self.kv, self.hd = heads, kv, hd
        self.q_proj = nn.Linear(h, heads * hd, bias=bias)
        self.k_proj = nn.Linear(h, kv * hd, bias=bias)
        self.v_proj = nn.Linear(h, kv * hd, bias=bias)
        self.o_proj = nn.Linear(heads * hd, h, bias=False)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.heads, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.kv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kv, self.hd).transpose(1, 2)
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        rep = self.heads // self.kv
        if rep > 1:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(o.transpose(1, 2).reshape(b, s, self.heads * self.hd))


class Block(nn.Module):
    def __init__(self, c, bias):
        super().__init__()
        h, hd = c["hidden_size"], c["head_dim"]
        self.input_layernorm = RMSNorm(h, c["rms_norm_eps"])
        self.self_attn = Attention(h, c["num_attention_heads"], c["num_key_value_heads"], hd, bias)
        self.post_attention_layernorm = RMSNorm(h, c["rms_norm_eps"])
        self.mlp = nn.Module()
        self.mlp.gate_proj = nn.Linear(h, c["intermediate_size"], bias=False)
        self.mlp.up_proj = nn.Linear(h, c["intermediate_size"], bias=False)
        self.mlp.down_proj = nn.Linear(c["intermediate_size"], h, bias=False)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        y = self.post_attention_layernorm(x)
        m = self.mlp
        return x + m.down_proj(F.silu(m.gate_proj(y)) * m.up_proj(y))


class NativeLM(nn.Module):
    """A Llama-style causal LM from a preset's config mapping (see the module docstring)."""

    def __init__(self, c: dict):
        super().__init__()
        c = dict(c)
        c.setdefault("num_key_value_heads", c["num_attention_heads"])
        c["head_dim"] = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
        c.setdefault("rms_norm_eps", 1e-6)
        self.c = c
        bias = bool(c.get("attention_bias", c.get("model_type") == "qwen2"))
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(Block(c, bias) for _ in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        if c.get("tie_word_embeddings"):
            self.lm_head.weight = self.embed_tokens.weight
        self.checkpointing = False

    def forward(self, input_ids, labels):
        s = input_ids.shape[1]
        hd = self.c["head_dim"]
        inv = 1.0 / (float(self.c.get("rope_theta", 10000.0)) **
                     (torch.arange(0, hd, 2, device=input_ids.device).float() / hd))
        freqs = torch.outer(torch.arange(s, device=input_ids.device).float(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        x = self.embed_tokens(input_ids)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        for layer in self.layers:
            if self.checkpointing and self.training:
                x = torch.utils.checkpoint.checkpoint(layer, x, cos, sin, use_reentrant=False)
            else:
                x = layer(x, cos, sin)
        logits = self.lm_head(self.norm(x)).float()
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                               labels[:, 1:].reshape(-1))


class LoRALinear(nn.Module):
    """PEFT-equivalent LoRA on a frozen linear (used when peft is absent)."""

    def __init__(self, base: nn.Module, r: int, alpha: int):
        super().__init__()
        self.base = base
        dev = next(base.parameters()).device
        self.lora_A = nn.Linear(base.in_features, r, bias=False, device=dev, dtype=torch.float32)
        self.lora_B = nn.Linear(r, base.out_features, bias=False, device=dev, dtype=torch.float32)
        nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B.weight)
        self.scaling = alpha / r

    def forward(self, x):
        return self.base(x) + (self.lora_B(self.lora_A(x.float())) * self.scaling).to(x.dtype)


def nf4_linear(lin: nn.Linear, device) -> nn.Module:
    """``lin`` as a bitsandbytes NF4 ``Linear4bit`` with double quantization and bf16 compute
    (the probe's QLoRA base; ``host_overhead.py`` quantizes its QLoRA mode with it too)."""
    import bitsandbytes as bnb

    q = bnb.nn.Linear4bit(lin.in_features, lin.out_features, bias=lin.bias is not None,
                          compute_dtype=torch.bfloat16, compress_statistics=True,
                          quant_type="nf4", device="cpu")
    q.weight = bnb.nn.Params4bit(lin.weight.data.cpu(), requires_grad=False,
                                 compress_statistics=True, quant_type="nf4")
    if lin.bias is not None:
        q.bias = nn.Parameter(lin.bias.data.clone(), requires_grad=False)
    return q.to(device)


def _replace_linears(model: nn.Module, make) -> int:
    n = 0
    for _name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if child_name in LORA_TARGETS and (isinstance(child, nn.Linear) or
                                               type(child).__name__ == "Linear4bit"):
                setattr(module, child_name, make(child))
                n += 1
    return n


# ------------------------------------------------------------------ building a case's model

def model_config(preset: dict, tiny: bool) -> dict:
    c = dict(preset["config"])
    if tiny:   # same family and layout, toy widths
        heads = 4
        kv = 2 if c.get("num_key_value_heads", heads) != c["num_attention_heads"] else heads
        c.update(hidden_size=64, num_hidden_layers=2, num_attention_heads=heads,
                 num_key_value_heads=kv, intermediate_size=128, vocab_size=512, head_dim=16)
        c.pop("rope_scaling", None)
    return c


def build_model(case: dict, args, device, versions: dict):
    """(model, params_b, notes) for a case's (preset, technique, impl)."""
    preset = load_preset(case["preset"])
    cfg = model_config(preset, args.tiny)
    notes = []
    with torch.device(device):
        if case["impl"] == "hf":
            import transformers
            from transformers import AutoConfig, AutoModelForCausalLM
            hf_cfg = AutoConfig.for_model(cfg["model_type"], **{
                k: v for k, v in cfg.items() if k not in ("model_type", "architectures")})
            hf_cfg.use_cache = False
            major = int(transformers.__version__.split(".")[0])
            kw = {"dtype": torch.bfloat16} if major >= 5 else {"torch_dtype": torch.bfloat16}
            model = AutoModelForCausalLM.from_config(hf_cfg, attn_implementation="sdpa", **kw)
            notes.append(f"impl=transformers {transformers.__version__} "
                         "AutoModelForCausalLM.from_config (random weights); attn=sdpa")
        else:
            model = NativeLM(cfg)
            notes.append("impl=native Llama-style block (benchmarks/gpu/memory_probe.py NativeLM)")
    model = model.to(device=device, dtype=torch.bfloat16)
    params_b = sum(p.numel() for p in model.parameters()) / 1e9
    tech = case["technique"]
    if tech == "qlora":
        n = _replace_linears(model, lambda lin: nf4_linear(lin, device))
        notes.append(f"quantization=bnb.nf4-dq ({n} projections, bitsandbytes "
                     f"{versions.get('bitsandbytes')}, compute bf16)")
        free_memory(device)
    if tech in ("lora", "qlora"):
        for p in model.parameters():
            p.requires_grad_(False)
        if case["impl"] == "hf" and not versions["peft"].startswith("absent"):
            from peft import LoraConfig, get_peft_model
            model = get_peft_model(model, LoraConfig(r=args.lora_rank, lora_alpha=2 * args.lora_rank,
                                                     lora_dropout=0.0,
                                                     target_modules=list(LORA_TARGETS),
                                                     task_type="CAUSAL_LM"))
            notes.append(f"lora=peft {versions['peft']}")
            notes.append("precision=pure (bf16 base weights, no autocast; PEFT keeps the adapters, "
                         "their gradients and AdamW states in fp32: get_peft_model "
                         "autocast_adapter_dtype=True)")
        else:
            _replace_linears(model, lambda lin: LoRALinear(lin, args.lora_rank, 2 * args.lora_rank))
            notes.append("lora=LoRALinear (benchmarks/gpu/memory_probe.py; peft absent or native)")
            notes.append("precision=pure (bf16 base weights, no autocast; LoRALinear keeps the "
                         "adapters in fp32 and casts their input, as PEFT does)")
        notes.append(f"targets={'+'.join(LORA_TARGETS)}; lora_alpha={2 * args.lora_rank}; "
                     "lora_dropout=0")
    else:
        notes.append("precision=pure (bf16 weights, gradients and AdamW states)")
    model.train()
    return model, params_b, notes


def release_model(model) -> None:
    """Give back a model's parameter, gradient and buffer storage whatever still refers to its
    tensors: each ``.data`` becomes an empty tensor. The 2026-11-27 runs found a case right
    after a Llama-3.1-8B case starting with a 1002 MiB block still allocated (the 8B model's
    untied lm_head weight, 128256 x 4096 bf16) although the model had been dropped and
    ``gc.collect`` run: some reference outlived it, and the next case's counters included it."""
    if model is None:
        return
    with torch.no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            t.grad = None
            t.data = torch.empty(0, dtype=t.dtype, device=t.device)


def model_state_bytes(model) -> int:
    """Bytes of the model's own parameters and buffers (each storage once)."""
    seen, total = set(), 0
    for t in list(model.parameters()) + list(model.buffers()):
        st = t.untyped_storage()
        if st.data_ptr() not in seen:
            seen.add(st.data_ptr())
            total += st.nbytes()
    return total


def set_checkpointing(model, case: dict) -> None:
    on = case["ac"]
    inner = model
    if hasattr(inner, "get_base_model"):
        inner = inner.get_base_model()
    if isinstance(inner, NativeLM):
        inner.checkpointing = on
    elif on:   # transformers 5 renamed gradient_ to activation_checkpointing_enable
        enable = getattr(inner, "activation_checkpointing_enable", None)
        if enable is not None:   # transformers >= 5.2x: activation_checkpointing_kwargs
            enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            inner.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        disable = getattr(inner, "activation_checkpointing_disable", None) or \
            inner.gradient_checkpointing_disable
        disable()


def make_optimizer(params, name: str):
    if name == "adamw_8bit":
        import bitsandbytes as bnb
        return bnb.optim.AdamW8bit(params, lr=1e-5)
    impl = name.split("_")[1]
    return torch.optim.AdamW(params, lr=1e-5, **{impl: True})


# ------------------------------------------------------------------ device memory readers

class DeviceMemory:
    """Memory in use on the device: pynvml, else nvidia-smi, else torch.cuda.mem_get_info."""

    def __init__(self, device):
        self.device = device
        self.method = ""
        self.nvml = None
        if device.type != "cuda":
            self.method = "none (no CUDA device)"
            return
        idx = device.index if device.index is not None else torch.cuda.current_device()
        self.idx = idx
        try:
            import pynvml
            pynvml.nvmlInit()
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(idx)
            self.nvml = pynvml
            self.method = "pynvml nvmlDeviceGetMemoryInfo.used (whole device)"
            return
        except Exception:  # noqa: BLE001 - fall back to the next reader
            pass
        try:
            res = subprocess.run(["nvidia-smi", "--query-gpu=memory.used",
                                  "--format=csv,noheader,nounits", "-i", str(idx)],
                                 capture_output=True, text=True, timeout=10)
            float(res.stdout.strip().splitlines()[0])
            self.method = "nvidia-smi --query-gpu=memory.used (MiB, whole device)"
        except (OSError, subprocess.SubprocessError, ValueError, IndexError):
            self.method = "torch.cuda.mem_get_info total-free (whole device)"

    def used(self):
        """Bytes in use on the whole device, or None."""
        if self.device.type != "cuda":
            return None
        try:
            if self.nvml:
                return int(self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used)
            if self.method.startswith("nvidia-smi"):
                res = subprocess.run(["nvidia-smi", "--query-gpu=memory.used",
                                      "--format=csv,noheader,nounits", "-i", str(self.idx)],
                                     capture_output=True, text=True, timeout=10)
                return int(float(res.stdout.strip().splitlines()[0]) * 2**20)
            free, total = torch.cuda.mem_get_info(self.device)
            return int(total - free)
        except Exception:  # noqa: BLE001 - a reading that fails is left empty
            return None


# ------------------------------------------------------------------ the grid

def case_id(c: dict) -> str:
    return (f"{c['preset']}:{c['technique']}:b{c['mb']}:s{c['seq']}:ac{int(c['ac'])}:"
            f"{c['optimizer']}")


def grid(args) -> list[dict]:
    """The cases, most informative first (each tier varies one setting from the baselines)."""
    presets = args.presets
    if args.tiny:
        base = dict(mb=1, seq=64, ac=False, optimizer="adamw_foreach")
        tiers = [[dict(base, preset=presets[0], technique="full")],
                 [dict(base, preset=presets[0], technique="lora")],
                 [dict(base, preset=presets[0], technique="full", ac=True)],
                 [dict(base, preset=presets[0], technique="full", seq=128, mb=2)],
                 [dict(base, preset=presets[0], technique="qlora", ac=True)]]
    else:
        base = dict(mb=1, seq=2048, ac=True, optimizer="adamw_fused")
        mid = [p for p in presets[1:3]] or presets[:1]
        # AC on and off of one model follow each other: the built model is reused
        tiers = [
            [dict(base, preset=p, technique="full", ac=a) for p in presets for a in (True, False)],
            [dict(base, preset=p, technique="lora", ac=a) for p in presets for a in (True, False)],
            [dict(base, preset=p, technique="qlora") for p in presets],
            [dict(base, preset=p, technique="full", seq=s) for p in mid for s in (512, 8192)],
            [dict(base, preset=p, technique="full", mb=b) for p in mid for b in (4,)],
            [dict(base, preset=p, technique="full", optimizer=o) for p in mid
             for o in ("adamw_foreach", "adamw_8bit")],
            [dict(base, preset=p, technique="lora", seq=s) for p in presets for s in (8192,)],
            [dict(base, preset=p, technique="full", ac=False, seq=s) for p in mid
             for s in (512, 4096)],
            [dict(base, preset=p, technique="qlora", seq=8192) for p in presets],
            [dict(base, preset=presets[-1], technique="full", optimizer="adamw_8bit")],
        ]
    cases, seen = [], set()
    for tier_no, tier in enumerate(tiers):
        for c in tier:
            c = dict(c, tier=tier_no, impl=args.impl)
            if case_id(c) not in seen:
                seen.add(case_id(c))
                cases.append(c)
    return cases


def missing_package(case: dict, versions: dict) -> str:
    if case["technique"] == "qlora" and versions["bitsandbytes"].startswith("absent"):
        return f"qlora needs bitsandbytes ({versions['bitsandbytes']})"
    if case["optimizer"] == "adamw_8bit" and versions["bitsandbytes"].startswith("absent"):
        return f"adamw_8bit needs bitsandbytes ({versions['bitsandbytes']})"
    return ""


# ------------------------------------------------------------------ running one case

class SimulatedOOM(Exception):
    pass


def run_steps(model, case, args, device, devmem, snapshot_path):
    """3 training steps; returns the raw measurements."""
    params = [p for p in model.parameters() if p.requires_grad]
    opt = make_optimizer(params, case["optimizer"])
    vocab = model_config(load_preset(case["preset"]), args.tiny)["vocab_size"]
    ids = torch.randint(0, vocab, (case["mb"], case["seq"]), device=device)
    cuda = device.type == "cuda"
    ctx = None
    if cuda:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        ctx = lambda: sdpa_kernel([SDPBackend.FLASH_ATTENTION,  # noqa: E731
                                   SDPBackend.EFFICIENT_ATTENTION])
    used = []
    times = []
    recording = False
    if snapshot_path and cuda:
        torch.cuda.memory._record_memory_history(max_entries=args.snapshot_entries)
        recording = True
    try:
        for _ in range(args.steps):
            t0 = time.perf_counter()
            if ctx:   # backward too: checkpointed layers recompute under the same backends
                with ctx():
                    loss = forward(model, ids)
                    loss.backward()
            else:
                loss = forward(model, ids)
                loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            del loss
            if cuda:
                torch.cuda.synchronize(device)
            times.append(time.perf_counter() - t0)
            used.append(devmem.used())
        if recording:
            snap = torch.cuda.memory._snapshot()
            save_snapshot(snap, snapshot_path)
    finally:
        if recording:
            torch.cuda.memory._record_memory_history(enabled=None)
        del opt, params
    out = {"step_times_s": times,
           "step_time_s": statistics.median(times[1:] if len(times) > 1 else times),
           "device_used_bytes": max((u for u in used if u is not None), default=None)}
    if cuda:
        out["max_allocated_bytes"] = torch.cuda.max_memory_allocated(device)
        out["max_reserved_bytes"] = torch.cuda.max_memory_reserved(device)
        if args.kernel_time and not recording:
            prof = profiled_kernel_seconds(model, ids, ctx, device)
            if prof is not None:
                out["gpu_kernel_time_s"], out["gpu_kernel_classes_s"] = prof
    return out


def profiled_kernel_seconds(model, ids, ctx, device):
    """The GPU's busy time in one more training step (forward + backward, the optimizer left
    out: its state is gone): the sum of the CUDA kernels' own device times that
    ``torch.profiler`` records (``self_device_time_total`` over ``key_averages()``, memcpys and
    memsets included), and that sum split by :func:`kernel_class` (seconds per class). Against
    the measured step time it says how much of the step the GPU worked (a host-bound step: far
    less than the step). None when the profiler fails."""
    try:
        from torch.profiler import ProfilerActivity, profile
        torch.cuda.synchronize(device)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            with ctx():
                loss = forward(model, ids)
                loss.backward()
            torch.cuda.synchronize(device)
        model.zero_grad(set_to_none=True)
        del loss
        classes: dict[str, float] = {}
        total_us = 0.0
        for e in prof.key_averages():
            us = getattr(e, "self_device_time_total", 0.0) or 0.0
            if us <= 0:
                continue
            total_us += us
            cls = kernel_class(e.key)
            classes[cls] = classes.get(cls, 0.0) + us / 1e6
        return total_us / 1e6, classes
    except Exception as exc:  # noqa: BLE001 - a profiler failure must not lose the case
        print(f"[memory_probe] kernel-time profile failed: {type(exc).__name__}: {exc}",
              flush=True)
        return None


#: kernel-name fragments -> class (first match wins; lower case): cuBLAS/CUTLASS GEMMs, the
#: SDPA backends' attention kernels, bitsandbytes' 4-bit kernels, the optimizers' multi-tensor
#: kernels, reductions (norms, softmax, loss), copies, then elementwise
KERNEL_CLASSES = (
    (("kdequantize", "kgemm_4bit", "kquantize", "bitsandbytes"), "bnb4bit"),
    (("flash", "fmha", "attention", "sdpa", "efficient_attention"), "attention"),
    (("gemm", "xmma", "cutlass", "cublas", "sm90_", "sm80_", "ampere_", "hopper_", "gemv",
      "splitk", "nvjet"), "gemm"),
    (("multi_tensor", "fused_adam", "adam", "optimizer"), "optimizer"),
    (("reduce", "softmax", "norm", "cross_entropy", "nll_loss", "log_softmax"), "reduction"),
    (("memcpy", "memset", "copy", "cat"), "copy"),
    (("elementwise", "vectorized", "unrolled", "pointwise", "triton"), "elementwise"),
)


def kernel_class(name: str) -> str:
    """The class of a CUDA kernel (or memcpy/memset) name for the probe's kernel-time split."""
    low = name.lower()
    for fragments, cls in KERNEL_CLASSES:
        if any(f in low for f in fragments):
            return cls
    return "other"


def forward(model, ids):
    if isinstance(model, NativeLM) or isinstance(getattr(model, "get_base_model", lambda: None)(),
                                                 NativeLM):
        return model(ids, ids)
    return model(input_ids=ids, labels=ids, use_cache=False).loss


def save_snapshot(snap, path: Path) -> None:
    import pickle
    data = pickle.dumps(snap)
    if len(data) > 15 * 2**20:   # the device returns files of at most 16 MiB
        path = path.with_suffix(".pickle.gz")
        data = gzip.compress(data)
    path.write_bytes(data)
    print(f"[memory_probe] snapshot -> {path} ({len(data) / 2**20:.1f} MiB)", flush=True)


def install_simulated_oom(model, case_text: str):
    """A forward hook on the first decoder layer that raises torch.OutOfMemoryError (the CPU
    test's stand-in for a real allocation failure mid-forward)."""
    for name, module in model.named_modules():
        if name == "layers.0" or name.endswith(".layers.0"):
            def hook(_m, _i, _o):
                raise torch.OutOfMemoryError(f"simulated OOM (--simulate-oom {case_text!r})")
            return module.register_forward_hook(hook)
    raise RuntimeError("--simulate-oom: no module named *layers.0 in the model")


# ------------------------------------------------------------------ rows

def evidence_rows(case, res, env, params_b, notes, devmem, args) -> list[dict]:
    gpu = env["gpu_table"] or env["gpu"]
    date = env["date"]
    pk = env["packages"]
    stack_version = "; ".join([f"torch {env['torch']}", f"cuda {env['cuda'] or '-'}"] +
                              [f"{k} {v}" for k, v in pk.items()
                               if k in ("transformers", "peft", "bitsandbytes")
                               and not v.startswith("absent")])
    other = [f"gpu_published={env['gpu']}", "harness=benchmarks/gpu/memory_probe.py",
             "random weights, no data: random token ids, labels=input ids",
             "loss=cross-entropy over the full vocabulary (fp32 logits)",
             "attention=sdpa restricted to flash/efficient backends" if env["gpu"] != "cpu"
             else "attention=sdpa (cpu)",
             f"steps={args.steps} (peak over all steps; step 1 allocates the optimizer states)",
             f"step_times_s={'/'.join(f'{t:.4f}' for t in res.get('step_times_s', []))}"] + notes
    if case["ac"]:
        other.append("gradient_checkpointing=true (non-reentrant, every decoder layer)")
    if case["optimizer"] == "adamw_fused":
        other.append("optimizer fused=true")
    if res.get("device_used_before_bytes") is not None:
        other.append(f"device_used_before_model_build_gib="
                     f"{res['device_used_before_bytes'] / GIB:.3f}")
    if res.get("foreign_allocated_bytes") is not None:
        other.append(f"foreign_allocated_at_start_gib="
                     f"{res['foreign_allocated_bytes'] / GIB:.3f}")
    if res.get("note"):
        other.append(res["note"])
    if args.mem_fraction:
        other.append(f"torch.cuda.set_per_process_memory_fraction({args.mem_fraction})")
    opt = {"adamw_fused": "adamw (fused=true)", "adamw_foreach": "adamw (foreach)",
           "adamw_8bit": "adamw 8-bit (bitsandbytes AdamW8bit)"}[case["optimizer"]]
    suspect = ("cpu smoke run (--device cpu): no CUDA memory counters; not evidence"
               if env["gpu"] == "cpu" else "")
    key = (f"fmest-{env['label']}-{date.replace('-', '')}-{case['preset']}-{case['technique']}-"
           f"b{case['mb']}-s{case['seq']}-ac{'on' if case['ac'] else 'off'}-"
           f"{case['optimizer'].replace('_', '')}").lower()
    base = dict(
        source=f"fmest-gpu-probe-{env['label']}-{date}".lower(), model=load_preset(
            case["preset"])["name"], params_b=f"{params_b:.4g}", gpu=gpu, num_gpus=1,
        dtype="bf16", technique=case["technique"],
        lora_rank=args.lora_rank if case["technique"] != "full" else "", optimizer=opt,
        seq_len=case["seq"], micro_batch=case["mb"], grad_accum=1, global_batch=case["mb"], dp=1,
        tp=1, pp=1, cp=1, ep=1, zero_or_fsdp="none",
        activation_checkpointing="full" if case["ac"] else "none", flash_attention="true",
        stack="pytorch", stack_version=stack_version, suspect=suspect,
        source_url="benchmarks/gpu/memory_probe.py", date_read=date)
    if res["status"] == "oom":
        o = other + [f"oom at {res.get('stage', '?')}: {res.get('reason', '')[:160]}"]
        if res.get("max_allocated_bytes") is not None:
            o.append(f"max_memory_allocated_before_failure_gib="
                     f"{res['max_allocated_bytes'] / GIB:.3f}")
        return [dict(base, id=key + "-oom", kind="memory", oom="true", other="; ".join(o),
                     measured_value="", unit="GiB", measure_type="max_memory_allocated",
                     source_quote=f"torch.OutOfMemoryError: {res.get('reason', '')[:160]}")]
    rows = []
    for suffix, mtype, value, quote in (
            ("alloc", "max_memory_allocated", res.get("max_allocated_bytes"),
             "torch.cuda.max_memory_allocated()"),
            ("reserved", "max_memory_reserved", res.get("max_reserved_bytes"),
             "torch.cuda.max_memory_reserved()"),
            ("device", "nvidia-smi", res.get("device_used_bytes"), devmem.method)):
        o = list(other)
        if suffix == "device":
            o.append(f"device memory read by {devmem.method}, max of the samples after each step")
        rows.append(dict(base, id=f"{key}-{suffix}", kind="memory", oom="",
                         other="; ".join(o),
                         measured_value=f"{value / GIB:.4f}" if value is not None else "",
                         unit="GiB", measure_type=mtype,
                         source_quote=f"{quote} = {value} bytes" if value is not None else
                         f"{quote}: not available on {env['gpu']}"))
    tps = case["mb"] * case["seq"] / res["step_time_s"]
    timing = [f"step_time_s={res['step_time_s']:.5f} (median of steps 2..n)"]
    if res.get("gpu_kernel_time_s") is not None:
        timing.append(f"gpu_kernel_time_s={res['gpu_kernel_time_s']:.5f} (sum of CUDA kernel "
                      "times of one more forward+backward, torch.profiler)")
    if res.get("gpu_kernel_classes_s"):
        split = "/".join(f"{k}:{v:.5f}" for k, v in sorted(res["gpu_kernel_classes_s"].items(),
                                                           key=lambda kv: -kv[1]))
        timing.append(f"gpu_kernel_classes_s={split}")
    rows.append(dict(base, id=f"{key}-tps", kind="throughput", oom="",
                     other="; ".join(other + timing),
                     measured_value=f"{tps:.2f}", unit="tokens_per_sec_per_gpu", measure_type="",
                     source_quote=f"micro_batch*seq/step_time = {case['mb']}*{case['seq']}/"
                                  f"{res['step_time_s']:.5f}"))
    return rows


# ------------------------------------------------------------------ main loop

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--tiny", action="store_true", help="toy model widths (CPU smoke test)")
    ap.add_argument("--budget-s", type=float, default=480.0)
    ap.add_argument("--out", default=None, help="output folder (default $OUT or /tmp/fmest_gpu_out)")
    ap.add_argument("--presets", nargs="+", default=list(DEFAULT_PRESETS))
    ap.add_argument("--impl", default="auto", choices=("auto", "hf", "native"),
                    help="model implementation (auto: transformers when importable)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--lora-rank", type=int, default=16)
    ap.add_argument("--max-cases", type=int, default=0, help="stop after N cases (0: all)")
    ap.add_argument("--only", default="", help="regex: run only the cases whose id it matches")
    ap.add_argument("--min-case-s", type=float, default=None,
                    help="do not start a case with less budget left (default 8; --tiny: 0)")
    ap.add_argument("--snapshot-case", default=None,
                    help="case id to snapshot (default: the Qwen2.5-0.5B LoRA AC-on case, "
                         "or the first case; 'none' for none)")
    ap.add_argument("--snapshot-entries", type=int, default=20000)
    ap.add_argument("--no-kernel-time", dest="kernel_time", action="store_false",
                    help="skip the extra profiled step that sums the GPU's kernel time")
    ap.add_argument("--simulate-oom", default="",
                    help="raise torch.OutOfMemoryError in cases whose id contains this text")
    ap.add_argument("--mem-fraction", type=float, default=0.0,
                    help="torch.cuda.set_per_process_memory_fraction (a real allocator limit)")
    args = ap.parse_args(argv)
    for name in args.presets:
        load_preset(name)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("memory_probe: --device cuda but torch.cuda.is_available() is False; use "
              "--device cpu --tiny for a smoke run", file=sys.stderr)
        return 2
    if args.min_case_s is None:
        args.min_case_s = 0.0 if args.tiny else 8.0
    device = torch.device(args.device)
    env = env_info(device)
    versions = env["packages"]
    if args.impl == "auto":
        args.impl = "native" if versions["transformers"].startswith("absent") else "hf"
    if args.mem_fraction and device.type == "cuda":
        torch.cuda.set_per_process_memory_fraction(args.mem_fraction, device)
    out = out_dir(args.out)
    label = env["label"]
    writer = RowWriter(out / f"memory_probe_{label}.csv", COLUMNS)
    devmem = DeviceMemory(device)
    budget = Budget(args.budget_s)
    cases = grid(args)
    if args.only:
        cases = [c for c in cases if re.search(args.only, case_id(c))]
    if args.max_cases:
        cases = cases[: args.max_cases]
    snap_id = args.snapshot_case
    if snap_id is None:
        # the first run (2026-11-27) kept the Llama-3.2-1B full AC-off snapshot; this case is
        # ~1.05 GiB above fmest and its trace (docs/benchmarks.md, the H200 probe)
        want = "qwen2.5-0.5b:lora:b1:s2048:ac1:adamw_fused"
        snap_id = want if any(case_id(c) == want for c in cases) else case_id(cases[0])
    report = {"env": env, "impl": args.impl, "budget_s": args.budget_s,
              "device_memory_method": devmem.method, "snapshot_case": snap_id,
              "snapshot": "", "cases": []}
    print(f"memory_probe on {env['gpu']} ({label}), impl {args.impl}, {len(cases)} cases, "
          f"budget {args.budget_s:g} s -> {writer.path}", flush=True)
    current = {"key": None, "model": None, "params_b": 0.0, "notes": []}
    longest: dict = {}   # (preset, technique) -> the longest case's seconds per 2048 tokens
    try:
        for case in cases:
            cid = case_id(case)
            rec = dict(case, id=cid)
            report["cases"].append(rec)
            reason = missing_package(case, versions)
            if reason:
                rec.update(status="skipped", reason=reason)
                print(f"[memory_probe {budget.elapsed():6.1f}s] skipped {cid}: {reason}")
                continue
            if budget.spent(args.min_case_s):
                rec.update(status="skipped", reason=budget.reason() +
                           f" (a case needs >= {args.min_case_s:g} s)")
                print(f"[memory_probe {budget.elapsed():6.1f}s] skipped {cid}: {rec['reason']}")
                continue
            # a case like one that already ran (same model and technique) is not started when
            # the budget left is under 1.2x that case's time: a run past the caller's hard limit
            # loses the case and the JSON (the H100 run's last QLoRA case, 2026-11-27)
            like = longest.get((case["preset"], case["technique"]), 0.0)
            if like and budget.spent(1.2 * like * max(1.0, case["seq"] * case["mb"] / 2048)):
                rec.update(status="skipped", reason=budget.reason() + f" (a like case took "
                           f"{like:.0f} s at 2048 tokens)")
                print(f"[memory_probe {budget.elapsed():6.1f}s] skipped {cid}: {rec['reason']}")
                continue
            t_case = time.perf_counter()
            res = {"status": "ok"}
            hook = None
            stage = "build"
            try:
                key = (case["preset"], case["technique"], case["impl"])
                if current["key"] != key:
                    release_model(current["model"])
                    current.update(key=None, model=None)
                    free_memory(device)
                    res["device_used_before_bytes"] = devmem.used()
                    current["model"], current["params_b"], current["notes"] = build_model(
                        case, args, device, versions)
                    current["key"] = key
                model = current["model"]
                set_checkpointing(model, case)
                if args.simulate_oom and args.simulate_oom in cid:
                    hook = install_simulated_oom(model, args.simulate_oom)
                free_memory(device)
                if device.type == "cuda":
                    torch.cuda.reset_peak_memory_stats(device)
                    # what is allocated besides the model when the case starts: the counters of
                    # a case that starts with foreign blocks include them (to_evidence.py marks
                    # its memory rows suspect)
                    res["foreign_allocated_bytes"] = max(
                        0, torch.cuda.memory_allocated(device) - model_state_bytes(model))
                stage = "steps"
                snap = None
                if snap_id == cid and not report["snapshot"]:
                    if device.type == "cuda":
                        snap = out / f"memory_snapshot_{label}.pickle"
                    else:
                        report["snapshot"] = "skipped: torch.cuda.memory._snapshot needs CUDA"
                res.update(run_steps(model, case, args, device, devmem, snap))
                if snap is not None:
                    res["note"] = "memory history recorded in this case (step time inflated)"
                    found = [p.name for p in out.glob(f"memory_snapshot_{label}.pickle*")]
                    report["snapshot"] = f"{found[0] if found else '?'} ({cid})"
                model = None
            except Exception as exc:  # noqa: BLE001 - every case ends in a recorded status
                model = None
                if is_oom(exc):
                    res.update(status="oom", stage=stage,
                               reason=str(exc).splitlines()[0][:300] if str(exc) else "OOM")
                else:
                    res.update(status="error", stage=stage,
                               reason=f"{type(exc).__name__}: {str(exc)[:300]}")
                del exc
                if device.type == "cuda":
                    res["max_allocated_bytes"] = torch.cuda.max_memory_allocated(device)
                if stage == "build" or res["status"] == "error":
                    release_model(current["model"])
                    current.update(key=None, model=None)
            finally:
                if hook is not None:
                    hook.remove()
                if current["model"] is not None:
                    for p in current["model"].parameters():
                        p.grad = None
                free_memory(device)
            res["case_wall_s"] = round(time.perf_counter() - t_case, 2)
            per_2048 = res["case_wall_s"] * 2048 / max(1, case["seq"] * case["mb"])
            key2 = (case["preset"], case["technique"])
            longest[key2] = max(longest.get(key2, 0.0), per_2048)
            rec.update({k: v for k, v in res.items()})
            if res["status"] in ("ok", "oom"):
                for row in evidence_rows(case, res, env, current["params_b"], current["notes"],
                                         devmem, args):
                    writer.write(row)
            what = (f"alloc {res['max_allocated_bytes'] / GIB:.2f} GiB, "
                    f"{case['mb'] * case['seq'] / res['step_time_s']:.0f} tok/s"
                    if res["status"] == "ok" and "max_allocated_bytes" in res else
                    f"{case['mb'] * case['seq'] / res['step_time_s']:.0f} tok/s"
                    if res["status"] == "ok" else res.get("reason", ""))
            print(f"[memory_probe {budget.elapsed():6.1f}s] {res['status']:7s} {cid}: {what} "
                  f"({res['case_wall_s']} s)", flush=True)
            write_report(out, label, report, budget, writer, final=False)
    finally:
        release_model(current["model"])
        current.update(model=None)
        writer.close()
        counts = write_report(out, label, report, budget, writer, final=True)
        print(f"memory_probe: {counts}, {len(writer.rows)} rows -> {writer.path} "
              f"({budget.elapsed():.1f} s)", flush=True)
    return 0


def write_report(out: Path, label: str, report: dict, budget, writer, *, final: bool) -> dict:
    """Write the JSON report (after every case too, so a run killed by the caller's time limit
    keeps what it finished; ``complete`` says whether the run ended normally)."""
    counts: dict = {}
    for rec in report["cases"]:
        counts[rec.get("status", "?")] = counts.get(rec.get("status", "?"), 0) + 1
    report.update(status_counts=counts, elapsed_s=round(budget.elapsed(), 1),
                  rows=len(writer.rows), complete=final)
    (out / f"memory_probe_{label}.json").write_text(
        json.dumps(report, indent=1, default=str), encoding="utf-8")
    return counts


if __name__ == "__main__":
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    sys.exit(main())
