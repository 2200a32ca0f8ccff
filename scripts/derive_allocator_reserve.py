"""Derive the caching-allocator reserve table from traces of the real code (fmest issue 21).

Each row: one fake-tensor trace (2 training steps of the transformers model on CPU, the
torch_runner tracer) whose allocation events are replayed through :mod:`fmest.allocator`
(the rules of PyTorch's c10/cuda/CUDACachingAllocator.cpp) with the default allocator
settings and with ``expandable_segments:True``. Written to core/fmest/data/allocator_reserve.json
with the setting, both peaks, their ratio, the command, the torch/transformers versions and
the allocator source commit; ``fmest.physics.device_terms`` reads the median ratio from it.

    python scripts/derive_allocator_reserve.py            # the whole grid (~10-20 min, 2 CPUs)
    python scripts/derive_allocator_reserve.py --only qwen2.5-0.5b --out /tmp/x.json
    python scripts/derive_allocator_reserve.py --floor    # the irreducible reserve (issue 22)

``--floor`` replays the same grid with :func:`fmest.allocator.measure_floor` (what a full
release cannot give back: at the allocated peak, at the next miss, and the least no-OOM
capacity) into the table's ``floor`` section; its rule is a Theil-Sen line (median pairwise
slope clamped at 0, median intercept), the method of the reserve's rule (``theil_sen``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "core" / "fmest" / "data" / "allocator_reserve.json"
ALLOCATOR_SOURCE = ("pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp @ "
                    "eb42ad6eca0ce61e7c581212b4bf32f991425571")

#: (preset, technique, micro batch, seq len, activation checkpointing); bf16 weights, AdamW
GRID: list[tuple[str, str, int, int, str]] = [
    ("qwen2.5-0.5b", "full", 1, 512, "none"),
    ("qwen2.5-0.5b", "full", 4, 1024, "none"),
    ("qwen2.5-0.5b", "full", 4, 1024, "full"),
    ("qwen2.5-0.5b", "lora", 2, 1024, "none"),
    ("smollm2-360m", "full", 8, 512, "none"),
    ("smollm2-1.7b", "full", 2, 1024, "none"),
    ("smollm2-1.7b", "lora", 4, 2048, "full"),
    ("llama-3.2-1b", "full", 2, 2048, "none"),
    ("llama-3.2-1b", "full", 2, 2048, "full"),
    ("llama-3.2-3b", "lora", 1, 2048, "none"),
    ("llama-3.2-3b", "full", 1, 1024, "full"),
    ("qwen2.5-7b", "lora", 1, 1024, "none"),
    ("llama-3.1-8b", "full", 1, 1024, "full"),
    ("llama-3.1-8b", "lora", 2, 2048, "full"),
]
#: fmest issue 21: the spread of the largest transient block (larger batch x length, the
#: 128k / 152k vocabularies) for the transient rule; traced into the reserve table with GRID
#: (the floor section keeps GRID)
TRANSIENT_GRID: list[tuple[str, str, int, int, str]] = [
    ("llama-3.2-1b", "full", 4, 2048, "full"),
    ("qwen2.5-0.5b", "full", 8, 2048, "full"),
    ("llama-3.2-1b", "full", 1, 2048, "full"),
    ("llama-3.2-1b", "full", 4, 2048, "none"),
    ("smollm2-360m", "full", 16, 1024, "full"),
    ("qwen2.5-0.5b", "full", 2, 4096, "none"),
    ("qwen2.5-0.5b", "lora", 8, 2048, "full"),
    ("llama-3.2-1b", "lora", 4, 4096, "full"),
    ("llama-3.2-3b", "lora", 4, 2048, "full"),
    ("smollm2-1.7b", "full", 4, 2048, "full"),
    ("qwen2.5-7b", "lora", 2, 4096, "full"),
    ("llama-3.2-3b", "full", 2, 2048, "full"),
    ("smollm2-360m", "lora", 8, 2048, "none"),
    ("llama-3.2-1b", "full", 1, 4096, "none"),
    ("qwen2.5-0.5b", "full", 1, 8192, "full"),
]
#: fmest issue 21 (re-derived): the per-layer blocks grow with batch x length x model width;
#: 7B-70B settings that span them (the 70B LoRA and Qwen2-7B batch-48 replays that showed
#: the growth, and mid-size steps between), traced into the table with GRID + TRANSIENT_GRID
LAYER_GRID: list[tuple[str, str, int, int, str]] = [
    ("llama-2-70b", "lora", 1, 4096, "full"),
    ("llama-2-70b", "lora", 2, 4096, "full"),
    ("llama-2-70b", "lora", 4, 4096, "full"),
    ("qwen2-7b", "full", 4, 512, "full"),
    ("qwen2-7b", "full", 16, 512, "full"),
    ("qwen2-7b", "full", 32, 512, "full"),
    ("qwen2-7b", "full", 48, 512, "full"),
    ("mistral-7b", "full", 4, 2048, "full"),
    ("mistral-7b", "full", 8, 2048, "full"),
    ("mistral-7b", "lora", 8, 1024, "none"),
    ("llama-2-13b", "lora", 4, 2048, "full"),
    ("llama-2-13b", "full", 4, 2048, "full"),
    ("llama-2-7b", "full", 8, 1024, "full"),
    ("llama-2-7b", "lora", 16, 512, "full"),
    ("llama-3.1-8b", "lora", 4, 4096, "full"),
    ("llama-3.1-8b", "full", 8, 1024, "full"),
    ("qwen2.5-14b", "lora", 4, 2048, "full"),
    ("qwen2.5-7b", "full", 8, 1024, "full"),
]


def _run_spec(job_dict: dict[str, Any]) -> Any:
    """The torch runner's run spec of a job (one GPU, the fake device), as the engine resolves
    the job."""
    import fmest
    from fmest.convert import job_from_dict
    from fmest.transforms import transforms_of
    from fmest_torch_runner.runner import run_spec_from_job

    engine = fmest._engine(None)  # type: ignore[attr-defined]
    job = job_from_dict(job_dict)
    ctx = engine.context(job)
    return run_spec_from_job(job, ctx.model, optimizer_name=ctx.optimizer.name, device="fake",
                             sharding=ctx.sharding, fsdp_world_size=1,
                             precision=transforms_of(job, ctx).precision)


def trace_events(job_dict: dict[str, Any]) -> tuple[list[tuple], int, float, Any]:
    """(allocation events, tracker peak bytes, trace seconds, run spec) of one fake trace."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from fmest_torch_runner.fake_trace import patched_mask_helper
    from fmest_torch_runner.model_builder import build_model
    from fmest_torch_runner.steps import train_steps
    from fmest_torch_runner.tracker import StorageTracker

    spec = _run_spec(job_dict)
    t0 = time.perf_counter()
    with patched_mask_helper():
        fake_mode = FakeTensorMode()
        model = build_model(spec, "fake", fake_mode)
        with fake_mode:
            tracker = StorageTracker(round_bytes=512)
            with tracker:
                train_steps(model, spec, "fake", tracker)
    return list(tracker.events), tracker.overall.total, time.perf_counter() - t0, spec


def _setting_job(preset: str, technique: str, batch: int, seq: int, ac: str) -> dict[str, Any]:
    """The fmest job of one traced setting (bf16, one GPU)."""
    return {"model": preset, "training": {"dtype": "bf16", "technique": technique,
                                          "micro_batch_size": batch, "seq_len": seq,
                                          "activation_checkpointing": ac}}


def transient_block_of(preset: str, batch: int, seq: int) -> float:
    """The analytic largest transient block of a traced setting
    (``fmest.physics.device_terms.transient_block_bytes``: the fp32 logits transformers'
    loss upcasts, tokens x vocab x 4 B; one GPU), the transient rule's abscissa."""
    import fmest
    from fmest.physics.device_terms import transient_block_bytes

    engine = fmest._engine(None)  # type: ignore[attr-defined]
    job = engine.context(fmest.to_job(_setting_job(preset, "full", batch, seq, "none")))
    return transient_block_bytes(batch * seq, job.model.vocab_size)


def layer_block_of(preset: str, technique: str, batch: int, seq: int, ac: str) -> float:
    """The analytic per-layer block of a traced setting: the bytes one layer frees in
    backward, its saved tensors plus its backward working set (memory_theory
    ``Activations.saved_layer + work_layer``, ``StagePeak.layer_block``: under recomputation
    the layer's re-allocated activations), the two-term rule's second abscissa."""
    import fmest
    from fmest.convert import job_from_dict
    from fmest_memory_theory import estimator as E

    engine = fmest._engine(None)  # type: ignore[attr-defined]
    job = job_from_dict(_setting_job(preset, technique, batch, seq, ac))
    setup = E.job_setup(job, engine.context(job))
    stages = E.pipeline_stages(setup.model.num_layers, setup.layout.pp,
                               setup.parallelism.pp_schedule, setup.training.grad_accum_steps,
                               setup.parallelism.pp_virtual_stages)
    peak = max((E.stage_peak(setup, st) for st in stages), key=lambda pk: pk.allocated)
    return float(peak.layer_block)


def _setting_fields(preset: str, technique: str, batch: int, seq: int, ac: str, spec: Any,
                    conf: str, events: list) -> dict[str, Any]:
    """The columns every table row of a traced setting starts with."""
    return {"model": preset, "technique": technique, "micro_batch_size": batch, "seq_len": seq,
            "activation_checkpointing": ac, "precision": spec.precision,
            "alloc_conf": conf or "default", "events": len(events),
            "transient_block_bytes": transient_block_of(preset, batch, seq),
            "layer_block_bytes": layer_block_of(preset, technique, batch, seq, ac)}


def row_for(preset: str, technique: str, batch: int, seq: int, ac: str) -> list[dict]:
    from fmest.allocator import AllocatorConfig, replay

    events, tracker_peak, secs, spec = trace_events(_setting_job(preset, technique, batch, seq,
                                                                  ac))
    rows = []
    for conf in ("", "expandable_segments:True"):
        t0 = time.perf_counter()
        res = replay(events, AllocatorConfig.parse(conf))
        replay_s = time.perf_counter() - t0
        rows.append({
            **_setting_fields(preset, technique, batch, seq, ac, spec, conf, events),
            "max_memory_allocated": res.max_memory_allocated,
            "tracker_peak_bytes": tracker_peak,
            "max_memory_reserved": res.max_memory_reserved,
            "ratio": round(res.reserve_ratio, 5),
            # over the tensor peak (storages rounded to 512 B: what the traced and analytic
            # answers call allocated); torch's allocated_bytes also counts unsplit remainders
            "reserved_over_tensor_peak": round(res.max_memory_reserved / tracker_peak, 5),
            "reserve_bytes": res.max_memory_reserved - res.max_memory_allocated,
            "trace_seconds": round(secs, 1), "replay_seconds": round(replay_s, 2),
            "command": (f"python scripts/derive_allocator_reserve.py --only {preset} "
                        f"--technique {technique} --batch {batch} --seq {seq} --ac {ac}"),
        })
        print(f"{preset:14s} {technique:4s} b{batch} s{seq} ac={ac:4s} "
              f"{conf or 'default':25s} alloc {res.max_memory_allocated / 2**30:7.2f} GiB "
              f"reserved {res.max_memory_reserved / 2**30:7.2f} GiB ratio "
              f"{res.reserve_ratio:.4f} ({len(events)} events, trace {secs:.0f} s, replay "
              f"{replay_s:.2f} s)", flush=True)
    return rows


#: variable-length grid (fmest issue 21): (preset, technique, micro batch, cap, AC); bf16, AdamW.
#: Small models only (the fake trace of a micro-batch takes ~5 s at 360M parameters and 1k tokens on 2 CPUs); the
#: growth is a property of the transient (activation) blocks, which the ratio below normalizes.
VARLEN_GRID: list[tuple[str, str, int, int, str]] = [
    ("smollm2-360m", "lora", 1, 1024, "full"),
    ("smollm2-360m", "lora", 1, 2048, "full"),
    ("smollm2-360m", "full", 2, 1024, "none"),
    ("qwen2.5-0.5b", "lora", 1, 2048, "full"),
    ("qwen2.5-0.5b", "full", 1, 1024, "none"),
]
#: micro-batches replayed per variable-length row, their lengths drawn from
#: uniform(VARLEN_LOW x cap, cap) with random.Random(VARLEN_SEED); the last one is the cap
#: (the longest sample of a real run is met sooner or later: ms-swift's benchmark runs 1000
#: samples, scripts/benchmark/test_memory_time/run_single.py train_dataset_sample = 1000)
VARLEN_STEPS = 12
VARLEN_LOW = 0.05
VARLEN_SEED = 20261127
#: an optimizer step after every VARLEN_ACCUM micro-batches (ms-swift benchmark default
#: gradient_accumulation_steps 16 is longer than the replay; 4 keeps optimizer steps in it)
VARLEN_ACCUM = 4


def varlen_lengths(cap: int, steps: int = VARLEN_STEPS, low: float = VARLEN_LOW,
                   seed: int = VARLEN_SEED) -> list[int]:
    """Padded lengths of the replayed micro-batches: uniform(low x cap, cap), rounded to 8
    tokens, the cap placed last (the worst order: every cached segment of the shorter steps is
    still held when the longest step needs its own)."""
    import random

    rng = random.Random(seed)
    out = [max(8, int(rng.uniform(low * cap, cap)) // 8 * 8) for _ in range(steps - 1)]
    return out + [cap]


def trace_varlen_events(job_dict: dict[str, Any], lengths: list[int],
                        marks: list[tuple[int, int]] | None = None, accum: int = 0
                        ) -> tuple[list[tuple], int, int, float]:
    """(events, tracker peak, transient bytes of the last micro-batch (its forward/backward
    peak over what is live as it starts), seconds) of one fake
    trace running one micro-batch per entry of ``lengths`` (the batch padded to that length, as
    a pad-to-longest collator does), an optimizer step after every ``accum`` (default
    ``VARLEN_ACCUM``). ``marks`` (when given) receives each micro-batch's (first, end) event
    index: the events whose sizes follow its length (the first one's include the setup)."""
    import attrs
    from torch._subclasses.fake_tensor import FakeTensorMode

    from fmest_torch_runner.fake_trace import patched_mask_helper
    from fmest_torch_runner.model_builder import build_model
    from fmest_torch_runner.optimizer import optimizer_step
    from fmest_torch_runner.steps import make_batch, prepare_steps
    from fmest_torch_runner.tracker import StorageTracker

    spec = _run_spec(job_dict)
    accum = accum or VARLEN_ACCUM
    t0 = time.perf_counter()
    with patched_mask_helper():
        fake_mode = FakeTensorMode()
        model = build_model(spec, "fake", fake_mode)
        with fake_mode:
            tracker = StorageTracker(round_bytes=512)
            with tracker:
                first = len(tracker.events)
                state = prepare_steps(model, attrs.evolve(spec, seq_len=lengths[0]), "fake",
                                      tracker)
                for i, n in enumerate(lengths):
                    if i:
                        first = len(tracker.events)
                    inputs = (state.inputs if i == 0 else
                              make_batch(model, attrs.evolve(spec, seq_len=n), "cpu"))
                    before = tracker.total
                    tracker.phase(f"m{i}_forward", "forward")
                    with state.amp:
                        loss = model(**inputs, use_cache=False).loss
                    tracker.end_phase()
                    tracker.phase(f"m{i}_backward", "backward")
                    loss.backward()
                    del loss, inputs
                    tracker.end_phase()
                    if marks is not None:
                        marks.append((first, len(tracker.events)))
                    if (i + 1) % accum == 0 or i == len(lengths) - 1:
                        tracker.phase(f"m{i}_optimizer", "optimizer")
                        optimizer_step(state.params, state.masters, state.optimizer, tracker)
                        tracker.end_phase()
                    if i == 0:
                        state.inputs.clear()
    last = len(lengths) - 1
    step_peak = max(tracker.windows[f"m{last}_{k}"].total for k in ("forward", "backward"))
    return (list(tracker.events), tracker.overall.total, step_peak - before,
            time.perf_counter() - t0)


#: the padded-length grid (issue 20): traced settings (LoRA, as the ms-swift benchmark rows;
#: with and without full activation checkpointing), replayed over length distributions
PADDED_TRACES: list[tuple[str, str, int, int, str]] = [
    ("smollm2-360m", "lora", 1, 1024, "full"),
    ("smollm2-360m", "lora", 1, 1024, "none"),
]
#: micro-batches per replay and the optimizer step period (2 steps and one more micro-batch)
PADDED_STEPS = 9
PADDED_ACCUM = 4
#: the grid: mean sample length over the cap, coefficient of variation (sd / mean) of a
#: lognormal length distribution, what happens to a sample over the cap (``truncate``: cut to
#: the cap, HF/TRL/LLaMA-Factory; ``delete``: dropped, ms-swift 1.x ``truncation_strategy=
#: 'delete'``, swift/llm/utils/template.py @ 46922151), samples per micro-batch
PADDED_MEAN_OVER_CAP = (0.125, 0.25, 0.5, 1.0, 2.0)
PADDED_CV = (0.3, 0.6, 1.0)
PADDED_TRUNCATION = ("truncate", "delete")
PADDED_BATCH = (1, 4)
PADDED_SEEDS = 16
PADDED_SEED = 20261127


def padded_templates(job_dict: dict[str, Any], cap: int) -> tuple[list[tuple], list[list[int]],
                                                                   list[tuple[int, int]], int]:
    """Three traces of ``PADDED_STEPS`` micro-batches at fixed lengths cap/4, cap/2 and cap
    (identical event order; the sizes differ): (events at the cap, each event's size at the
    three lengths, the micro-batch marks, transient bytes of one micro-batch at the cap)."""
    lens = (cap // 4, cap // 2, cap)
    runs = []
    for n in lens:
        marks: list[tuple[int, int]] = []
        ev, _, transient, secs = trace_varlen_events(job_dict, [n] * PADDED_STEPS, marks,
                                                     PADDED_ACCUM)
        print(f"  traced {PADDED_STEPS} x {n} tokens: {len(ev)} events ({secs:.0f} s)",
              flush=True)
        runs.append((ev, marks, transient))
    base, marks, transient = runs[2]

    def by_key(ev: list[tuple]) -> dict[tuple, int]:
        # the mallocs come in the same order with the same handles at every length; a free's
        # place can move (storages released by the garbage collector), so sizes are matched
        # by (handle, nth malloc of it), not by position
        seen: dict[object, int] = {}
        out: dict[tuple, int] = {}
        for e in ev:
            if e[0] == "m":
                k = seen[e[1]] = seen.get(e[1], -1) + 1
                out[(e[1], k)] = int(e[2])
        return out

    keyed = [by_key(ev) for ev, _, _ in runs]
    if any(k.keys() != keyed[2].keys() for k in keyed[:2]):
        raise RuntimeError("the traces at different lengths differ in their allocations")
    seen: dict[object, int] = {}
    sizes: list[list[int]] = [[], [], []]
    for e in base:
        key = None
        if e[0] == "m":
            key = (e[1], seen.setdefault(e[1], -1) + 1)
            seen[e[1]] = key[1]
        for t in range(3):
            sizes[t].append(keyed[t][key] if key is not None else 0)
    return base, sizes, marks, transient


def size_at(s: tuple[int, int, int], x: tuple[int, int, int], n: float) -> int:
    """An allocation's size at length ``n``: the quadratic through its sizes at the traced
    lengths ``x`` (attention scores may grow as n^2; the rest is affine), rounded to 512 B."""
    (x0, x1, x2), (y0, y1, y2) = x, s
    v = (y0 * (n - x1) * (n - x2) / ((x0 - x1) * (x0 - x2))
         + y1 * (n - x0) * (n - x2) / ((x1 - x0) * (x1 - x2))
         + y2 * (n - x0) * (n - x1) / ((x2 - x0) * (x2 - x1)))
    return max(512, int(-(-v // 512)) * 512)


def synth_events(base: list[tuple], sizes: list[list[int]], marks: list[tuple[int, int]],
                 cap: int, tokens: list[float]) -> list[tuple]:
    """The event stream of micro-batch i run at ``tokens[i]`` tokens (samples x padded
    length; the activations are affine in tokens at a fixed batch, quadratic in the length
    only through attention scores, whose share is checked by ``size_at``'s fit)."""
    x = (cap // 4, cap // 2, cap)
    owner = [-1] * len(base)
    for i, (a, b) in enumerate(marks):
        for j in range(a, b):
            owner[j] = i
    out = []
    for j, e in enumerate(base):
        i = owner[j]
        if e[0] == "m" and i >= 0 and tokens[i] != cap:
            out.append(("m", e[1], size_at((sizes[0][j], sizes[1][j], sizes[2][j]), x,
                                           tokens[i])))
        else:
            out.append(e)
    return out


def padded_lengths(rng: Any, cap: int, mean_over_cap: float, cv: float, truncation: str,
                   batch: int, steps: int) -> list[int]:
    """Padded lengths of ``steps`` micro-batches: each the longest of ``batch`` samples drawn
    from a lognormal of mean ``mean_over_cap x cap`` and sd ``cv x mean`` (over the cap: cut to
    it, or redrawn for ``delete``), at least 8 tokens; one micro-batch, at a random place, is
    the cap (the longest batch a run meets: the estimate's peak)."""
    out = [max(_one_length(rng, cap, mean_over_cap, cv, truncation) for _ in range(batch))
           for _ in range(steps)]
    out[rng.randrange(steps)] = cap
    return out


def realized_stats(cap: int, mean_over_cap: float, cv: float, truncation: str,
                   n: int = 20000) -> tuple[float, float]:
    """(mean / cap, sd / mean) of the sample lengths as trained (after the cap: cut or
    dropped) of one grid cell: what a job states as ``workload.avg_seq_len`` and
    ``seq_len_std``, the axes of the lookup."""
    import random

    rng = random.Random(f"{PADDED_SEED}-stats-{mean_over_cap}-{cv}-{truncation}")
    xs = [float(_one_length(rng, cap, mean_over_cap, cv, truncation)) for _ in range(n)]
    mean = statistics.fmean(xs)
    return round(mean / cap, 5), round(statistics.pstdev(xs) / mean, 5)


def _one_length(rng: Any, cap: int, mean_over_cap: float, cv: float, truncation: str) -> int:
    """One sample length of :func:`padded_lengths`' distribution."""
    import math

    s2 = math.log(1.0 + cv * cv)
    mu = math.log(mean_over_cap * cap) - s2 / 2.0
    for _ in range(10000):
        n = rng.lognormvariate(mu, math.sqrt(s2))
        if n <= cap:
            return max(8, int(n))
        if truncation == "truncate":
            return cap
    return cap


def padded_rows_for(preset: str, technique: str, batch: int, cap: int, ac: str) -> list[dict]:
    """The padded-length grid of one traced setting: growth of the replayed reserved peak over
    the same job at the cap every micro-batch, over the transient bytes of one micro-batch at
    the cap, median over ``PADDED_SEEDS`` draws."""
    import random

    from fmest.allocator import replay

    job = {"model": preset, "training": {"dtype": "bf16", "technique": technique,
                                          "micro_batch_size": batch, "seq_len": cap,
                                          "activation_checkpointing": ac}}
    base, sizes, marks, transient = padded_templates(job, cap)
    rows = []
    for b in PADDED_BATCH:
        fixed_tokens = [float(b * cap)] * PADDED_STEPS
        fixed = replay(synth_events(base, sizes, marks, cap, fixed_tokens))
        for m, cv, trunc in itertools.product(PADDED_MEAN_OVER_CAP, PADDED_CV,
                                              PADDED_TRUNCATION):
            growth = []
            rng = random.Random(f"{PADDED_SEED}-{m}-{cv}-{trunc}-{b}")
            for _ in range(PADDED_SEEDS):
                lens = padded_lengths(rng, cap, m, cv, trunc, b, PADDED_STEPS)
                var = replay(synth_events(base, sizes, marks, cap, [float(b * n) for n in lens]))
                growth.append((var.max_memory_reserved - fixed.max_memory_reserved)
                              / (b * transient))
            real_m, real_cv = realized_stats(cap, m, cv, trunc)
            rows.append({"activation_checkpointing": ac, "batch": b, "mean_over_cap": m,
                         "cv": cv, "truncation": trunc, "trained_mean_over_cap": real_m,
                         "trained_cv": real_cv,
                         "growth_over_transient": round(max(0.0, statistics.median(growth)), 4),
                         "min": round(min(growth), 4), "max": round(max(growth), 4)})
            print(f"  {ac:4s} b{b} mean/cap {m:5.3f} cv {cv:.1f} {trunc:8s} growth/transient "
                  f"{rows[-1]['growth_over_transient']:.3f}", flush=True)
    return rows


def main_padded(args: argparse.Namespace) -> int:
    """Trace ``PADDED_TRACES`` and write the grid into the table's ``padded`` section."""
    from importlib.metadata import version

    grid = ([(args.only, args.technique, args.batch, args.seq, args.ac)] if args.only
            else PADDED_TRACES)
    rows: list[dict] = []
    for setting in grid:
        rows.extend(padded_rows_for(*setting))
    table = json.loads(args.out.read_text(encoding="utf-8")) if args.out.exists() else {}
    table["padded"] = {
        "description": "Pad-to-longest batches of varying length (issue 20): growth of the "
                       "replayed max_memory_reserved over the same job padded to the cap every "
                       "micro-batch, over the transient bytes (forward/backward peak over what "
                       f"is live at its start) of one micro-batch at the cap. {PADDED_STEPS} "
                       f"micro-batches, an optimizer step every {PADDED_ACCUM}; event sizes at "
                       "any length from three fake traces at cap/4, cap/2, cap (quadratic "
                       "through them); lengths lognormal(mean, cv), one micro-batch at the cap "
                       f"at a random place; median over {PADDED_SEEDS} draws (seed "
                       f"{PADDED_SEED}). Looked up (nearest mean/cap and cv in log space, then "
                       "truncation, batch and checkpointing mode) by fmest.allocator."
                       "padded_growth_fraction.",
        "generated": time.strftime("%Y-%m-%d"),
        "command": "python scripts/derive_allocator_reserve.py --padded",
        "traces": [list(t) for t in grid],
        "torch": version("torch"), "transformers": version("transformers"),
        "allocator_source": ALLOCATOR_SOURCE,
        "rows": rows,
    }
    args.out.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    return 0


def varlen_row_for(preset: str, technique: str, batch: int, cap: int, ac: str) -> dict:
    """One variable-length row: the replayed reserved peak of ``VARLEN_STEPS`` micro-batches of
    varying length against the same job at a fixed length (the cap, every micro-batch)."""
    from fmest.allocator import replay

    job = {"model": preset, "training": {"dtype": "bf16", "technique": technique,
                                          "micro_batch_size": batch, "seq_len": cap,
                                          "activation_checkpointing": ac}}
    lengths = varlen_lengths(cap)
    ev_var, peak_var, _, secs_var = trace_varlen_events(job, lengths)
    # the fixed-length reserve is steady after the first optimizer step (the table's fixed rows
    # trace 2 steps): VARLEN_ACCUM micro-batches, the step, one more micro-batch
    ev_fix, peak_fix, transient, secs_fix = trace_varlen_events(job, [cap] * (VARLEN_ACCUM + 1))
    var, fix = replay(ev_var), replay(ev_fix)
    row = {
        "model": preset, "technique": technique, "micro_batch_size": batch, "seq_len_cap": cap,
        "activation_checkpointing": ac, "lengths": lengths,
        "tracker_peak_fixed": peak_fix, "tracker_peak_varlen": peak_var,
        "transient_bytes": transient,
        "reserved_fixed": fix.max_memory_reserved, "reserved_varlen": var.max_memory_reserved,
        "growth_bytes": var.max_memory_reserved - fix.max_memory_reserved,
        "growth_over_transient": round((var.max_memory_reserved - fix.max_memory_reserved)
                                       / max(1, transient), 4),
        "reserved_varlen_over_tensor_peak": round(var.max_memory_reserved / peak_fix, 5),
        "reserved_fixed_over_tensor_peak": round(fix.max_memory_reserved / peak_fix, 5),
        "trace_seconds": round(secs_var + secs_fix, 1),
        "command": (f"python scripts/derive_allocator_reserve.py --varlen --only {preset} "
                    f"--technique {technique} --batch {batch} --seq {cap} --ac {ac}"),
    }
    print(f"{preset:14s} {technique:4s} b{batch} cap{cap} ac={ac:4s} tensor peak "
          f"{peak_fix / 2**30:6.2f} GiB, transient {transient / 2**30:6.2f} GiB, reserved fixed "
          f"{fix.max_memory_reserved / 2**30:6.2f} varlen {var.max_memory_reserved / 2**30:6.2f}"
          f" GiB, growth/transient {row['growth_over_transient']:.3f} "
          f"({secs_var + secs_fix:.0f} s)", flush=True)
    return row


def theil_sen(rows: list[dict], y_key: str = "", x_key: str = "tracker_peak_bytes"
              ) -> tuple[float, float]:
    """(intercept bytes, slope) of reserve bytes over the tensor peak (``x_key``: another
    abscissa, e.g. ``transient_block_bytes``): the median of pairwise
    slopes, then the median intercept (robust to the few fragmentation-heavy rows).
    ``y_key``: a row field holding the bytes to fit (default: reserved peak - tensor peak)."""
    pts = [(r[x_key],
            r[y_key] if y_key else r["max_memory_reserved"] - r["tracker_peak_bytes"])
           for r in rows]
    slopes = [(y2 - y1) / (x2 - x1) for (x1, y1), (x2, y2) in itertools.combinations(pts, 2)
              if x2 != x1]
    slope = statistics.median(slopes) if slopes else 0.0
    # a negative slope has no physical reading (the allocator cannot hold less reserve for a
    # larger tensor peak): the rule is then the median reserve, a constant
    slope = max(0.0, slope)
    # nor a negative intercept (no reserve below zero)
    return max(0.0, statistics.median([y - slope * x for x, y in pts])), slope


#: the two-term rule's abscissas (fmest issue 21): the logits block and one layer's working set
LAYER_RULE_KEYS = ("transient_block_bytes", "layer_block_bytes")


def lad_fit(rows: list[dict], keys: tuple[str, ...] = LAYER_RULE_KEYS) -> list[float]:
    """(constant, slope per key) of the reserve (reserved peak - tensor peak) over the rows'
    ``keys``: least absolute deviations with every coefficient >= 0 (a linear program; the
    median regression, robust to the few fragmentation-heavy rows like Theil-Sen above, which
    has no unique two-variable form). Negative coefficients have no physical reading."""
    import numpy as np
    from scipy.optimize import linprog  # type: ignore[import-untyped]

    n, k = len(rows), len(keys) + 1
    x = np.array([[1.0] + [float(r[key]) for key in keys] for r in rows])
    y = np.array([float(r["max_memory_reserved"] - r["tracker_peak_bytes"]) for r in rows])
    scale = np.maximum(np.abs(x).max(axis=0), 1.0)   # conditioning: fit in units of each max
    cost = np.r_[np.zeros(k), np.ones(2 * n)]
    a_eq = np.c_[x / scale, np.eye(n), -np.eye(n)]
    res = linprog(cost, A_eq=a_eq, b_eq=y, bounds=[(0, None)] * (k + 2 * n), method="highs")
    return [float(v) for v in res.x[:k] / scale]


def loo_error(rows: list[dict], rule: str) -> tuple[float, float]:
    """Median and max |predicted / replayed reserved - 1| leaving each row out of the fit."""
    errs = []
    for i, r in enumerate(rows):
        rest = rows[:i] + rows[i + 1:]
        a = r["tracker_peak_bytes"]
        if rule == "fraction":
            pred = a * statistics.median([x["reserved_over_tensor_peak"] for x in rest])
        elif rule == "transient":
            c, f = theil_sen(rest, x_key="transient_block_bytes")
            pred = a + c + f * r["transient_block_bytes"]
        elif rule == "layer":
            coef = lad_fit(rest)
            pred = a + coef[0] + sum(s * r[k] for s, k in zip(coef[1:], LAYER_RULE_KEYS, strict=True))
        else:
            c, f = theil_sen(rest)
            pred = a * (1 + f) + c
        errs.append(abs(pred / r["max_memory_reserved"] - 1))
    return round(statistics.median(errs), 4), round(max(errs), 4)


def summarize(rows: list[dict]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for conf, name in (("default", "rule"), ("expandable_segments:True", "rule_expandable")):
        picked = [r for r in rows if r["alloc_conf"] == conf]
        if len(picked) > 2:
            c, f = theil_sen(picked)
            out[name] = {
                "what": f"reserve = constant + fraction x tensor peak, Theil-Sen over the {conf} "
                        "rows; chosen over a pure fraction by the leave-one-out error below",
                "constant_bytes": int(round(c)), "fraction": round(f, 5),
                "loo_constant_plus_fraction": loo_error(picked, "constant+fraction"),
                "loo_fraction_only": loo_error(picked, "fraction")}
            c, f = theil_sen(picked, x_key="transient_block_bytes")
            out[name.replace("rule", "rule_transient")] = {
                "what": "reserve = constant + slope x transient_block_bytes (the analytic "
                        "largest transient block: fp32 logits, tokens x vocab x 4 B), "
                        f"Theil-Sen over the {conf} rows (fmest issue 21); loo_*: median and "
                        "max |predicted / replayed reserved - 1| leaving each trace out",
                "constant_bytes": int(round(c)), "slope": round(f, 5),
                "loo_transient": loo_error(picked, "transient"),
                "loo_tensor_peak_rule": loo_error(picked, "constant+fraction")}
            if all("layer_block_bytes" in r for r in picked):
                c, st, sl = lad_fit(picked)
                out[name.replace("rule", "rule_layer")] = {
                    "what": "reserve = constant + transient_slope x transient_block_bytes + "
                            "layer_slope x layer_block_bytes (the bytes one layer frees in "
                            "backward: memory_theory Activations.saved_layer + work_layer), "
                            "least absolute "
                            f"deviations, coefficients >= 0, over the {conf} rows (fmest issue "
                            "21); loo_*: median and max |predicted / replayed reserved - 1| "
                            "leaving each trace out",
                    "constant_bytes": int(round(c)), "transient_slope": round(st, 5),
                    "layer_slope": round(sl, 5),
                    "loo_layer": loo_error(picked, "layer"),
                    "loo_transient": loo_error(picked, "transient"),
                    "loo_tensor_peak_rule": loo_error(picked, "constant+fraction"),
                    "rows": len(picked)}
    for conf in ("default", "expandable_segments:True"):
        ratios = [r["reserved_over_tensor_peak"] for r in rows if r["alloc_conf"] == conf]
        if ratios:
            out[conf] = {"median_ratio": round(statistics.median(ratios), 5),
                         "min_ratio": min(ratios), "max_ratio": max(ratios), "rows": len(ratios)}
    return out


#: the floor's statistic: bytes above the tensor peak of the smallest capacity at which the
#: replayed step raises no OOM (fmest.allocator.measure_floor.min_capacity): the allocator's own
#: fit test, its release-and-retry included. The two other measures (at the allocated peak, at
#: the next miss after a full release) are tabulated beside it.
FLOOR_KEY = "floor_bytes"


def floor_rows_for(preset: str, technique: str, batch: int, seq: int, ac: str) -> list[dict]:
    """The irreducible reserve of one traced setting, default and expandable segments."""
    from fmest.allocator import AllocatorConfig, measure_floor

    events, tracker_peak, secs, spec = trace_events(_setting_job(preset, technique, batch, seq,
                                                                  ac))
    rows = []
    for conf in ("", "expandable_segments:True"):
        t0 = time.perf_counter()
        fl = measure_floor(events, AllocatorConfig.parse(conf))
        dt = time.perf_counter() - t0
        row = {
            **_setting_fields(preset, technique, batch, seq, ac, spec, conf, events),
            "tracker_peak_bytes": tracker_peak,
            "max_memory_allocated": fl.max_memory_allocated,
            "max_memory_reserved": fl.max_memory_reserved,
            "requested_at_peak": fl.requested_at_peak,
            "held_at_peak": fl.held_at_peak,
            "held_at_next_miss": fl.held_at_next_miss,
            "min_capacity": fl.min_capacity,
            # the three floors: fragmentation + rounding over the tensors at the allocated
            # peak, the same at the next miss after a full release, and the min no-OOM
            # capacity over the tensor peak (the rule's statistic, FLOOR_KEY)
            "at_peak_bytes": fl.at_peak,
            "at_next_miss_bytes": fl.at_next_miss,
            FLOOR_KEY: fl.min_capacity - tracker_peak,
            "at_peak_over_tensor_peak": round(fl.at_peak / tracker_peak, 5),
            "floor_over_tensor_peak": round((fl.min_capacity - tracker_peak) / tracker_peak, 5),
            "floor_over_reserve": round((fl.min_capacity - tracker_peak)
                                        / max(1, fl.max_memory_reserved - tracker_peak), 4),
            "trace_seconds": round(secs, 1), "measure_seconds": round(dt, 2),
            "command": (f"python scripts/derive_allocator_reserve.py --floor --only {preset} "
                        f"--technique {technique} --batch {batch} --seq {seq} --ac {ac}"),
        }
        rows.append(row)
        gib = 2 ** 30
        print(f"{preset:14s} {technique:4s} b{batch} s{seq} ac={ac:4s} "
              f"{conf or 'default':25s} tensors {tracker_peak / gib:6.2f} reserve "
              f"{(fl.max_memory_reserved - tracker_peak) / gib:5.2f} at-peak "
              f"{fl.at_peak / gib:5.2f} next-miss {fl.at_next_miss / gib:5.2f} floor "
              f"{row[FLOOR_KEY] / gib:5.2f} GiB ({dt:.1f} s)", flush=True)
    return rows


def loo_floor(rows: list[dict]) -> tuple[float, float]:
    """Median and max |predicted - measured| / tensor peak of the floor, leaving each row out
    of the Theil-Sen fit (the floor can be ~0: relative to the tensors, not to itself)."""
    errs = []
    for i, r in enumerate(rows):
        c, f = theil_sen(rows[:i] + rows[i + 1:], FLOOR_KEY)
        errs.append(abs(c + f * r["tracker_peak_bytes"] - r[FLOOR_KEY]) / r["tracker_peak_bytes"])
    return round(statistics.median(errs), 4), round(max(errs), 4)


def summarize_floor(rows: list[dict]) -> dict[str, Any]:
    """The floor rule of each allocator setting: Theil-Sen constant + fraction of the tensor
    peak over the rows (the method of the reserve's ``summary.rule``), with the median and
    range of each measure."""
    out: dict[str, Any] = {}
    for conf, name in (("default", "rule"), ("expandable_segments:True", "rule_expandable")):
        picked = [r for r in rows if r["alloc_conf"] == conf]
        if len(picked) < 3:
            continue
        c, f = theil_sen(picked, FLOOR_KEY)
        out[name] = {
            "what": f"floor = constant + fraction x tensor peak, Theil-Sen (median pairwise "
                    f"slope, clamped >= 0, then median intercept) of {FLOOR_KEY} over the "
                    f"{conf} rows",
            "constant_bytes": int(round(c)), "fraction": round(f, 5),
            "loo_abs_error_over_tensor_peak": loo_floor(picked)}
        for key in ("at_peak_bytes", "at_next_miss_bytes", FLOOR_KEY, "floor_over_reserve"):
            vals = [r[key] for r in picked]
            out[name][key] = {"median": statistics.median(vals), "min": min(vals),
                              "max": max(vals)}
    return out


def main_floor(args: argparse.Namespace) -> int:
    from importlib.metadata import version

    grid = ([(args.only, args.technique, args.batch, args.seq, args.ac)] if args.only
            else GRID)
    rows: list[dict] = []
    for setting in grid:
        try:
            rows.extend(floor_rows_for(*setting))
        except Exception as exc:  # a row that cannot be traced is reported, not invented
            print(f"{setting}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    table = json.loads(args.out.read_text(encoding="utf-8")) if args.out.exists() else {}
    table["floor"] = {
        "description": "The reserve the caching allocator cannot give back (fmest issue 22): "
                       "release_cached_blocks frees only segments holding no live block, and "
                       "expandable segments unmap only whole free pages. Per traced setting "
                       "(the fixed grid): at_peak_bytes = reserved after a full release at the "
                       "allocated peak - requested bytes there; at_next_miss_bytes = the same "
                       "once the next request no cached block serves has its fresh segment; "
                       f"{FLOOR_KEY} = the smallest capacity (2 MiB grid) whose capped replay "
                       "raises no OOM - the tensor peak (the rule's statistic).",
        "generated": time.strftime("%Y-%m-%d"),
        "command": "python scripts/derive_allocator_reserve.py --floor",
        "torch": version("torch"), "transformers": version("transformers"),
        "allocator_source": ALLOCATOR_SOURCE,
        "summary": summarize_floor(rows), "rows": rows,
    }
    args.out.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(table["floor"]["summary"], indent=1))
    return 0


def summarize_varlen(rows: list[dict]) -> dict[str, Any]:
    """Median (min, max) growth of the reserved peak over the transient bytes of the longest
    micro-batch: the rule fmest.physics.device_terms applies to variable-length jobs."""
    out: dict[str, Any] = {
        "what": "reserved(varlen) - reserved(fixed at the cap) = fraction x transient bytes of "
                "one micro-batch at the cap; median over the rows of each activation "
                "checkpointing mode (recomputation re-allocates the layer temporaries of every "
                "length: the growth differs by mode)"}
    for ac in ("full", "none"):
        g = [r["growth_over_transient"] for r in rows if r["activation_checkpointing"] == ac]
        if g:
            out[ac] = {"fraction_of_transient": round(statistics.median(g), 4),
                       "min": min(g), "max": max(g), "rows": len(g)}
    return out


def main_varlen(args: argparse.Namespace) -> int:
    from importlib.metadata import version

    grid = ([(args.only, args.technique, args.batch, args.seq, args.ac)] if args.only
            else VARLEN_GRID)
    rows = []
    for setting in grid:
        try:
            rows.append(varlen_row_for(*setting))
        except Exception as exc:  # a row that cannot be traced is reported, not invented
            print(f"{setting}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    table = json.loads(args.out.read_text(encoding="utf-8")) if args.out.exists() else {}
    table["varlen"] = {
        "description": "Variable-length (pad-to-longest, unpacked) steps: the replayed reserved "
                       f"peak of {VARLEN_STEPS} micro-batches whose lengths are uniform("
                       f"{VARLEN_LOW} x cap, cap) (seed {VARLEN_SEED}, the cap last), an "
                       f"optimizer step every {VARLEN_ACCUM}, against the same trace at the cap "
                       "every micro-batch. growth_over_transient = (reserved_varlen - "
                       "reserved_fixed) / transient bytes of one micro-batch at the cap.",
        "generated": time.strftime("%Y-%m-%d"),
        "command": "python scripts/derive_allocator_reserve.py --varlen",
        "torch": version("torch"), "transformers": version("transformers"),
        "summary": summarize_varlen(rows), "rows": rows,
    }
    args.out.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(table["varlen"]["summary"], indent=1))
    return 0


def _row_key(r: dict) -> tuple:
    return (r["model"], r["technique"], r["micro_batch_size"], r["seq_len"],
            r["activation_checkpointing"], r["alloc_conf"])


def main(argv: list[str] | None = None) -> int:
    from importlib.metadata import version

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="one preset (with --technique/--batch/--seq/--ac)")
    ap.add_argument("--technique", default="full")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--ac", default="none")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--summarize", action="store_true",
                    help="recompute the summary of the existing table's rows (no tracing)")
    ap.add_argument("--merge", nargs="*", type=Path,
                    help="with --summarize: tables written by --only --out to add to the rows")
    ap.add_argument("--varlen", action="store_true",
                    help="trace the variable-length grid (VARLEN_GRID) into the table's "
                         "'varlen' section, keeping the fixed-length rows")
    ap.add_argument("--floor", action="store_true",
                    help="trace the grid and measure the irreducible reserve (fmest.allocator."
                         "measure_floor) into the table's 'floor' section, keeping the rest")
    ap.add_argument("--padded", action="store_true",
                    help="trace PADDED_TRACES and replay the padded-length grid into the "
                         "table's 'padded' section, keeping the rest")
    args = ap.parse_args(argv)
    if args.padded:
        return main_padded(args)
    if args.varlen:
        return main_varlen(args)
    if args.floor and not args.summarize:
        return main_floor(args)
    if args.summarize:
        table = json.loads(args.out.read_text(encoding="utf-8"))
        for path in args.merge or ():
            # rows traced one setting at a time (``--only ... --out FILE``): a setting already
            # in the table is replaced
            new_rows = json.loads(Path(path).read_text(encoding="utf-8"))["rows"]
            keys = {_row_key(r) for r in new_rows}
            table["rows"] = [r for r in table["rows"] if _row_key(r) not in keys] + new_rows
        for r in table["rows"]:
            if "transient_block_bytes" not in r:
                r["transient_block_bytes"] = transient_block_of(
                    r["model"], r["micro_batch_size"], r["seq_len"])
            # the memory model's per-layer block (recomputed: it follows the analytic model)
            r["layer_block_bytes"] = layer_block_of(
                r["model"], r["technique"], r["micro_batch_size"], r["seq_len"],
                r["activation_checkpointing"])
        table["summary"] = summarize(table["rows"])
        if "floor" in table:
            table["floor"]["summary"] = summarize_floor(table["floor"]["rows"])
        args.out.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
        print(json.dumps(table["summary"], indent=1))
        return 0
    grid = ([(args.only, args.technique, args.batch, args.seq, args.ac)] if args.only
            else GRID + TRANSIENT_GRID + LAYER_GRID)
    rows: list[dict] = []
    for setting in grid:
        try:
            rows.extend(row_for(*setting))
        except Exception as exc:  # a row that cannot be traced is reported, not invented
            print(f"{setting}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    table = {
        "description": "Caching-allocator reserve derived from fake-tensor traces of the real "
                       "training code replayed through fmest.allocator (docs/allocator.md). "
                       "ratio = max_memory_reserved / max_memory_allocated of the replay; "
                       "reserved_over_tensor_peak = max_memory_reserved / the trace's tensor "
                       "peak (the summary's statistic).",
        "generated": time.strftime("%Y-%m-%d"),
        "command": "python scripts/derive_allocator_reserve.py",
        "torch": version("torch"), "transformers": version("transformers"),
        "peft": version("peft"),
        "allocator_source": ALLOCATOR_SOURCE,
        "summary": summarize(rows),
        "rows": rows,
    }
    args.out.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(table["summary"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
