"""The engine: builds registries from the plugins, resolves a job, asks every plugin, lets
the policy choose, and assembles a :class:`Report`.

Flow: job -> context (model spec, GPU, layout, optimizer, sharding; cross-field checks) ->
memory answers -> policy -> time answers (given the chosen memory) -> policy -> tokens -> cost.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional

import attrs
from attrs import field, frozen

from fmest.errors import FmestError, InfeasibleError, InputError, PluginError
from fmest.estimates import CostEstimate, MemoryEstimate, TimeEstimate, TokensEstimate, with_plugin
from fmest.gpus import GpuSpec
from fmest.job import Job, Layout, resolve_layout
from fmest.models.spec import ModelSpec
from fmest.policies import Decision, Failure
from fmest.prices import PriceQuote
from fmest.registry import ListRegistry, Registry
from fmest.transforms import OptimizerSpec, ShardingStrategy, Transforms, resolve_transforms

QUANTITIES = ("memory", "time", "tokens", "cost")
_RESULT_TYPES = {"memory": MemoryEstimate, "time": TimeEstimate, "tokens": TokensEstimate,
                 "cost": CostEstimate}


class Registries:
    """Every registry, filled once from the registration hooks of a plugin manager."""

    def __init__(self, pm) -> None:
        self.gpus: Registry[GpuSpec] = Registry("GPU", "hardware.gpu")
        self.models: Registry[Callable[[], ModelSpec]] = Registry("model", "model")
        self.optimizers: Registry[OptimizerSpec] = Registry("optimizer", "training.optimizer")
        self.parallelism: Registry[ShardingStrategy] = Registry("sharding strategy",
                                                                "parallelism.fsdp")
        self.policies: Registry[Any] = Registry("policy", "options.method")
        self.prices: ListRegistry[PriceQuote] = ListRegistry(
            "price", key=lambda q: (q.provider.lower(), q.instance.lower(), q.region.lower(),
                                    q.price_type))
        self.model_sources: dict[str, str] = {}
        self._fill(pm)

    def _each(self, pm, hook_name: str, make_register):
        for impl in getattr(pm.hook, hook_name).get_hookimpls():
            impl.function(register=make_register(impl.plugin_name))

    def _fill(self, pm) -> None:
        def named(registry, attr="name"):
            def make(plugin):
                def register(item):
                    registry.add(getattr(item, attr), item, aliases=getattr(item, "aliases", ()),
                                 source=plugin)
                return register
            return make

        def models(plugin):
            def register(name, loader, aliases=(), source=""):
                self.models.add(name, loader, aliases=aliases, source=plugin)
                self.model_sources[name] = source
            return register

        def prices(plugin):
            def register(quote):
                self.prices.add(quote, source=plugin)
            return register

        self._each(pm, "fmest_register_gpus", named(self.gpus))
        self._each(pm, "fmest_register_models", models)
        self._each(pm, "fmest_register_optimizers", named(self.optimizers))
        self._each(pm, "fmest_register_parallelism", named(self.parallelism))
        self._each(pm, "fmest_register_policies", named(self.policies))
        self._each(pm, "fmest_register_prices", prices)


@frozen(kw_only=True)
class EstimateContext:
    """Everything resolved about a job that estimation hooks need (see hookspecs)."""

    model: ModelSpec
    gpu: GpuSpec
    layout: Layout
    optimizer: OptimizerSpec
    sharding: ShardingStrategy
    registries: Registries = field(eq=False, repr=False)
    warnings: tuple[str, ...] = ()
    #: optimizer sizing, sharding and communication resolved once (fmest.transforms)
    transforms: Optional[Transforms] = None


@frozen(kw_only=True)
class Report:
    """The answer to a job: the chosen estimate per quantity plus every decision."""

    job: Job
    context: EstimateContext
    memory: Optional[MemoryEstimate]
    time: Optional[TimeEstimate] = None
    tokens: Optional[TokensEstimate] = None
    cost: Optional[CostEstimate] = None
    fits: Optional[bool] = None
    headroom_bytes: Optional[int] = None
    max_micro_batch: Optional[int] = None
    decisions: dict[str, Decision] = field(factory=dict)
    warnings: tuple[str, ...] = ()


def sharding_name(job: Job) -> str:
    """The registry key of the job's sharding strategy (``zero0``.., ``fsdp_*``)."""
    par = job.parallelism
    if par.fsdp != "none" and par.zero_stage:
        raise InputError("parallelism", "give either zero_stage (DeepSpeed) or fsdp (PyTorch "
                         f"FSDP), not both (got zero_stage={par.zero_stage}, fsdp={par.fsdp!r})")
    if par.fsdp != "none":
        return f"fsdp_{par.fsdp}"
    return f"zero{par.zero_stage}"


class Engine:
    """Estimates jobs with the plugins of one plugin manager.

    ``Engine()`` uses the installed plugins; tests pass a fresh manager
    (``fmest.testing.new_engine``).
    """

    def __init__(self, pm=None) -> None:
        if pm is None:
            from fmest.plugins import new_plugin_manager

            pm = new_plugin_manager()
        self.pm = pm
        self.load_errors = list(getattr(pm, "fmest_load_errors", []))
        self.registries = Registries(pm)
        self._model_cache: dict[tuple, ModelSpec] = {}

    # -- resolution ---------------------------------------------------------------------
    def resolve_model(self, job: Job) -> ModelSpec:
        key = (job.model, repr(sorted(job.model_config.items())) if job.model_config else None)
        if key in self._model_cache:
            return self._model_cache[key]
        if job.model_config is not None:
            from fmest.models.hf import spec_from_hf_config

            spec = spec_from_hf_config(dict(job.model_config), name=job.model,
                                       source="inline model_config")
        else:
            loader = self.registries.models.find(job.model)
            if loader is not None:
                spec = loader()
            else:
                from fmest.models.local import resolve_model

                spec = resolve_model(job.model)
        self._model_cache[key] = spec
        return spec

    def context(self, job: Job) -> EstimateContext:
        """Resolve and cross-check a job; raises :class:`InputError` naming the field."""
        model = self.resolve_model(job)
        gpu = self.registries.gpus.get(job.hardware.gpu)
        layout = resolve_layout(job)
        optimizer = self.registries.optimizers.get(job.training.optimizer)
        sharding = self.registries.parallelism.get(sharding_name(job))
        par = job.parallelism
        if par.tp > 1:
            if model.num_attention_heads % par.tp:
                raise InputError("parallelism.tp", f"must divide the model's "
                                 f"{model.num_attention_heads} attention heads", value=par.tp,
                                 accepted=[d for d in range(1, model.num_attention_heads + 1)
                                           if model.num_attention_heads % d == 0])
            if model.num_kv_heads % par.tp and par.tp % model.num_kv_heads:
                raise InputError("parallelism.tp", f"must divide (or be a multiple of) the "
                                 f"model's {model.num_kv_heads} key/value heads", value=par.tp)
        if par.pp > model.num_layers:
            raise InputError("parallelism.pp", f"more pipeline stages than the model's "
                             f"{model.num_layers} layers", value=par.pp)
        if par.ep > 1:
            if not model.is_moe:
                raise InputError("parallelism.ep", "expert parallelism needs a mixture-of-"
                                 f"experts model; {model.name} has no experts", value=par.ep)
            if model.num_experts % par.ep:
                raise InputError("parallelism.ep", f"must divide the model's {model.num_experts}"
                                 " experts", value=par.ep)
        if job.training.seq_len % par.cp:
            raise InputError("parallelism.cp", "must divide training.seq_len "
                             f"({job.training.seq_len})", value=par.cp)
        if job.training.technique == "qlora" and par.fsdp == "none" and par.zero_stage == 3:
            pass  # allowed (QLoRA + ZeRO-3 is supported by DeepSpeed with bnb >= 0.43)
        if job.options.method not in self.registries.policies:
            self.registries.policies.get(job.options.method)  # raises with the accepted names
        transforms = resolve_transforms(job, model=model, layout=layout, optimizer=optimizer,
                                        sharding=sharding)
        return EstimateContext(model=model, gpu=gpu, layout=layout, optimizer=optimizer,
                               sharding=sharding, registries=self.registries,
                               warnings=tuple(model.warnings), transforms=transforms)

    # -- asking plugins -------------------------------------------------------------------
    def _ask(self, quantity: str, job: Job, **kwargs) -> tuple[list, list[Failure]]:
        hook = getattr(self.pm.hook, f"fmest_estimate_{quantity}")
        answers, failures = [], []
        for impl in hook.get_hookimpls():
            try:
                result = impl.function(job=job, **kwargs)
            except (InfeasibleError, InputError):
                raise
            except Exception as exc:  # a broken plugin names itself and spares the others
                failures.append(Failure(plugin=impl.plugin_name,
                                        error=f"{type(exc).__name__}: {exc}"))
                continue
            if result is None:
                continue
            if not isinstance(result, _RESULT_TYPES[quantity]):
                failures.append(Failure(plugin=impl.plugin_name, error=(
                    f"returned {type(result).__name__}, expected "
                    f"{_RESULT_TYPES[quantity].__name__}")))
                continue
            answers.append(with_plugin(result, impl.plugin_name))
        return answers, failures

    def decide(self, quantity: str, job: Job, **kwargs) -> Decision:
        answers, failures = self._ask(quantity, job, **kwargs)
        policy = self.registries.policies.get(job.options.method)
        decision = policy.choose(quantity, answers)
        return attrs.evolve(decision, failures=tuple(failures))

    # -- public operations ------------------------------------------------------------------
    def estimate_memory(self, job: Job, ctx: EstimateContext | None = None) -> Decision:
        ctx = ctx or self.context(job)
        return self.decide("memory", job, ctx=ctx)

    def max_micro_batch(self, job: Job, ctx: EstimateContext, *, limit: int = 4096) -> int:
        """Largest micro-batch whose estimated peak fits the GPU (0 if even 1 does not)."""
        cap = ctx.gpu.memory_bytes

        def fits(b: int) -> bool:
            j = job.evolve(training={"micro_batch_size": b})
            chosen = self.decide("memory", j, ctx=ctx).chosen
            return chosen is not None and chosen.total_bytes <= cap

        if not fits(1):
            return 0
        lo, hi = 1, 2
        while hi <= limit and fits(hi):
            lo, hi = hi, hi * 2
        if hi > limit:
            return lo
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if fits(mid):
                lo = mid
            else:
                hi = mid
        return lo

    def estimate(self, job: Job, *, quantities=QUANTITIES, search_batch: bool = True) -> Report:
        """Estimate ``quantities`` for ``job`` and return a :class:`Report`."""
        for q in quantities:
            if q not in QUANTITIES:
                raise InputError("quantities", "unknown quantity", value=q, accepted=QUANTITIES)
        ctx = self.context(job)
        decisions: dict[str, Decision] = {}
        warnings = list(ctx.warnings) + [str(e) for e in self.load_errors]
        mem_d = self.decide("memory", job, ctx=ctx)
        decisions["memory"] = mem_d
        memory = mem_d.chosen
        fits = headroom = max_mb = None
        if memory is not None:
            headroom = ctx.gpu.memory_bytes - memory.total_bytes
            fits = headroom >= 0
            if search_batch:
                search_job = job
                if memory.provenance.basis == "traced":
                    # a trace costs seconds; the batch search uses the formulas instead
                    search_job = job.evolve(options={"method": "theory"})
                    warnings.append("max_micro_batch comes from the theory policy (tracing "
                                    "every candidate batch would take minutes)")
                max_mb = self.max_micro_batch(search_job, ctx)
        time = tokens = cost = None
        if any(q in quantities for q in ("time", "tokens", "cost")):
            decisions["time"] = self.decide("time", job, ctx=ctx, memory=memory)
            time = decisions["time"].chosen
        if time is not None and any(q in quantities for q in ("tokens", "cost")):
            decisions["tokens"] = self.decide("tokens", job, ctx=ctx, time=time)
            tokens = decisions["tokens"].chosen
        if time is not None and "cost" in quantities:
            decisions["cost"] = self.decide("cost", job, ctx=ctx, time=time)
            cost = decisions["cost"].chosen
        for d in decisions.values():
            warnings += [f"plugin {f.plugin!r} failed on {d.quantity}: {f.error} "
                         f"(disable it with FMEST_DISABLE_PLUGINS={f.plugin})" for f in d.failures]
        if "memory" in quantities and memory is None:
            warnings.append("no installed plugin answered memory for this job with policy "
                            f"{job.options.method!r} ({mem_d.rule})")
        return Report(job=job, context=ctx, memory=memory, time=time, tokens=tokens, cost=cost,
                      fits=fits, headroom_bytes=headroom, max_micro_batch=max_mb,
                      decisions=decisions, warnings=tuple(dict.fromkeys(warnings)))


@functools.lru_cache(maxsize=1)
def default_engine() -> Engine:
    """The process-wide engine over the installed plugins (built on first use)."""
    return Engine()
