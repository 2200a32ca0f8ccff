"""The sealed part of the evidence set: whole sources kept out of every figure but the aggregate
``python benchmarks/accuracy.py --sealed`` / ``python benchmarks/uncertainty.py --sealed``.

The project rule: the evidence set is a test, not a training set; a sealed part (whole sources,
random with a recorded seed, at least a fifth of the sources, every stack represented) is looked
at only in aggregate, once, at the end of a model change. The list lives in
``benchmarks/data/sealed_sources.json``; :func:`draw` reproduces it from the seed:

1. The pool is every source of ``benchmarks/data/measured.csv`` that is not a development source
   (a source with a row whose id starts ``dev-``: the formulas' hand-set constants were checked
   against those rows, so they are in-sample whatever happens; see ``accuracy.FOOTER``).
2. A source's stacks are the ``stack`` values its rows map to (``measured.map_row(row).stack``);
   a source may span several.
3. Size: ``ceil(share x pool)`` sources (share 0.2: at least a fifth).
4. ``random.Random(seed)``; every stack with at least :data:`MIN_SOURCES_PER_STACK` pool sources,
   rarest stack first (ties by name), gets one source drawn among its pool sources unless a
   source drawn before already covers it.
5. The rest is filled from a seeded shuffle of the remaining pool sources (sorted first).
6. No draw seals a stack's last open pool source (steps 4 and 5 skip such a source), so every
   stack with a non-development source keeps one in the open figures.

Later draws (``later`` in the file, each with its own recorded rule) add whole batches: on
2026-11-27 every source of part r5, collected blind and scored only in aggregate before it was
added, so the sealed part holds families with no open source (benchmarks/source_families.py).
:func:`load` returns all sealed sources, :func:`load_first` the seeded draw's.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import random
from pathlib import Path
from typing import Iterable, Mapping

HERE = Path(__file__).resolve().parent
SEALED_FILE = HERE / "data" / "sealed_sources.json"
#: The recorded seed and share (the draw of 2026-11-26; docs/benchmarks.md).
SEED = 20261126
SHARE = 0.2
#: A stack needs this many pool (non-development) sources to be represented in the sealed part:
#: with fewer, sealing its one source would leave no out-of-sample row of it in the open figures.
MIN_SOURCES_PER_STACK = 2
METHOD = (
    "Whole sources. Pool: sources of benchmarks/data/measured.csv without a development row "
    "(id 'dev-*'). Size: ceil(share x pool). random.Random(seed): every stack with >= 2 pool "
    "sources (the stack values its rows map to in benchmarks/measured.py), rarest first, gets one "
    "source drawn among its pool sources unless already covered; the rest comes from a seeded "
    "shuffle of the other pool sources; no stack's last open pool source is sealed. "
    "Reproduced by benchmarks/sealed.py draw()."
)


def development_sources(rows: Iterable[Mapping]) -> set[str]:
    """Sources with a development row (id ``dev-*``), as ``accuracy.analyse`` defines them."""
    return {r["source"] for r in rows if str(r["id"]).startswith("dev-")}


def source_stacks(rows: Iterable[Mapping]) -> dict[str, set[str]]:
    """Source -> the stacks its rows map to (``measured.map_row(row).stack``)."""
    import measured

    out: dict[str, set[str]] = {}
    for r in rows:
        out.setdefault(r["source"], set()).add(measured.map_row(r).stack)
    return out


def draw(stacks_of: Mapping[str, set[str]], development: set[str], seed: int = SEED,
         share: float = SHARE) -> list[str]:
    """The sealed sources (sorted) by the rule in the module docstring."""
    pool = sorted(s for s in stacks_of if s not in development)
    k = math.ceil(share * len(pool))
    by_stack: dict[str, list[str]] = {}
    for s in pool:
        for st in stacks_of[s]:
            by_stack.setdefault(st, []).append(s)
    rng = random.Random(seed)
    chosen: list[str] = []

    def allowed(s: str) -> bool:
        # sealing s must leave every one of its stacks with an open pool source
        return s not in chosen and all(
            sum(o not in chosen for o in by_stack[st]) >= 2 for st in stacks_of[s])

    for st in sorted(by_stack, key=lambda st: (len(by_stack[st]), st)):
        members = by_stack[st]
        if len(members) < MIN_SOURCES_PER_STACK or any(s in chosen for s in members):
            continue
        candidates = [s for s in members if allowed(s)]
        if candidates:
            chosen.append(rng.choice(candidates))
    rest = [s for s in pool if s not in chosen]
    rng.shuffle(rest)
    for s in rest:
        if len(chosen) >= k:
            break
        if allowed(s):
            chosen.append(s)
    return sorted(chosen)


def problems(sealed: Iterable[str], stacks_of: Mapping[str, set[str]], development: set[str],
             share: float = SHARE) -> list[str]:
    """What is wrong with a sealed list against the rule (empty when it holds)."""
    sealed = set(sealed)
    pool = {s for s in stacks_of if s not in development}
    out = [f"{s}: not a source of the evidence set" for s in sorted(sealed - set(stacks_of))]
    out += [f"{s}: a development source" for s in sorted(sealed & development)]
    need = math.ceil(share * len(pool))
    if len(sealed & pool) < need:
        out.append(f"{len(sealed & pool)} sealed pool sources < ceil({share} x {len(pool)}) = "
                   f"{need}")
    stacks = {st for s in pool for st in stacks_of[s]}
    for st in sorted(stacks):
        members = {s for s in pool if st in stacks_of[s]}
        if len(members) >= MIN_SOURCES_PER_STACK and not members & sealed:
            out.append(f"stack {st}: {len(members)} pool sources, none sealed")
        if members and members <= sealed:
            out.append(f"stack {st}: every pool source sealed, none left open")
    return out


def load(path: Path = SEALED_FILE) -> list[str]:
    """The recorded sealed sources: the seeded draw's and every later draw's (``later``: a
    batch sealed whole, with its own recorded rule), sorted."""
    data = json.loads(Path(path).read_text())
    later = [s for entry in data.get("later", []) for s in entry["sources"]]
    return sorted(set(data["sources"]) | set(later))


def load_first(path: Path = SEALED_FILE) -> list[str]:
    """The seeded draw's sources alone (what :func:`draw` reproduces)."""
    return list(json.loads(Path(path).read_text())["sources"])


def later_sources(path: Path = SEALED_FILE) -> list[str]:
    """The sources of the later draws (``later``), sorted."""
    data = json.loads(Path(path).read_text())
    return sorted({s for entry in data.get("later", []) for s in entry["sources"]})


def load_pool(path: Path = SEALED_FILE) -> list[str] | None:
    """The pool the recorded draw was made from (``pool``), or None when not recorded. Sources
    added to the evidence set after the draw are outside it: they stay open, so adding one never
    reshuffles the seal."""
    pool = json.loads(Path(path).read_text()).get("pool")
    return list(pool) if pool is not None else None


def at_draw(stacks_of: Mapping[str, set[str]], development: set[str],
            path: Path = SEALED_FILE) -> dict[str, set[str]]:
    """``stacks_of`` restricted to the recorded pool and the development sources (all of it when
    no pool is recorded): what :func:`draw` saw."""
    pool = load_pool(path)
    if pool is None:
        return dict(stacks_of)
    keep = set(pool) | set(development)
    return {s: v for s, v in stacks_of.items() if s in keep}


def write(sources: list[str], path: Path = SEALED_FILE, seed: int = SEED,
          share: float = SHARE, pool: list[str] | None = None) -> None:
    """Record a draw (the keys ``benchmarks/uncertainty.py`` reads, plus ``method`` and the
    ``pool`` it was drawn from)."""
    Path(path).write_text(json.dumps({
        "about": "Sources kept out of every figure of benchmarks/accuracy.py and "
                 "benchmarks/uncertainty.py but their --sealed mode (aggregate only, once per "
                 "model change). Drawn from the non-development sources.",
        "seed": seed, "share": share, "drawn": _dt.date.today().isoformat(),
        "method": METHOD,
        "sources": sorted(sources),
        **({"pool": sorted(pool)} if pool is not None else {})}, indent=2) + "\n")


def main() -> int:
    """Check the recorded draw against the rule; ``--redraw`` rewrites it from the seed."""
    import argparse
    import sys

    import measured

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--redraw", action="store_true",
                    help=f"draw again with seed {SEED} and rewrite {SEALED_FILE.name}")
    args = ap.parse_args()
    rows = measured.load_rows()
    stacks_of, dev = source_stacks(rows), development_sources(rows)
    if args.redraw:
        write(draw(stacks_of, dev), pool=sorted(s for s in stacks_of if s not in dev))
    found = problems(load_first(), at_draw(stacks_of, dev), dev)
    found += [f"{s}: a later draw's source not in the evidence set"
              for s in later_sources() if s not in stacks_of]
    for p in found:
        print(f"sealed draw: {p}", file=sys.stderr)
    print(f"sealed: {len(load())} sources; rule {'holds' if not found else 'BROKEN'}")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
