"""``fmest prices``: list the registered price rows, filtered and sorted."""

from __future__ import annotations

import json
import re
import sys
from datetime import date
from typing import Optional

from fmest.errors import InputError, near_names
from fmest.job import PRICE_TYPES
from fmest_cost_cloud import PRICES_HELP
from fmest_cost_cloud.cost import CLI_FIELDS, filter_quotes, rentable_gpus
from fmest_cost_cloud.table import age_days, is_stale, max_age_days, today

HELP = PRICES_HELP
SORTS = ("provider", "price")


def add_arguments(parser) -> None:
    parser.add_argument("--gpu", metavar="NAME", help="GPU name or alias; also matches every "
                        "GPU whose canonical name starts with these words (H100 -> all H100s)")
    parser.add_argument("--provider", metavar="NAME", help="e.g. AWS, GCP, Lambda (any case)")
    parser.add_argument("--region", metavar="R", help="exact region, e.g. us-east-1")
    parser.add_argument("--price-type", metavar="|".join(PRICE_TYPES))
    parser.add_argument("--sort", choices=SORTS, default="provider",
                        help="provider (default: provider, GPU, instance) or price ($/GPU-h)")
    parser.add_argument("--format", choices=("table", "json", "csv"), default="table",
                        help="table for people; json or csv (the JSON rows' fields) for machines")


def _tokens(text: str) -> list[str]:
    return [t for t in re.split(r"[^0-9a-z]+", text.lower()) if t]


def gpu_names_matching(gpus, text: str) -> set[str]:
    """Canonical GPU names that ``text`` selects: the GPU it names (name or alias, through the
    registry), plus every GPU whose canonical name starts with the same words, split on
    anything but letters and digits (``H100`` -> H100-SXM-80GB, H100-PCIE-80GB, ...;
    ``A10`` does not match A100)."""
    out = set()
    spec = gpus.find(text)
    if spec is not None:
        out.add(spec.name)
    want = _tokens(text)
    if want:
        out.update(n for n in gpus.names() if _tokens(n)[:len(want)] == want)
    return out


def select_rows(engine, *, gpu: Optional[str] = None, provider: Optional[str] = None,
                region: Optional[str] = None, price_type: Optional[str] = None):
    """``(quote, plugin, canonical GPU name or None)`` for the rows the filters keep."""
    reg = engine.registries
    if price_type is not None and price_type not in PRICE_TYPES:
        raise InputError(CLI_FIELDS.price_type, "not an accepted value", value=price_type,
                         accepted=PRICE_TYPES)
    resolved = {}
    for quote, _plugin in reg.prices.with_sources():
        spec = reg.gpus.find(quote.gpu)
        resolved[id(quote)] = spec.name if spec is not None else None
    rows = reg.prices.with_sources()
    label = "any GPU"
    if gpu is not None:
        names = gpu_names_matching(reg.gpus, gpu)
        if not names:
            raise InputError(CLI_FIELDS.gpu, "unknown GPU", value=gpu,
                             accepted=near_names(gpu, reg.gpus.all_keys()) or rentable_gpus(reg))
        rows = [r for r in rows if resolved[id(r[0])] in names]
        label = gpu if len(names) > 1 else next(iter(names))
        if not rows:
            raise InputError(CLI_FIELDS.gpu, f"no price rows for {', '.join(sorted(names))}",
                             value=gpu, accepted=rentable_gpus(reg))
    if not rows:
        return []
    kept = filter_quotes(rows, gpu_label=label, provider=provider, region=region,
                         price_type=price_type, fields=CLI_FIELDS)
    return [(q, p, resolved[id(q)]) for q, p in kept]


def _sort(rows, how: str):
    def gpu_of(r):
        return (r[2] or r[0].gpu).lower()
    if how == "price":
        key = lambda r: (r[0].usd_per_gpu_hour, r[0].provider.lower(), r[0].instance.lower(),
                         r[0].region.lower(), PRICE_TYPES.index(r[0].price_type))
    else:
        key = lambda r: (r[0].provider.lower(), gpu_of(r), r[0].instance.lower(),
                         r[0].region.lower(), PRICE_TYPES.index(r[0].price_type))
    return sorted(rows, key=key)


def row_dict(quote, plugin: str, gpu_name: Optional[str], on: date, max_age: int) -> dict:
    """One row of ``fmest prices --format json``."""
    return {"provider": quote.provider, "instance": quote.instance, "gpu": quote.gpu,
            "gpu_name": gpu_name, "gpus_per_instance": quote.gpus_per_instance,
            "region": quote.region, "price_type": quote.price_type,
            "usd_per_instance_hour": quote.usd_per_instance_hour,
            "usd_per_gpu_hour": quote.usd_per_gpu_hour, "observed": quote.observed,
            "age_days": age_days(quote.observed, on),
            "stale": is_stale(quote.observed, on, max_age), "source_url": quote.source,
            "notes": quote.notes, "plugin": plugin}


#: ``fmest prices --format csv`` columns: the ``--format json`` row's fields, in its order.
CSV_FIELDS = ("provider", "instance", "gpu", "gpu_name", "gpus_per_instance", "region",
              "price_type", "usd_per_instance_hour", "usd_per_gpu_hour", "observed", "age_days",
              "stale", "source_url", "notes", "plugin")


def prices_table(rows: list[dict], on: date, max_age: int, *,
                 tty: Optional[bool] = None) -> str:
    """The table (fmest.output.render: rich on a terminal, plain text when piped); prices with four
    decimals, STALE marks old prices."""
    from fmest.output.render import Column
    from fmest.output.render import render_table as table

    right = {"GPUs", "$/GPU-h", "$/instance-h"}
    head = [Column(name=n, align="right" if n in right else "left")
            for n in ("provider", "instance", "gpu", "GPUs", "region", "price type", "$/GPU-h",
                      "$/instance-h", "observed", "")]
    body = [(r["provider"], r["instance"], r["gpu_name"] or r["gpu"],
             str(r["gpus_per_instance"]), r["region"], r["price_type"],
             f"{r['usd_per_gpu_hour']:.4f}", f"{r['usd_per_instance_hour']:.4f}", r["observed"],
             "STALE" if r["stale"] else "") for r in rows]
    out = [table(head, body, tty=tty)]
    n_stale = sum(r["stale"] for r in rows)
    out.append("")
    out.append(f"{len(rows)} row(s); USD per hour, excluding tax. STALE ({n_stale}): observed "
               f"more than {max_age} days before {on.isoformat()} (FMEST_PRICE_MAX_AGE_DAYS). "
               "Sources and notes: --format json.")
    return "\n".join(out)


def run(args, engine) -> int:
    """Entry of ``fmest prices``; bad filters raise :class:`InputError` (exit 2)."""
    on, max_age = today(), max_age_days()
    rows = select_rows(engine, gpu=args.gpu, provider=args.provider, region=args.region,
                       price_type=args.price_type)
    dicts = [row_dict(q, p, g, on, max_age) for q, p, g in _sort(rows, args.sort)]
    if args.format == "json":
        print(json.dumps(dicts, indent=2))
    elif args.format == "csv":
        from fmest.output.render import csv_text

        sys.stdout.write(csv_text(CSV_FIELDS, dicts))
    elif not dicts:
        print("no price rows registered (is a price plugin installed? see 'fmest plugins')")
    else:
        print(prices_table(dicts, on, max_age))
    return 0
