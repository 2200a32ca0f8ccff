"""The traced memory answer of the `torch_runner` plugin (hooks in :mod:`fmest_torch_runner.plugin`).

Importing this module does not import torch (the CLI stays fast with the plugin installed);
torch and transformers are imported only when a traced estimate or a probe is requested.

Per-GPU memory = peak of a two-step fake-tensor trace of the real transformers model
(:mod:`fmest_torch_runner.runner`, CPU kernel semantics, storages rounded to the CUDA
allocator's 512-byte blocks), with parallelism the trace does not execute applied by scaling
its per-category bytes (FSDP full sharding, and ZeRO-3 approximated by it, IS executed: FSDP2
on a fake process group, see :func:`fsdp_world_size`), plus documented GPU-side terms
(:func:`gpu_side_terms`; the caching-allocator reserve comes from replaying the trace's
allocation events through :mod:`fmest.allocator`, under the stack's ``PYTORCH_CUDA_ALLOC_CONF``:
:func:`stack_alloc_conf`), and DDP's gradient buckets when the layout replicates with DDP
(:func:`ddp_bucket_bytes`: the single-process trace does not build them). Traces are cached on disk by configuration hash in
``$FMEST_CACHE_DIR/traces`` (default ``~/.cache/fmest/traces``); each entry carries the SHA-256
of its content, and one that does not match is traced again with a note (:func:`traced_run`).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Optional

from attrs import frozen

from fmest.allocator import irreducible_reserve_bytes
from fmest.estimates import MemoryEstimate, Provenance
from fmest.transforms import transforms_of

MIB = 1 << 20
#: GPU-side terms: the same constants and rules as the analytic plugin, from core
#: (fmest.physics.device_terms, fmest.allocator).
from fmest.physics.device_terms import (  # noqa: E402
    CUDA_CONTEXT_BYTES,
    allocator_reserve_bytes,
    nccl_buffer_bytes,
    transient_block_bytes,
)

#: the CUDA caching allocator hands out blocks in multiples of 512 bytes
ROUND_BYTES = 512
#: version of the allocator replay stored in a cached trace (``reserved_peak_bytes``); part of
#: the cache key so that entries traced before the replay existed are traced again
ALLOCATOR_REPLAY_VERSION = "1"


def cache_dir() -> Path:
    """``$FMEST_CACHE_DIR/traces``, default ``~/.cache/fmest/traces``."""
    base = os.environ.get("FMEST_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache",
                                                               "fmest")
    return Path(base) / "traces"


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return ""


def trace_key(run, round_bytes: int = ROUND_BYTES) -> str:
    """The cache key of a run: its spec, the rounding, and the library versions."""
    from fmest_torch_runner.runner import RUNNER_VERSION

    payload = {"run": run.key(), "round_bytes": round_bytes, "runner": RUNNER_VERSION,
               "allocator_replay": ALLOCATOR_REPLAY_VERSION,
               "torch": _version("torch"), "transformers": _version("transformers"),
               "peft": _version("peft") if run.technique != "full" else ""}
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _digest(payload: dict) -> str:
    """SHA-256 of ``payload``'s canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def cache_entry(key: str, run, res) -> dict:
    """The JSON a trace is cached as: ``key``, ``run``, ``result`` and ``sha256``, the digest
    of the other three (:func:`_digest`), so that a changed or cut entry is recognised."""
    payload = json.loads(json.dumps({"key": key, "run": run.key(), "result": res.to_dict()},
                                    default=str))  # the types JSON gives back when read
    return {**payload, "sha256": _digest(payload)}


def read_cache_entry(path: Path, key: str):
    """``(result, None)`` from the cache entry at ``path``, or ``(None, why)`` when it cannot
    be trusted: unreadable, not JSON (a cut write), no or a wrong ``sha256`` (edited, or
    written before entries carried one), another key."""
    from fmest_torch_runner.runner import RunResult

    try:
        with open(path, encoding="utf-8") as fh:
            entry = json.load(fh)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return None, f"unreadable or not whole ({type(exc).__name__})"
    if not isinstance(entry, dict) or "sha256" not in entry:
        return None, "carries no content hash"
    digest = entry.pop("sha256")
    if digest != _digest(entry):
        return None, "content does not match its sha256 (changed or damaged)"
    if entry.get("key") != key:
        return None, f"holds key {entry.get('key')!r}, not {key!r}"
    try:
        return RunResult.from_dict(entry["result"]), None
    except (ValueError, TypeError, KeyError) as exc:
        return None, f"result unreadable ({type(exc).__name__}: {exc})"


def traced_run(run, *, round_bytes: int = ROUND_BYTES, use_cache: bool = True,
               notes: Optional[list[str]] = None):
    """The fake-mode :class:`~fmest_torch_runner.runner.RunResult` of ``run``, from the disk
    cache when present. Returns ``(result, cache_hit)``.

    A cache entry is used only when its ``sha256`` matches its content
    (:func:`read_cache_entry`); an entry that does not is traced again and overwritten, and
    ``notes`` (when given) gets a line saying so. Entries are written atomically (temporary
    file, fsync, rename: :func:`fmest.atomic.write_text_atomic`); a read-only cache is no
    error."""
    key = trace_key(run, round_bytes)
    path = cache_dir() / f"{key}.json"
    if use_cache and path.is_file():
        res, why = read_cache_entry(path, key)
        if res is not None:
            return res, True
        if notes is not None:
            notes.append(f"trace cache entry {path} ignored ({why}); traced again")
    from fmest.output.render import status
    from fmest_torch_runner.runner import run as run_steps

    with status(f"tracing {run.model_name} ({run.steps} steps on fake tensors)"):
        res = run_steps(run, "fake", round_bytes=round_bytes)
    if use_cache and res.status == "ok":
        from fmest.atomic import write_text_atomic

        try:
            write_text_atomic(path, json.dumps(cache_entry(key, run, res)))
        except (OSError, ValueError):
            pass  # a read-only cache is not an error
    return res, False


def reserve_ratio(res) -> Optional[float]:
    """Simulated ``max_memory_reserved`` / ``max_memory_allocated`` of a fake trace (the
    allocator replay, :func:`fmest_torch_runner.fake_trace.replay_into`); None when the result
    carries no replay."""
    reserved, allocated = res.reserved_peak_bytes, res.tracker_peak_bytes
    if res.mode != "fake" or not reserved or not allocated:
        return None
    return max(1.0, reserved / allocated)


@frozen(kw_only=True)
class ReserveInputs:
    """What the caching-allocator reserve of a traced window depends on besides its bytes --
    the inputs memory_theory's ``assemble`` gives ``fmest.physics.device_terms`` for its
    analytic peak, here taken from the trace (:func:`reserve_inputs`)."""

    #: simulated max_memory_reserved / max_memory_allocated of the trace's own events
    #: (:func:`reserve_ratio`); None when the trace carries no replay or its bytes were scaled
    #: (the replay is of the unscaled single-process step, not of the per-rank one)
    ratio: Optional[float] = None
    #: the step's largest transient block per rank (bytes): the transient rule's abscissa
    transient: Optional[float] = None
    #: ``expandable_segments:True`` in the stack's ``PYTORCH_CUDA_ALLOC_CONF``
    expandable: bool = False
    #: pad-to-longest reserve growth, a fraction of the window's activations + temporaries
    #: (fmest.allocator.padded_growth_fraction; 0 for fixed shapes)
    padded_growth: float = 0.0
    #: device memory (bytes; 0: unknown): the reserve is capped at the room left
    capacity: float = 0.0
    #: the stack's fitted reserve fraction (stacks_fitted.json), replacing the physics reserve
    fitted: Optional[float] = None


def gpu_side_terms(peak_bytes: int, *, world_size: int, nodes: int,
                   ratio: Optional[float] = None, allocated: Optional[float] = None,
                   inputs: Optional[ReserveInputs] = None,
                   transient: float = 0.0) -> dict[str, int]:
    """Memory a GPU run holds beyond the tensors the trace sees: the same terms as the analytic
    plugin's (memory_theory ``assemble``, from :mod:`fmest.physics.device_terms` and
    :mod:`fmest.allocator`), overridable by environment variables:

    * ``cuda_context``: CUDA context with the kernels a step loads (``FMEST_CUDA_CONTEXT_BYTES``,
      default 1368 MiB, measured on an H200: ``device_terms.CUDA_CONTEXT_BYTES``);
    * ``nccl_buffers``: one NCCL communicator when world size > 1 (``FMEST_NCCL_BUFFER_BYTES``,
      default 688 MiB: ``device_terms.nccl_buffer_bytes``);
    * ``allocator_reserve``: caching-allocator reserve over the allocated peak. ``peak_bytes``
      are the bytes the replay covers (the traced tensors), ``allocated`` the window's whole
      allocated bytes (default ``peak_bytes``), ``transient`` the window's transient bytes
      (activations + temporaries, for the pad-to-longest growth). In order:
      ``FMEST_ALLOCATOR_RESERVE_FRACTION`` (a fraction of ``peak_bytes``) when set; the stack's
      fitted fraction x allocated; else ``peak x (ratio - 1)`` with the trace's own replayed
      ratio, or ``allocator_reserve_bytes(allocated, expandable, transient block)`` (the
      transient rule) where the bytes are scaled; plus the pad-to-longest growth; capped, as
      theory caps it, at the room the device leaves, never below the irreducible floor
      (``fmest.allocator.irreducible_reserve_bytes``).
    """
    inp = inputs if inputs is not None else ReserveInputs(ratio=ratio)
    ctx = int(float(os.environ.get("FMEST_CUDA_CONTEXT_BYTES", CUDA_CONTEXT_BYTES)))
    nccl = 0
    if world_size > 1:
        nccl = int(float(os.environ.get("FMEST_NCCL_BUFFER_BYTES",
                                        nccl_buffer_bytes(world_size))))
    alloc = float(peak_bytes if allocated is None else allocated)
    env = os.environ.get("FMEST_ALLOCATOR_RESERVE_FRACTION")
    if env is not None:
        reserve = peak_bytes * float(env)
    else:
        if inp.fitted is not None:
            held = inp.fitted * alloc
        else:
            if inp.ratio is not None:
                held = peak_bytes * (inp.ratio - 1.0)
            else:
                held = allocator_reserve_bytes(alloc, inp.expandable, inp.transient)
            held += inp.padded_growth * transient
        reserve = held
        if inp.capacity:
            room = inp.capacity - ctx - nccl - alloc
            if room >= 0:
                reserve = min(held, max(room, irreducible_reserve_bytes(alloc, inp.expandable)))
    return {"cuda_context": ctx, "allocator_reserve": int(round(reserve)),
            "nccl_buffers": nccl}


def padded_growth_of(job, stack) -> float:
    """:func:`fmest.allocator.padded_growth_of`: the pad-to-longest reserve growth that
    memory_theory adds and the trace (run at ``seq_len``) lacks."""
    from fmest.allocator import padded_growth_of as growth

    return growth(job, stack)


def reserve_inputs(job, ctx, res, *, scaled: bool) -> ReserveInputs:
    """The allocator inputs of ``job``'s traced windows: the trace's own replay when its bytes
    are the per-rank ones (one GPU, DDP replicas, FSDP traced); where parallelism is scaled,
    the transient rule on the trace's largest freed block divided like the activations
    (``1/(tp*cp)``; a trace cached without the block: the analytic one,
    ``fmest.physics.device_terms.transient_block_bytes`` of the fp32 logits); plus the
    stack's expandable segments, pad-to-longest growth, fitted fraction and the device's
    capacity."""
    stack = transforms_of(job, ctx).stack
    lay = ctx.layout
    ratio = None if scaled else reserve_ratio(res)
    transient: Optional[float] = None
    if ratio is None:
        block = getattr(res, "transient_block_bytes", None)
        if block:
            transient = float(block) / (lay.tp * lay.cp)
        else:
            tokens = job.training.micro_batch_size * job.training.seq_len / lay.cp
            transient = transient_block_bytes(tokens, ctx.model.vocab_size / lay.tp)
    return ReserveInputs(
        ratio=ratio, transient=transient,
        expandable=bool(stack is not None and stack.profile.expandable_segments),
        padded_growth=padded_growth_of(job, stack),
        capacity=float(getattr(ctx.gpu, "memory_bytes", 0) or 0),
        fitted=stack.fitted.reserve_fraction if stack is not None else None)


def fsdp_world_size(job, ctx) -> int:
    """The fake-process-group size to trace FSDP2 with, or 1 when the job's sharding is scaled
    instead: a strategy that behaves like ``fully_shard`` (``ShardingStrategy
    .gathers_full_shard``: FSDP FULL_SHARD, ZeRO-3 approximated by it) over a shard group > 1,
    full fine-tuning, pure/amp precision. ``FMEST_TRACE_FSDP=0`` turns it off."""
    if os.environ.get("FMEST_TRACE_FSDP", "1") == "0":
        return 1
    from fmest_torch_runner.runner import fsdp_traceable

    transforms = transforms_of(job, ctx)
    group = transforms.sharding.group_size
    traceable = fsdp_traceable(job, ctx.sharding, group, precision=transforms.precision)
    return group if traceable is None else 1


def parallel_factors(job, ctx, *, fsdp_traced: bool = False) -> tuple[dict[str, float],
                                                                       list[str]]:
    """Per-category divisors for what the single-process trace cannot execute.

    With ``fsdp_traced`` the trace already ran FSDP2 over the shard group: nothing is divided
    by the group (tp/pp/cp/ep still scale).

    Weights, gradients and optimizer state divide by ``tp*pp`` (and experts by ``ep``), and by
    the sharding transform's divisors (``ctx.transforms.sharding``); activations divide by
    ``tp*cp`` (exact only with sequence parallelism; 1F1B keeps ~pp micro-batches of L/pp
    layers on the first stage, so ``pp`` leaves them unchanged).
    """
    lay = ctx.layout
    plan = transforms_of(job, ctx).sharding
    notes: list[str] = []
    mp = lay.tp * lay.pp
    counts = ctx.model.param_counts()
    expert_frac = counts.experts / counts.total if counts.total else 0.0
    ep_keep = (1 - expert_frac) + expert_frac / lay.ep if lay.ep > 1 else 1.0
    state = ep_keep / mp
    factors = {"params": state, "grads": state, "optimizer_state": state,
               "activations": 1.0 / (lay.tp * lay.cp), "temporaries": 1.0 / (lay.tp * lay.cp),
               "optimizer_temporaries": state}
    if plan.group_size > 1 and not fsdp_traced:
        for cat, divisor in (("params", plan.params_divisor), ("grads", plan.grads_divisor),
                             ("optimizer_state", plan.optimizer_divisor),
                             ("optimizer_temporaries", plan.optimizer_divisor)):
            factors[cat] /= divisor
    if mp > 1 or lay.ep > 1 or lay.cp > 1:
        notes.append(f"tp={lay.tp} pp={lay.pp} cp={lay.cp} ep={lay.ep} not executed by the "
                     "trace: weights/grads/optimizer state scaled by 1/(tp*pp)"
                     + (" (experts by 1/ep)" if lay.ep > 1 else "")
                     + ", activations by 1/(tp*cp)"
                     + ("" if job.parallelism.sequence_parallel or lay.tp == 1 else
                        " (optimistic without sequence parallelism)"))
    shards = ctx.sharding.shards
    if fsdp_traced:
        notes.append(f"{ctx.sharding.name} sharding traced as FSDP2 fully_shard over a fake "
                     f"process group of {plan.group_size} ranks, per-rank bytes of rank 0 "
                     f"(strategies other than PyTorch FSDP are approximated: their bucketing, "
                     f"prefetch and persistence thresholds differ)")
    elif plan.group_size > 1 and shards:
        notes.append(f"{ctx.sharding.name} sharding not executed by the trace (no fake process "
                     f"group): {', '.join(sorted(shards))} scaled by 1/{plan.group_size}")
    return factors, notes


def _scaled_windows(res, factors: dict[str, float], gather_bytes: int) -> dict[str, dict]:
    out = {}
    for window, cats in res.phase_breakdowns.items():
        opt = window.endswith("optimizer")
        scaled = {}
        for c, v in cats.items():
            key = "optimizer_temporaries" if (opt and c == "temporaries") else c
            scaled[c] = int(round(v * factors.get(key, 1.0)))
        if gather_bytes and not opt:
            scaled["params"] = scaled.get("params", 0) + gather_bytes
        out[window] = scaled
    return out


def _trace(job, ctx, use_cache: bool, notes: Optional[list[str]] = None):
    """(run spec, result, cache hit) of the job's fake trace; None when it cannot run.
    ``notes`` gets what the cache had to say (:func:`traced_run`)."""
    try:
        from fmest_torch_runner.runner import Unsupported, run_spec_from_job
    except ImportError:  # torch/transformers missing
        return None
    try:
        run = run_spec_from_job(job, ctx.model, optimizer_name=ctx.optimizer.name, device="fake",
                                sharding=ctx.sharding, fsdp_world_size=fsdp_world_size(job, ctx),
                                precision=transforms_of(job, ctx).precision,
                                alloc_conf=stack_alloc_conf(job, ctx))
    except Unsupported:
        return None  # e.g. QLoRA: bitsandbytes cannot be traced on CPU; the policy falls back
    res, hit = traced_run(run, use_cache=use_cache, notes=notes)
    if res.status == "unsupported":
        return None
    if res.status != "ok":
        raise RuntimeError(f"fake trace failed: {res.error}")
    return run, res, hit


def stack_alloc_conf(job, ctx) -> str:
    """The ``PYTORCH_CUDA_ALLOC_CONF`` the job's training stack launches with, for the
    allocator replay: ``expandable_segments:True`` when its profile says so (torchtitan's
    run_train.sh, core/fmest/data/stacks.toml), else "" (PyTorch's defaults)."""
    stack = transforms_of(job, ctx).stack
    if stack is not None and getattr(stack.profile, "expandable_segments", False):
        return "expandable_segments:True"
    return ""


def ddp_bucket_bytes(job, ctx, res, factors: dict[str, float]) -> int:
    """DDP's flat all-reduce buckets, which the single-process trace does not build: with
    ``gradient_as_bucket_view=False`` (torch's and accelerate's default) they hold a second copy
    of every trainable gradient from construction on ("the saved memory size will be equal to
    the total gradients size", torch/nn/parallel/distributed.py DistributedDataParallel
    docstring, torch 2.13). Counted when the strategy replicates with DDP buckets
    (``ShardingStrategy.ddp_bucket``, nothing sharded) over dp > 1 and the stack does not reduce
    from its own contiguous gradient buffer (Megatron, DeepSpeed) -- the analytic plugin's rule
    (memory_theory ``_bucket_bytes``). Size: the trace's gradients at a window's end (per rank:
    scaled by tp/pp like the gradients)."""
    strategy, lay = ctx.sharding, ctx.layout
    stack = transforms_of(job, ctx).stack
    if not strategy.ddp_bucket or strategy.shards or lay.dp <= 1:
        return 0
    if stack is not None and stack.profile.contiguous_grad_buffer:
        return 0
    grads = max((w.get("grads", 0) for w in res.window_end_bytes.values()), default=0)
    return int(round(grads * factors.get("grads", 1.0)))


def _gather_bytes(job, ctx, res, factors) -> int:
    """Parameters gathered per layer when the trace did not run the sharding (ZeRO-3/FSDP
    scaled): ~two layers' unsharded weights at a time (current + prefetch)."""
    plan = transforms_of(job, ctx).sharding
    unsharded = res.breakdown_bytes.get("params", 0) * factors["params"] * plan.params_divisor
    return int(2 * unsharded / max(1, ctx.model.num_layers))


def _replayed(cats: dict[str, int]) -> int:
    """The bytes of a window the allocator replay's reserve ratio applies to: the traced
    tensors, not DDP's buckets (each ~25 MiB, its own segment: no reserve to speak of)."""
    return sum(v for c, v in cats.items() if c != "framework_buffers")


def _window_terms(window: str, cats: dict[str, int], layout,
                  inputs: ReserveInputs) -> dict[str, int]:
    """The GPU-side terms of one traced window (:func:`gpu_side_terms`). The micro-batch's
    transient bytes (what the pad-to-longest growth scales) are the window's activations and
    temporaries -- in an optimizer window its temporaries are the optimizer's, which do not
    depend on the batch's shape (memory_theory: activations + logits_and_loss of the phase)."""
    transient = cats.get("activations", 0)
    if not window.endswith("optimizer"):
        transient += cats.get("temporaries", 0)
    return gpu_side_terms(_replayed(cats), world_size=layout.world_size, nodes=layout.nodes,
                          allocated=sum(cats.values()), inputs=inputs, transient=transient)


def _phase_peaks(windows: dict, layout, inputs: ReserveInputs) -> dict[str, int]:
    """Per phase kind, the largest window plus its GPU-side terms."""
    peaks: dict[str, int] = {}
    for window, cats in windows.items():
        kind = window.split("_", 1)[1]
        peak = sum(cats.values()) + sum(_window_terms(window, cats, layout, inputs).values())
        peaks[kind] = max(peaks.get(kind, 0), peak)
    return peaks


def _trace_notes(job, run, res, hit: bool, window: str, fsdp_traced: bool,
                 inputs: ReserveInputs) -> list[str]:
    autocast = ""
    if run.autocast_dtype:
        autocast = (f", MixedPrecisionPolicy {run.autocast_dtype} (no autocast)" if fsdp_traced
                    else f", autocast {run.autocast_dtype}")
    notes = [f"fake-tensor trace of 2 training steps of the transformers model "
             f"({run.precision}, {run.param_dtype} weights{autocast}, {run.optimizer} "
             f"{run.optimizer_impl}, peak in {window}; trace "
             + ("from cache" if hit else f"{res.wall_seconds:.1f} s") + ")",
             "GPU-side terms: cuda_context measured on one H200 (CUDA 13.0), nccl_buffers "
             "published for A100 NVLink; other GPUs and versions may differ "
             "(docs/torch_runner.md)"]
    notes += [n for n in res.notes if n.startswith("layer replication:")]
    if os.environ.get("FMEST_ALLOCATOR_RESERVE_FRACTION") is not None:
        notes.append("allocator_reserve: FMEST_ALLOCATOR_RESERVE_FRACTION x the traced peak")
    elif inputs.fitted is not None:
        notes.append(f"allocator_reserve: the stack's fitted fraction {inputs.fitted:.3f} x "
                     "allocated (core/fmest/data/stacks_fitted.json)")
    elif inputs.ratio is not None:
        notes.append(f"allocator_reserve: the trace's allocation events replayed through the "
                     f"CUDA caching-allocator rules (fmest.allocator, docs/allocator.md): "
                     f"max_memory_reserved = {inputs.ratio:.3f} x max_memory_allocated")
    else:
        src = ("the trace's largest freed block" if getattr(res, "transient_block_bytes", None)
               else "the analytic fp32 logits block")
        notes.append(f"allocator_reserve: parallelism scaled, so the transient rule "
                     f"(fmest.physics.device_terms.allocator_reserve_bytes) on {src}, "
                     f"{(inputs.transient or 0) / MIB:.0f} MiB per rank")
    if inputs.padded_growth and inputs.fitted is None:
        notes.append(f"allocator_reserve: + {inputs.padded_growth:.3f} x the micro-batch's "
                     "activations and temporaries for pad-to-longest batches of varying length "
                     "(fmest.allocator.padded_growth_fraction; the trace runs at seq_len)")
    if run.attention != job.training.attention:
        notes.append(f"attention {job.training.attention!r} traced as {run.attention!r}")
    if job.training.attention == "flash":
        notes.append("flash attention traced with the CPU sdpa flash kernel (no s^2 tensors)")
    return notes


#: Bytes per (token, vocabulary entry) that eager cross-entropy holds and a fused loss does not:
#: the fp32 upcast of the logits whose log-softmax is saved for backward (transformers
#: src/transformers/loss/loss_utils.py ForCausalLMLoss: ``logits = logits.float()``; Megatron's
#: fused vocab-parallel cross-entropy and Liger's fused linear cross-entropy keep no fp32 copy).
EAGER_LOSS_FP32_BYTES = 4
#: Fusions that change what is saved for backward (fp8 casts, residual adds and layout copies
#: change time, not the peak).
MEMORY_FUSIONS = ("norm", "activation", "rope", "loss")


def stack_fusion_note(job, ctx) -> Optional[tuple[str, str]]:
    """``(stack name, note)`` when the job's training stack fuses kernels the trace ran eagerly
    (issue 12): the trace executes eager PyTorch, so its peak is high by the fp32 logits a
    fused loss never holds (quantified) and by the intermediates fused norm/activation/RoPE
    kernels do not save (named). None for stacks that fuse nothing of these."""
    stack = transforms_of(job, ctx).stack
    fused = [op for op in MEMORY_FUSIONS if stack is not None and stack.fuses(op)]
    if not fused:
        return None
    parts = []
    if "loss" in fused:
        lay = ctx.layout
        tokens = job.training.micro_batch_size * job.training.seq_len / lay.cp
        fp32_logits = tokens * ctx.model.vocab_size / lay.tp * EAGER_LOSS_FP32_BYTES
        size = (f"{fp32_logits / 2**30:.2f} GiB" if fp32_logits >= 2**30
                else f"{fp32_logits / 2**20:.1f} MiB")
        parts.append(f"about {size} (the fp32 logits its fused loss never holds)")
    others = [op for op in fused if op != "loss"]
    if others:
        parts.append(f"the intermediates its fused {'/'.join(others)} kernels do not save "
                     "(not quantified)")
    name = f"{stack.name} with Liger kernels" if stack.liger else stack.name
    return stack.name, (f"traced eager PyTorch; stack {name} fuses {', '.join(fused)}: "
                        f"its real peak is lower by {' plus '.join(parts)}")


def traced_memory(job, ctx, *, use_cache: bool = True) -> Optional[MemoryEstimate]:
    """The traced :class:`MemoryEstimate` of ``job`` (None when the runner cannot run it):
    trace, scale by the transforms' divisors, add gathered layers and GPU-side terms."""
    cache_notes: list[str] = []
    traced = _trace(job, ctx, use_cache, cache_notes)
    if traced is None:
        return None
    run, res, hit = traced
    fsdp_traced = run.fsdp_world_size > 1
    factors, scale_notes = parallel_factors(job, ctx, fsdp_traced=fsdp_traced)
    gather = 0
    if not fsdp_traced and ctx.sharding.param_gather and "parameters" in ctx.sharding.shards:
        gather = _gather_bytes(job, ctx, res, factors)
        scale_notes.append("parameter all-gather: two layers' unsharded weights added to "
                           "forward/backward windows")
    windows = _scaled_windows(res, factors, gather)
    buckets = ddp_bucket_bytes(job, ctx, res, factors)
    if buckets:
        for cats in windows.values():  # persistent from DDP's construction on
            cats["framework_buffers"] = buckets
        scale_notes.append(f"DDP gradient buckets (not built by the single-process trace): "
                           f"one copy of the trainable gradients, "
                           f"{buckets / 2**30:.2f} GiB, added to every window")
    if fsdp_traced:  # pitfall (i): the step-1 optimizer window is not trusted under FSDP
        from fmest_torch_runner.runner import FSDP_IGNORED_WINDOW

        windows.pop(FSDP_IGNORED_WINDOW, None)
    window, comps = max(windows.items(), key=lambda kv: sum(kv[1].values()))
    lay = ctx.layout
    # scaled, not executed: parallelism applied by dividing the trace's categories
    scaled = (lay.tp * lay.pp * lay.cp * lay.ep > 1
              or (not fsdp_traced and transforms_of(job, ctx).sharding.group_size > 1
                  and bool(ctx.sharding.shards)))
    inputs = reserve_inputs(job, ctx, res, scaled=scaled)
    components = dict(comps)
    components.update(_window_terms(window, comps, lay, inputs))
    notes = (_trace_notes(job, run, res, hit, window, fsdp_traced, inputs) + scale_notes
             + cache_notes)
    unfused = stack_fusion_note(job, ctx)
    if unfused is not None:
        notes.append(unfused[1])
    return MemoryEstimate(
        total_bytes=int(sum(components.values())),
        components={k: int(v) for k, v in components.items()},
        provenance=Provenance(basis="traced", detail="FakeTensorMode + live-storage tracker, "
                              "CPU kernel semantics, 512-byte rounding"
                              + (f", FSDP2 on a fake process group of {run.fsdp_world_size}"
                                 if fsdp_traced else "")
                              + ("; parallelism scaled, not executed" if scaled else ""),
                              scaled=scaled,
                              unfused_stack=unfused[0] if unfused is not None else None),
        phase=window.split("_", 1)[1],
        phase_peaks_bytes=_phase_peaks(windows, ctx.layout, inputs),
        notes=tuple(notes))
