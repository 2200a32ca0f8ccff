"""Reserved memory of variable-length (unpacked, pad-to-longest) jobs (fmest issue 21).

The mechanism is checked on the allocator simulator with hand-derived sizes, and the table
that scripts/derive_allocator_reserve.py --varlen wrote for its invariants. The analytic model
does not apply the growth yet (docs/allocator.md, "Variable-length steps": the replays are an
upper bound, and no job field states variable lengths).
"""

from __future__ import annotations

import json
from pathlib import Path

from fmest.allocator import replay

MIB = 1 << 20
TABLE = Path(__file__).resolve().parents[1] / "core" / "fmest" / "data" / "allocator_reserve.json"


def _steps(sizes_mib: list[int]) -> list[tuple]:
    """One transient block per step, freed before the next: a micro-batch whose activation
    block has the given size."""
    events: list[tuple] = []
    for i, size in enumerate(sizes_mib):
        events += [("m", i, size * MIB), ("f", i)]
    return events


def test_fixed_length_reuses_its_segment():
    # 40 MiB > kMinLargeAlloc (10 MiB): a segment of the request rounded to 2 MiB (40 MiB),
    # freed, cached and found again by best fit every step: reserved = one segment
    assert replay(_steps([40, 40, 40])).max_memory_reserved == 40 * MIB


def test_longer_step_after_shorter_maps_a_new_segment():
    # the cached 30 MiB block is smaller than the 40 MiB request (get_free_block needs a block
    # >= the request): a second segment is mapped while the first stays cached: 30 + 40 MiB
    assert replay(_steps([30, 40])).max_memory_reserved == 70 * MIB
    # shorter after longer: the 40 MiB block is split (remainder 10 MiB > kSmallSize): no growth
    assert replay(_steps([40, 30])).max_memory_reserved == 40 * MIB
    # increasing lengths cache every size met: 20 + 30 + 40 MiB
    assert replay(_steps([20, 30, 40, 40])).max_memory_reserved == 90 * MIB


def test_the_traced_varlen_table_is_whole():
    table = json.loads(TABLE.read_text())
    varlen = table["varlen"]
    rows = varlen["rows"]
    assert rows, "scripts/derive_allocator_reserve.py --varlen wrote no rows"
    for r in rows:
        # replaying shapes that change can only cache more, never less, than one fixed shape
        assert r["reserved_varlen"] >= r["reserved_fixed"]
        assert r["lengths"][-1] == r["seq_len_cap"]
        assert r["command"].startswith("python scripts/derive_allocator_reserve.py --varlen")
    for ac in ("full", "none"):
        assert varlen["summary"][ac]["fraction_of_transient"] > 0
