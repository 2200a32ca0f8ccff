"""Map well-known fine-tunes and renamed repositories to the preset with their architecture.

The table (``aliases.json``, one public source per entry) has exact names (``bigscience/bloomz-7b1``
-> ``bigscience/bloom-7b1``) and name rules (``-Instruct`` removed, ``-chat-hf`` -> ``-hf`` ...)
applied to the part after the slash. A match gives the base preset's spec under the requested
name with a warning naming the mapping, so ``bigscience/bloomz-7b1`` answers offline. A fine-tune
that changed the shape (extra vocabulary rows, other heads) is not covered by a rule and needs its
own config.json.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Callable, Optional

import attrs

from fmest.models.spec import ModelSpec

ALIAS_FILE = Path(__file__).resolve().parent / "aliases.json"


@attrs.frozen(kw_only=True)
class AliasMatch:
    """``name`` maps to ``preset`` because ``why`` (``source`` states it)."""

    name: str
    preset: str
    why: str
    source: str

    def warning(self, preset_name: str = "") -> str:
        preset_name = repr(preset_name or self.preset)
        return (f"model {self.name!r} is not a preset; estimated as {preset_name}"
                f" "
                f"(alias table: {self.why}; source: {self.source})")


@functools.lru_cache(maxsize=1)
def alias_table() -> dict:
    with open(ALIAS_FILE, encoding="utf-8") as fh:
        return json.load(fh)


def _candidates(name: str) -> list[tuple[str, dict]]:
    """(candidate preset name, rule) pairs for ``name``, exact entries first."""
    table = alias_table()
    key = name.strip().lower()
    short = key.split("/")[-1]
    out = [(e["preset"], e) for e in table["exact"]
           if e["name"].lower() == key or e["name"].lower().split("/")[-1] == short]
    original_short = name.strip().split("/")[-1]
    for rule in table["name_rules"]:
        removed = rule["remove"]
        at = original_short.find(removed)
        end = at + len(removed)
        # whole name parts only: "-it" removes from "gemma-2-9b-it", not from "gemma-2-9b-itx"
        if at > 0 and (end == len(original_short) or original_short[end] in "-._"):
            out.append((original_short[:at] + rule["add"] + original_short[end:], rule))
    return out


def match_alias(name: str, find: Callable[[str], Optional[object]]) -> Optional[AliasMatch]:
    """The first alias of ``name`` whose target ``find`` (a preset lookup) knows, or None."""
    if not isinstance(name, str) or not name.strip():
        return None
    for target, rule in _candidates(name):
        if find(target) is not None:
            return AliasMatch(name=name.strip(), preset=target, why=rule["why"],
                              source=rule["source"])
    return None


def alias_loader(name: str, presets) -> Optional[Callable[[], ModelSpec]]:
    """A loader for ``name`` through the alias table and the ``presets`` registry
    (``find(name) -> loader``), or None. The spec it returns keeps the requested name and
    carries the mapping as a warning."""
    hit = match_alias(name, presets.find)
    if hit is None:
        return None
    base_loader = presets.find(hit.preset)

    def load() -> ModelSpec:
        spec = base_loader()
        return attrs.evolve(spec, name=hit.name,
                            source=f"{spec.source}; via alias table {ALIAS_FILE.name}",
                            warnings=(*spec.warnings, hit.warning(spec.name)))
    return load
