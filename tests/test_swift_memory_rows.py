"""ms-swift's benchmark memory rows (benchmarks/data/parts/r1_SOURCES.md,
``ms-swift-benchmark-doc-2024``): what the run was, read from ms-swift's code, and why its
``max_memory_reserved`` reading exceeds a fixed-length step's (fmest issue 21).

The run (modelscope/ms-swift at 97e4d198bbb9f2bda7188f48362f388c9ef15fa9, the commit that
wrote the Qwen tables; 4312aeb28 added the other models' rows):
``scripts/benchmark/test_memory_time/run_single.py`` trains on cls-fudan-news-zh (4959 samples,
Qwen tokens 3234.4 +- 2547.5, min 91, max 19548: docs/source/LLM/支持的模型和数据集.md) with
``train_dataset_sample=-1`` for ``max_length <= 2048`` and 1000 samples above; the template's
default ``truncation_strategy='delete'`` (swift/llm/utils/template.py) drops samples longer than
``max_length``; ``batch_size`` 1 with a random sampler (swift/trainers/mixin.py
``_get_train_sampler``, ``train_sampler_random`` true) and ``data_collate_fn`` pads a batch to
its own longest sample only, so every micro-batch has its own length <= max_length. The reading
is ``torch.cuda.max_memory_reserved`` (swift/trainers/trainers.py ``perf['memory']``): the
caching allocator keeps freed blocks cached, and a longer micro-batch than any before cannot
reuse the smaller cached blocks of the length-proportional tensors (logits, loss, activations),
so it maps new segments while the old ones stay reserved.

The tests replay that mechanism through fmest's allocator simulator (the rules of
c10/cuda/CUDACachingAllocator.cpp, docs/allocator.md) on a synthetic step whose transient
tensors scale with the length, with no torch import.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

from fmest.allocator import replay

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import measured  # type: ignore[import-not-found]  # noqa: E402

MIB = 1 << 20
VOCAB = 151936  # Qwen (v1) vocabulary
HIDDEN, LAYERS = 2048, 24  # Qwen-1.8B


def _step_events(s: int, uid: list[int]) -> list[tuple]:
    """One micro-batch of a checkpointed decoder: per-layer boundary activations kept to the
    backward, then the bf16 logits, the loss's fp32 copy and the logits' gradient."""
    ev: list[tuple] = []

    def m(n: int) -> int:
        uid[0] += 1
        ev.append(("m", uid[0], n))
        return uid[0]

    acts = [m(s * HIDDEN * 2) for _ in range(LAYERS)]
    logits = m(s * VOCAB * 2)
    fp32 = m(s * VOCAB * 4)
    grad = m(s * VOCAB * 4)
    ev += [("f", fp32), ("f", logits)]
    dlog = m(s * VOCAB * 2)
    ev += [("f", grad), ("f", dlog)]
    for a in reversed(acts):
        tmp = m(s * HIDDEN * 8)  # the layer's recomputation
        ev += [("f", tmp), ("f", a)]
    return ev


def _run(lengths: list[int]) -> tuple[int, int]:
    uid = [0]
    events: list[tuple] = [("m", "weights", 4096 * MIB)]
    for s in lengths:
        events += _step_events(s, uid)
    res = replay(events)
    return res.max_memory_allocated, res.max_memory_reserved


def _kept_lengths(cap: int, n: int, seed: int) -> list[int]:
    """Sample lengths of the kept samples (<= cap, 'delete' truncation), in random order: a
    gamma law with the dataset's published mean and standard deviation (an illustration of a
    spread of lengths, not the dataset's own)."""
    rng = random.Random(seed)
    mean, sd = 3234.4, 2547.5
    out: list[int] = []
    while len(out) < n:
        x = int(rng.gammavariate((mean / sd) ** 2, sd * sd / mean))
        if 91 <= x <= cap:
            out.append(x)
    return out


def test_fixed_length_steps_reserve_no_more_than_one_step() -> None:
    alloc, reserved = _run([2048] * 8)
    one_alloc, one_reserved = _run([2048])
    assert alloc == one_alloc and reserved == one_reserved


def test_variable_lengths_grow_reserved_beyond_the_longest_step() -> None:
    lengths = _kept_lengths(2048, 200, seed=1)
    alloc, reserved = _run(lengths)
    fixed_alloc, fixed_reserved = _run([max(lengths)])
    # the tensors in use never exceed the longest step's ...
    assert alloc <= fixed_alloc
    # ... but the cache of earlier, shorter steps stays reserved
    assert reserved > fixed_reserved * 1.2


def test_swift_rows_are_reserved_readings_of_capped_variable_lengths() -> None:
    rows = [r for r in measured.load_rows("memory")
            if r["source"] == "ms-swift-benchmark-doc-2024"]
    assert rows
    for r in rows:
        if (r.get("oom") or "").strip().lower() == "true":
            continue
        assert r["measure_type"] == "max_memory_reserved"
        assert measured.VARIABLE_LENGTH.search(r["other"])
