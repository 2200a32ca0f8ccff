"""The searches a report shows beside its estimate, in one place, run once by the use case
(:mod:`fmest.api`): the largest micro-batch that fits (``memory.max_micro_batch``) and the
fewest GPUs that fit (``memory.min_gpus``).

Both ask the engine's memory decision over the plugins cheap enough to search (a trace per
candidate would take minutes) and both use the structure of memory to guess first:

* Per-GPU memory is affine in the micro-batch (activations, logits and their buffers grow
  with it, model state does not: Korthikanti et al. 2022, eq. 1-2), so two probes (b = 1, 2)
  give the line, and the line's crossing of the usable memory is the guess.
* Per-GPU memory falls as ``A + B / n`` with the GPUs ``n`` the state is spread over (ZeRO /
  FSDP shard it over dp; tp x pp split it), so the smallest and largest counts give the
  curve, and its crossing is the guess.

A guess is checked at the boundary (it fits, one more micro-batch / one count fewer does
not); when the check fails the search falls back to bisection between the probes it has. So
the answer is the one an exhaustive search gives whenever memory is monotone in the searched
quantity, in 3-4 memory decisions instead of 10-25.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable, NamedTuple, Optional

from fmest.errors import InfeasibleError, InputError
from fmest.job import Job

if TYPE_CHECKING:
    from fmest.engine import Engine, EstimateContext
    from fmest.job import Layout

#: Largest micro-batch searched (a power of two: the answer is min(largest that fits, this)).
MAX_MICRO_BATCH = 4096
#: Largest GPU count searched (a 512-node cluster of 8-GPU nodes).
MAX_GPUS = 4096
DEFAULT_GPUS_PER_NODE = 8
GIB = 1024**3


# -- largest micro-batch ------------------------------------------------------------------------

def max_micro_batch(engine: "Engine", job: Job, ctx: "EstimateContext", *,
                    limit: int = MAX_MICRO_BATCH) -> int:
    """Largest micro-batch whose estimated peak fits the GPU (0 if even 1 does not)."""
    from fmest.engine import calibrated, paged_to_host, usable_memory_bytes

    cap = usable_memory_bytes(job, ctx)
    peaks: dict[int, Optional[float]] = {}

    def peak(b: int) -> Optional[float]:
        if b not in peaks:
            j = job.evolve(training={"micro_batch_size": b})
            chosen = engine.decide("memory", j, ctx=ctx, searching=True).chosen
            peaks[b] = None if chosen is None else \
                paged_to_host(j, ctx, calibrated(job, chosen)).total_bytes
        return peaks[b]

    def fits(b: int) -> bool:
        p = peak(b)
        return p is not None and p <= cap

    if not fits(1):
        return 0
    guess = _affine_guess(peak(1), peak(2), cap, limit)
    if guess is not None and fits(guess) and (guess >= limit or not fits(guess + 1)):
        return guess
    # the line missed (rounding, a term that is not affine): the exhaustive search, which
    # reuses the probes made so far
    lo, hi = 1, 2
    while hi <= limit and fits(hi):
        lo, hi = hi, hi * 2
    if hi > limit:
        return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


def _affine_guess(p1: Optional[float], p2: Optional[float], cap: float,
                  limit: int) -> Optional[int]:
    """The largest b with ``p1 + (b - 1) * (p2 - p1) <= cap``, within [1, limit]."""
    if p1 is None or p2 is None:
        return None
    slope = p2 - p1
    if slope <= 0:
        return limit
    return max(1, min(limit, 1 + math.floor((cap - p1) / slope)))


# -- fewest GPUs -------------------------------------------------------------------------------

class MinGpus(NamedTuple):
    """``gpus`` (None when no count fits), why, how many GPUs one step of the strategy adds,
    the job at that count and the job one step fewer (None when there is none)."""

    gpus: Optional[int]
    reason: str
    step_gpus: int
    job: Optional[Job]
    fewer: Optional[Job] = None


def _fits_at(engine: "Engine", job: Job) -> tuple[bool, Optional[float]]:
    """(fits, peak bytes) of ``job`` as the engine's verdict reads it: its policy over the
    plugins cheap enough to search, the job's calibration knobs, and the usable memory after
    its safety margin (fmest.physics.calibration)."""
    from fmest.physics.calibration import calibrate_memory, usable_bytes

    try:
        ctx = engine.context(job)
        est = engine.decide("memory", job, ctx=ctx, searching=True).chosen
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


def _runnable_dp(mp: int, gpus_per_node: int, most: int) -> list[int]:
    """Every dp in 1..most whose world ``dp * mp`` can run: within one node, or whole nodes
    (the multiples of the smallest dp that fills them). Computed, not scanned: the scan of
    4096 counts cost more than the search."""
    within = list(range(1, min(most, gpus_per_node // mp) + 1))
    step = gpus_per_node // math.gcd(mp, gpus_per_node)
    start = max(step, (len(within) // step + 1) * step)
    return within + list(range(start, most + 1, step))


def min_gpus(engine: "Engine", job: Job, *,
             known: Optional[tuple["Layout", bool, float]] = None) -> MinGpus:
    """The fewest GPUs of the job's type at which ``job`` fits, keeping its strategy.

    * A strategy that shards state over data-parallel ranks (ZeRO-1/2/3, FSDP) grows ``dp``;
      one step is ``tp x pp x cp`` GPUs.
    * Plain data parallelism (DDP / ZeRO-0) keeps a full replica per rank, so more ranks never
      help; when the user set ``tp``/``pp`` those grow together, keeping their ratio
      (``tp x k``, ``pp x k`` for k = 1, 2, 4, ...), the data-parallel degree kept.
    * Counts beyond one node are whole nodes (``gpus_per_node``, default 8), so the layout the
      answer names can be run.

    ``None`` comes with the reason: the per-GPU floor that no count goes below (activations,
    unsharded layers, buffers) or a layout limit (heads, layers).

    ``known``: ``(layout, fits, peak bytes)`` of the job as the report already estimated it;
    when that layout is one of the candidates, its answer is used instead of probing it again
    (the report's verdict is the search's own rule: same policy, knobs and usable memory)."""
    par = job.parallelism
    cap = engine.registries.gpus.get(job.hardware.gpu).memory_bytes
    if job.mode != "training":
        return MinGpus(None, "min_gpus is searched for training jobs", 1, None)
    gpn = job.hardware.gpus_per_node or DEFAULT_GPUS_PER_NODE
    strategy = engine.context(job).sharding     # raises InputError naming a bad field
    mp = par.tp * par.pp * par.cp
    make: Callable[[int], Job]
    world: Callable[[int], int]
    if strategy.shards:
        # only layouts the job's rules accept: expert parallelism needs ep | dp*cp (or dp); a
        # refused layout counted as "does not fit" would break the search's monotone order
        candidates = [d for d in _runnable_dp(mp, gpn, MAX_GPUS // mp)
                      if par.ep == 1 or (d * par.cp) % par.ep == 0 or d % par.ep == 0]

        def make(d: int) -> Job:
            return _with_world(job, dp=d, tp=par.tp, pp=par.pp, gpus_per_node=gpn)

        def world(d: int) -> int:
            return d * mp
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

        def make(k: int) -> Job:
            return _with_world(job, dp=dp, tp=par.tp * k, pp=par.pp * k, gpus_per_node=gpn)

        def world(k: int) -> int:
            return dp * par.tp * k * par.pp * k * par.cp
        what = f"tp and pp together (ratio {par.tp}:{par.pp}) under {strategy.name}"
        step = mp * dp
    if not candidates:
        return MinGpus(None, f"no layout of {strategy.name} with these degrees is valid for "
                       "the model", step, None)
    jobs = _LazyJobs(make, candidates, world)
    from fmest.physics.calibration import usable_bytes

    usable = usable_bytes(cap, job.calibration.safety_margin)
    found, peak = _first_fitting(engine, jobs, usable, _seed(jobs, known))
    if found is None:
        last = len(jobs) - 1
        if not strategy.shards and par.tp == 1 and par.pp == 1:
            return MinGpus(None, f"{strategy.name} keeps a full replica of the model state on "
                           "every GPU, so no count fits; shard it (--zero 3 / --fsdp "
                           "full_shard) or split the model (--tp/--pp)", step, None)
        floor = "" if peak is None else f"; per-GPU memory stays at {peak / GIB:.1f} GiB"
        n = _world_gpus(jobs[last])
        return MinGpus(None, f"does not fit on {cap / GIB:.0f} GiB GPUs at any count up to "
                       f"{n} growing {what}{floor} (activations, unsharded layers and buffers "
                       "do not shrink with more GPUs)", step, None)
    best = jobs[found]
    fewer = jobs[found - 1] if found > 0 else None
    return MinGpus(_world_gpus(best), f"fewest {job.hardware.gpu} GPUs that fit, growing "
                   f"{what}", step, best, fewer)


class _LazyJobs:
    """The candidate jobs of a search, built when probed (a search probes a handful of the
    hundreds of counts it could)."""

    def __init__(self, make: Callable[[int], Job], candidates: list[int],
                 world: Callable[[int], int]) -> None:
        self._make, self._candidates = make, candidates
        self._built: dict[int, Job] = {}
        #: GPUs of each candidate, computed without building its job
        self.worlds = [world(c) for c in candidates]

    def __len__(self) -> int:
        return len(self._candidates)

    def __getitem__(self, i: int) -> Job:
        i = i % len(self._candidates)
        if i not in self._built:
            self._built[i] = self._make(self._candidates[i])
        return self._built[i]


def _seed(jobs: _LazyJobs, known: Optional[tuple["Layout", bool, float]]
          ) -> dict[int, tuple[bool, Optional[float]]]:
    """``{index: (fits, peak)}`` of the candidate whose layout is the report's own, if any."""
    if known is None:
        return {}
    from fmest.job import resolve_layout

    layout, fits, peak = known
    for i, n in enumerate(jobs.worlds):
        if n == layout.world_size and resolve_layout(jobs[i]) == layout:
            return {i: (fits, peak)}
    return {}


def _first_fitting(engine: "Engine", jobs: _LazyJobs, cap: float,
                   seed: Optional[dict[int, tuple[bool, Optional[float]]]] = None
                   ) -> tuple[Optional[int], Optional[float]]:
    """Index of the first of ``jobs`` (ever more GPUs) that fits, or None, and the peak of the
    last job (the floor no count goes below, when none fits).

    The smallest and largest counts bracket the answer; each next probe is where the curve
    ``A + B / n`` through the bracket's two ends crosses the usable memory (regula falsi in
    ``1 / n``), kept strictly inside the bracket, until the bracket closes."""

    probed: dict[int, tuple[bool, Optional[float]]] = dict(seed or {})

    def probe(i: int) -> tuple[bool, Optional[float]]:
        if i not in probed:
            probed[i] = _fits_at(engine, jobs[i])
        return probed[i]

    last = len(jobs) - 1
    # a known count that does not fit rules out every smaller one; one that fits, every larger
    known_lo = max((i for i, (fit, _) in probed.items() if not fit), default=None)
    known_hi = min((i for i, (fit, _) in probed.items() if fit), default=None)
    if known_lo is None and probe(0)[0]:
        return 0, None
    if known_hi is None:
        last_fit, last_peak = probe(last)
        if not last_fit:
            return None, last_peak
    lo = known_lo if known_lo is not None else 0       # does not fit
    hi = known_hi if known_hi is not None else last    # fits
    if hi < lo:     # memory not monotone in the count: the exhaustive rule, first that fits
        return next((i for i in range(len(jobs)) if probe(i)[0]), None), None
    while hi - lo > 1:
        guess = _inverse_guess(jobs.worlds, lo, hi, probed[lo][1], probed[hi][1], cap)
        if guess is None:
            guess = (lo + hi) // 2
        if probe(guess)[0]:
            hi = guess
        else:
            lo = guess
    return hi, None


def _inverse_guess(worlds: list[int], lo: int, hi: int, lo_peak: Optional[float],
                   hi_peak: Optional[float], cap: float) -> Optional[int]:
    """The first index in (lo, hi) whose GPU count ``n`` has ``A + B / n <= cap`` on the curve
    through the peaks at ``lo`` and ``hi``; the index just below ``hi`` when the curve says
    ``hi`` itself, so every probe narrows the bracket."""
    if lo_peak is None or hi_peak is None or lo_peak <= hi_peak:
        return None
    n0, n1 = worlds[lo], worlds[hi]
    b = (lo_peak - hi_peak) / (1 / n0 - 1 / n1)
    a = hi_peak - b / n1
    if cap <= a:
        return None
    need = b / (cap - a)
    first, last = lo + 1, hi - 1
    while first < last:             # GPU counts grow with the index
        mid = (first + last) // 2
        if worlds[mid] >= need:
            last = mid
        else:
            first = mid + 1
    return first
