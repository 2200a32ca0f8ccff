"""``fmest plan`` on published training setups: where does the published layout rank among
the feasible layouts of the same GPUs by predicted step time, and how fast is the search?

For each setup the planner searches its GPU type up to the published GPU count at the
published global batch. The rank is among the feasible configurations on exactly the
published count, by the vectorized (array-formula) step time; "published" and "best" step
times are then re-estimated by the full engine. configs/s counts every configuration
evaluated (pruned ones included) over the whole search, probes included, on one core.

Setups (sources):

* torchtitan Llama 3 8B: ``torchtitan/models/llama3/train_configs/llama3_8b.toml`` (pytorch/
  torchtitan @ 01424cb, "a preset for 64 A100 GPUs"): FSDP over 64 GPUs, local batch 1,
  seq 8192, selective (op) activation checkpointing.
* torchtitan Llama 3 70B: ``llama3_70b.toml`` (@ 038d5fd, 64 A100): FSDP 8 x TP 8, local batch
  8, seq 8192, full activation checkpointing.
* torchtitan Llama 3 405B: ``llama3_405b.toml`` (@ 01424cb, "a preset for 128 H100 GPUs"):
  FSDP 16 x TP 8 (async TP), local batch 2, seq 8192, float8 linears, torch.compile, full
  activation checkpointing.
* Megatron GPT-3 175B: Narayanan et al. 2021 (arXiv:2104.04473), Table 2 (PTD-P vs ZeRO-3):
  model-parallel size 96 (t = 8, p = 12) on 384 A100s, batch 1536, micro-batch 1, seq 2048,
  fp16 with fp32 master weights, full recomputation.
* QLoRA 70B on one GPU: Dettmers et al. 2023 (arXiv:2305.14314) section 4 and the
  guanaco_65b finetune script (per-device batch 1, gradient accumulation 16, r 64 on all
  linear layers, NF4 with double quantization, gradient checkpointing), run as Llama-2-70B on
  one A100-80GB with 512-token samples (source 384 + target 128, Table 9).

Run: python benchmarks/plan.py
"""

from __future__ import annotations

import sys
import time

import numpy as np

import fmest
from fmest.engine import Engine
from fmest.plan import space as sp
from fmest.plan.planner import Constraints, config_job, evaluate_space

GPT3_175B = {"model_type": "gpt2", "n_layer": 96, "n_embd": 12288, "n_head": 96,
             "vocab_size": 50257, "n_positions": 2048, "activation_function": "gelu",
             "tie_word_embeddings": True}

SETUPS = [
    dict(name="torchtitan Llama 3 8B, 64x A100 FSDP",
         job={"model": "meta-llama/Llama-3.1-8B", "training": {"seq_len": 8192},
              "workload": {"dataset_tokens": 1e10}},
         gpu="A100-80GB", gpus=64, global_batch_tokens=64 * 8192,
         published=dict(dp=64, tp=1, pp=1, cp=1, vstages=1, sp=False, sharding="fsdp_full_shard",
                        offload=False, ckpt="selective", mb=1)),
    dict(name="torchtitan Llama 3 70B, 64x A100 FSDP8 x TP8",
         job={"model": "meta-llama/Llama-3.1-70B", "training": {"seq_len": 8192},
              "workload": {"dataset_tokens": 1e10}},
         gpu="A100-80GB", gpus=64, global_batch_tokens=8 * 8 * 8192,
         published=dict(dp=8, tp=8, pp=1, cp=1, vstages=1, sp=True, sharding="fsdp_full_shard",
                        offload=False, ckpt="full", mb=8)),
    dict(name="torchtitan Llama 3 405B, 128x H100 FSDP16 x TP8",
         job={"model": "meta-llama/Llama-3.1-405B",
              "training": {"seq_len": 8192, "dtype": "fp8", "compile": True},
              "workload": {"dataset_tokens": 1e10}},
         gpu="H100-SXM", gpus=128, global_batch_tokens=16 * 2 * 8192,
         published=dict(dp=16, tp=8, pp=1, cp=1, vstages=1, sp=True, sharding="fsdp_full_shard",
                        offload=False, ckpt="full", mb=2)),
    dict(name="Megatron GPT-3 175B, 384x A100 t8 p12",
         job={"model": "gpt3-175b", "model_config": GPT3_175B,
              "training": {"seq_len": 2048, "dtype": "fp16", "precision": "master"},
              "workload": {"dataset_tokens": 3e11}},
         gpu="A100-80GB", gpus=384, global_batch_tokens=1536 * 2048,
         published=dict(dp=4, tp=8, pp=12, cp=1, vstages=1, sp=False, sharding="zero0",
                        offload=False, ckpt="full", mb=1)),
    dict(name="QLoRA Llama-2-70B, 1x A100-80GB",
         job={"model": "meta-llama/Llama-2-70b-hf",
              "training": {"technique": "qlora", "lora_rank": 64,
                           "lora_target_modules": "all-linear", "seq_len": 512},
              "workload": {"dataset_tokens": 1e7}},
         gpu="A100-80GB", gpus=1, global_batch_tokens=16 * 512,
         published=dict(dp=1, tp=1, pp=1, cp=1, vstages=1, sp=False, sharding="zero0",
                        offload=False, ckpt="full", mb=1)),
]


def _match(res: dict, shardings, count: int, pub: dict) -> np.ndarray:
    names = [n for n, _ in shardings]
    m = res["count"] == count
    for key in ("dp", "tp", "pp", "cp", "vstages", "mb"):
        m &= res[key] == pub[key]
    m &= res["sp"] == pub["sp"]
    m &= res["hidx"] == names.index(pub["sharding"])
    m &= (res["off"] == 1) == pub["offload"]
    m &= res["ckidx"] == sp.CHECKPOINTING.index(pub["ckpt"])
    return np.nonzero(m)[0]


def run_setup(engine, setup: dict) -> dict:
    job = fmest.to_job(setup["job"])
    cons = Constraints(gpus=setup["gpu"], max_gpus=setup["gpus"], objective="time",
                       global_batch_tokens=setup["global_batch_tokens"])
    res, evaluated, seconds, rejected, ctx = evaluate_space(job, cons, engine=engine)
    out = dict(name=setup["name"], evaluated=evaluated, seconds=seconds,
               rate=evaluated / seconds, feasible=0, rank=None, pub_step=None,
               best_step=None, best="-")
    if not res:
        return out
    same = np.nonzero(res["count"] == setup["gpus"])[0]
    out["feasible"] = int(same.size)
    hit = _match(res, ctx["shardings"], setup["gpus"], setup["published"])
    if same.size:
        best = same[np.argmin(res["step"][same])]
        bj = config_job(job, res, int(best), ctx["shardings"], method="theory")
        out["best_step"] = engine.estimate(bj).time.step_seconds
        par, tr = bj.parallelism, bj.training
        out["best"] = (f"dp{par.dp} tp{par.tp} pp{par.pp}{' sp' if par.sequence_parallel else ''}"
                       f"{' v%d' % par.pp_virtual_stages if par.pp_virtual_stages > 1 else ''} "
                       f"{'fsdp ' + par.fsdp if par.fsdp != 'none' else 'zero%d' % par.zero_stage}"
                       f"{' +off' if par.cpu_offload != 'none' else ''} mb{tr.micro_batch_size} "
                       f"{tr.activation_checkpointing}")
    if hit.size:
        i = int(hit[0])
        out["rank"] = int((res["step"][same] < res["step"][i]).sum()) + 1
        pj = config_job(job, res, i, ctx["shardings"], method="theory")
        out["pub_step"] = engine.estimate(pj).time.step_seconds
    else:
        # not feasible by the array formulas: say what the engine thinks of it
        p = setup["published"]
        zero = int(p["sharding"][4:]) if p["sharding"].startswith("zero") else 0
        fsdp = p["sharding"][5:] if p["sharding"].startswith("fsdp_") else "none"
        samples = setup["global_batch_tokens"] // job.training.seq_len
        pj = job.evolve(training={"micro_batch_size": p["mb"], "activation_checkpointing":
                                  p["ckpt"], "grad_accum_steps": samples // (p["mb"] * p["dp"])},
                        parallelism={"dp": p["dp"], "tp": p["tp"], "pp": p["pp"],
                                     "sequence_parallel": p["sp"], "zero_stage": zero,
                                     "fsdp": fsdp},
                        hardware={"gpu": setup["gpu"], "gpus_per_node": min(8, setup["gpus"]),
                                  "nodes": max(1, setup["gpus"] // 8)})
        r = engine.estimate(pj)
        out["pub_step"] = r.time.step_seconds if r.time else None
        out["rank"] = "not feasible (engine: fits=%s)" % r.fits
    return out


def main() -> int:
    engine = Engine()
    rows = []
    for setup in SETUPS:
        t0 = time.perf_counter()
        rows.append(run_setup(engine, setup))
        rows[-1]["wall"] = time.perf_counter() - t0
    head = ("setup", "evaluated", "configs/s", "feasible@N", "published rank", "published s",
            "best s", "best layout at N")
    table = [head]
    for r in rows:
        table.append((r["name"], f"{r['evaluated']:,}", f"{r['rate']:,.0f}",
                      f"{r['feasible']:,}", str(r["rank"]),
                      "-" if r["pub_step"] is None else f"{r['pub_step']:.2f}",
                      "-" if r["best_step"] is None else f"{r['best_step']:.2f}", r["best"]))
    widths = [max(len(str(row[i])) for row in table) for i in range(len(head))]
    for row in table:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)))
    total = sum(r["evaluated"] for r in rows)
    secs = sum(r["seconds"] for r in rows)
    print(f"\nall setups: {total:,} configurations in {secs:.2f} s = {total / secs:,.0f} "
          "configurations/s (one process, probes included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
