"""Registers ``fmest solve FIELD``: the largest seq_len, micro_batch, context or lora_rank that
fits the GPU (:mod:`fmest.solve`; docs/plan.md)."""

from fmest.hookspecs import hookimpl


@hookimpl
def fmest_register_commands(register):
    from fmest.plugins import lazy_command

    register("solve", "the largest seq_len, micro_batch, context (inference) or lora_rank "
             "that fits the GPU, with every estimate flag", *lazy_command("fmest.solve"))
