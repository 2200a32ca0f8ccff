"""The whole plugin contract: every hook fmest calls.

Registration hooks (``fmest_register_*``) run once when an :class:`fmest.engine.Engine` builds
its registries; each receives a ``register`` callable and returns nothing. Registering the
same key twice fails loudly, naming both plugins.

Estimation hooks (``fmest_estimate_*``) run per request. Each returns its answer, or ``None``
when the job is not one it can answer (wrong technique, missing data, out of scope); correction
hooks (``fmest_correct_*``) then see every answer so far. Every implementation is called
separately, with only the arguments it declares (an implementation may take a subset of the
spec's arguments, as in pytest); an exception or a result of the wrong type is reported as a
failure of that plugin and does not stop the others. Which plugins are asked depends on the
bases they declare (``fmest_register_estimators``) and the job's policy. The engine stamps the answering plugin's entry-point name into
``provenance.plugin``; a policy (see ``fmest_register_policies``) chooses among the answers.

The ``ctx`` argument of estimation hooks is an :class:`fmest.engine.EstimateContext`:
``ctx.model`` (:class:`fmest.models.ModelSpec`), ``ctx.layout`` (:class:`fmest.job.Layout`:
world size, dp/tp/pp/cp/ep, GPUs per node, nodes), ``ctx.gpu`` (:class:`fmest.gpus.GpuSpec`),
``ctx.optimizer`` (:class:`fmest.transforms.OptimizerSpec`), ``ctx.sharding``
(:class:`fmest.transforms.ShardingStrategy`), and ``ctx.registries`` for anything else.
"""

from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("fmest")
hookimpl = pluggy.HookimplMarker("fmest")


@hookspec
def fmest_register_gpus(register):
    """Register accelerators.

    Fires once per engine. Call ``register(spec)`` with a :class:`fmest.gpus.GpuSpec` for each
    GPU; its ``name`` and ``aliases`` become lookup keys (case-insensitive). Returns nothing.
    """


@hookspec
def fmest_register_models(register):
    """Register model presets.

    Fires once per engine. Call ``register(name, loader, aliases=(), source="", **info)``
    where ``loader`` is a zero-argument callable returning a :class:`fmest.models.ModelSpec`
    (called lazily, on first use), ``source`` says where the shape comes from and ``info`` may
    carry ``model_type`` and ``retrieved`` for listings (``fmest models``). Returns nothing.
    """


@hookspec
def fmest_register_prices(register):
    """Register cloud prices.

    Fires once per engine. Call ``register(quote)`` with a :class:`fmest.prices.PriceQuote` per
    (provider, instance, region, price type). Returns nothing.
    """


@hookspec
def fmest_register_optimizers(register):
    """Register optimizers (the optimizer transform).

    Fires once per engine. Call ``register(spec)`` with an
    :class:`fmest.transforms.OptimizerSpec`; ``name`` and ``aliases`` become lookup keys.
    Returns nothing.
    """


@hookspec
def fmest_register_parallelism(register):
    """Register data-parallel sharding strategies (the parallelism transform).

    Fires once per engine. Call ``register(strategy)`` with a
    :class:`fmest.transforms.ShardingStrategy`. A job selects it by name with
    ``parallelism.sharding``; ``parallelism.zero_stage`` N selects ``zeroN`` and
    ``parallelism.fsdp`` S selects ``fsdp_S``. Returns nothing.
    """


@hookspec
def fmest_register_stacks(register):
    """Register training-stack profiles (the stack transform, issue 12).

    Fires once per engine. Call ``register(profile)`` with a
    :class:`fmest.stacks.StackProfile` (what the framework fuses, overlaps, keeps and
    allocates, with a source per value). A job selects one with ``training.stack`` by name or
    alias, case-insensitively; a duplicate name fails loudly naming both plugins. Returns
    nothing.
    """


@hookspec
def fmest_register_policies(register):
    """Register policies that choose among estimation answers.

    Fires once per engine. Call ``register(policy)`` with an object having ``name``,
    ``description`` and ``choose(quantity, candidates) -> fmest.policies.Decision`` (see
    :class:`fmest.policies.Policy`). ``job.options.method`` selects one by name. Returns nothing.
    """


@hookspec
def fmest_register_estimators(register):
    """Declare what the estimation answers of this plugin are based on.

    Fires once per engine. Call ``register(basis, searchable=True)``: ``basis`` is one of
    :data:`fmest.estimates.BASES` (or a tuple of them); ``searchable=False`` says an answer costs
    too much to be asked once per candidate in a search (``max_micro_batch`` then asks the
    other plugins; a trace takes seconds). The policy of a job decides whom to ask: a plugin is
    asked when the policy can choose one of its bases (``policy.asks(basis)``), so a plugin
    never tests ``job.options.method`` itself. A plugin that declares nothing is always asked.
    Returns nothing.
    """


@hookspec(firstresult=True)
def fmest_resolve_model(name, registries):
    """Resolve a model name to a :class:`fmest.models.ModelSpec`.

    Fires per job whose ``model_config`` is not inline. ``name`` is ``job.model`` (a preset
    name or alias, a local ``config.json`` or folder, a Hub id); ``registries`` the engine's
    :class:`fmest.engine.Registries` (``registries.models`` holds the registered presets).
    Return a ``ModelSpec``, or ``None`` to let the next implementation try. The first answer
    wins; the core's default (``trylast``) tries a registered preset, then a local path, then
    the Hub, and raises :class:`fmest.errors.UnknownNameError` naming the nearest presets.
    """


@hookspec
def fmest_register_commands(register):
    """Register CLI sub-commands.

    Fires when the CLI starts a command that is not built in, and for ``fmest --help``, which
    lists the commands without building an engine (keep it cheap: import what the command
    needs inside its functions). Call ``register(name, help, add_arguments, run)``:
    ``add_arguments(parser)`` adds argparse arguments (called only for the command being run;
    job flags come from :data:`fmest.flags.JOB_FLAGS`), ``run(args, engine) -> int`` executes
    and returns the exit code. Returns nothing.
    """


@hookspec
def fmest_estimate_memory(job, ctx):
    """Estimate per-GPU peak memory of one training step.

    ``job`` is the :class:`fmest.job.Job`; ``ctx`` the resolved context (see module doc).
    Return a :class:`fmest.estimates.MemoryEstimate` (``total_bytes`` for the most loaded
    GPU, ``components`` summing to it, ``provenance.basis`` set), or ``None`` if not applicable.
    """


@hookspec
def fmest_estimate_time(job, ctx, memory):
    """Estimate the time of one optimizer step and of the whole run.

    ``memory`` is the chosen :class:`fmest.estimates.MemoryEstimate` (or ``None``), for plugins
    that price offload traffic or recomputation. Return a
    :class:`fmest.estimates.TimeEstimate`, or ``None`` if not applicable.
    """


@hookspec
def fmest_correct_memory(job, ctx, candidates):
    """Correct another plugin's memory answer (a learned model over an analytic baseline).

    Fires after every ``fmest_estimate_memory`` implementation, for the same job. ``candidates``
    is the tuple of their :class:`fmest.estimates.MemoryEstimate` answers, each with
    ``provenance.plugin`` and ``provenance.basis`` set; pick the baseline by basis (never
    import another plugin to recompute it). Return a new ``MemoryEstimate`` (it joins the
    candidates the policy chooses from), or ``None`` if not applicable.
    """


@hookspec
def fmest_correct_time(job, ctx, memory, candidates):
    """Correct another plugin's time answer.

    Fires after every ``fmest_estimate_time`` implementation; ``memory`` is the chosen memory
    estimate (or ``None``), ``candidates`` the tuple of their
    :class:`fmest.estimates.TimeEstimate` answers. Return a new ``TimeEstimate``, or ``None``.
    """


@hookspec
def fmest_estimate_tokens(job, ctx, time):
    """Estimate throughput from a chosen :class:`fmest.estimates.TimeEstimate` (``time``).

    Return a :class:`fmest.estimates.TokensEstimate`, or ``None`` if not applicable (for example
    when ``time`` is ``None``).
    """


@hookspec
def fmest_estimate_cost(job, ctx, time):
    """Estimate the dollar cost of the run from a chosen time estimate.

    Use ``job.pricing`` (provider, region, price type, override) and
    ``ctx.registries.prices``. Return a :class:`fmest.estimates.CostEstimate`, or ``None`` if
    not applicable.
    """
