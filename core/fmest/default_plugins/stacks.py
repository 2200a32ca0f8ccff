"""Built-in training-stack profiles (``core/fmest/data/stacks.toml``) and ``fmest stacks``."""

from __future__ import annotations

import json

from fmest.hookspecs import hookimpl


@hookimpl
def fmest_register_stacks(register):
    """The nine built-in profiles, each value with its source (issue 12)."""
    from fmest.stacks import load_profiles

    for profile in load_profiles():
        register(profile)


def stacks_rows(engine) -> list[dict]:
    """One row per registered profile: name, aliases, what it fuses and overlaps, precision,
    fitted constants, the registering plugin and the sources of its values."""
    from fmest.stacks import FUSIBLE, OVERLAPS, fitted_constants

    rows = []
    registry = engine.registries.stacks
    for name, profile in sorted(registry.items()):
        fitted = fitted_constants(profile.name)
        rows.append({
            "name": profile.name, "title": profile.title, "aliases": list(profile.aliases),
            "fused": [op for op in FUSIBLE if op in profile.fused],
            "overlap": [kind for kind in OVERLAPS if kind in profile.overlap],
            "overlap_needs_flag": sorted(profile.overlap_needs_flag),
            "attention_kernel": profile.attention_kernel,
            "optimizer_impl": profile.optimizer_impl,
            "auto_precision": profile.auto_precision, "fp32_grads": profile.fp32_grads,
            "fp8_recipe": profile.fp8_recipe, "time_factor": fitted.time_factor,
            "reserve_fraction": fitted.reserve_fraction, "fitted_from": fitted.origin,
            "plugin": registry.source_of(name), "sources": dict(profile.sources)})
    return rows


def _add_arguments(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--sources", action="store_true", help="print each value's source")


def _run(args, engine) -> int:
    rows = stacks_rows(engine)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for row in rows:
        aliases = f" (aliases: {', '.join(row['aliases'])})" if row["aliases"] else ""
        print(f"{row['name']}{aliases}: {row['title']}  [{row['plugin']}]")
        print(f"    fused: {', '.join(row['fused']) or 'none'}; overlapped: "
              f"{', '.join(row['overlap']) or 'none'}"
              + (f" ({', '.join(row['overlap_needs_flag'])} only with its flag)"
                 if row["overlap_needs_flag"] else "")
              + f"; attention {row['attention_kernel']}; optimizer {row['optimizer_impl']}; "
              f"precision {row['auto_precision'] or 'by sharding rule'}"
              + (f"; fp32 grads under {row['fp32_grads']}" if row["fp32_grads"] else "")
              + f"; fp8 {row['fp8_recipe']}")
        reserve = "physics default" if row["reserve_fraction"] is None \
            else f"{row['reserve_fraction']:.3f}"
        print(f"    fitted: time x{row['time_factor']:.3f}, allocator reserve {reserve} "
              f"({row['fitted_from']})")
        if args.sources:
            for key, text in row["sources"].items():
                print(f"    source[{key}]: {text}")
    if not args.sources:
        print("(--sources prints the source of every value; docs/memory_model.md and "
              "docs/time_model.md explain each)")
    return 0


@hookimpl
def fmest_register_commands(register):
    register("stacks", "list training-stack profiles (--stack NAME) with their sources",
             _add_arguments, _run)
