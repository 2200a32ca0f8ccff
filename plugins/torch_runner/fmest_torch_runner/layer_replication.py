"""Layer replication: the fake trace of an L-layer model built from traces of a few layers.

A fake trace spends nearly all of its time dispatching ops, and nearly all ops belong to the
decoder layers, which (in most models) are identical. The tracker's state changes
(:attr:`fmest_torch_runner.tracker.StorageTracker.log`: allocations with their exact bytes and
category, frees, relabels, phase windows) of a model with ``k`` identical layers are then
"the same log with one more layer's worth of entries inserted" for ``k + 1`` layers. This module

1. checks that the layers of the full model are structurally identical (same modules,
   parameter shapes/dtypes and scalar attributes, ``layer_idx`` aside; per-layer config lists
   uniform) and identical to those of the small models (:func:`eligible`);
2. traces the same run with ``b``, ``b + 1``, ``b + 2`` and ``b + 3`` layers (``b`` = ``K0``),
   recording the tracker log (:func:`_trace_log`), each run of consecutive frees put in
   ordinal order (:func:`canonical`: storages that die together do so in either order from
   one run to the next, and nothing the trace yields depends on that order);
3. aligns the ``b``-layer log into the ``b + 1`` and ``b + 2`` ones (insertion-only, greedy:
   :func:`_align`), giving the insertion points and the inserted blocks, and fits every
   reference (the ordinal of the allocation a free or relabel refers to) as an affine function
   of the number of inserted copies and of the copy it sits in (:func:`_fit`);
4. synthesises the ``b + 3``-layer log from that fit and requires it to equal the traced one,
   entry for entry (:func:`fit`) -- else ``b`` moves up one layer (``TRIES`` bases in all),
   and when no base fits the full model is traced as before (:func:`run_replicated` returns
   False);
5. synthesises the L-layer log and replays it through a fresh tracker
   (:meth:`~fmest_torch_runner.tracker.StorageTracker.replay_log`), which yields the same
   windows, peaks, breakdowns, window ends and allocation events (up to the order of frees
   that happen together) -- hence the same allocator replay -- as tracing the L-layer model
   (``plugins/torch_runner/tests/test_layer_replication.py`` compares the two on dense, LoRA
   and gradient-checkpointed bf16-autocast configurations).

Parameter counts are affine in the layer count too (checked on the four small models).
``FMEST_TRACE_REPLICATE=0`` turns replication off; FSDP traces, encoder-decoders, VLMs and
QLoRA are never replicated. Timings (2-core CPU, cold, in-process): Llama-2-7B LoRA s4096 traces
1..4 layers in ~1.5 s instead of 32 in ~4-5 s; Llama-2-70B ~1.5 s instead of ~10 s.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, Optional

import attrs

from fmest_torch_runner.records import RunResult, RunSpec, torch_dtype

if TYPE_CHECKING:
    import torch

    from fmest_torch_runner.tracker import StorageTracker

#: layer counts traced: K0 .. K0 + 3 (the last one only checks the fit); when the fit fails,
#: the base moves up one layer (one more trace) up to ``K0 + TRIES - 1``
K0 = 1
TRIES = 2
#: models with fewer layers are traced whole (K0 .. K0 + 3 = 10 layers of tracing, up to 15)
MIN_LAYERS = 16
#: scalar module attributes that legitimately differ between identical layers
_INDEX_ATTRS = frozenset({"layer_idx", "layer_id", "layer_index", "layer_number", "idx"})
_SCALARS = (bool, int, float, str, type(None))


# -- which runs can be replicated ------------------------------------------------------------

def _scalar_attrs(mod: Any) -> tuple:
    out = []
    for k, v in sorted(vars(mod).items()):
        if k in _INDEX_ATTRS:
            continue
        if isinstance(v, _SCALARS) or (isinstance(v, tuple)
                                       and all(isinstance(x, _SCALARS) for x in v)):
            out.append((k, v))
    return tuple(out)


def layer_signature(layer: torch.nn.Module) -> tuple:
    """What makes two decoder layers behave alike in a trace: per submodule its class and
    scalar attributes (``layer_idx`` and the like aside), per parameter/buffer its shape,
    dtype and ``requires_grad``."""
    mods = tuple((name, type(m).__qualname__, _scalar_attrs(m))
                 for name, m in layer.named_modules())
    params = tuple((name, tuple(p.shape), str(p.dtype), bool(p.requires_grad))
                   for name, p in layer.named_parameters(remove_duplicate=False))
    bufs = tuple((name, tuple(b.shape), str(b.dtype))
                 for name, b in layer.named_buffers(remove_duplicate=False))
    return mods, params, bufs


def _config_uniform(cfg: Any, layers: int) -> bool:
    """No per-layer config list that varies (``layer_types``, ``mlp_only_layers`` ...)."""
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    for value in vars(text).values():
        if isinstance(value, (list, tuple)) and len(value) == layers:
            if any(v != value[0] for v in value):
                return False
    if getattr(text, "mlp_only_layers", None):
        return False
    return True


def _meta_layers(run: RunSpec, cfg: Any = None) -> tuple[Any, list]:
    """(config, decoder layers) of ``run``'s base model built on the meta device."""
    import torch

    from fmest_torch_runner.model_builder import (
        _attn_impl,
        _auto_class,
        build_config,
        decoder_layers,
    )

    cfg = build_config(run) if cfg is None else cfg
    with torch.device("meta"):
        model = _auto_class(cfg).from_config(cfg, dtype=torch_dtype(run.param_dtype),
                                             attn_implementation=_attn_impl(run.attention,
                                                                            "fake"))
    return cfg, decoder_layers(model)


def eligible(run: RunSpec, min_layers: Optional[int] = None) -> Optional[int]:
    """The run's layer count when it can be replicated (at least ``min_layers``, default
    :data:`MIN_LAYERS`), else None."""
    if os.environ.get("FMEST_TRACE_REPLICATE", "1") == "0":
        return None
    if run.fsdp_world_size > 1 or run.technique not in ("full", "lora"):
        return None
    try:
        return _eligible_layers(run, MIN_LAYERS if min_layers is None else min_layers)
    except Exception:  # anything the meta build cannot do: trace the whole model
        return None


def _eligible_layers(run: RunSpec, min_layers: int) -> Optional[int]:
    from fmest_torch_runner.model_builder import build_config

    cfg = build_config(run)
    if getattr(cfg, "is_encoder_decoder", False) or getattr(cfg, "vision_config", None):
        return None
    n = getattr(cfg, "num_hidden_layers", None)
    if not isinstance(n, int) or n < max(min_layers, K0 + TRIES + 3):
        return None
    if not _config_uniform(cfg, n):
        return None
    _, layers = _meta_layers(run, cfg)
    if len(layers) != n:
        return None
    sig = layer_signature(layers[0])
    if any(layer_signature(layer) != sig for layer in layers[1:]):
        return None
    most = K0 + TRIES + 2  # the most layers a small trace has
    _, small = _meta_layers(attrs.evolve(run, num_layers=most))
    if len(small) != most or any(layer_signature(layer) != sig for layer in small):
        return None
    return n


# -- tracing a small model ---------------------------------------------------------------------

@attrs.define
class _Trace:
    log: list
    params: int
    trainable: int
    step_seconds: list


def _trace_log(run: RunSpec, round_bytes: int) -> Optional[_Trace]:
    """The recorded tracker log of ``run`` on fake tensors (None: not replayable)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from fmest_torch_runner.model_builder import build_model
    from fmest_torch_runner.steps import count_params, train_steps
    from fmest_torch_runner.tracker import StorageTracker

    fake_mode = FakeTensorMode()
    model = build_model(run, "fake", fake_mode)
    counted = RunResult(mode="fake")
    count_params(model, counted)
    with fake_mode:
        tracker = StorageTracker(round_bytes=round_bytes, record=True)
        with tracker:
            seconds = train_steps(model, run, "fake", tracker)
    # what run_fake reads its results from: the log up to here (the model is still alive)
    log = None if tracker.log is None else canonical(tracker.log)
    tracker.log = None
    del model
    if log is None:
        return None
    return _Trace(log=log, params=int(counted.params or 0),
                  trainable=int(counted.trainable_params or 0), step_seconds=seconds)


# -- aligning, fitting, synthesising -------------------------------------------------------------

def canonical(log: list) -> list:
    """``log`` with every run of consecutive frees in ascending ordinal order.

    The order in which several storages die at once is not stable from run to run (two
    activations freed together as the forward returns come in either order in identical
    traces), and nothing the trace yields depends on it: a free never makes a peak, the
    window ends, categories and the largest freed block do not depend on it, and the
    caching-allocator replay (:meth:`fmest.allocator.CachingAllocator.free`) merges a freed
    block with its free neighbours, which gives the same free blocks and counters in either
    order."""
    out = list(log)
    i, n = 0, len(out)
    while i < n:
        if out[i][0] != "f":
            i += 1
            continue
        j = i
        while j < n and out[j][0] == "f":
            j += 1
        if j - i > 1:
            out[i:j] = sorted(out[i:j])
        i = j
    return out


def _shapes(log: list, table: dict, context: int) -> tuple[list[int], list[int]]:
    """Per entry an interned shape id, and per entry the ordinal it references (-1: none).
    An allocation's shape is the entry itself; a free's or relabel's is the referenced
    allocation's bytes and category plus the plain shapes of the log entries around that
    allocation, ``context`` entries on either side (a free of the last element of an op's
    outputs then does not look like a free of something another op allocated)."""
    plain: list[tuple] = []
    where: list[int] = []  # log position of each allocation
    refs: list[int] = []
    for pos, op in enumerate(log):
        kind = op[0]
        if kind == "a":
            where.append(pos)
            plain.append(op)
            refs.append(-1)
        elif kind in ("f", "r"):
            target = log[where[op[1]]]
            plain.append((kind, target[1], target[2]) + tuple(op[2:]))
            refs.append(op[1])
        else:
            plain.append(op)
            refs.append(-1)
    shapes: list[int] = []
    last = len(log) - 1
    for pos in range(len(log)):
        if refs[pos] < 0:
            key: tuple = plain[pos]
        else:
            at = where[refs[pos]]
            key = (plain[pos],
                   *(plain[q] if 0 <= q <= last else None
                     for q in range(at - context, at + context + 1) if q != at))
        shapes.append(table.setdefault(key, len(table)))
    return shapes, refs


#: log entries on either side of an allocation that a reference to it is told apart by,
#: tried in turn: 1 lets a one-layer base fit (its only layer is first and last, so wider
#: contexts differ from a middle layer's); 3 tells a layer norm's gradient from the final
#: norm's (GPT-BigCode, Granite)
CONTEXTS = (1, 3)
#: match lengths the alignment tries, longest first (:func:`_align`)
WINDOWS = (48, 16, 8, 4)


def _common_run(a: list[int], i: int, b: list[int], j: int, cap: int) -> int:
    """How many entries ``a[i:]`` and ``b[j:]`` share from the start (at most ``cap``)."""
    k = 0
    while k < cap and i + k < len(a) and j + k < len(b) and a[i + k] == b[j + k]:
        k += 1
    return k


def _align(a: list[int], b: list[int],
           window: int) -> Optional[list[tuple[int, int, int]]]:
    """``b`` as ``a`` with blocks inserted: ``[(position in a, start in b, length)]``, the
    insertions in order (greedy: each placed after the longest common run, its length the
    shortest after which ``window`` entries match again, else the one that resumes the longest
    match); None when ``b`` is not ``a`` with insertions. A wrong guess is caught by the
    fit's check (:func:`run_replicated` then tries a shorter window)."""
    n, m = len(a), len(b)
    extra = m - n
    if extra <= 0:
        return None
    i = j = 0
    out: list[tuple[int, int, int]] = []
    while i < n:
        if j < m and a[i] == b[j]:
            i += 1
            j += 1
            continue
        left = extra - sum(x[2] for x in out)
        w = min(window, n - i)
        first = a[i]
        best, best_run = 0, 0
        # a match that reaches the end of ``a`` must reach the end of ``b``
        candidates = [m - j - w] if w == n - i else range(1, left + 1)
        for p in candidates:
            if p < 1 or p > left or j + p >= m or b[j + p] != first:
                continue
            run = _common_run(a, i, b, j + p, w)
            if run > best_run:
                best, best_run = p, run
                if run == w:
                    break
        if not best:
            return None
        out.append((i, j, best))
        j += best
    if j < m:
        out.append((n, j, m - j))
    if sum(x[2] for x in out) != extra:
        return None
    return out


def _align_from_end(a: list[int], b: list[int],
                    window: int) -> Optional[list[tuple[int, int, int]]]:
    """:func:`_align` run from the ends of the logs: each insertion placed as early as the
    entries allow instead of as late (the two differ where a layer's entries look like the
    entries next to the repeated run, e.g. a layer norm's gradients and the final norm's)."""
    rev = _align(a[::-1], b[::-1], window)
    if rev is None:
        return None
    n, m = len(a), len(b)
    return [(n - i, m - j - p, p) for i, j, p in reversed(rev)]


def _split(x: list[int], y: list[int]) -> Optional[list[int]]:
    """Lengths ``t1, t2 ...`` of consecutive pieces ``S1 S2 ...`` of ``x`` with ``y`` equal to
    ``S1 S1 S2 S2 ...`` (two insertion points that touch, e.g. the end of one op's outputs
    and the start of the next one's, make one insertion); the longest piece first."""
    out: list[int] = []
    i = j = 0
    while i < len(x):
        for t in range(len(x) - i, 0, -1):
            piece = x[i:i + t]
            if y[j:j + t] == piece and y[j + t:j + 2 * t] == piece:
                break
        else:
            return None
        out.append(t)
        i += t
        j += 2 * t
    return out


def _big_positions(n: int, ins: list[tuple[int, int, int]]) -> list[int]:
    """Where each entry of the small log sits in the big one."""
    out = []
    shift = 0
    k = 0
    for p in range(n):
        while k < len(ins) and ins[k][0] <= p:
            shift += ins[k][2]
            k += 1
        out.append(p + shift)
    return out


@attrs.define
class _Model:
    """The fitted structure: the base log's entries, the insertion points with one copy's
    entries, and every reference as ``alpha + beta * copy + gamma * copies``."""

    base: list                 # entries of the K0 log
    base_ref: list             # per base entry (alpha, gamma) or None
    points: list               # per region: position in the base log
    blocks: list               # per region: list of (entry, (alpha, beta, gamma) or None)


def _fit(logs: list[list], window: int = WINDOWS[0], from_end: bool = False,
         context: int = CONTEXTS[0]) -> Optional[_Model]:
    """Fit the affine reference model on the K0, K0+1 and K0+2 logs."""
    table: dict = {}
    (sa, ra), (sb, rb), (sc, rc) = (_shapes(log, table, context) for log in logs)
    align = _align_from_end if from_end else _align
    ins_b = align(sa, sb, window)
    ins_c = align(sa, sc, window)
    if ins_b is None or ins_c is None or len(ins_b) != len(ins_c):
        return None
    # regions: (point, start in B, length, start of copy 0 in C, start of copy 1 in C)
    regions: list[tuple[int, int, int, int, int]] = []
    for (ib, startb, lb), (ic, startc, lc) in zip(ins_b, ins_c, strict=True):
        if ib != ic or lc != 2 * lb:
            return None
        pieces = _split(sb[startb:startb + lb], sc[startc:startc + lc])
        if pieces is None:
            return None
        for t in pieces:
            regions.append((ib, startb, t, startc, startc + t))
            startb += t
            startc += 2 * t
    pos_b = _big_positions(len(sa), ins_b)
    pos_c = _big_positions(len(sa), ins_c)
    base_ref: list = []
    for p, ref_a in enumerate(ra):
        if ref_a < 0:
            base_ref.append(None)
            continue
        tb, tc = rb[pos_b[p]], rc[pos_c[p]]
        gamma = tb - ref_a
        if tc != ref_a + 2 * gamma:
            return None
        base_ref.append((ref_a, gamma))
    blocks: list = []
    for _, startb, length, c0, c1 in regions:
        block: list[tuple[tuple, Optional[tuple[int, int, int]]]] = []
        for t in range(length):
            entry = logs[1][startb + t]
            rb_t = rb[startb + t]
            if rb_t < 0:
                block.append((entry, None))
                continue
            r0, r1 = rc[c0 + t], rc[c1 + t]
            gamma = r0 - rb_t
            block.append((entry, (rb_t - gamma, r1 - r0, gamma)))
        blocks.append(block)
    return _Model(base=logs[0], base_ref=base_ref, points=[r[0] for r in regions],
                  blocks=blocks)


def fit(logs: list[list]) -> Optional[_Model]:
    """The model fitted on the K0 .. K0+2 logs that reproduces the K0+3 log exactly (trying
    the reference contexts, insertions as late as possible then as early, and the alignment
    windows in turn), or None."""
    for context in CONTEXTS:
        for from_end in (False, True):
            for window in WINDOWS:
                model = _fit(logs[:3], window, from_end, context)
                if model is not None and synthesise(model, 3) == logs[3]:
                    return model
    return None


def _with_ref(entry: tuple, ref: int) -> tuple:
    return (entry[0], ref) + tuple(entry[2:])


def synthesise(model: _Model, copies: int) -> list:
    """The log with ``copies`` blocks inserted at every insertion point."""
    out: list = []
    regions = list(zip(model.points, model.blocks, strict=True))
    r = 0
    n_base = len(model.base)
    for p in range(n_base + 1):
        while r < len(regions) and regions[r][0] == p:
            block = regions[r][1]
            for c in range(copies):
                for entry, fit in block:
                    if fit is None:
                        out.append(entry)
                    else:
                        alpha, beta, gamma = fit
                        out.append(_with_ref(entry, alpha + beta * c + gamma * copies))
            r += 1
        if p == n_base:
            break
        entry, fit2 = model.base[p], model.base_ref[p]
        out.append(entry if fit2 is None else _with_ref(entry, fit2[0] + fit2[1] * copies))
    return out


# -- the door ------------------------------------------------------------------------------------

def run_replicated(run: RunSpec, res: RunResult, round_bytes: int, *,
                   min_layers: Optional[int] = None) -> Optional[StorageTracker]:
    """The tracker of ``run``'s fake trace as :func:`fmest_torch_runner.fake_trace.run_fake`
    would leave it (not entered; its results and allocation events are read the same way),
    from traces of ``base .. base + 3`` layers (``base`` = ``K0``, or up to ``TRIES - 1``
    more when the fit fails), with ``res``'s parameter counts, step times and a note set;
    None (``res`` untouched) when the run is not eligible (:func:`eligible`) or no fit
    reproduces its ``base + 3``-layer trace exactly."""
    from fmest_torch_runner.tracker import StorageTracker

    layers = eligible(run, min_layers)
    if layers is None:
        return None
    t0 = time.perf_counter()
    traces: dict[int, _Trace] = {}
    base = model = None
    for base in range(K0, K0 + TRIES):  # K0 .. K0+3 layers, else one more
        for k in range(base, base + 4):
            if k not in traces:
                try:
                    tr = _trace_log(attrs.evolve(run, num_layers=k), round_bytes)
                except Exception:  # whatever a small model cannot do: trace the full one
                    return None
                if tr is None:
                    return None
                traces[k] = tr
        model = fit([traces[k].log for k in range(base, base + 4)])
        if model is not None:
            break
    if model is None or base is None:
        return None
    counts = [(traces[k].params, traces[k].trainable) for k in range(base, base + 4)]
    dp = counts[1][0] - counts[0][0]
    dt = counts[1][1] - counts[0][1]
    if any(counts[i] != (counts[0][0] + i * dp, counts[0][1] + i * dt) for i in range(4)):
        return None
    log = canonical(synthesise(model, layers - base))
    tracker = StorageTracker(round_bytes=round_bytes)
    tracker.replay_log(log)
    res.params = counts[0][0] + (layers - base) * dp
    res.trainable_params = counts[0][1] + (layers - base) * dt
    res.step_seconds = traces[base + 3].step_seconds
    res.notes.append(
        f"layer replication: traced {base}..{base + 3} of {layers} identical decoder layers "
        f"({time.perf_counter() - t0:.1f} s), the {base + 3}-layer trace reproduced exactly by "
        f"the fit, the {layers}-layer tracker log synthesised and replayed "
        f"(fmest_torch_runner.layer_replication)")
    return tracker
