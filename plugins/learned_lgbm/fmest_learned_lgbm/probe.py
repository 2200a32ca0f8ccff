"""Real CPU probes: run two training steps of a small model and record the allocator's peak.

Used by the tests (a handful of tiny configurations) and to build the default bundle's data
when no probe dataset from ``fmest-torch-runner`` (``fmest probe``) is available. A minimal
profiler probe runs here: the model is built inside ``torch.profiler.profile(profile_memory=
True)`` and the truth is the maximum of the CPU allocator's ``total_allocated`` over the run
(bytes allocated since profiling began and still live: the CPU analogue of
``torch.cuda.max_memory_allocated``). Step time is the median of three further, unprofiled
steps. Rows follow the probe dataset schema (see :mod:`fmest_learned_lgbm.data`).
"""

from __future__ import annotations

import csv
import json
import random
import statistics
import time
from typing import Any, Iterable, Optional

PROBE_FIELDS = ("job_json", "status", "device", "measured_peak_bytes", "measured_reserved_bytes",
                "measured_step_seconds", "probe", "error", "torch_version")


def _own_probe(job, ctx, steps_timed: int = 3) -> tuple[str, Optional[int], Optional[float], str]:
    import torch
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile
    from transformers import AutoConfig, AutoModelForCausalLM

    tr = job.training
    if tr.dtype not in ("fp32", "bf16") or tr.technique == "qlora" or tr.loss != "standard":
        return "unsupported", None, None, "own probe runs fp32/bf16 full or LoRA only"
    cfg = dict(ctx.model.hf_config)
    mt = cfg.pop("model_type")
    torch.manual_seed(0)
    dtype = torch.float32 if tr.dtype == "fp32" or tr.precision == "amp" else torch.bfloat16
    x = None

    def build():
        config = AutoConfig.for_model(mt, **cfg)
        config._attn_implementation = tr.attention if tr.attention != "flash" else "sdpa"
        model = AutoModelForCausalLM.from_config(config).to(dtype)
        if tr.activation_checkpointing == "full":
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False})
        if tr.technique == "lora":
            from peft import LoraConfig, get_peft_model

            model = get_peft_model(model, LoraConfig(r=tr.lora_rank, lora_alpha=tr.lora_alpha,
                                                     target_modules=list(
                                                         tr.lora_target_modules)))
        model.train()
        params = [p for p in model.parameters() if p.requires_grad]
        foreach = tr.optimizer_impl in ("auto", "foreach")
        opt = torch.optim.AdamW(params, lr=1e-4, foreach=foreach)
        return model, opt

    def step(model, opt, ids):
        with torch.autocast("cpu", torch.bfloat16,
                            enabled=tr.precision == "amp" and tr.dtype == "bf16"):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        model, opt = build()
        x = torch.randint(0, int(cfg.get("vocab_size", 1000)), (tr.micro_batch_size, tr.seq_len))
        for _ in range(2):
            step(model, opt, x)
    # The allocator's counter persists across profiling sessions in one process (tensors freed
    # while no profiler runs are never subtracted), so measure from its value at our start.
    events = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        e = stack.pop()
        if e.tag == _EventType.Allocation:
            events.append(e)
        stack.extend(e.children)
    events.sort(key=lambda e: (e.start_time_ns, e.id))
    first = events[0].extra_fields
    offset = int(first.total_allocated) - int(first.alloc_size)
    peak = max(int(e.extra_fields.total_allocated) for e in events) - offset
    times = []
    for _ in range(steps_timed):
        t = time.perf_counter()
        step(model, opt, x)
        times.append(time.perf_counter() - t)
    del model, opt
    return "ok", peak, statistics.median(times), ""


def probe_job(job, engine) -> dict:
    """Measure ``job`` on this CPU; returns a probe dataset row. (Probes by
    ``fmest-torch-runner``'s ``fmest probe`` are datasets ``fmest learn`` reads too; this plugin
    does not import that one.)"""
    import torch

    from fmest.convert import job_to_dict

    ctx = engine.context(job)
    row = {"job_json": json.dumps(job_to_dict(job), sort_keys=True), "device": "cpu",
           "measured_reserved_bytes": "", "torch_version": torch.__version__, "error": ""}
    try:
        status, peak, seconds, err = _own_probe(job, ctx)
    except Exception as exc:  # a failed probe is a row with status error, not a crash
        status, peak, seconds, err = "error", None, None, f"{type(exc).__name__}: {exc}"
    return dict(row, status=status, error=err, probe="fmest_learned_lgbm.probe",
                measured_peak_bytes=peak or "", measured_step_seconds=seconds or "")


def write_rows(path, rows: Iterable[dict]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=PROBE_FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(r)


# -- tiny model families for CPU probes ----------------------------------------------------

def tiny_config(family: str, hidden: int, layers: int, vocab: int = 1024) -> dict:
    """A small Hugging Face config of ``family`` (random weights; shapes only matter)."""
    heads = max(2, hidden // 32)
    inter = hidden * 3
    if family in ("llama", "mistral", "qwen2"):
        return {"model_type": family, "hidden_size": hidden, "intermediate_size": inter,
                "num_hidden_layers": layers, "num_attention_heads": heads,
                "num_key_value_heads": max(1, heads // 2), "vocab_size": vocab,
                "max_position_embeddings": 1024, "tie_word_embeddings": family == "qwen2"}
    if family == "gemma":
        return {"model_type": "gemma", "hidden_size": hidden, "intermediate_size": inter,
                "num_hidden_layers": layers, "num_attention_heads": heads,
                "num_key_value_heads": 1, "head_dim": 32, "vocab_size": vocab,
                "max_position_embeddings": 1024}
    if family == "phi3":
        return {"model_type": "phi3", "hidden_size": hidden, "intermediate_size": inter,
                "num_hidden_layers": layers, "num_attention_heads": heads,
                "num_key_value_heads": heads, "vocab_size": vocab,
                "max_position_embeddings": 1024, "original_max_position_embeddings": 1024,
                "pad_token_id": 0}
    if family == "gpt2":
        return {"model_type": "gpt2", "n_embd": hidden, "n_layer": layers, "n_head": heads,
                "vocab_size": vocab, "n_positions": 1024, "resid_pdrop": 0.0,
                "embd_pdrop": 0.0, "attn_pdrop": 0.0}
    if family == "opt":
        return {"model_type": "opt", "hidden_size": hidden, "ffn_dim": hidden * 4,
                "num_hidden_layers": layers, "num_attention_heads": heads,
                "word_embed_proj_dim": hidden, "vocab_size": vocab,
                "max_position_embeddings": 1024, "dropout": 0.0, "attention_dropout": 0.0}
    raise ValueError(f"no tiny config for {family!r}")


FAMILIES = ("llama", "mistral", "qwen2", "gemma", "phi3", "gpt2", "opt")
LORA_TARGETS = {"gpt2": ["c_attn"], "phi3": ["qkv_proj"]}


def probe_grid(n: int, *, families=FAMILIES, seed: int = 0) -> list[dict]:
    """``n`` job dicts drawn deterministically from a grid of tiny configurations."""
    rnd = random.Random(seed)
    jobs = []
    for k in range(n):
        fam = families[k % len(families)]
        hidden = rnd.choice((64, 128, 192, 256))
        layers = rnd.choice((1, 2, 3, 4))
        technique = rnd.choice(("full", "full", "lora"))
        dtype, precision = rnd.choice((("fp32", "pure"), ("fp32", "pure"), ("bf16", "amp"),
                                       ("bf16", "pure")))
        training: dict[str, Any] = {
            "dtype": dtype, "precision": precision, "technique": technique,
            "seq_len": rnd.choice((32, 64, 128, 256)),
            "micro_batch_size": rnd.choice((1, 2, 4)),
            "activation_checkpointing": rnd.choice(("none", "none", "full")),
            "attention": rnd.choice(("sdpa", "eager")),
            "optimizer": "adamw", "optimizer_impl": rnd.choice(("foreach", "for_loop"))}
        if technique == "lora":
            training["lora_rank"] = rnd.choice((4, 8, 16))
            training["lora_target_modules"] = LORA_TARGETS.get(fam, ["q_proj", "v_proj"])
        jobs.append({"model": f"tiny-{fam}-h{hidden}-l{layers}",
                     "model_config": tiny_config(fam, hidden, layers), "training": training})
    return jobs


def main(argv=None) -> int:
    """``python -m fmest_learned_lgbm.probe OUT.csv [N]``: probe N tiny configurations
    (``--own`` is accepted for old command lines; this module's probe is the only one)."""
    import sys

    import torch

    from fmest.convert import job_from_dict
    from fmest.engine import Engine

    args = list(sys.argv[1:] if argv is None else argv)
    args = [a for a in args if a != "--own"]
    out = args[0]
    n = int(args[1]) if len(args) > 1 else 140
    torch.set_num_threads(1)
    engine = Engine()
    rows = []
    for i, jd in enumerate(probe_grid(n)):
        t = time.perf_counter()
        row = probe_job(job_from_dict(jd), engine)
        rows.append(row)
        print(f"{i + 1}/{n} {jd['model']} {row['status']} {row['measured_peak_bytes']} "
              f"{time.perf_counter() - t:.1f}s", flush=True)
        write_rows(out, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
