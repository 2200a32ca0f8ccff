"""The ``torch_runner`` plugin's hooks: traced per-GPU memory (:mod:`fmest_torch_runner.traced`,
docs/torch_runner.md) and the ``fmest probe`` command.

The tracing code loads when a policy first asks for a traced answer, not with the plugin:
``fmest --help`` and theory estimates load every plugin and must stay cheap.
"""

from __future__ import annotations

from fmest.hookspecs import hookimpl


@hookimpl
def fmest_register_estimators(register):
    """Traced answers (basis ``traced``), asked only by policies that can choose them; a trace
    costs seconds, so the batch search does not ask per candidate."""
    register("traced", searchable=False)


@hookimpl
def fmest_estimate_memory(job, ctx):
    """The traced answer (basis ``traced``; the engine asks only when the job's policy can
    choose it); None for jobs the runner cannot execute (serving jobs: the runner traces a
    training step)."""
    if job.mode == "inference":
        return None
    from fmest_torch_runner.traced import traced_memory

    return traced_memory(job, ctx)


@hookimpl
def fmest_register_commands(register):
    from fmest.plugins import lazy_command

    register("probe", "run real (cpu/cuda) or fake training steps of jobs and record rows "
             "(CSV/Parquet); --sweep for a grid, one subprocess per configuration",
             *lazy_command("fmest_torch_runner.probe", "add_arguments", "run_command"))
