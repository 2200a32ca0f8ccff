"""``memory.min_gpus``: the fewest GPUs of the job's type at which the job fits, keeping its
strategy.

* A strategy that shards state over data-parallel ranks (ZeRO-1/2/3, FSDP) grows ``dp``; one
  step is ``tp x pp x cp`` GPUs.
* Plain data parallelism (DDP / ZeRO-0) keeps a full replica per rank, so more ranks never
  help; when the user set ``tp``/``pp`` those grow together, keeping their ratio
  (``tp x k``, ``pp x k`` for k = 1, 2, 4, ...), the data-parallel degree kept.
* Counts beyond one node are whole nodes (``gpus_per_node``, default 8), so the layout the
  answer names can be run.

``None`` comes with the reason: the per-GPU floor that no count goes below (activations,
unsharded layers, buffers) or a layout limit (heads, layers).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

from fmest.errors import InfeasibleError, InputError
from fmest.job import Job

#: Largest GPU count searched (a 512-node cluster of 8-GPU nodes).
MAX_GPUS = 4096
DEFAULT_GPUS_PER_NODE = 8
GIB = 1024**3


class MinGpus(NamedTuple):
    """``gpus`` (None when no count fits), why, how many GPUs one step of the strategy adds,
    the job at that count and the job one step fewer (None when there is none)."""

    gpus: Optional[int]
    reason: str
    step_gpus: int
    job: Optional[Job]
    fewer: Optional[Job] = None


def _fits(engine, job: Job) -> tuple[bool, Optional[float]]:
    """(fits, peak bytes) of ``job`` as the engine's verdict reads it: its policy over the
    plugins cheap enough to search (as ``max_micro_batch``: a trace per candidate count would
    take minutes), the job's calibration knobs, and the usable memory after its safety margin
    (fmest.calibration)."""
    from fmest.calibration import calibrate_memory, usable_bytes

    try:
        ctx = engine.context(job)
        try:
            est = engine.decide("memory", job, ctx=ctx, searching=True).chosen
        except TypeError:      # an engine without searchable estimators
            est = engine.estimate_memory(job, ctx).chosen
    except (InputError, InfeasibleError):
        return False, None
    if est is None:
        return False, None
    knobs = job.calibration
    peak = calibrate_memory(est, activation_factor=knobs.activation_factor,
                            fragmentation_gib=knobs.fragmentation_gib,
                            misc_overhead_gib=knobs.misc_overhead_gib).total_bytes
    return peak <= usable_bytes(ctx.gpu.memory_bytes, knobs.safety_margin), peak


def _with_world(job: Job, *, dp: int, tp: int, pp: int, gpus_per_node: int) -> Job:
    world = dp * tp * pp * job.parallelism.cp
    gpn = min(world, gpus_per_node)
    return job.evolve(parallelism={"dp": dp, "tp": tp, "pp": pp},
                      hardware={"gpus_per_node": gpn, "nodes": world // gpn})


def _world_gpus(job: Job) -> int:
    """GPUs of a job built by :func:`_with_world`, which always sets ``gpus_per_node``."""
    gpn = job.hardware.gpus_per_node
    assert gpn is not None, "_with_world sets hardware.gpus_per_node"
    return gpn * job.hardware.nodes


def _runnable(world: int, gpus_per_node: int) -> bool:
    return world <= gpus_per_node or world % gpus_per_node == 0


def min_gpus(engine, job: Job) -> MinGpus:
    """The fewest GPUs at which ``job`` fits (see the module doc)."""
    par = job.parallelism
    cap = engine.registries.gpus.get(job.hardware.gpu).memory_bytes
    if job.mode != "training":
        return MinGpus(None, "min_gpus is searched for training jobs", 1, None)
    gpn = job.hardware.gpus_per_node or DEFAULT_GPUS_PER_NODE
    strategy = engine.context(job).sharding     # raises InputError naming a bad field
    mp = par.tp * par.pp * par.cp
    if strategy.shards:
        candidates = [d for d in range(1, MAX_GPUS // mp + 1) if _runnable(d * mp, gpn)]
        make = lambda d: _with_world(job, dp=d, tp=par.tp, pp=par.pp, gpus_per_node=gpn)  # noqa: E731
        what = f"dp (one step = tp*pp*cp = {mp} GPUs) under {strategy.name}"
        step = mp
    else:
        dp = par.dp or 1
        model = engine.resolve_model(job)
        candidates, k = [], 1
        while par.tp * k * par.pp * k * par.cp * dp <= MAX_GPUS:
            tp, pp = par.tp * k, par.pp * k
            if (par.tp > 1 or par.pp > 1 or k == 1) and pp <= model.num_layers \
                    and model.num_attention_heads % tp == 0 and tp <= max(gpn, par.tp):
                candidates.append(k)
            if par.tp == 1 and par.pp == 1:
                break
            k *= 2
        make = lambda k: _with_world(job, dp=dp, tp=par.tp * k, pp=par.pp * k,  # noqa: E731
                                     gpus_per_node=gpn)
        what = f"tp and pp together (ratio {par.tp}:{par.pp}) under {strategy.name}"
        step = mp * dp
    fits = {}

    def ok(i: int) -> bool:
        if i not in fits:
            fits[i] = _fits(engine, make(candidates[i]))
        return fits[i][0]

    if not candidates:
        return MinGpus(None, f"no layout of {strategy.name} with these degrees is valid for "
                       "the model", step, None)
    # per-GPU memory falls as the state is spread: exponential probe, then bisect
    last = len(candidates) - 1
    hi = 0
    while hi < last and not ok(hi):
        hi = min(hi * 2 + 1, last)
    if not ok(hi):
        peak = fits[last][1]
        if not strategy.shards and par.tp == 1 and par.pp == 1:
            return MinGpus(None, f"{strategy.name} keeps a full replica of the model state on "
                           "every GPU, so no count fits; shard it (--zero 3 / --fsdp "
                           "full_shard) or split the model (--tp/--pp)", step, None)
        floor = "" if peak is None else f"; per-GPU memory stays at {peak / GIB:.1f} GiB"
        n = _world_gpus(make(candidates[last]))
        return MinGpus(None, f"does not fit on {cap / GIB:.0f} GiB GPUs at any count up to "
                       f"{n} growing {what}{floor} (activations, unsharded layers and buffers "
                       "do not shrink with more GPUs)", step, None)
    lo = max((i for i, (fit, _) in fits.items() if not fit and i < hi), default=-1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    best = make(candidates[hi])
    n = _world_gpus(best)
    fewer = make(candidates[hi - 1]) if hi > 0 else None
    return MinGpus(n, f"fewest {job.hardware.gpu} GPUs that fit, growing {what}", step, best,
                   fewer)


class LazyMinGpus:
    """``min_gpus(engine, job)`` computed on first use and kept: a report carries one, and only
    the outputs that show ``memory.min_gpus`` (JSON, the table) pay for the search."""

    def __init__(self, engine, job: Job) -> None:
        self._engine, self._job = engine, job
        self._result: Optional[MinGpus] = None

    def get(self) -> MinGpus:
        if self._result is None:
            self._result = min_gpus(self._engine, self._job)
        return self._result
