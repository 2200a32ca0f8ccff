"""Measure the irreducible allocator reserve (the floor, fmest issue 22) of the reserve table's
large settings, the ones the floor rule's 14 traces leave out.

``core/fmest/data/allocator_reserve.json`` ``floor`` holds ``fmest.allocator.measure_floor`` of
the 14 ``GRID`` traces of ``scripts/derive_allocator_reserve.py`` only, while the reserve's
two-term rule was fitted over ``GRID + TRANSIENT_GRID + LAYER_GRID`` (47 traces, 0.36B-70B,
logits blocks up to 14 GiB). This script traces the other two grids the same way
(``derive_allocator_reserve.trace_events``: fake-tensor training steps of the transformers
model, replayed through :mod:`fmest.allocator`, default allocator settings) and writes one JSON
row per setting with the floor (smallest no-OOM capacity of the capped replay minus the tensor
peak), the replay's reserve and the analytic abscissas of the reserve rule
(``transient_block_bytes``, ``layer_block_bytes``)::

    python plugins/memory_theory/scripts/replay_floor_grid.py --out /tmp/floor_rows.json
    python plugins/memory_theory/scripts/replay_floor_grid.py --part 0/2 --out /tmp/a.json

Needs torch and transformers (CPU); ~20-40 s per setting on 2 CPUs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(ROOT / "scripts"))
    sys.path.insert(0, str(ROOT / "plugins" / "torch_runner"))
    import derive_allocator_reserve as D  # type: ignore[import-not-found]

    from fmest.allocator import AllocatorConfig, measure_floor

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--part", default="0/1", help="k/n: every n-th setting from the k-th")
    args = ap.parse_args(argv)
    k, n = (int(x) for x in args.part.split("/"))
    grid = (D.TRANSIENT_GRID + D.LAYER_GRID)[k::n]
    rows = []
    for preset, technique, batch, seq, ac in grid:
        try:
            events, peak, secs, _ = D.trace_events(D._setting_job(preset, technique, batch,
                                                                  seq, ac))
        except Exception as exc:  # a setting that cannot be traced is reported, not invented
            print(f"{preset} {technique} b{batch} s{seq} {ac}: {type(exc).__name__}: {exc}",
                  file=sys.stderr, flush=True)
            continue
        t0 = time.perf_counter()
        fl = measure_floor(events, AllocatorConfig.parse(""))
        row = {"model": preset, "technique": technique, "micro_batch_size": batch,
               "seq_len": seq, "activation_checkpointing": ac, "alloc_conf": "default",
               "tracker_peak_bytes": peak, "max_memory_reserved": fl.max_memory_reserved,
               "min_capacity": fl.min_capacity, "floor_bytes": fl.min_capacity - peak,
               "reserve_bytes": fl.max_memory_reserved - peak,
               "transient_block_bytes": D.transient_block_of(preset, batch, seq),
               "layer_block_bytes": D.layer_block_of(preset, technique, batch, seq, ac),
               "trace_seconds": round(secs, 1),
               "measure_seconds": round(time.perf_counter() - t0, 1)}
        rows.append(row)
        g = 2 ** 30
        print(f"{preset:14s} {technique:4s} b{batch} s{seq} {ac:4s} tensors {peak / g:7.2f} "
              f"reserve {row['reserve_bytes'] / g:6.2f} floor {row['floor_bytes'] / g:6.2f} "
              f"transient {row['transient_block_bytes'] / g:6.2f} layer "
              f"{row['layer_block_bytes'] / g:6.2f} GiB", flush=True)
        args.out.write_text(json.dumps({"rows": rows}, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
