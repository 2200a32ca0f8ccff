"""``fmest replay-snapshot``: a recorded ``torch.cuda.memory._snapshot()`` through the
caching-allocator simulator (:mod:`fmest.allocator`), under the settings it was recorded with
and under others (``--alloc-conf``, repeatable): what ``max_memory_reserved`` would have been
with ``expandable_segments:True`` or a ``max_split_size_mb``, before spending a GPU-hour on it.

The simulator's rules are PyTorch's (docs/allocator.md); on the H200 probe's recorded step it
reproduces the real reserved peak within 0.2 % (tests/test_allocator_recorded.py)."""

from __future__ import annotations

import gzip
import json
import pickle
from pathlib import Path

from fmest.errors import InputError
from fmest.hookspecs import hookimpl

GIB = 1 << 30


def load_snapshot(path: str) -> dict:
    """A pickled snapshot (``torch.cuda.memory._snapshot()`` dumped with ``pickle``, or
    ``torch.cuda.memory._dump_snapshot``), gzip-compressed or not."""
    p = Path(path)
    if not p.is_file():
        raise InputError("snapshot", f"no such file: {path}", value=path)
    raw = p.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    try:
        data = pickle.loads(raw)  # noqa: S301  (a file the user recorded and names)
    except Exception as exc:  # noqa: BLE001  (any unpickling failure is a bad input)
        raise InputError("snapshot", f"not a pickled torch.cuda.memory snapshot ({exc})",
                         value=path) from exc
    if not isinstance(data, dict) or "segments" not in data:
        raise InputError("snapshot", "not a torch.cuda.memory._snapshot() dictionary (no "
                         "'segments')", value=path)
    return data


def replay_rows(snapshot: dict, confs: list[str], device: int = 0) -> list[dict]:
    """One row per setting: the recorded one first (the snapshot's own settings), then each of
    ``confs``; each with the simulated peaks and, for the recorded setting, the real peak."""
    from fmest.allocator import replay_snapshot

    recorded = (snapshot.get("allocator_settings") or {}).get("PYTORCH_CUDA_ALLOC_CONF") or ""
    rows = []
    for conf in [None, *confs]:
        r = replay_snapshot(snapshot, conf, device=device)
        sim = r.simulated
        rows.append({
            "alloc_conf": recorded if conf is None else conf,
            "as_recorded": conf is None,
            "recorded_reserved_bytes": r.recorded_reserved_peak if conf is None else None,
            "reserved_bytes": sim.max_memory_reserved,
            "allocated_bytes": sim.max_memory_allocated,
            "reserve_bytes": sim.max_memory_reserved - sim.max_memory_allocated,
            "segments_peak": sim.segments_peak, "alloc_retries": sim.num_alloc_retries,
            "events": r.events, "live_at_start": r.live_at_start})
    return rows


def _add_arguments(parser) -> None:
    parser.add_argument("snapshot", help="a pickled torch.cuda.memory._snapshot() "
                        "(.pickle or .pickle.gz), recorded with "
                        "torch.cuda.memory._record_memory_history()")
    parser.add_argument("--alloc-conf", action="append", default=[], metavar="CONF",
                        help="a PYTORCH_CUDA_ALLOC_CONF to replay under as well, e.g. "
                        "expandable_segments:True or max_split_size_mb:512 (repeatable)")
    parser.add_argument("--device", type=int, default=0,
                        help="the device whose trace to replay (default 0)")
    parser.add_argument("--format", choices=("table", "json"), default="table")


def _run(args, engine) -> int:
    from fmest.output.render import render_table

    rows = replay_rows(load_snapshot(args.snapshot), list(args.alloc_conf), args.device)
    if args.format == "json":
        print(json.dumps({"snapshot": args.snapshot, "rows": rows}, indent=2))
        return 0

    def gib(v) -> str:
        return "-" if v is None else f"{v / GIB:.2f}"

    first = rows[0]
    print(f"{args.snapshot}: {first['events']} allocation events after {first['live_at_start']} "
          f"blocks already in use")
    print(render_table(
        ["PYTORCH_CUDA_ALLOC_CONF", "reserved GiB (recorded)", "reserved GiB (replay)",
         "allocated GiB", "reserve GiB", "segments", "retries"],
        [((r["alloc_conf"] or "(defaults)") + (" [recorded]" if r["as_recorded"] else ""),
          gib(r["recorded_reserved_bytes"]), gib(r["reserved_bytes"]),
          gib(r["allocated_bytes"]), gib(r["reserve_bytes"]),
          # expandable segments grow one mapping per stream and pool: no segment count
          str(r["segments_peak"]) if r["segments_peak"] else "-",
          str(r["alloc_retries"])) for r in rows]))
    return 0


@hookimpl
def fmest_register_commands(register):
    register("replay-snapshot", "replay a recorded torch.cuda.memory snapshot through the "
             "caching-allocator simulator, as recorded and under other PYTORCH_CUDA_ALLOC_CONF "
             "settings", _add_arguments, _run)
