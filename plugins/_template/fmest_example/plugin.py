"""Template fmest plugin. Implement only the hooks you need (see docs/plugin_hooks.md)."""

from fmest.gpus import GpuSpec
from fmest.hookspecs import hookimpl

GIB = 1024**3


@hookimpl
def fmest_register_gpus(register):
    # Every figure in a shipped table carries its source and the date it was checked.
    register(GpuSpec(name="Example-GPU-24GB", vendor="Example", memory_bytes=24 * GIB,
                     bf16_flops_per_s=100e12, hbm_bytes_per_s=1.0e12,
                     aliases=("example-gpu",), source="https://example.invalid/datasheet",
                     checked="2026-11-22"))
