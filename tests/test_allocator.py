"""The caching-allocator replay (fmest.allocator) on patterns whose result is derived by hand.

Every test states its derivation from the rules of PyTorch's c10/cuda/CUDACachingAllocator.cpp
(commit eb42ad6eca0ce61e7c581212b4bf32f991425571; docs/allocator.md lists each rule)."""

from __future__ import annotations

import pytest

from fmest.allocator import (
    AllocatorConfig,
    CachingAllocator,
    allocation_size,
    measure_floor,
    nvidia_smi_bytes,
    replay,
    round_size,
    roundup_power2_next_division,
)
from fmest.errors import InputError

KIB = 1 << 10
MIB = 1 << 20


def _reserved(a: CachingAllocator) -> int:
    return a.stats.reserved_bytes.current


def test_small_requests_share_one_2mib_segment():
    # 600 KiB = 1200 x 512 B (no rounding), <= 1 MiB -> small pool; the first request
    # cudaMallocs kSmallBuffer = 2 MiB and splits (remainder 1448 KiB >= 512 B); the second and
    # third fit the remainders (848 KiB, then 248 KiB left). A fourth needs a second segment.
    a = CachingAllocator()
    for h in range(3):
        a.malloc(h, 600 * KIB)
    assert _reserved(a) == 2 * MIB
    assert a.stats.allocated_bytes.current == 1800 * KIB
    assert a.stats.segment.current == 1
    a.malloc(3, 600 * KIB)
    assert _reserved(a) == 4 * MIB and a.stats.segment.current == 2


def test_a_5mib_request_takes_a_20mib_segment_and_the_next_reuses_its_remainder():
    # 1 MiB < 5 MiB < kMinLargeAlloc 10 MiB -> get_allocation_size = kLargeBuffer 20 MiB; the
    # remainder 15 MiB > kSmallSize is split off and cached; the second 5 MiB is its best fit.
    a = CachingAllocator()
    a.malloc(1, 5 * MIB)
    assert _reserved(a) == 20 * MIB
    a.malloc(2, 5 * MIB)
    assert _reserved(a) == 20 * MIB and a.stats.segment.current == 1
    assert a.stats.allocated_bytes.current == 10 * MIB


def test_a_15mib_request_takes_a_16mib_segment_counted_whole():
    # >= 10 MiB -> rounded up to kRoundLarge 2 MiB: 16 MiB; the 1 MiB remainder is not
    # > kSmallSize, so the block is not split and allocated_bytes counts all 16 MiB.
    a = CachingAllocator()
    a.malloc(1, 15 * MIB)
    assert _reserved(a) == 16 * MIB
    assert a.stats.allocated_bytes.current == 16 * MIB
    assert a.stats.requested_bytes.current == 15 * MIB


def test_free_merges_neighbours_and_the_merged_block_is_reused():
    # three 5 MiB blocks in one 20 MiB segment (+ 5 MiB cached tail); freeing the first two
    # merges them into one 10 MiB block (try_merge_blocks), which a 10 MiB request reuses.
    a = CachingAllocator()
    for h in range(3):
        a.malloc(h, 5 * MIB)
    a.free(0)
    a.free(1)
    a.malloc(9, 10 * MIB)
    assert _reserved(a) == 20 * MIB and a.stats.segment.current == 1
    # freeing everything merges the segment back into one block: empty_cache releases it
    a.free(2)
    a.free(9)
    a.empty_cache()
    assert _reserved(a) == 0 and a.stats.segment.current == 0


def test_growing_requests_force_new_segments_but_not_with_expandable_segments():
    # 12, 14, 16 MiB one after another, each freed before the next: no cached block is large
    # enough for the next one, so each cudaMallocs its own segment: reserved 12+14+16 = 42 MiB
    # while at most 16 MiB is allocated.
    events = []
    for h, size in enumerate((12, 14, 16)):
        events += [("m", h, size * MIB), ("f", h)]
    r = replay(events)
    assert r.max_memory_allocated == 16 * MIB
    assert r.max_memory_reserved == 42 * MIB
    # expandable segments: one segment mapped in 20 MiB pages; 12 MiB maps one page, 14 and
    # 16 MiB reuse it; a later 30 MiB maps a second page right after: reserved 40 MiB
    r = replay(events + [("m", 9, 30 * MIB)], "expandable_segments:True")
    assert r.max_memory_reserved == 40 * MIB
    assert r.max_memory_allocated == 30 * MIB


def test_expandable_segments_reserve_allocated_rounded_to_pages():
    # ten 5 MiB requests = 50 MiB; large-pool pages are kLargeBuffer 20 MiB -> 3 pages = 60 MiB;
    # small requests map 2 MiB pages: 3 x 600 KiB -> one page. empty_cache unmaps every page.
    a = CachingAllocator("expandable_segments:True")
    for h in range(10):
        a.malloc(h, 5 * MIB)
    for h in range(10, 13):
        a.malloc(h, 600 * KIB)
    assert _reserved(a) == 60 * MIB + 2 * MIB
    assert a.stats.allocated_bytes.current == 50 * MIB + 1800 * KIB
    for h in range(13):
        a.free(h)
    a.empty_cache()
    assert _reserved(a) == 0


def test_max_split_size_keeps_oversize_blocks_for_large_requests():
    # max_split_size 32 MiB: a cached 40 MiB block (>= 32 MiB) is not handed to an 8 MiB
    # request (get_free_block), which cudaMallocs a 20 MiB segment: reserved 60 MiB. Without
    # the option the 8 MiB request splits the 40 MiB block: reserved 40 MiB.
    events = [("m", 1, 40 * MIB), ("f", 1), ("m", 2, 8 * MIB)]
    assert replay(events, "max_split_size_mb:32").max_memory_reserved == 60 * MIB
    assert replay(events).max_memory_reserved == 40 * MIB
    # a 36 MiB request may take the 40 MiB block (40 < 36 + max_non_split_rounding 20 MiB),
    # unsplit (36 >= max_split_size): allocated_bytes counts 40 MiB
    r = replay([("m", 1, 40 * MIB), ("f", 1), ("m", 2, 36 * MIB)], "max_split_size_mb:32")
    assert r.max_memory_reserved == 40 * MIB
    assert r.max_memory_allocated == 40 * MIB


def test_empty_cache_releases_only_wholly_free_segments():
    # segment A (20 MiB) still holds one live 5 MiB block; segment B (16 MiB) is all free:
    # release_blocks frees only blocks without prev/next, i.e. B.
    a = CachingAllocator()
    a.malloc(1, 5 * MIB)
    a.malloc(2, 5 * MIB)
    a.malloc(3, 15 * MIB)
    a.free(2)
    a.free(3)
    a.empty_cache()
    assert _reserved(a) == 20 * MIB
    assert a.stats.reserved_bytes.peak == 36 * MIB


def test_capacity_pressure_frees_the_cache_then_retries():
    # capacity 40 MiB. 24 MiB cached (freed); 26 MiB does not fit it and 24 + 26 > 40, so the
    # first cudaMalloc fails, release_cached_blocks frees the 24 MiB segment and the retry
    # succeeds (num_alloc_retries 1). Then 20 MiB more: 26 + 20 > 40 with nothing cached:
    # an OOM, recorded (the replay goes on over the capacity).
    a = CachingAllocator(capacity=40 * MIB)
    a.malloc(1, 24 * MIB)
    a.free(1)
    a.malloc(2, 26 * MIB)
    assert a.stats.num_alloc_retries == 1 and not a.oom
    assert _reserved(a) == 26 * MIB
    a.malloc(3, 20 * MIB)
    assert a.oom and a.stats.num_ooms == 1


def test_streams_have_their_own_pools():
    # a block freed on stream 0 is not reused by stream 1 (BlockComparatorSize orders by stream
    # first; get_free_block requires the same stream)
    r = replay([("m", 1, 5 * MIB, 0), ("f", 1), ("m", 2, 5 * MIB, 1)])
    assert r.max_memory_reserved == 40 * MIB


def test_rounding_rules():
    assert round_size(1) == 512 and round_size(513) == 1024
    # the doc comment of roundup_power2_next_division: 1200 with 4 divisions -> 1280
    assert roundup_power2_next_division(1200, 4) == 1280
    cfg = AllocatorConfig.parse("roundup_power2_divisions:4")
    # 5 MiB + 1 B lies in [4, 8) MiB: steps of 1 MiB -> 6 MiB
    assert round_size(5 * MIB + 1, cfg) == 6 * MIB
    assert allocation_size(512) == 2 * MIB
    assert allocation_size(3 * MIB) == 20 * MIB
    assert allocation_size(11 * MIB) == 12 * MIB


def test_config_parsing_and_errors():
    cfg = AllocatorConfig.parse("expandable_segments:True, max_split_size_mb:128, "
                                "roundup_power2_divisions:[256:1,512:2,>:4], "
                                "garbage_collection_threshold:0.8")
    assert cfg.expandable_segments and cfg.max_split_size == 128 * MIB
    assert cfg.roundup_power2_divisions[8] == 1 and cfg.roundup_power2_divisions[15] == 4
    assert cfg.garbage_collection_threshold == 0.8
    with pytest.raises(InputError, match="unrecognized.*'foo'.*accepted: backend"):
        AllocatorConfig.parse("foo:1")
    with pytest.raises(InputError, match="max_split_size_mb: too small"):
        AllocatorConfig.parse("max_split_size_mb:8")
    with pytest.raises(InputError, match="expandable_segments"):
        AllocatorConfig.parse("expandable_segments:yes")


def test_nvidia_smi_adds_the_memory_outside_the_allocator():
    from fmest.physics.device_terms import cuda_context_bytes

    assert nvidia_smi_bytes(10 * MIB) == 10 * MIB + cuda_context_bytes(1)


def test_replay_is_fast():
    import time

    events = []
    for step in range(20000):
        events.append(("m", step, (step % 97 + 1) * 123 * KIB))
        if step >= 50:
            events.append(("f", step - 50))
    t0 = time.perf_counter()
    r = replay(events)
    assert time.perf_counter() - t0 < 5.0
    assert r.max_memory_reserved >= r.max_memory_allocated > 0


def test_device_terms_reserve_is_the_traced_tables_rule():
    """device_terms' constants are the rule of core/fmest/data/allocator_reserve.json (written
    by scripts/derive_allocator_reserve.py), not hand-set."""
    import json
    from pathlib import Path

    from fmest.physics import device_terms as dt

    table = json.loads((Path(dt.__file__).parents[1] / "data" / "allocator_reserve.json")
                       .read_text())
    rule = table["summary"]["rule"]
    assert dt.ALLOCATOR_RESERVE_CONSTANT_BYTES == rule["constant_bytes"]
    assert dt.ALLOCATOR_RESERVE_FRACTION == rule["fraction"]
    default = [r for r in table["rows"] if r["alloc_conf"] == "default"]
    assert dt.ALLOCATOR_RESERVE_MIN_TRACED_BYTES == min(r["tracker_peak_bytes"] for r in default)
    for r in table["rows"]:
        assert r["max_memory_reserved"] >= r["tracker_peak_bytes"]
        assert r["command"].startswith("python scripts/derive_allocator_reserve.py")
    # continuous at the table's smallest peak, and invertible (planner calibration)
    m = dt.ALLOCATOR_RESERVE_MIN_TRACED_BYTES
    assert dt.allocator_reserve_bytes(m - 1) == pytest.approx(dt.allocator_reserve_bytes(m))
    for a in (1e9, m, 3e10):
        assert dt.allocated_from_reserved(a + dt.allocator_reserve_bytes(a)) == pytest.approx(a)


# -- what a full release cannot give back (fmest issue 22) ------------------------------------

def test_a_segment_with_one_live_block_keeps_its_free_remainder():
    # two 5 MiB requests share one kLargeBuffer 20 MiB segment (the second is the best fit of
    # the 15 MiB remainder); freeing the first leaves the segment split (prev/next set), so
    # release_cached_blocks frees nothing: 20 MiB held for 5 MiB requested
    a = CachingAllocator()
    a.malloc(1, 5 * MIB)
    a.malloc(2, 5 * MIB)
    a.free(1)
    assert a.releasable_bytes() == 0 and a.irreducible_bytes() == 20 * MIB
    a.empty_cache()
    assert _reserved(a) == 20 * MIB
    # the last live block freed: the blocks merge back into the whole segment, all releasable
    a.free(2)
    assert a.releasable_bytes() == 20 * MIB and a.irreducible_bytes() == 0


def test_expandable_segments_give_back_whole_free_pages_only():
    # expandable: a 25 MiB request maps two 20 MiB pages (40 MiB) and splits (remainder 15 MiB
    # >= 512 B); 10 MiB takes the front of that remainder: [0,25) A, [25,35) B, [35,40) free.
    # Freeing A leaves [0,25) free: page [0,20) is whole and releasable, [20,25) shares page 2
    # with B: 20 MiB stay, 10 MiB of them B's
    a = CachingAllocator("expandable_segments:True")
    a.malloc(1, 25 * MIB)
    a.malloc(2, 10 * MIB)
    assert _reserved(a) == 40 * MIB
    a.free(1)
    assert a.releasable_bytes() == 20 * MIB and a.irreducible_bytes() == 20 * MIB
    a.empty_cache()
    assert _reserved(a) == 20 * MIB


def test_measure_floor_when_live_blocks_pin_their_segments():
    # A, B: 5 MiB each in one 20 MiB segment; A freed; C 16 MiB (>= kMinLargeAlloc: a 16 MiB
    # segment) fits neither free piece ([0,5) and [10,20)): reserved 36 MiB, allocated peak
    # 21 MiB (B + C). At the peak both segments hold a live block: a full release returns
    # nothing, so 36 MiB is the least capacity (at 34 MiB C's cudaMalloc fails, the release
    # frees nothing: an OOM)
    events = [("m", 1, 5 * MIB), ("m", 2, 5 * MIB), ("f", 1), ("m", 3, 16 * MIB)]
    fl = measure_floor(events)
    assert (fl.max_memory_allocated, fl.max_memory_reserved) == (21 * MIB, 36 * MIB)
    assert fl.requested_at_peak == 21 * MIB and fl.held_at_peak == 36 * MIB
    assert fl.at_peak == 15 * MIB and fl.min_capacity == 36 * MIB
    assert replay(events, capacity=34 * MIB).num_ooms == 1


def test_measure_floor_when_the_cache_is_whole_segments():
    # A, B freed: the 20 MiB segment is whole and cached; C 22 MiB does not fit it (best fit
    # needs >= 22 MiB): a 22 MiB segment, reserved 42 MiB uncapped. At capacity 22 MiB the
    # cudaMalloc fails, release_cached_blocks frees the 20 MiB segment, the retry fits: the
    # floor is 0 and the least capacity is the allocated peak
    events = [("m", 1, 5 * MIB), ("m", 2, 5 * MIB), ("f", 1), ("f", 2), ("m", 3, 22 * MIB)]
    fl = measure_floor(events)
    assert fl.max_memory_reserved == 42 * MIB and fl.max_memory_allocated == 22 * MIB
    assert fl.at_peak == 0 and fl.min_capacity == 22 * MIB
    res = replay(events, capacity=22 * MIB)
    assert res.num_ooms == 0 and res.num_alloc_retries == 1
    # with expandable segments the same program needs no new segment: C maps one more page
    # after the free 20 MiB page, 40 MiB in all, and the unlimited peak is the floor's bound
    fe = measure_floor(events, "expandable_segments:True")
    assert fe.max_memory_reserved == 40 * MIB and fe.held_at_peak == 40 * MIB
