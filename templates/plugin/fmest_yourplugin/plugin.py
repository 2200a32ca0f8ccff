"""The yourplugin fmest plugin: registers one GPU and its prices.

Implement only the hooks you need; docs/plugin_hooks.md lists every hook, its arguments and
its return contract. A hook implementation may take a subset of the spec's arguments.

PLACEHOLDERS: every YOURGPU / yourcloud value below is an example to replace with the vendor's
datasheet and the provider's price page; keep a source URL and the date you checked it.
"""

from fmest.gpus import GpuSpec
from fmest.hookspecs import hookimpl
from fmest.prices import PriceQuote

GIB = 1024**3
CHECKED = "2026-11-22"  # YYYY-MM-DD you last checked the sources below

#: The accelerator (dense peaks, per GPU; bandwidths one direction).
GPU = GpuSpec(
    name="YOURGPU-80GB", vendor="YOURVENDOR", memory_bytes=80 * GIB,
    hbm_bytes_per_s=3.35e12, bf16_flops_per_s=989e12, fp16_flops_per_s=989e12,
    fp8_flops_per_s=1979e12, tf32_flops_per_s=494e12, fp32_flops_per_s=67e12,
    intra_node_bytes_per_s=450e9, inter_node_bytes_per_s=50e9, pcie_bytes_per_s=64e9,
    aliases=("YOURGPU",), source="https://example.invalid/YOURGPU-datasheet", checked=CHECKED)

#: What yourcloud charges for instances with that GPU.
PRICES = (
    PriceQuote(provider="yourcloud", instance="yourcloud.8xYOURGPU", gpu="YOURGPU-80GB",
               gpus_per_instance=8, region="your-region-1", price_type="on_demand",
               usd_per_instance_hour=24.0, observed=CHECKED,
               source="https://example.invalid/yourcloud-pricing"),
    PriceQuote(provider="yourcloud", instance="yourcloud.8xYOURGPU", gpu="YOURGPU-80GB",
               gpus_per_instance=8, region="your-region-1", price_type="spot",
               usd_per_instance_hour=9.6, observed=CHECKED,
               source="https://example.invalid/yourcloud-spot-pricing"),
)


@hookimpl
def fmest_register_gpus(register):
    register(GPU)


@hookimpl
def fmest_register_prices(register):
    for quote in PRICES:
        register(quote)
