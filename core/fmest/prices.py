"""A cloud price quote: one row of a rate card, registered through ``fmest_register_prices``."""

from __future__ import annotations

from attrs import frozen


@frozen(kw_only=True)
class PriceQuote:
    """The price of one instance type at one provider, region and price type.

    ``gpu`` is a name the GPU registry resolves (an alias is fine); ``observed`` is the ISO date
    the price was seen at ``source``.
    """

    provider: str
    instance: str
    gpu: str
    gpus_per_instance: int
    region: str
    price_type: str
    usd_per_instance_hour: float
    observed: str
    source: str
    notes: str = ""

    @property
    def usd_per_gpu_hour(self) -> float:
        return self.usd_per_instance_hour / self.gpus_per_instance
