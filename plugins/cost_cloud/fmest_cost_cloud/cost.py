"""Choosing a price row for a job and turning it into a :class:`fmest.estimates.CostEstimate`.

The rule (docs/cost.md):

* ``pricing.price_per_gpu_hour`` overrides the table: provider ``custom``, billed per GPU.
* Otherwise the rows for the job's GPU are filtered by provider (a name, or ``cheapest`` / none
  for every provider), region and price type, in that order; the first filter that leaves
  nothing raises an :class:`fmest.errors.InputError` naming that field and what is available.
* Among the remaining rows the one with the lowest hourly bill *for this job* wins
  (``ceil(world_size / gpus_per_instance)`` instances x the instance price); ties break on
  provider, instance, region.
* No pricing asked for (no provider, no region, price type ``on_demand``) and nobody rents
  the GPU on demand: no answer (``None``), no error, so memory and time still come back.
"""

from __future__ import annotations

from datetime import date
from typing import Iterable, Optional, Sequence

from attrs import frozen

from fmest.errors import InputError
from fmest.estimates import CostEstimate, Provenance
from fmest.prices import PriceQuote
from fmest_cost_cloud.index import price_index
from fmest_cost_cloud.table import is_stale, max_age_days, today

CHEAPEST = "cheapest"
CUSTOM = "custom"


def instances_needed(world_size: int, gpus_per_instance: int) -> int:
    """Whole instances to rent for ``world_size`` GPUs: 12 GPUs on 8-GPU instances rent 2."""
    return -(-world_size // gpus_per_instance)


def billed_hours(total_seconds: Optional[float], *, checkpoint_overhead_fraction: float = 0.0,
                 startup_overhead_hours: float = 0.0) -> Optional[float]:
    """Hours the instances are rented: the run's wall time stretched by the checkpoint
    overhead fraction, plus the fixed start-up hours; ``None`` without a run time."""
    if total_seconds is None:
        return None
    return total_seconds / 3600.0 * (1.0 + checkpoint_overhead_fraction) + startup_overhead_hours


@frozen(kw_only=True)
class Field:
    """User-facing names of the four filters (job paths for estimates, flags for the CLI)."""

    gpu: str = "hardware.gpu"
    provider: str = "pricing.provider"
    region: str = "pricing.region"
    price_type: str = "pricing.price_type"


JOB_FIELDS = Field()
CLI_FIELDS = Field(gpu="--gpu", provider="--provider", region="--region",
                   price_type="--price-type")


def _distinct(values: Iterable[str]) -> list[str]:
    """Sorted case-insensitively, one spelling per case-insensitive value."""
    seen: dict[str, str] = {}
    for v in values:
        seen.setdefault(v.lower(), v)
    return sorted(seen.values(), key=str.lower)


def filter_quotes(rows: Sequence[tuple[PriceQuote, str]], *, gpu_label: str,
                  provider: Optional[str] = None, region: Optional[str] = None,
                  price_type: Optional[str] = None, fields: Field = JOB_FIELDS,
                  all_gpus: Sequence[str] = ()) -> list[tuple[PriceQuote, str]]:
    """Narrow ``rows`` (already the rows of the wanted GPU, with their registering plugin) by
    provider, region and price type, each case-insensitive and exact; ``cheapest`` or ``None``
    keeps every provider. Raises :class:`InputError` on the first filter that empties the list,
    naming the field and the values that would have matched."""
    if not rows:
        raise InputError(fields.gpu, f"no provider in the price table rents {gpu_label}; pick "
                         "a rentable GPU or give a price per GPU-hour", value=gpu_label,
                         accepted=list(all_gpus))
    if provider is not None and provider.strip().lower() != CHEAPEST:
        kept = [r for r in rows if r[0].provider.lower() == provider.strip().lower()]
        if not kept:
            raise InputError(fields.provider, f"no price for {gpu_label} from this provider",
                             value=provider, accepted=_distinct(r[0].provider for r in rows)
                             + [CHEAPEST])
        rows = kept
    if region is not None:
        kept = [r for r in rows if r[0].region.lower() == region.strip().lower()]
        if not kept:
            raise InputError(fields.region, f"no price for {gpu_label} in this region"
                             + (f" from {rows[0][0].provider}" if provider and
                                provider.lower() != CHEAPEST else ""),
                             value=region, accepted=_distinct(r[0].region for r in rows))
        rows = kept
    if price_type is not None:
        kept = [r for r in rows if r[0].price_type == price_type]
        if not kept:
            raise InputError(fields.price_type, f"no {price_type} price for {gpu_label} with "
                             "the other filters given", value=price_type,
                             accepted=_distinct(r[0].price_type for r in rows))
        rows = kept
    return list(rows)


def cheapest_for_job(rows: Sequence[tuple[PriceQuote, str]],
                     world_size: int) -> tuple[PriceQuote, str]:
    """The row with the lowest hourly bill for ``world_size`` GPUs (whole instances); ties
    break on provider, instance and region (case-insensitive), never on registration order."""
    def key(r):
        q = r[0]
        bill = instances_needed(world_size, q.gpus_per_instance) * q.usd_per_instance_hour
        return (round(bill, 9), q.provider.lower(), q.instance.lower(), q.region.lower())
    return min(rows, key=key)


def rows_for_gpu(registries, gpu_name: str) -> list[tuple[PriceQuote, str]]:
    """Registered price rows whose GPU resolves (name or alias) to ``gpu_name``, in
    registration order (a dict lookup in the registries' :func:`price_index`)."""
    return list(price_index(registries).rows_by_gpu.get(gpu_name, ()))


def rentable_gpus(registries) -> list[str]:
    """Canonical names of the GPUs that some registered row prices."""
    return list(price_index(registries).rentable_gpus)


def estimate_cost(job, ctx, time, *, on: Optional[date] = None,
                  max_age: Optional[int] = None) -> Optional[CostEstimate]:
    """The ``fmest_estimate_cost`` answer (see the module doc). ``on`` and ``max_age`` freeze
    "today" and the staleness limit (defaults: today / ``FMEST_PRICE_MAX_AGE_DAYS``)."""
    pricing = job.pricing
    world = ctx.layout.world_size
    total_seconds = time.total_seconds if time is not None else None
    hours = billed_hours(total_seconds,
                         checkpoint_overhead_fraction=pricing.checkpoint_overhead_fraction,
                         startup_overhead_hours=pricing.startup_overhead_hours)
    notes: list[str] = []
    if total_seconds is None:  # and so hours (billed_hours answers None without a run time)
        notes.append("no run time (no workload given): only the hourly rate is priced")
    elif pricing.checkpoint_overhead_fraction or pricing.startup_overhead_hours:
        notes.append(f"billed hours = run {total_seconds / 3600:.3f} h x (1 + "
                     f"{pricing.checkpoint_overhead_fraction:g} checkpoint overhead) + "
                     f"{pricing.startup_overhead_hours:g} h start-up = {hours:.3f} h")

    if pricing.price_per_gpu_hour is not None:
        if pricing.provider and pricing.provider.lower() != CUSTOM:
            notes.append(f"pricing.provider {pricing.provider!r} ignored: "
                         "pricing.price_per_gpu_hour overrides the price table")
        usd_per_hour = pricing.price_per_gpu_hour * world
        return CostEstimate(
            usd=None if hours is None else usd_per_hour * hours,
            usd_per_hour=usd_per_hour,
            provenance=Provenance(basis="quoted", detail=(
                f"user price ${pricing.price_per_gpu_hour:g}/GPU-h x {world} GPUs")),
            provider=CUSTOM, instance=f"{ctx.gpu.name} (per GPU)", instances=world,
            gpus_per_instance=1, region=pricing.region or "", price_type=pricing.price_type,
            price_observed="", price_source="pricing.price_per_gpu_hour", stale=False,
            gpu_hours=None if hours is None else world * hours, notes=tuple(notes))

    if pricing.provider is not None and pricing.provider.strip().lower() == CUSTOM:
        raise InputError("pricing.price_per_gpu_hour", "provider 'custom' needs a price per "
                         "GPU-hour (--price-per-gpu-hour)")
    # Pricing was asked for when any pricing field differs from its default; otherwise a GPU
    # nobody rents (on demand) simply gets no cost answer instead of failing the whole estimate.
    asked = (pricing.provider is not None or pricing.region is not None
             or pricing.price_type != "on_demand")
    rows = rows_for_gpu(ctx.registries, ctx.gpu.name)
    if not asked and not any(q.price_type == "on_demand" for q, _ in rows):
        return None
    rows = filter_quotes(rows, gpu_label=ctx.gpu.name, provider=pricing.provider,
                         region=pricing.region, price_type=pricing.price_type,
                         all_gpus=rentable_gpus(ctx.registries))
    # A multi-GPU layout assumes its GPUs per node share a node (the time estimate prices
    # intra-node links): prefer instances at least that large when the filters leave any.
    node_sized = [r for r in rows if r[0].gpus_per_instance >= ctx.layout.gpus_per_node]
    if node_sized and len(node_sized) < len(rows):
        notes.append(f"only instances with >= {ctx.layout.gpus_per_node} GPUs considered "
                     f"(the layout's GPUs per node); {len(rows) - len(node_sized)} smaller "
                     "offer(s) skipped")
        rows = node_sized
    limit = max_age if max_age is not None else max_age_days()
    on = on if on is not None else today()  # read FMEST_PRICE_TODAY once, not once per row
    choosing = pricing.provider is None or pricing.provider.strip().lower() == CHEAPEST
    fresh = [r for r in rows if not is_stale(r[0].observed, on, limit)]
    if choosing and fresh and len(fresh) < len(rows):
        # an old price may no longer be offered: choose among current ones when any exist
        notes.append(f"{len(rows) - len(fresh)} stale offer(s) older than {limit} days not "
                     "considered for 'cheapest'")
        rows = fresh
    quote, plugin = cheapest_for_job(rows, world)
    n = instances_needed(world, quote.gpus_per_instance)
    rented = n * quote.gpus_per_instance
    usd_per_hour = n * quote.usd_per_instance_hour
    if pricing.provider is None or pricing.provider.strip().lower() == CHEAPEST:
        how = "no pricing.provider given" if pricing.provider is None else "provider cheapest"
        providers = ", ".join(_distinct(r[0].provider for r in rows))
        notes.append(f"{how}: lowest hourly bill among {len(rows)} {pricing.price_type} "
                     f"row(s) for {ctx.gpu.name} from {providers}")
    elif len(rows) > 1:
        notes.append(f"lowest hourly bill among {len(rows)} matching {quote.provider} rows")
    if rented > world:
        notes.append(f"{world} GPUs on {quote.gpus_per_instance}-GPU instances: renting {n} "
                     f"instance(s) = {rented} GPUs, {rented - world} idle")
    if quote.gpus_per_instance < ctx.layout.gpus_per_node:
        notes.append(f"the layout puts {ctx.layout.gpus_per_node} GPUs per node but "
                     f"{quote.instance} has {quote.gpus_per_instance} per instance: unless the "
                     "provider places them on one node, the time estimate's intra-node "
                     "bandwidth does not hold (pick a provider or region with larger instances)")
    stale = is_stale(quote.observed, on, limit)
    if stale:
        notes.append(f"price observed {quote.observed}, more than {limit} days ago "
                     "(FMEST_PRICE_MAX_AGE_DAYS): check the provider's current price")
    if quote.price_type == "spot":
        notes.append("spot prices move and instances can be interrupted; restarts are not "
                     "priced")
    return CostEstimate(
        usd=None if hours is None else usd_per_hour * hours,
        usd_per_hour=usd_per_hour,
        provenance=Provenance(basis="quoted", detail=(
            f"{quote.provider} {quote.instance} {quote.region} {quote.price_type}: "
            f"${quote.usd_per_instance_hour:g}/instance-h x {n} (row from {plugin})")),
        provider=quote.provider, instance=quote.instance, instances=n,
        gpus_per_instance=quote.gpus_per_instance, region=quote.region,
        price_type=quote.price_type, price_observed=quote.observed, price_source=quote.source,
        stale=stale, gpu_hours=None if hours is None else rented * hours, notes=tuple(notes))
