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

Both answer at a confidence (``options.fit_confidence``, ``--fit-confidence``, default 0.9): a
candidate fits when P(fit) >= the confidence, P(fit) from the candidate's memory answer and its
P10-P90 interval (:func:`fmest.uncertainty.with_interval`, as the report's own answer gets it;
:func:`fmest.estimates.fits_probability`); an answer without an interval fits by its point
estimate. P(fit) >= c is the same test as "the answer's c-quantile <= usable memory"
(:func:`peak_quantile`), and that quantile is the answer times a constant of the interval's
shape (the table's P10/P90 ratios), so it is affine in the micro-batch and ``A + B / n`` in the
GPUs as the point answer is: the guesses above are made on the quantile, unchanged.
"""

from __future__ import annotations

import functools
import math
from statistics import NormalDist
from typing import TYPE_CHECKING, Callable, NamedTuple, Optional, Sequence

from fmest.errors import InfeasibleError, InputError
from fmest.estimates import INTERVAL_QUANTILES, MemoryEstimate, fits_probability
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


# -- a candidate at a confidence ---------------------------------------------------------------

#: the standard normal quantile at the interval's high end (P90): the interval's half-width in
#: sigmas, as :func:`fmest.estimates.fits_probability` reads it
_Z_HIGH = NormalDist().inv_cdf(INTERVAL_QUANTILES[1])


def peak_quantile(total_bytes: float, interval: Optional[tuple[float, float]],
                  confidence: float) -> float:
    """The ``confidence``-quantile of the peak under :func:`fmest.estimates.fits_probability`'s
    split log-normal (median ``total_bytes``, each side's spread read from its end of the P10-P90
    ``interval``): P(fit) >= ``confidence`` exactly when this is <= the usable memory. The point
    itself without an interval."""
    if interval is None or total_bytes <= 0:
        return float(total_bytes)
    low, high = interval
    if confidence >= 0.5:
        spread = math.log(high / total_bytes) if high > total_bytes else 0.0
    else:
        spread = math.log(total_bytes / low) if 0 < low < total_bytes else 0.0
    return total_bytes * math.exp(spread * _z(confidence) / _Z_HIGH)


@functools.lru_cache(maxsize=64)
def _z(confidence: float) -> float:
    """The standard normal quantile at ``confidence`` (one per level in use)."""
    return NormalDist().inv_cdf(confidence)


class Judged(NamedTuple):
    """One candidate's verdict at a confidence: ``fits`` (P(fit) >= confidence, or the point
    verdict without an interval), ``peak`` (the peak at the confidence, :func:`peak_quantile`:
    what the searches' guesses read), ``point`` (the answer's own peak) and ``probability``
    (P(fit); ``None`` without an interval)."""

    fits: bool
    peak: float
    point: float
    probability: Optional[float]


def judge(job: Job, memory: MemoryEstimate, usable_bytes: float,
          confidence: Optional[float] = None) -> Judged:
    """``memory`` (the job's calibrated answer) judged at ``confidence`` (default: the job's
    ``options.fit_confidence``), with the interval the report's answer would get
    (:func:`fmest.uncertainty.with_interval`: analytic training answers that have none)."""
    from fmest.uncertainty import interval_of

    level = job.options.fit_confidence if confidence is None else confidence
    total, interval = float(memory.total_bytes), interval_of("memory", job, memory)
    p = fits_probability(total, interval, usable_bytes)
    if p is None:
        return Judged(total <= usable_bytes, total, total, None)
    return Judged(p >= level, peak_quantile(total, interval, level), total, p)


def _level_text(confidence: Optional[float]) -> str:
    """How a search's answer was judged, for its reason text."""
    if confidence is None:
        return "by the point estimate (the answers have no interval)"
    return f"at P(fit) >= {confidence * 100:g} %"


# -- largest micro-batch ------------------------------------------------------------------------

class MaxMicroBatch(NamedTuple):
    """``batch`` (0 if even 1 does not fit) and ``confidence``: the P(fit) level it was judged at,
    ``None`` when the answers had no interval (the point estimate's verdict)."""

    batch: int
    confidence: Optional[float]


def max_micro_batch(engine: "Engine", job: Job, ctx: "EstimateContext", *,
                    limit: int = MAX_MICRO_BATCH, confidence: Optional[float] = None,
                    known: Optional[MemoryEstimate] = None) -> int:
    """Largest micro-batch that fits the GPU at ``confidence`` (default: the job's
    ``options.fit_confidence``; 0 if even 1 does not fit): :func:`largest_micro_batch`."""
    return largest_micro_batch(engine, job, ctx, limit=limit, confidence=confidence,
                               known=known).batch


def largest_micro_batch(engine: "Engine", job: Job, ctx: "EstimateContext", *,
                        limit: int = MAX_MICRO_BATCH, confidence: Optional[float] = None,
                        known: Optional[MemoryEstimate] = None) -> MaxMicroBatch:
    """Largest micro-batch whose peak fits the GPU with P(fit) >= ``confidence`` (the point
    verdict for answers without an interval), and the level used.

    ``known``: the report's own memory answer for ``job`` (calibrated, a paged optimizer's
    states paged out: the ``memory`` of :meth:`fmest.engine.Engine.estimate`); when the
    search's decision asks the same plugins as the report's
    (:meth:`fmest.engine.Engine.search_asks_the_same`), it is the probe at the job's own
    micro-batch, not decided again."""
    from fmest.engine import calibrated, paged_to_host, usable_memory_bytes

    level = job.options.fit_confidence if confidence is None else confidence
    cap = usable_memory_bytes(job, ctx)
    judged: dict[int, Optional[Judged]] = {}
    if known is not None and engine.search_asks_the_same(job):
        judged[job.training.micro_batch_size] = judge(job, known, cap, level)

    def probe(b: int) -> Optional[Judged]:
        if b not in judged:
            j = job.evolve(training={"micro_batch_size": b})
            chosen = engine.decide("memory", j, ctx=ctx, searching=True).chosen
            judged[b] = None if chosen is None else \
                judge(j, paged_to_host(j, ctx, calibrated(job, chosen)), cap, level)
        return judged[b]

    def peak(b: int) -> Optional[float]:
        p = probe(b)
        return None if p is None else p.peak

    def fits(b: int) -> bool:
        p = probe(b)
        return p is not None and p.fits

    def answer(b: int) -> MaxMicroBatch:
        interval = any(p is not None and p.probability is not None for p in judged.values())
        return MaxMicroBatch(b, level if interval else None)

    if not fits(1):
        return answer(0)
    guess = _affine_guess(peak(1), peak(2), cap, limit)
    if guess is not None and fits(guess) and (guess >= limit or not fits(guess + 1)):
        return answer(guess)
    # the line missed (rounding, a term that is not affine): the exhaustive search, which
    # reuses the probes made so far
    lo, hi = 1, 2
    while hi <= limit and fits(hi):
        lo, hi = hi, hi * 2
    if hi > limit:
        return answer(lo)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return answer(lo)


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
    """``gpus`` (the fewest GPUs that fit, any count the layout accepts; None when no count
    fits), why, how many GPUs one step of the strategy adds, the job at that count and the job
    one step fewer (None when there is none); ``whole_node_gpus`` and ``nodes``: the fewest
    GPUs in whole nodes of ``gpus_per_node`` (== ``gpus`` within one node) and how many nodes
    that is, with its job; ``confidence``: the P(fit) level the counts were judged at (``None``
    when the answers had no interval: the point estimate's verdict)."""

    gpus: Optional[int]
    reason: str
    step_gpus: int
    job: Optional[Job]
    fewer: Optional[Job] = None
    whole_node_gpus: Optional[int] = None
    nodes: Optional[int] = None
    whole_node_job: Optional[Job] = None
    confidence: Optional[float] = None
    gpus_per_node: int = 8


def _fits_at(engine: "Engine", job: Job, confidence: Optional[float] = None
             ) -> tuple[bool, Optional[float]]:
    """(fits, peak bytes at the confidence) of ``job`` as the engine's verdict reads it: its
    policy over the plugins cheap enough to search, the job's calibration knobs, the usable
    memory after its safety margin (fmest.physics.calibration), and P(fit) >= ``confidence``
    (default: the job's) where the answer has an interval (:func:`judge`)."""
    found = _judge_at(engine, job, confidence)
    return (False, None) if found is None else (found.fits, found.peak)


def _judge_at(engine: "Engine", job: Job, confidence: Optional[float] = None
              ) -> Optional[Judged]:
    """:func:`judge` of ``job``'s searched memory answer; None when there is none (refused)."""
    from fmest.physics.calibration import apply_calibration, usable_bytes

    try:
        ctx = engine.context(job)
        est = engine.decide("memory", job, ctx=ctx, searching=True).chosen
    except (InputError, InfeasibleError):
        return None
    knobs = job.calibration
    if est is not None:
        est = apply_calibration(est, knobs)
    remember = getattr(engine, "remember_searched", None)
    if remember is not None:    # the fit advice's "more GPUs" candidate is one of these jobs
        remember(job, ctx, est)
    if est is None:
        return None
    return judge(job, est, usable_bytes(ctx.gpu.capacity_bytes, knobs.safety_margin), confidence)


def node_split(world: int, gpus_per_node: int, tp: int = 1) -> tuple[int, int]:
    """``(GPUs per node, nodes)`` of ``world`` GPUs on nodes of at most ``gpus_per_node``: one
    node when it holds them, else the fewest nodes that split them evenly with whole tensor-
    parallel groups on each (18 GPUs on 8-GPU nodes: 3 nodes of 6; as
    :func:`fmest.job.resolve_layout` spreads ``--dp 18``)."""
    if world <= gpus_per_node:
        return world, 1
    keep_tp = tp if tp <= gpus_per_node else 1
    for nodes in range(-(-world // gpus_per_node), world + 1):
        if world % nodes == 0 and (world // nodes) % keep_tp == 0:
            return world // nodes, nodes
    return 1, world  # unreachable: nodes = world gives one GPU per node (keep_tp 1 then)


def _even_on_fewest_nodes(world: int, gpus_per_node: int, tp: int = 1) -> bool:
    """Whether ``world`` GPUs fit one node, or split evenly (whole tensor-parallel groups on
    each) over the fewest nodes of ``gpus_per_node`` that hold them: launchers start the same
    number of processes on every node (torchrun ``--nproc_per_node``), and a count that only
    splits as one GPU on each of many nodes is no layout anyone runs on multi-GPU servers."""
    if world <= gpus_per_node:
        return True
    nodes = -(-world // gpus_per_node)
    keep_tp = tp if tp <= gpus_per_node else 1
    return world % nodes == 0 and (world // nodes) % keep_tp == 0


def _with_world(job: Job, *, dp: int, tp: int, pp: int, gpus_per_node: int) -> Job:
    world = dp * tp * pp * job.parallelism.cp
    gpn, nodes = node_split(world, gpus_per_node, tp)
    return job.evolve(parallelism={"dp": dp, "tp": tp, "pp": pp},
                      hardware={"gpus_per_node": gpn, "nodes": nodes})


def _world_gpus(job: Job) -> int:
    """GPUs of a job built by :func:`_with_world`, which always sets ``gpus_per_node``."""
    gpn = job.hardware.gpus_per_node
    assert gpn is not None, "_with_world sets hardware.gpus_per_node"
    return gpn * job.hardware.nodes


def _whole_nodes(world: int, gpus_per_node: int) -> bool:
    """Whether ``world`` GPUs run within one node or on whole nodes."""
    return world <= gpus_per_node or world % gpus_per_node == 0


def _runnable_dp(mp: int, gpus_per_node: int, most: int) -> list[int]:
    """Every dp in 1..most whose world ``dp * mp`` can run: within one node, or whole nodes
    (the multiples of the smallest dp that fills them). Computed, not scanned: the scan of
    4096 counts cost more than the search."""
    within = list(range(1, min(most, gpus_per_node // mp) + 1))
    step = gpus_per_node // math.gcd(mp, gpus_per_node)
    start = max(step, (len(within) // step + 1) * step)
    return within + list(range(start, most + 1, step))


def _even_worlds(mp: int, gpus_per_node: int, tp: int, most: int) -> list[int]:
    """Every dp in 1..most whose world ``dp * mp`` passes :func:`_even_on_fewest_nodes`,
    increasing: computed node count by node count (the worlds on ``n`` nodes are ``n x g`` for
    the GPUs per node ``g`` that need exactly ``n`` nodes), not scanned (a scan of 4096 counts
    cost more than the search)."""
    gpn, top = gpus_per_node, most * mp
    keep_tp = tp if tp <= gpn else 1
    out = list(range(1, min(most, gpn // mp) + 1))     # within one node
    for nodes in range(2, gpn + 1):
        # g GPUs on each of ``nodes`` nodes need exactly that many: (nodes - 1) * gpn < n * g
        for g in range((nodes - 1) * gpn // nodes + 1, gpn + 1):
            world = nodes * g
            if world > top:
                return out
            if g % keep_tp == 0 and world % mp == 0:
                out.append(world // mp)
    # past gpn nodes only full nodes need exactly that many: worlds nodes * gpn, those that
    # are whole multiples of mp
    if gpn % keep_tp == 0:
        every = mp // math.gcd(gpn, mp)
        first = -(-max(2, gpn + 1) // every) * every
        out += [nodes * gpn // mp for nodes in range(first, top // gpn + 1, every)]
    return out


@functools.lru_cache(maxsize=256)
def _sharded_candidates(mp: int, gpus_per_node: int, tp: int, cp: int, ep: int, most: int,
                        hybrid: bool, expert_tp: Optional[int] = None
                        ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(dp candidates, their GPU counts)`` of :func:`min_gpus` for a strategy that shards
    over dp: a pure function of the degrees, so kept (a planner asks the same few layouts)."""
    if hybrid:     # shards within a node: a partial node would shard over fewer
        candidates = _runnable_dp(mp, gpus_per_node, most)
    else:   # past one node, only counts that split evenly over the fewest nodes that hold
        # them (19 on 8-GPU nodes would be 19 nodes of one GPU: 21, 3 nodes of 7, instead)
        candidates = _even_worlds(mp, gpus_per_node, tp, most)
    # only layouts the job's rules accept: the expert grid needs expert_tp x ep | tp x cp x dp
    # (fmest.job._check_expert_grid; ep | dp x cp at expert_tp = tp); a refused layout counted
    # as "does not fit" would break the search's monotone order
    grid = ep * (expert_tp or tp)
    if grid > 1:
        candidates = [d for d in candidates if (tp * cp * d) % grid == 0]
    return tuple(candidates), tuple(d * mp for d in candidates)


def min_gpus(engine: "Engine", job: Job, *,
             known: Optional[tuple["Layout", Judged]] = None,
             confidence: Optional[float] = None,
             ctx: Optional["EstimateContext"] = None) -> MinGpus:
    """The fewest GPUs of the job's type at which ``job`` fits, keeping its strategy, judged
    at ``confidence`` (default: the job's ``options.fit_confidence``; :func:`judge`).

    * A strategy that shards state over data-parallel ranks (ZeRO-1/2/3, FSDP) grows ``dp``;
      one step is ``tp x pp x cp`` GPUs.
    * Plain data parallelism (DDP / ZeRO-0) keeps a full replica per rank, so more ranks never
      help; when the user set ``tp``/``pp`` those grow together, keeping their ratio
      (``tp x k``, ``pp x k`` for k = 1, 2, 4, ...), the data-parallel degree kept.
    * ``gpus`` is the fewest count that fits one node or splits evenly over the fewest nodes
      that hold it (18 on 8-GPU nodes: 3 nodes of 6; 19 is skipped, 21 is 3 nodes of 7:
      :func:`_even_on_fewest_nodes`); ``whole_node_gpus`` /
      ``nodes`` is the fewest in whole nodes of ``gpus_per_node`` (default 8): 24, 3 nodes.
      A hybrid-sharded strategy shards within a node, so its counts are whole nodes past one
      (a partial node would shard over fewer GPUs): both answers are the same.

    ``None`` comes with the reason: the per-GPU floor that no count goes below (activations,
    unsharded layers, buffers) or a layout limit (heads, layers).

    ``known``: ``(layout, judged)`` of the job as the report already estimated it, its answer
    judged at the same confidence (:func:`judge`); when that layout is one of the candidates,
    its answer is used instead of probing it again (the report's verdict is the search's own
    rule: same policy, knobs and usable memory).

    ``ctx``: ``job``'s own context when the caller has it (a report's ``context`` for its
    ``job``), so the strategy is read from it instead of checking and resolving the job again
    (:meth:`fmest.engine.Engine.context` of that job returns that context)."""
    par = job.parallelism
    spec = engine.registries.gpus.get(job.hardware.gpu)
    cap = spec.capacity_bytes    # what CUDA reports (gpus.csv cuda_total_gib), else the label
    if job.mode != "training":
        return MinGpus(None, "min_gpus is searched for training jobs", 1, None)
    level = job.options.fit_confidence if confidence is None else confidence
    gpn = job.hardware.gpus_per_node or DEFAULT_GPUS_PER_NODE
    # raises InputError naming a bad field (a given context was built from the checked job)
    strategy = (ctx if ctx is not None else engine.context(job)).sharding
    mp = par.tp * par.pp * par.cp
    make: Callable[[int], Job]
    candidates: Sequence[int]
    worlds: Sequence[int]
    if strategy.shards:
        most = MAX_GPUS // mp
        candidates, worlds = _sharded_candidates(mp, gpn, par.tp, par.cp, par.ep, most,
                                                 strategy.hybrid, par.expert_tp)

        def make(d: int) -> Job:
            return _with_world(job, dp=d, tp=par.tp, pp=par.pp, gpus_per_node=gpn)

        what = f"dp (one step = tp*pp*cp = {mp} GPUs) under {strategy.name}"
        step = mp
    else:
        dp = par.dp or 1
        model = engine.resolve_model(job)
        ks: list[int] = []
        k = 1
        while par.tp * k * par.pp * k * par.cp * dp <= MAX_GPUS:
            tp, pp = par.tp * k, par.pp * k
            grid = par.ep * (par.expert_tp or tp)
            if (par.tp > 1 or par.pp > 1 or k == 1) and pp <= model.num_layers \
                    and model.num_attention_heads % tp == 0 and tp <= max(gpn, par.tp) \
                    and (tp * par.cp * dp) % grid == 0:
                ks.append(k)
            if par.tp == 1 and par.pp == 1:
                break
            k *= 2
        candidates = ks
        worlds = [dp * par.tp * k * par.pp * k * par.cp for k in ks]

        def make(k: int) -> Job:
            return _with_world(job, dp=dp, tp=par.tp * k, pp=par.pp * k, gpus_per_node=gpn)

        what = f"tp and pp together (ratio {par.tp}:{par.pp}) under {strategy.name}"
        step = mp * dp
    if not candidates:
        return MinGpus(None, f"no layout of {strategy.name} with these degrees is valid for "
                       "the model", step, None, gpus_per_node=gpn)
    jobs = _LazyJobs(make, candidates, worlds)
    from fmest.physics.calibration import usable_bytes

    usable = usable_bytes(cap, job.calibration.safety_margin)
    search = _Search(engine, jobs, level)
    _seed(search, known)
    found, peak = _first_fitting(search, usable)
    judged = _level_text(level if search.interval else None)
    if found is None:
        if not strategy.shards and par.tp == 1 and par.pp == 1:
            return MinGpus(None, f"{strategy.name} keeps a full replica of the model state on "
                           "every GPU, so no count fits; shard it (--zero 3 / --fsdp "
                           "full_shard) or split the model (--tp/--pp)", step, None,
                           confidence=level if search.interval else None, gpus_per_node=gpn)
        last = len(jobs) - 1
        point = search.points.get(last, peak)
        floor = "" if point is None else f"; per-GPU memory stays at {point / GIB:.1f} GiB"
        n = jobs.worlds[last]
        return MinGpus(None, f"does not fit {judged} on {spec.memory_bytes / GIB:.0f} GiB GPUs at any count "
                       f"up to {n} growing {what}{floor} (activations, unsharded layers and "
                       "buffers do not shrink with more GPUs)", step, None,
                       confidence=level if search.interval else None, gpus_per_node=gpn)
    best = jobs[found]
    fewer = jobs[found - 1] if found > 0 else None
    whole = _first_whole_node(search, found, gpn)
    confidence_used = level if search.interval else None
    gpus = jobs.worlds[found]
    where = _nodes_text(best)
    if whole is None:
        nodes_text = f"no count in whole nodes of {gpn} up to {jobs.worlds[-1]} fits"
        whole_gpus = whole_nodes = whole_job = None
    else:
        whole_job, whole_gpus = jobs[whole], jobs.worlds[whole]
        whole_nodes = max(1, whole_gpus // gpn) if whole_gpus >= gpn else 1
        nodes_text = ("the same in whole nodes" if whole_gpus == gpus and
                      _whole_nodes(gpus, gpn) else
                      f"in whole nodes of {gpn}: {whole_gpus} GPUs "
                      f"({_nodes_text(whole_job)})")
    return MinGpus(gpus, f"fewest {job.hardware.gpu} GPUs that fit {judged}, growing {what}: "
                   f"{gpus} ({where}); {nodes_text}", step, best, fewer,
                   whole_node_gpus=whole_gpus, nodes=whole_nodes, whole_node_job=whole_job,
                   confidence=confidence_used, gpus_per_node=gpn)


def _nodes_text(job: Job) -> str:
    """``one node`` / ``3 nodes of 6``: how a job built by :func:`_with_world` lies."""
    nodes = job.hardware.nodes
    return "one node" if nodes == 1 else f"{nodes} nodes of {job.hardware.gpus_per_node}"


def _first_whole_node(search: "_Search", found: int, gpus_per_node: int) -> Optional[int]:
    """Index of the first candidate from ``found`` on whose GPUs fill whole nodes (or lie
    within one) and that fits: by memory's order the first such count, probed to be sure (one
    decision more when it is not ``found`` itself)."""
    worlds = search.jobs.worlds
    for i in range(found, len(worlds)):
        if _whole_nodes(worlds[i], gpus_per_node) and search.probe(i)[0]:
            return i
    return None


class _LazyJobs:
    """The candidate jobs of a search, built when probed (a search probes a handful of the
    hundreds of counts it could)."""

    def __init__(self, make: Callable[[int], Job], candidates: Sequence[int],
                 worlds: Sequence[int]) -> None:
        self._make, self._candidates = make, candidates
        self._built: dict[int, Job] = {}
        #: GPUs of each candidate, increasing (computed once per layout:
        #: :func:`_sharded_candidates`)
        self.worlds = worlds

    def __len__(self) -> int:
        return len(self._candidates)

    def __getitem__(self, i: int) -> Job:
        i = i % len(self._candidates)
        if i not in self._built:
            self._built[i] = self._make(self._candidates[i])
        return self._built[i]


def _seed(search: "_Search", known: Optional[tuple["Layout", "Judged"]]) -> None:
    """Record the report's own answer as the probe of the candidate with its layout, if any."""
    if known is None:
        return
    from fmest.job import resolve_layout

    layout, judged = known
    jobs = search.jobs
    try:
        i = jobs.worlds.index(layout.world_size)
    except ValueError:
        return
    if resolve_layout(jobs[i]) == layout:
        search.record(i, judged)


class _Search:
    """The probes of one fewest-GPU search: ``(fits, peak at the confidence)`` per candidate
    index, and whether any answer had an interval."""

    def __init__(self, engine: "Engine", jobs: _LazyJobs, confidence: float) -> None:
        self.engine, self.jobs, self.confidence = engine, jobs, confidence
        self.probed: dict[int, tuple[bool, Optional[float]]] = {}
        #: the answers' own peaks (the floor a reason names), by index
        self.points: dict[int, float] = {}
        self.interval = False

    def record(self, i: int, found: Optional[Judged]) -> None:
        if found is None:
            self.probed[i] = (False, None)
            return
        self.interval = self.interval or found.probability is not None
        self.probed[i] = (found.fits, found.peak)
        self.points[i] = found.point

    def probe(self, i: int) -> tuple[bool, Optional[float]]:
        if i not in self.probed:
            self.record(i, _judge_at(self.engine, self.jobs[i], self.confidence))
        return self.probed[i]


def _first_fitting(search: _Search, cap: float) -> tuple[Optional[int], Optional[float]]:
    """Index of the first of the search's jobs (ever more GPUs) that fits, or None, and the
    peak of the last job (the floor no count goes below, when none fits).

    The smallest and largest counts bracket the answer; each next probe is where the curve
    ``A + B / n`` through the bracket's two ends crosses the usable memory (regula falsi in
    ``1 / n``), kept strictly inside the bracket, until the bracket closes. The peaks are at
    the search's confidence (:func:`peak_quantile`: the point times a constant, so the curve is
    the same shape)."""
    probed, probe, jobs = search.probed, search.probe, search.jobs
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
    # Illinois: an end kept twice in a row has its excess over the cap halved in the next
    # guess, so the bracket closes from both sides (plain regula falsi creeps from one)
    weight = {"lo": 1.0, "hi": 1.0}
    moved = ""
    while hi - lo > 1:
        lo_peak, hi_peak = probed[lo][1], probed[hi][1]
        if lo_peak is not None:
            lo_peak = cap + (lo_peak - cap) * weight["lo"]
        if hi_peak is not None:
            hi_peak = cap - (cap - hi_peak) * weight["hi"]
        guess = _inverse_guess(jobs.worlds, lo, hi, lo_peak, hi_peak, cap)
        if guess is None:
            guess = (lo + hi) // 2
        if probe(guess)[0]:
            hi, now, kept = guess, "hi", "lo"
        else:
            lo, now, kept = guess, "lo", "hi"
        weight[now] = 1.0
        weight[kept] = weight[kept] / 2 if moved == now else 1.0
        moved = now
    return hi, None


def _inverse_guess(worlds: Sequence[int], lo: int, hi: int, lo_peak: Optional[float],
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
