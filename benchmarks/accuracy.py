"""fmest against published measurements of real training runs, judged out-of-source.

Run: ``python benchmarks/accuracy.py`` (tables), ``--json`` (one JSON object), ``--markdown``
(the README's table), ``--rows``
(every row), ``--unsupported`` (the rows fmest cannot express, with the missing feature: a to-do
list), ``--fitters NAME,...`` (add fitted corrections from ``fitting.AVAILABLE``, what-if),
``--sealed`` (the sealed part, aggregate only: once, at the end of a model change),
``--extra CSV`` (rows in measured.csv's format from a file kept outside the repository, scored
like the sealed part: aggregate lines only, per-stack medians over >= 3 rows, never a row id).

Sealed part: the sources listed in ``benchmarks/data/sealed_sources.json`` (drawn by
``benchmarks/sealed.py``) are kept out of every figure above, the to-do list included; ``--sealed``
scores them with the fitted constants fitted on all the open sources and prints aggregate lines
only (no row, no row id, no per-source figure), alone; with ``--rows``, ``--markdown``,
``--unsupported`` or ``--fitters`` it is refused.
Data: ``benchmarks/data/measured.csv`` (``$FMEST_MEASURED_CSV`` overrides), mapped to jobs by
``benchmarks/measured.py``. Method: ``docs/benchmarks.md``.

What is compared with what (the estimate is made comparable to the counter the source read):

* ``max_memory_reserved`` and ``unknown`` -> the estimate less the components the caching
  allocator never sees (class ``outside`` in ``fmest.estimates.MEMORY_COMPONENTS``: CUDA
  context, NCCL buffers). ``unknown`` counters are read as reserved: the number most training
  logs print (torchtitan, HF/accelerate memory trackers).
* ``max_memory_allocated`` / ``active_bytes`` -> the allocated part
  (``fmest.estimates.allocated_bytes``: less ``reserve`` and ``outside`` components).
* ``nvidia-smi`` -> the whole estimate.
* Units: ``GiB`` = 2^30 bytes; ``GB`` is read as 2^30 bytes too (tools print GiB labelled "GB";
  the sources note the +-7.4 % ambiguity) unless ``other`` states 10^9 bytes or the row's
  counter is the one its stack's own log line prints in 10^9-byte GB (stacks.toml
  ``memory_log_counter`` / ``memory_log_unit``: LitGPT).
* Throughput in the row's unit: tokens/s per GPU or for the job, samples/s, MFU % and TFLOP/s
  per GPU from fmest's MFU times the dtype's dense peak (Megatron 2021 rows: Narayanan et al.
  2021 eq. 3 FLOPs, recompute included, as the source counts; other ``megatron-core`` rows:
  Megatron-LM's ``num_floating_point_operations``, full s x s attention, see
  ``megatron_model_flops``; BigScience Megatron-DeepSpeed rows: the fork's own log-line count
  with the run's recompute factor, before or after its PR 251, ``bigscience_logged_flops``),
  seconds per step compared as a
  rate (measured/predicted - 1); a timed "iteration" that ``other`` says is one micro-batch is
  compared with fmest's step time divided by the accumulation steps.
  Error = predicted / measured - 1 (positive: fmest predicts more
  memory / a faster run).
* A memory figure that ``other`` says is summed over the GPUs (``memory_scope=SUM``) is
  divided by ``num_gpus``.
* ``oom`` rows: a pass/fail check that fmest's whole estimate exceeds the GPU's memory.
  Boundary rows (``BOUNDARY`` in ``other``: the largest configuration that fit): pass when the
  whole estimate is within the GPU's memory. Neither enters the medians.
* ``suspect`` rows (a stated physical reason) stay out of the medians and are listed.

Baselines on the same rows: memory "16 B/param + nothing" and "weights + states + Korthikanti
activations"; throughput "6 N tokens at 40 % of the dtype's dense peak" (functions below).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import fitting  # noqa: E402
import measured  # noqa: E402
import sealed as sealed_draw  # noqa: E402  (benchmarks/sealed.py)
from source_families import family  # noqa: E402

GIB = 2**30
FMEST = "fmest"
BASE_16 = "16 B/param"
BASE_KOR = "wts+states+Korthikanti"
BASE_6N = "6N @40% peak"
MEMORY_BASELINES = (BASE_16, BASE_KOR)
THROUGHPUT_BASELINES = (BASE_6N,)
RATE_UNITS = ("tokens_per_sec_per_gpu", "tokens_per_sec", "TFLOPs_per_gpu", "MFU_pct",
              "samples_per_sec")
#: ``other`` wording that says a timed "step" is one micro-batch's forward+backward (Lit-GPT
#: iterations), not an optimizer step: compared with fmest's step time / grad_accum.
MICRO_BATCH_ITERATION = re.compile(r"iteration = one micro-batch|per micro-batch iteration|"
                                   r"step_scope=micro_batch", re.I)
#: ``other`` wording that says a memory figure is the sum over all GPUs of the run (compared
#: per GPU: divided by ``num_gpus``).
MEMORY_SUM_SCOPE = re.compile(r"memory_scope=sum", re.I)
FOOTER = ("note: the hand-set constants in fmest's formulas were checked against the development "
          "sources (rows dev-*),\n      so those rows are in-sample for the formulas even in the "
          "LOSO column; 'unseen' = rows from the other sources.")


# -- baselines ----------------------------------------------------------------------------------
def korthikanti_activation_bytes(*, seq_len: int, micro_batch: int, hidden: int, heads: int,
                                 layers: int, tp: int, checkpointing: str,
                                 flash: bool) -> float:
    """Activation memory of one micro-batch: ``s b h (34 + 5 a s / h)`` bytes per layer
    (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
    eq. 2; 16-bit activations), divided by ``tp`` (the paper's tensor + sequence parallel
    form, eq. 5). Full recomputation keeps the layer input, ``2 s b h`` per layer (sec. 4.3);
    selective recomputation and flash attention drop the ``5 a s / h`` score term (sec. 5;
    Dao et al. 2022 never store the score matrix)."""
    sbh = float(seq_len) * micro_batch * hidden
    if checkpointing == "full":
        per_layer = 2.0 * sbh
    elif checkpointing == "selective" or flash:
        per_layer = 34.0 * sbh
    else:
        per_layer = sbh * (34.0 + 5.0 * heads * seq_len / hidden)
    return per_layer * layers / tp


def state_bytes_per_param(technique: str, sharding: str, dp: int) -> float:
    """Weights + gradients + Adam states per parameter for the Korthikanti baseline:
    full mixed precision = 2 (16-bit weights) + 2 (grads) + 12 (fp32 master, m, v) (Rajbhandari
    et al. 2020, ZeRO, sec. 3.1); ZeRO-1 shards the 12, ZeRO-2 the 14, ZeRO-3/FSDP all 16 over
    ``dp``. LoRA: the frozen 16-bit weights (2); QLoRA: 4-bit NF4 weights (0.5) (Dettmers et al.
    2023); adapters are ignored (<1 %)."""
    if technique == "lora":
        return 2.0
    if technique == "qlora":
        return 0.5
    if sharding in ("3", "fsdp", "fsdp-hybrid"):
        return 16.0 / dp
    if sharding == "2":
        return 2.0 + 14.0 / dp
    if sharding in ("1", "distopt"):
        return 4.0 + 12.0 / dp
    return 16.0


def baseline_memory_gib(row: dict, job: dict, model) -> dict[str, float]:
    """The two memory baselines (GiB per GPU) for a mapped row."""
    par, tr = job["parallelism"], job["training"]
    tp, pp, dp, cp = par.get("tp", 1), par.get("pp", 1), par.get("dp", 1), par.get("cp", 1)
    params = model.param_counts().total
    zf = (row.get("zero_or_fsdp") or "").strip().lower()
    model_parallel = tp * pp
    b16 = 16.0 * params / model_parallel / (dp if zf in ("3", "fsdp", "fsdp-hybrid") else 1)
    states = state_bytes_per_param(tr.get("technique", "full"), zf, dp) * params / model_parallel
    acts = korthikanti_activation_bytes(
        seq_len=tr["seq_len"] // cp, micro_batch=tr["micro_batch_size"],
        hidden=model.hidden_size, heads=model.num_attention_heads,
        layers=math.ceil(model.num_layers / pp), tp=tp,
        checkpointing=tr.get("activation_checkpointing", "none"),
        flash=tr.get("attention") == "flash")
    return {BASE_16: b16 / GIB, BASE_KOR: (states + acts) / GIB}


def baseline_tokens_per_gpu(dtype: str, model, gpu) -> Optional[float]:
    """Tokens/s per GPU of the rule of thumb "6 N FLOPs per token at 40 % of the dtype's dense
    peak" (Kaplan et al. 2020, C ~ 6 N D; N = parameters one token uses, MoE: active)."""
    peak = gpu.peak_flops_per_s("fp8" if dtype == "fp8" else dtype)
    active = model.param_counts().active
    if not peak or not active:
        return None
    return 0.40 * peak / (6.0 * active)


# -- estimating ------------------------------------------------------------------------------
def _engine():
    from fmest.engine import Engine

    return Engine()


def _memory_bytes_per_unit(row: dict) -> float:
    """Bytes per unit of a memory row: ``GB`` is 10^9 when ``other`` says so or when the row
    quotes its stack's own log line and that line divides by 10^9 (the row's counter is the
    one the stack's profile logs, ``memory_log_unit = "GB"`` in stacks.toml: LitGPT prints
    ``max_memory_allocated() / 1e9`` as "GB"); else 2^30 (module doc)."""
    other = (row.get("other") or "").lower()
    if row["unit"] == "GB" and re.search(r"10\^9|1e9|decimal gb", other):
        return 1e9
    if row["unit"] == "GB":
        from fmest.stacks import MEMORY_LOG_UNITS, _builtin_by_key

        profile = _builtin_by_key().get((row.get("stack") or "").strip().lower())
        if profile is not None and profile.memory_log_unit == "GB" and \
                profile.memory_log_counter == (row.get("measure_type") or "").strip():
            return float(MEMORY_LOG_UNITS["GB"])
    return float(GIB)


def comparable_bytes(estimate, measure_type: str) -> tuple[float, str]:
    """The part of a memory estimate a counter of ``measure_type`` sees (module doc)."""
    from fmest.estimates import OUTSIDE_COMPONENTS, allocated_bytes

    mtype = (measure_type or "unknown").strip()
    if mtype == "nvidia-smi":
        return float(estimate.total_bytes), "whole"
    if mtype in ("max_memory_allocated", "active_bytes"):
        return float(allocated_bytes(estimate)), "allocated"
    outside = sum(estimate.components.get(k, 0) for k in OUTSIDE_COMPONENTS)
    return float(estimate.total_bytes - outside), "reserved"


#: Stacks whose published TFLOP/s come from Megatron-LM's FLOPs count (megatron_model_flops)
MEGATRON_FLOPS_STACKS = ("megatron-core", "nemo", "megatron-lm")


def megatron_flops_per_iteration(cfg: dict, gbs: int, seq: int) -> float:
    """Narayanan et al. 2021 eq. 3: 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) (recompute incl.)."""
    h, layers, vocab = cfg["n_embd"], cfg["n_layer"], cfg["vocab_size"]
    return 96.0 * gbs * seq * layers * h * h * (1 + seq / (6.0 * h) + vocab / (16.0 * layers * h))


def megatron_model_flops(model, tokens: float, seq: int) -> Optional[float]:
    """Model FLOPs of ``tokens`` as Megatron-LM counts them (``num_floating_point_operations``,
    megatron/training/training.py; NeMo 24.x reports TFLOP/s with the same terms): ``12 B s L
    h^2 ((1 + g/a + s/h) q/h + f/h k m + f_s/h m + V/(2 L h))`` with ``g/a`` the KV-group
    ratio, ``q/h`` the query width over hidden, ``f`` the (expert) FFN width, ``k`` the routed
    experts, ``m`` 3/2 for gated MLPs, ``f_s`` the shared experts' width. The attention term
    ``s/h`` counts the full s x s score matrix, not its causal half (fmest's own FLOPs halve
    it). None for multi-latent attention (its own branch there)."""
    if getattr(model, "kv_lora_rank", None) or getattr(model, "qk_head_dim", None):
        return None
    h, layers, heads = model.hidden_size, model.num_layers, model.num_attention_heads
    groups = model.num_kv_heads or heads
    gated = 1.5 if model.gated_mlp else 1.0
    ffn, routed, shared = model.intermediate_size, 1, 0
    if model.is_moe:
        ffn = model.moe_intermediate_size or model.intermediate_size
        routed = model.experts_per_token
        shared = sum(lin.out_features for lin in model.linears  # gate + up: 2 f_s
                     if lin.kind == "shared_expert" and lin.in_features == h) / (
            2.0 if model.gated_mlp else 1.0)
    q_ratio = heads * model.head_dim / h
    return 12.0 * tokens * layers * h * h * (
        (1 + groups / heads + seq / h) * q_ratio + ffn / h * routed * gated
        + shared / h * gated + model.vocab_size / (2.0 * layers * h))


#: Date of bigscience-workshop/Megatron-DeepSpeed PR 251 (commit ae6277f5b95e, 2022-02-21),
#: which replaced the fork's parameter-count TFLOPs log line by Narayanan et al.'s eq. 3.
BIGSCIENCE_PR251_DATE = (2022, 2, 21)
#: make_vocab_size_divisible_by default of the fork (megatron/arguments.py); the vocabulary is
#: padded to a multiple of it times TP (megatron/tokenizer/tokenizer.py _vocab_size_with_padding)
MEGATRON_VOCAB_DIVISOR = 128


#: Sources whose TFLOP/s come from ArcticTraining's own count (the ALST paper, arXiv 2506.13996:
#: "the Megatron-LM flos formula taking into account repeated forwards"; snowflakedb/
#: ArcticTraining arctic_training/metrics.py @02307413a12ad40ecd3aafeee93ad03f590c7b9f
#: ``Metrics._estimate_decoder_transformer_tflos``): ``8 N s + 16 L s^2 h`` per sequence of
#: ``s`` tokens, ``N`` every parameter of the model (embeddings included), ``8`` = 2 FLOPs per
#: parameter x (forward, backward twice, the checkpointed forward again), the attention term
#: over the full (unmasked) ``s x s`` scores, both matmuls, the same four passes. Checked on the
#: paper's own figure: Table 1's 3.7M-token row (recipe max_length 3,800,000, 8 H100, 6455 s)
#: gives 591 TFLOP/s per GPU against the 590.6 printed.
ARCTIC_FLOPS_SOURCES = frozenset({"h14-alst-paper-2506-13996v1"})


def arctic_training_flops(model, *, seq: int, sequences: float) -> float:
    """FLOPs of ``sequences`` sequences of ``seq`` tokens as ArcticTraining counts them
    (:data:`ARCTIC_FLOPS_SOURCES`)."""
    n = model.param_counts().total
    return sequences * (8.0 * n * seq
                        + 16.0 * model.num_layers * seq * seq * model.hidden_size)


def is_bigscience_megatron_deepspeed(row: dict) -> bool:
    """A row whose TFLOP/s come from the BigScience Megatron-DeepSpeed fork's log line."""
    text = f"{row.get('stack_version') or ''} {row.get('other') or ''}".lower()
    return row.get("stack") == "megatron-deepspeed" and "bigscience" in text


#: the run date of a BigScience chronicles row (benchmarks/measured.py, rule 11)
bigscience_run_date = measured.bigscience_run_date


def bigscience_uses_pr251(row: dict) -> bool:
    """Whether the fork that logged the row already had PR 251's eq.-3 count: yes when ``other``
    says so or the run is dated on/after the merge; the older parameter count only for a run
    dated before it (the default is the fork's count since 2022-02-21)."""
    if "after the improved calculator" in (row.get("other") or "").lower():
        return True
    date = bigscience_run_date(row)
    return date is None or date >= BIGSCIENCE_PR251_DATE


def bigscience_logged_flops(model, *, tokens: float, seq: int, tp: int, recompute: bool,
                            pr251: bool) -> float:
    """FLOPs per iteration as the BigScience Megatron-DeepSpeed fork counts them in its
    ``TFLOPs:`` log line (megatron/training.py ``training_log``; the log divides by the
    iteration time and ``world_size``), recompute factor ``f`` = 4 with
    ``--checkpoint-activations`` else 3:

    * PR 251 on (bigscience-workshop/Megatron-DeepSpeed ae6277f5b95ede2d4932cb8718fcc6a6132c09e7,
      kept at 8387ae17c4704f6579f88a84500b535d19d7fbbf): ``c f B s L h^2 (1 + s/(6h) +
      V/(16 L h))`` with ``c`` = 24, 32 with ``--glu-activation`` (PR 283, e23393fb), ``V`` the
      padded vocabulary (``MEGATRON_VOCAB_DIVISOR`` x TP);
    * before (ae6277f5~1): ``N f 2 s B`` with ``N`` = ``get_parameters_in_billions(model,
      exclude_embeddings=True)`` (megatron/utils.py): the non-embedding parameters (the last
      stage's count x TP x PP; uniform stages taken).

    ``tokens`` = B s (global batch x sequence)."""
    f = 4.0 if recompute else 3.0
    if not pr251:
        pc = model.param_counts()
        return (pc.total - pc.embedding) * f * 2.0 * tokens
    h, layers = model.hidden_size, model.num_layers
    div = MEGATRON_VOCAB_DIVISOR * max(tp, 1)
    vocab = math.ceil(model.vocab_size / div) * div
    coeff = 32.0 if model.gated_mlp else 24.0
    return coeff * f * tokens * layers * h * h * (
        1.0 + seq / (6.0 * h) + vocab / (16.0 * layers * h))


def predicted_rate(row: dict, job: dict, report) -> Optional[float]:
    """fmest's prediction in the row's throughput unit (module doc)."""
    unit = row["unit"]
    t, k = report.time, report.tokens
    if t is None or k is None:
        return None
    world = report.context.layout.world_size
    if unit == "tokens_per_sec_per_gpu":
        return k.tokens_per_second_per_gpu
    if unit == "tokens_per_sec":
        return k.tokens_per_second
    if unit == "samples_per_sec":
        return k.tokens_per_second / job["training"]["seq_len"]
    if unit == "seconds_per_step":
        if MICRO_BATCH_ITERATION.search(row.get("other") or ""):
            return t.step_seconds / job["training"]["grad_accum_steps"]
        return t.step_seconds
    if unit == "MFU_pct":
        return None if t.mfu is None else t.mfu * 100.0
    if unit == "TFLOPs_per_gpu":
        cfg = job.get("model_config") or {}
        if row.get("stack") == "megatron-core" and "n_embd" in cfg and row.get("global_batch"):
            gbs = int(float(row["global_batch"]))
            tr = job["training"]
            per_step = tr["micro_batch_size"] * tr["grad_accum_steps"] * report.context.layout.dp
            steps = gbs / per_step
            flops = megatron_flops_per_iteration(cfg, gbs, tr["seq_len"])
            return flops / (t.step_seconds * steps * world) / 1e12
        if row.get("stack") in MEGATRON_FLOPS_STACKS:
            # like with like: Megatron/NeMo report TFLOP/s from Megatron-LM's count
            tr = job["training"]
            tokens = tr["micro_batch_size"] * tr["grad_accum_steps"] * \
                report.context.layout.dp * tr["seq_len"]
            model_flops = megatron_model_flops(report.context.model, tokens, tr["seq_len"])
            if model_flops is not None:
                return model_flops / (t.step_seconds * world) / 1e12
        if row.get("source") in ARCTIC_FLOPS_SOURCES:
            # like with like: the trainer's own count over the step's sequences
            tr = job["training"]
            sequences = tr["micro_batch_size"] * tr["grad_accum_steps"] * \
                report.context.layout.dp
            return arctic_training_flops(report.context.model, seq=tr["seq_len"],
                                         sequences=sequences) / (t.step_seconds * world) / 1e12
        if is_bigscience_megatron_deepspeed(row):
            # like with like: the fork's own log-line count, with the run's recompute
            tr = job["training"]
            layout = report.context.layout
            tokens = tr["micro_batch_size"] * tr["grad_accum_steps"] * layout.dp * tr["seq_len"]
            logged = bigscience_logged_flops(
                report.context.model, tokens=tokens, seq=tr["seq_len"], tp=layout.tp,
                recompute=tr.get("activation_checkpointing", "none") != "none",
                pr251=bigscience_uses_pr251(row))
            return logged / (t.step_seconds * world) / 1e12
        if t.flops_per_step is None:
            return None
        return t.flops_per_step / t.step_seconds / world / 1e12
    return None


def baseline_rate(row: dict, job: dict, model, gpu) -> Optional[float]:
    """The 6N baseline in the row's unit."""
    per_gpu = baseline_tokens_per_gpu(job["training"]["dtype"], model, gpu)
    if per_gpu is None:
        return None
    num = measured._int(row["num_gpus"], 1) or 1
    seq = job["training"]["seq_len"]
    accum = 1 if MICRO_BATCH_ITERATION.search(row.get("other") or "") \
        else job["training"]["grad_accum_steps"]
    tokens_per_step = (seq * job["training"]["micro_batch_size"] * accum
                       * job["parallelism"].get("dp", 1))
    unit = row["unit"]
    if unit == "tokens_per_sec_per_gpu":
        return per_gpu
    if unit == "tokens_per_sec":
        return per_gpu * num
    if unit == "samples_per_sec":
        return per_gpu * num / seq
    if unit == "seconds_per_step":
        return tokens_per_step / (per_gpu * num)
    if unit == "MFU_pct":
        return 40.0
    if unit == "TFLOPs_per_gpu":
        return 0.40 * gpu.peak_flops_per_s("fp8" if job["training"]["dtype"] == "fp8"
                                           else job["training"]["dtype"]) / 1e12
    return None


def pct_error(row: dict, predicted: float, measured_value: float) -> float:
    """Signed % error; step times are compared as rates."""
    if row["unit"] in ("seconds_per_step", "hours", "gpu_hours"):
        return (measured_value / predicted - 1.0) * 100.0
    return (predicted / measured_value - 1.0) * 100.0


@functools.lru_cache(maxsize=1)
def _stack_registry():
    """The installed stacks (names and aliases) a job's ``training.stack`` may name."""
    return _engine().registries.stacks


def _job_with_known_stack(job_from_dict, job_dict: dict):
    """The job; a stack name fmest does not accept is dropped (the row keeps its stack for
    the breakdown) rather than failing the row."""
    from fmest.errors import InputError

    stack = job_dict.get("training", {}).get("stack")
    if stack and _stack_registry().canonical(stack) is None:
        # checked here too: the engine resolves the stack only when it estimates
        training = {k: v for k, v in job_dict["training"].items() if k != "stack"}
        job_dict = {**job_dict, "training": training}
    try:
        return job_from_dict(job_dict)
    except InputError as exc:
        if "stack" not in job_dict.get("training", {}) or "stack" not in str(exc):
            raise
        training = {k: v for k, v in job_dict["training"].items() if k != "stack"}
        return job_from_dict({**job_dict, "training": training})


def evaluate(rows: list[dict], engine=None, progress: bool = True) -> list[dict]:
    """One result dict per row (status ``scored``, ``oom-check``, ``boundary-check``,
    ``suspect``, ``unsupported``, ``failed`` or ``not-scored``)."""
    from fmest.convert import job_from_dict

    engine = engine or _engine()
    cache: dict[str, object] = {}
    out = []
    started = time.time()
    for n, row in enumerate(rows, 1):
        if progress and (n % 100 == 0 or n == len(rows)):
            print(f"  [{n}/{len(rows)}] {time.time() - started:.0f} s", file=sys.stderr, flush=True)
        mapped = measured.map_row(row)
        res = {"id": row["id"], "source": row["source"], "stack": mapped.stack,
               "kind": row["kind"], "unit": row["unit"], "measure_type": row["measure_type"],
               "gpu_family": measured.gpu_family(row), "features": mapped.features,
               "row": row, "job": mapped.job, "status": "", "reason": mapped.reason,
               "measured": None, "predicted": None, "baselines": {}}
        out.append(res)
        if mapped.job is None:
            res["status"] = "unsupported"
            continue
        if row["kind"] == "total_time":
            res["status"], res["reason"] = "not-scored", "total-time rows need the workload's " \
                "token count and include restarts; not scored"
            continue
        key = json.dumps(mapped.job, sort_keys=True)
        try:
            if key not in cache:
                job = _job_with_known_stack(job_from_dict, mapped.job)
                cache[key] = engine.estimate(job, quantities=("memory", "time", "tokens"))
            report = cache[key]
        except Exception as exc:  # an InputError/InfeasibleError is a finding, not a crash
            res["status"], res["reason"] = "failed", f"{type(exc).__name__}: {exc}"
            continue
        model, gpu = report.context.model, report.context.gpu
        oom = (row.get("oom") or "").strip().lower() == "true"
        boundary = "boundary" in (row.get("other") or "").lower()
        if row["kind"] == "memory" or oom:
            est = report.memory
            if est is None:
                res["status"], res["reason"] = "failed", "no memory estimate"
                continue
            # the analytic total against the device, for the fit-probability scores
            # (benchmarks/uncertainty.py); the capacity is the total CUDA reports (GpuSpec)
            res["total_bytes"], res["capacity_bytes"] = est.total_bytes, gpu.capacity_bytes
            if oom or boundary:
                cap = gpu.capacity_bytes
                res["status"] = "oom-check" if oom else "boundary-check"
                res["predicted"] = est.total_bytes / GIB
                res["measured"] = cap / GIB
                res["passed"] = est.total_bytes > cap if oom else est.total_bytes <= cap
                continue
            comp, label = comparable_bytes(est, row["measure_type"])
            res["predicted"] = comp / _memory_bytes_per_unit(row)
            res["compared_as"] = label
            res["baselines"] = {k: v * GIB / _memory_bytes_per_unit(row)
                                for k, v in baseline_memory_gib(row, mapped.job, model).items()}
        else:
            pred = predicted_rate(row, mapped.job, report)
            if pred is None or pred <= 0:
                res["status"], res["reason"] = "failed", "no time estimate in the row's unit " \
                    + "; ".join(report.warnings)[:200]
                continue
            res["predicted"] = pred
            base = baseline_rate(row, mapped.job, model, gpu)
            if base:
                res["baselines"] = {BASE_6N: base}
        res["measured"] = float(row["measured_value"])
        if row["kind"] == "memory" and MEMORY_SUM_SCOPE.search(row.get("other") or ""):
            res["measured"] /= measured._int(row["num_gpus"], 1) or 1
        res["status"] = "suspect" if (row.get("suspect") or "").strip() else "scored"
    return out


def implied_peak_share(res: dict) -> float:
    """The share of the dtype's dense peak a measured throughput implies at 6 N FLOPs per
    token (4 N for LoRA/QLoRA, whose backward skips the frozen weights' gradients; Hu et al.
    2021): above 1 the row is physically implausible. 0 for rows without the 6N baseline."""
    base = res.get("baselines", {}).get(BASE_6N)
    if not base or res["kind"] != "throughput" or not res.get("measured"):
        return 0.0
    flops_factor = 4.0 / 6.0 if res["row"].get("technique") in ("lora", "qlora") else 1.0
    if res["unit"] in ("seconds_per_step", "hours", "gpu_hours"):
        ratio = base / res["measured"]
    else:
        ratio = res["measured"] / base
    return ratio * 0.40 * flops_factor


# -- statistics ----------------------------------------------------------------------------
def weighted_median(values: list[float], weights: list[float]) -> Optional[float]:
    if not values:
        return None
    pairs = sorted(zip(values, weights, strict=True))
    half = sum(weights) / 2.0
    acc = 0.0
    for value, weight in pairs:
        acc += weight
        if acc >= half:
            return value
    return pairs[-1][0]


def percentile(values: list[float], q: float) -> Optional[float]:
    if not values:
        return None
    vals = sorted(values)
    pos = (len(vals) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return vals[lo] + (vals[hi] - vals[lo]) * (pos - lo)


def summary(items: list[dict], errors: dict[str, float],
            unanswered: Optional[int] = 0) -> dict:
    """The contract's S: rows, median_abs_pct, p90_abs_pct, within10_share, worst_id (plus
    unanswered, worst_pct and the source-weighted median)."""
    errs = [(it, errors[it["id"]]) for it in items if it["id"] in errors]
    if not errs:
        return {"rows": 0, "unanswered": unanswered, "median_abs_pct": None, "p90_abs_pct": None,
                "within10_share": None, "worst_id": None, "worst_pct": None,
                "source_weighted_median_abs_pct": None}
    abs_e = [abs(e) for _, e in errs]
    worst = max(errs, key=lambda p: abs(p[1]))
    per_source: dict[str, int] = {}
    for it, _ in errs:
        per_source[it["source"]] = per_source.get(it["source"], 0) + 1
    weights = [1.0 / per_source[it["source"]] for it, _ in errs]
    return {"rows": len(errs), "unanswered": unanswered,
            "median_abs_pct": round(statistics.median(abs_e), 2),
            "p90_abs_pct": round(percentile(abs_e, 0.9), 2),
            "within10_share": round(sum(e <= 10.0 for e in abs_e) / len(abs_e), 3),
            "worst_id": worst[0]["id"], "worst_pct": round(worst[1], 1),
            "source_weighted_median_abs_pct": round(weighted_median(abs_e, weights), 2)}


def to_scored(res: dict, quantity: str) -> fitting.Scored:
    return fitting.Scored(id=res["id"], source=res["source"], stack=res["stack"],
                          quantity=quantity, measured=res["measured"],
                          predicted=res["predicted"], row=res["row"], job=res["job"])


def analyse(results: list[dict], fitters=()) -> dict:
    """Everything the report prints, per quantity: in-sample, LOSO, unseen, baselines,
    breakdowns, checks, suspects, unsupported."""
    devs = {r["source"] for r in results if r["id"].startswith("dev-")}
    out: dict = {}
    for quantity, kinds, bases in (("memory", ("memory",), MEMORY_BASELINES),
                                   ("throughput", ("throughput",), THROUGHPUT_BASELINES)):
        mine = [r for r in results if r["kind"] in kinds]
        scored = [r for r in mine if r["status"] == "scored"]
        unanswered = sum(r["status"] in ("unsupported", "failed") for r in mine)
        items = [to_scored(r, quantity) for r in scored]
        ins = fitting.in_sample(items, fitters)
        loso, folds = fitting.leave_one_source_out(items, fitters)
        by_id = {r["id"]: r for r in scored}
        err_in = {i: pct_error(by_id[i]["row"], p, by_id[i]["measured"]) for i, p in ins.items()}
        err_lo = {i: pct_error(by_id[i]["row"], p, by_id[i]["measured"]) for i, p in loso.items()}
        err_base = {b: {r["id"]: pct_error(r["row"], r["baselines"][b], r["measured"])
                        for r in scored if r["baselines"].get(b)} for b in bases}
        unseen = [r for r in scored if r["source"] not in devs]
        unseen_unanswered = sum(r["status"] in ("unsupported", "failed") and
                                r["source"] not in devs for r in mine)
        q: dict = {"in_sample": summary(scored, err_in, unanswered),
                   "loso": summary(scored, err_lo, unanswered),
                   "unseen": summary(unseen, err_lo, unseen_unanswered),
                   "baselines": {b: summary(scored, e, None) for b, e in err_base.items()},
                   "fold_params": folds if fitters else {}}
        for name, key in (("per_stack", lambda r: [r["stack"]]),
                          ("per_gpu_family", lambda r: [r["gpu_family"]]),
                          ("per_feature", lambda r: list(r["features"])),
                          ("per_source", lambda r: [r["source"]]),
                          ("per_counter_or_unit", lambda r: [r["measure_type"] or r["unit"]])):
            groups: dict[str, list] = {}
            for r in scored:
                for g in key(r):
                    groups.setdefault(g, []).append(r)
            table = {}
            for g, members in sorted(groups.items()):
                entry = summary(members, err_lo)
                entry["baselines"] = {b: summary(members, err_base[b])["median_abs_pct"]
                                      for b in bases}
                entry["loses_to"] = [b for b, v in entry["baselines"].items()
                                     if v is not None and entry["median_abs_pct"] is not None
                                     and v < entry["median_abs_pct"]]
                table[g] = entry
            q[name] = table
        checks = [r for r in results if r["status"] in ("oom-check", "boundary-check")
                  and (quantity == "memory")]
        q["checks"] = {"oom": {"rows": sum(r["status"] == "oom-check" for r in checks),
                               "passed": sum(r["status"] == "oom-check" and r["passed"]
                                             for r in checks)},
                       "boundary": {"rows": sum(r["status"] == "boundary-check" for r in checks),
                                    "passed": sum(r["status"] == "boundary-check" and r["passed"]
                                                  for r in checks)}}
        q["suspect"] = [r["id"] for r in mine if r["status"] == "suspect"]
        q["implausible"] = [r["id"] for r in scored if implied_peak_share(r) > 1.0]
        q["errors_loso"] = err_lo
        q["errors_baselines"] = err_base
        out[quantity] = q
    return out


# -- the sealed part ----------------------------------------------------------------------------
SEALED_REFUSED = ("--rows", "--markdown", "--unsupported", "--fitters")


def split_sealed(items: list[dict], sealed: set[str]) -> tuple[list[dict], list[dict]]:
    """(open, sealed): rows or results whose ``source`` is not / is in ``sealed``."""
    return ([r for r in items if r["source"] not in sealed],
            [r for r in items if r["source"] in sealed])


def sealed_header(sealed_rows: list[dict]) -> str:
    """The one line every open figure carries."""
    n = len({r["source"] for r in sealed_rows})
    return (f"sealed: {n} sources, {len(sealed_rows)} rows kept out; --sealed prints their "
            "aggregate")


def fit_and_apply(train: list[fitting.Scored], test: list[fitting.Scored],
                  fitters) -> dict[str, float]:
    """Predictions for ``test`` with every fitter fitted on ``train`` (the open sources)."""
    fitted = [(f, f.fit([i for i in train if fitting._applies(f, i)])) for f in fitters]
    return {i.id: fitting._apply(fitted, i, i.predicted) for i in test}


def _aggregate(items: list[dict], errors: dict[str, float], unanswered=None) -> dict:
    """:func:`summary` without anything that names a row."""
    s = summary(items, errors, unanswered)
    return {k: v for k, v in s.items() if k not in ("worst_id", "worst_pct")}


def sealed_aggregate(open_results: list[dict], sealed_results: list[dict], fitters) -> dict:
    """Aggregate figures of the sealed rows: per quantity fmest's and the baselines' summaries
    (no row ids), the OOM/boundary checks, and per-stack counts without errors."""
    out: dict = {"sources": len({r["source"] for r in sealed_results}),
                 "rows": len(sealed_results)}
    for quantity, bases in (("memory", MEMORY_BASELINES), ("throughput", THROUGHPUT_BASELINES)):
        mine = [r for r in sealed_results if r["kind"] == quantity]
        scored = [r for r in mine if r["status"] == "scored"]
        train = [to_scored(r, quantity) for r in open_results
                 if r["kind"] == quantity and r["status"] == "scored"]
        preds = fit_and_apply(train, [to_scored(r, quantity) for r in scored], fitters)
        err = {r["id"]: pct_error(r["row"], preds[r["id"]], r["measured"]) for r in scored}
        unanswered = sum(r["status"] in ("unsupported", "failed") for r in mine)
        q: dict = {"fmest": _aggregate(scored, err, unanswered), "baselines": {}}
        for b in bases:
            e = {r["id"]: pct_error(r["row"], r["baselines"][b], r["measured"])
                 for r in scored if r["baselines"].get(b)}
            q["baselines"][b] = _aggregate(scored, e)
        q["loses_to"] = [b for b, v in q["baselines"].items()
                         if v["median_abs_pct"] is not None
                         and q["fmest"]["median_abs_pct"] is not None
                         and v["median_abs_pct"] < q["fmest"]["median_abs_pct"]]
        q["suspect"] = sum(r["status"] == "suspect" for r in mine)
        out[quantity] = q
    checks = {}
    for status in ("oom-check", "boundary-check"):
        these = [r for r in sealed_results if r["status"] == status]
        checks[status.split("-")[0]] = {"rows": len(these),
                                        "passed": sum(bool(r["passed"]) for r in these)}
    out["memory"]["checks"] = checks
    per_stack: dict[str, dict] = {}
    for r in sealed_results:
        e = per_stack.setdefault(r["stack"], {"sources": set(), "memory": 0, "throughput": 0,
                                              "checks": 0, "unanswered": 0, "other": 0})
        e["sources"].add(r["source"])
        if r["status"] == "scored" and r["kind"] in ("memory", "throughput"):
            e[r["kind"]] += 1
        elif r["status"] in ("oom-check", "boundary-check"):
            e["checks"] += 1
        elif r["status"] in ("unsupported", "failed"):
            e["unanswered"] += 1
        else:
            e["other"] += 1
    out["per_stack"] = {st: {**e, "sources": len(e["sources"])}
                        for st, e in sorted(per_stack.items())}
    return out


def print_sealed(agg: dict, tag: str = "SEALED", header: Optional[str] = None) -> None:
    """The aggregate lines of ``--sealed`` (nothing that names a row or a source); ``tag`` and
    ``header`` let ``--extra`` print the same lines for its file."""
    print(header or (
        f"fmest on the SEALED part: {agg['sources']} sources, {agg['rows']} rows of "
        "benchmarks/data/measured.csv (aggregate only; fitted constants fitted on the open "
        "sources; run once, at the end of a model change)"))
    for quantity, unit in (("memory", "per-GPU peak, GiB"),
                           ("throughput", "tokens/s, TFLOP/s, MFU or step time")):
        q = agg[quantity]
        print(f"\n== {tag} {quantity.upper()} ({unit}) ==")
        print(f"  {'':44s} {'rows':>5s} {'unans':>5s} {'median|e|':>10s} {'p90|e|':>8s} "
              f"{'<=10%':>6s} {'src-wtd med':>11s}")
        for label, s in [("fmest", q["fmest"])] + [(f"baseline {b} (same rows)", v)
                                                   for b, v in q["baselines"].items()]:
            within = "-" if s["within10_share"] is None else f"{s['within10_share'] * 100:5.0f}%"
            unans = "-" if s.get("unanswered") is None else str(s["unanswered"])
            print(f"  {label:44s} {s['rows']:5d} {unans:>5s} "
                  f"{_fmt(s['median_abs_pct'], '9.1f')} {_fmt(s['p90_abs_pct'], '7.1f')} "
                  f"{within:>6s} {_fmt(s['source_weighted_median_abs_pct'], '10.1f')}")
        if q["loses_to"]:
            print(f"  fmest LOSES to {', '.join(q['loses_to'])} on the {tag.lower()} rows")
        if quantity == "memory":
            c = q["checks"]
            print(f"  checks: oom rows predicted above capacity {c['oom']['passed']}/"
                  f"{c['oom']['rows']}; boundary rows predicted within capacity "
                  f"{c['boundary']['passed']}/{c['boundary']['rows']}")
        if q["suspect"]:
            print(f"  suspect rows kept out of the medians: {q['suspect']}")
    print("\n  per stack (counts only)")
    print(f"    {'stack':20s} {'sources':>7s} {'memory':>7s} {'thruput':>7s} {'checks':>7s} "
          f"{'unans':>6s} {'other':>6s}")
    for st, e in agg["per_stack"].items():
        print(f"    {st[:20]:20s} {e['sources']:7d} {e['memory']:7d} {e['throughput']:7d} "
              f"{e['checks']:7d} {e['unanswered']:6d} {e['other']:6d}")
    if agg.get("per_stack_median"):
        print("\n  per stack median |error| (stacks with >= "
              f"{EXTRA_MIN_STACK_ROWS} scored rows; fmest / best baseline; bias = fmest's "
              "median signed error, + = fmest above the measurement)")
        for quantity, table in agg["per_stack_median"].items():
            for st, (n, med, base, bias) in table.items():
                print(f"    {quantity:10s} {st[:20]:20s} {n:5d} rows  fmest {_fmt(med, '5.1f')}"
                      f"  baseline {_fmt(base, '5.1f')}  bias {bias:+6.1f}%")


# -- an evidence file kept outside the repository (--extra) -----------------------------------
#: a stack's median is printed only over this many scored rows (fewer would come close to
#: naming a row's error)
EXTRA_MIN_STACK_ROWS = 3
EXTRA_REFUSED = ("--rows", "--markdown", "--unsupported", "--fitters", "--sealed")


def load_extra(path: Path) -> list[dict]:
    """Rows of a CSV in ``measured.csv``'s format (its header, any column order) kept outside
    the repository; a missing column is an error, extra columns are ignored."""
    import csv

    with open(measured.csv_path(), newline="", encoding="utf-8") as fh:
        columns = next(csv.reader(fh))
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise SystemExit(f"--extra: {path} lacks the columns {', '.join(missing)} "
                             "(the header of benchmarks/data/measured.csv)")
        return [{c: (r.get(c) or "") for c in columns} for r in reader]


def extra_aggregate(open_results: list[dict], extra_results: list[dict], fitters) -> dict:
    """:func:`sealed_aggregate` of the extra rows, plus per-stack medians (fmest and the best
    baseline, stacks with at least ``EXTRA_MIN_STACK_ROWS`` scored rows) and how many of the
    file's sources also name a source of the evidence set."""
    agg = sealed_aggregate(open_results, extra_results, fitters)
    open_sources = {r["source"] for r in open_results}
    agg["sources_also_open"] = len({r["source"] for r in extra_results} & open_sources)
    per: dict[str, dict] = {}
    for quantity, bases in (("memory", MEMORY_BASELINES), ("throughput", THROUGHPUT_BASELINES)):
        scored = [r for r in extra_results if r["kind"] == quantity and r["status"] == "scored"]
        train = [to_scored(r, quantity) for r in open_results
                 if r["kind"] == quantity and r["status"] == "scored"]
        preds = fit_and_apply(train, [to_scored(r, quantity) for r in scored], fitters)
        table = {}
        for st in sorted({r["stack"] for r in scored}):
            mine = [r for r in scored if r["stack"] == st]
            if len(mine) < EXTRA_MIN_STACK_ROWS:
                continue
            signed = [pct_error(r["row"], preds[r["id"]], r["measured"]) for r in mine]
            med = statistics.median(abs(e) for e in signed)
            base_meds = [statistics.median(abs(pct_error(r["row"], r["baselines"][b],
                                                         r["measured"]))
                                           for r in mine if r["baselines"].get(b))
                         for b in bases if any(r["baselines"].get(b) for r in mine)]
            table[st] = (len(mine), round(med, 1),
                         round(min(base_meds), 1) if base_meds else None,
                         round(statistics.median(signed), 1))
        per[quantity] = table
    agg["per_stack_median"] = per
    return agg


# -- printing ----------------------------------------------------------------------------------
def _fmt(value, spec="5.1f", suffix="%"):
    return "-" if value is None else f"{value:{spec}}{suffix}"


def print_summary_table(title: str, q: dict) -> None:
    print(f"\n{title}")
    head = (f"  {'':38s} {'rows':>5s} {'unans':>5s} {'median|e|':>10s} {'p90|e|':>8s} "
            f"{'<=10%':>6s} {'src-wtd med':>11s}  worst row (error)")
    print(head)
    lines = [("fmest in-sample", q["in_sample"]), ("fmest LOSO", q["loso"]),
             ("fmest unseen (LOSO, non-dev sources)", q["unseen"])]
    lines += [(f"baseline {b}", s) for b, s in q["baselines"].items()]
    for label, s in lines:
        within = "-" if s["within10_share"] is None else f"{s['within10_share'] * 100:5.0f}%"
        worst = "-" if s["worst_id"] is None else f"{s['worst_id']} ({s['worst_pct']:+.0f}%)"
        unans = "-" if s.get("unanswered") is None else str(s["unanswered"])
        print(f"  {label:38s} {s['rows']:5d} {unans:>5s} "
              f"{_fmt(s['median_abs_pct'], '9.1f')} {_fmt(s['p90_abs_pct'], '7.1f')} "
              f"{within:>6s} {_fmt(s['source_weighted_median_abs_pct'], '10.1f')}  {worst}")


def print_breakdown(title: str, table: dict, bases) -> None:
    print(f"\n  {title} (LOSO median |error|, %)")
    cols = "".join(f" {b[:22]:>22s}" for b in bases)
    print(f"    {'group':40s} {'rows':>5s} {'fmest':>7s} {'<=10%':>6s}{cols}  verdict")
    for g, e in table.items():
        bcols = "".join(f" {_fmt(e['baselines'][b], '21.1f')}" for b in bases)
        within = "-" if e["within10_share"] is None else f"{e['within10_share'] * 100:5.0f}%"
        verdict = ("fmest LOSES to " + ", ".join(e["loses_to"])) if e["loses_to"] else ""
        print(f"    {g[:40]:40s} {e['rows']:5d} {_fmt(e['median_abs_pct'], '6.1f')} "
              f"{within:>6s}{bcols}  {verdict}")


def print_report(results: list[dict], analysis: dict, seconds: float, rows_total: int,
                 sources_total: int, show_rows: bool, sealed_line: str = "") -> None:
    print(f"fmest accuracy on the evidence set: {rows_total} rows from {sources_total} sources "
          f"(benchmarks/data/measured.csv); error = fmest / measured - 1")
    if sealed_line:
        print(sealed_line)
    if show_rows:
        print(f"\n{'id':60s} {'stack':13s} {'unit':24s} {'measured':>10s} {'fmest':>10s} "
              f"{'error':>8s}  status")
        for r in results:
            err = ""
            if r["status"] in ("scored", "suspect"):
                err = f"{pct_error(r['row'], r['predicted'], r['measured']):+7.1f}%"
            elif r["status"] in ("oom-check", "boundary-check"):
                err = "PASS" if r["passed"] else "FAIL"
            meas = "-" if r["measured"] is None else f"{r['measured']:10.4g}"
            pred = "-" if r["predicted"] is None else f"{r['predicted']:10.4g}"
            print(f"{r['id'][:60]:60s} {r['stack'][:13]:13s} {r['unit'][:24]:24s} {meas:>10s} "
                  f"{pred:>10s} {err:>8s}  {r['status']} {r['reason'][:80]}")
    for quantity, unit, bases in (("memory", "per-GPU peak, GiB", MEMORY_BASELINES),
                                  ("throughput", "tokens/s, TFLOP/s, MFU or step time",
                                   THROUGHPUT_BASELINES)):
        q = analysis[quantity]
        print_summary_table(f"== {quantity.upper()} ({unit}) ==", q)
        for name in ("per_stack", "per_gpu_family", "per_feature", "per_counter_or_unit") + \
                (("per_source",) if show_rows else ()):
            print_breakdown(name.replace("_", " "), q[name], bases)
        if quantity == "memory":
            c = q["checks"]
            print(f"\n  checks: oom rows predicted above capacity {c['oom']['passed']}/"
                  f"{c['oom']['rows']}; boundary rows predicted within capacity "
                  f"{c['boundary']['passed']}/{c['boundary']['rows']}")
        if q.get("implausible"):
            print(f"  rows whose measured rate implies more than the dense peak "
                  f"(kept in; mark them suspect in their part if the source confirms): "
                  f"{', '.join(q['implausible'])}")
        if q["suspect"]:
            print(f"  suspect rows kept out of the medians: {', '.join(q['suspect'])}")
    unsupported = [r for r in results if r["status"] in ("unsupported", "failed")]
    print(f"\nunanswered rows: {len(unsupported)} (python benchmarks/accuracy.py --unsupported "
          "lists them with the missing feature)")
    print(FOOTER)
    print(f"run time: {seconds:.1f} s")


def unsupported_report(results: list[dict], sealed_line: str = "") -> None:
    """The to-do list: missing features with their row counts, then every row."""
    if sealed_line:
        print(sealed_line)
    rows = [r for r in results if r["status"] in ("unsupported", "failed", "not-scored")]
    reasons: dict[str, list[str]] = {}
    for r in rows:
        key = r["reason"]
        reasons.setdefault(f"{r['status']}: {key[:120]}", []).append(r["id"])
    print(f"{len(rows)} rows fmest does not answer, by missing feature:")
    for reason, ids in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
        print(f"  {len(ids):4d}  {reason}")
    print()
    for r in rows:
        print(f"{r['id']:70s} {r['status']:12s} {r['reason']}")


def json_report(analysis: dict, rows_total: int, sources_total: int, seconds: float,
                sealed: Optional[dict] = None) -> dict:
    """``rows``/``sources``: the open part; ``sealed``: the sources and rows kept out."""
    out = {"rows": rows_total, "sources": sources_total, "seconds": round(seconds, 1),
           "sealed": sealed or {"sources": 0, "rows": 0}}
    for quantity in ("memory", "throughput"):
        q = analysis[quantity]
        out[quantity] = {k: q[k] for k in ("in_sample", "loso", "unseen", "baselines",
                                           "per_stack", "per_gpu_family", "per_feature",
                                           "per_source", "per_counter_or_unit",
                                           "checks", "suspect", "implausible")}
    return out


def markdown_summary(analysis: dict, rows_total: int, sources_total: int,
                     sealed: Optional[dict] = None) -> str:
    """The README's accuracy table (LOSO figures), for ``--markdown``."""
    kept = "" if not sealed or not sealed["sources"] else (
        f"; {sealed['rows']} rows from {sealed['sources']} more sources are sealed "
        "(`benchmarks/data/sealed_sources.json`, scored in aggregate only)")
    lines = [f"Leave-one-source-out on {rows_total} published rows from {sources_total} sources "
             f"(`benchmarks/data/measured.csv`), measured {time.strftime('%Y-%m-%d')}{kept}:",
             "",
             "| | rows answered (unanswered) | median abs. error | p90 | within 10 % | "
             "source-weighted median | unseen sources: median | best naive baseline: median |",
             "|---|---|---|---|---|---|---|---|"]
    for quantity, label in (("memory", "per-GPU peak memory"),
                            ("throughput", "throughput / step time")):
        q = analysis[quantity]
        lo, un = q["loso"], q["unseen"]
        best = min(((b, v["median_abs_pct"]) for b, v in q["baselines"].items()
                    if v["median_abs_pct"] is not None), key=lambda p: p[1], default=None)
        base = f"{best[1]:.1f} % ({best[0]})" if best else "-"
        within = None if lo["within10_share"] is None else lo["within10_share"] * 100
        lines.append(f"| {label} | {lo['rows']} ({lo['unanswered']}) | "
                     f"{_fmt(lo['median_abs_pct'], '.1f', ' %')} | "
                     f"{_fmt(lo['p90_abs_pct'], '.1f', ' %')} | "
                     f"{_fmt(within, '.0f', ' %')} | "
                     f"{_fmt(lo['source_weighted_median_abs_pct'], '.1f', ' %')} | "
                     f"{_fmt(un['median_abs_pct'], '.1f', ' %')} | {base} |")
    losing = [f"{quantity} on {name} ({', '.join(e['loses_to'])})"
              for quantity in ("memory", "throughput")
              for table in ("per_stack", "per_feature")
              for name, e in analysis[quantity][table].items() if e["loses_to"]]
    if losing:
        lines += ["", "Where a naive baseline beats fmest: " + "; ".join(losing) + "."]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--rows", action="store_true", help="print every row")
    ap.add_argument("--markdown", action="store_true",
                    help="print the README's accuracy table (LOSO figures)")
    ap.add_argument("--unsupported", action="store_true",
                    help="list the rows fmest cannot express, with the missing feature")
    ap.add_argument("--fitters", default="",
                    help="comma-separated fitters to refit per fold: "
                         + ", ".join(fitting.AVAILABLE))
    ap.add_argument("--sealed", action="store_true",
                    help="score the sealed sources, aggregate only (once per model change)")
    ap.add_argument("--extra", metavar="CSV", default="",
                    help="score the rows of CSV (measured.csv's format, kept outside the repo), "
                         "aggregate lines only")
    args = ap.parse_args(argv)
    if args.extra:
        given = [f for f, on in zip(EXTRA_REFUSED, (args.rows, args.markdown, args.unsupported,
                                                    bool(args.fitters), args.sealed),
                                    strict=True) if on]
        if given:
            ap.error(f"--extra prints aggregate lines only; it cannot be combined with "
                     f"{', '.join(given)} (accepted with --extra: --json)")
        return run_extra(Path(args.extra), args.json)
    if args.sealed:
        given = [f for f, on in zip(SEALED_REFUSED, (args.rows, args.markdown, args.unsupported,
                                                     bool(args.fitters)), strict=True) if on]
        if given:
            ap.error(f"--sealed prints aggregate lines only, with the default fitters; it "
                     f"cannot be combined with {', '.join(given)} (accepted with --sealed: "
                     "--json)")
    started = time.time()
    all_rows = measured.load_rows()
    sealed = set(sealed_draw.load())
    rows, sealed_rows = split_sealed(all_rows, sealed)
    sealed_line = sealed_header(sealed_rows)
    sealed_info = {"sources": len({r["source"] for r in sealed_rows}), "rows": len(sealed_rows)}
    results = evaluate(rows, progress=True)
    if args.sealed:
        sealed_results = evaluate(sealed_rows, progress=True)
        agg = sealed_aggregate(results, sealed_results, list(fitting.FITTERS))
        # the sealed sources of a family with no open source: new to the model in the sense
        # the held-out files are (benchmarks/source_families.py); the others have open siblings
        open_families = {family(r["source"]) for r in rows}
        new = [r for r in sealed_results if family(r["source"]) not in open_families]
        agg_new = sealed_aggregate(results, new, list(fitting.FITTERS)) if new else None
        if args.json:
            print(json.dumps({**agg, "new_families": agg_new}))
        else:
            print_sealed(agg)
            if agg_new is not None:
                print()
                print_sealed(agg_new, tag="SEALED NEW-FAMILY", header=(
                    f"fmest on the sealed sources of families with no open source "
                    f"(benchmarks/source_families.py): {agg_new['sources']} of "
                    f"{agg['sources']} sealed sources, {agg_new['rows']} rows (the other "
                    "sealed sources have open siblings: their figures above are in-family)"))
        return 0
    if args.unsupported:
        unsupported_report(results, sealed_line)
        return 0
    fitters = list(fitting.FITTERS)
    for name in filter(None, args.fitters.split(",")):
        if name not in fitting.AVAILABLE:
            ap.error(f"--fitters: unknown {name!r}; accepted: {', '.join(fitting.AVAILABLE)}")
        fitters.append(fitting.AVAILABLE[name]())
    analysis = analyse(results, fitters)
    seconds = time.time() - started
    sources = len({r["source"] for r in rows})
    if args.json:
        print(json.dumps(json_report(analysis, len(rows), sources, seconds, sealed_info)))
        return 0
    if args.markdown:
        print(markdown_summary(analysis, len(rows), sources, sealed_info))
        return 0
    print_report(results, analysis, seconds, len(rows), sources, args.rows, sealed_line)
    return 0

def run_extra(path: Path, as_json: bool) -> int:
    """``--extra CSV``: fitted constants fitted on the open sources (as for ``--sealed``), the
    file's rows scored, aggregate lines only (no row, no row id, no per-source figure)."""
    extra_rows = load_extra(path)
    open_rows, _ = split_sealed(measured.load_rows(), set(sealed_draw.load()))
    agg = extra_aggregate(evaluate(open_rows, progress=False),
                          evaluate(extra_rows, progress=False), list(fitting.FITTERS))
    if as_json:
        print(json.dumps(agg))
        return 0
    print_sealed(agg, tag="EXTRA", header=(
        f"fmest on an EXTRA evidence file: {agg['sources']} sources, {agg['rows']} rows of "
        f"{path.name} (aggregate only; fitted constants fitted on the open sources of "
        f"benchmarks/data/measured.csv; sources also named there: {agg['sources_also_open']})"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
