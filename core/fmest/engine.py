"""The engine: builds registries from the plugins, resolves a job, asks every plugin, lets
the policy choose, and assembles a :class:`Report`.

Flow: job -> context (model spec, GPU, layout, optimizer, sharding; cross-field checks) ->
memory answers -> policy -> time answers (given the chosen memory) -> policy -> tokens -> cost.
"""

from __future__ import annotations

import contextlib
import functools
from collections import OrderedDict
from typing import Any, Callable, Optional

import attrs
from attrs import field, frozen

from fmest.bounds import answer_problem, check_context, check_job, check_model, registered_problem
from fmest.errors import FmestError, InfeasibleError, InputError, PluginError, UnknownNameError
from fmest.estimates import (
    BASES,
    CostEstimate,
    MemoryEstimate,
    TimeEstimate,
    TokensEstimate,
    with_plugin,
)
from fmest.gpus import GpuSpec
from fmest.job import Job, Layout, resolve_layout
from fmest.models.spec import ModelSpec, with_dense_experts
from fmest.physics.counting import resolve_lora_targets
from fmest.plugins import (
    PluginDeadline,
    call_each,
    call_first,
    call_register,
    parse_plugin_timeout,
    plugin_timeout_from_env,
)
from fmest.policies import Decision, Failure
from fmest.prices import PriceQuote
from fmest.registry import ListRegistry, Registry
from fmest.stacks import StackProfile, resolve_job_stack
from fmest.transforms import OptimizerSpec, ShardingStrategy, Transforms, resolve_transforms
from fmest.uncertainty import with_interval

QUANTITIES = ("memory", "time", "tokens", "cost")
#: Most model specs an engine keeps, least recently used dropped first: every shipped preset
#: (116) with room for the inline configs in use. A long-running service sees a new entry for
#: every distinct ``model_config`` a client sends; unbounded, that memory was never freed.
MODEL_CACHE_ENTRIES = 128
#: Most characters of inline ``model_config`` (their cache keys) the model cache keeps. A spec
#: keeps its config, about 10x the key's length in Python objects (a 64 KB config: 0.6 MB), so a
#: count alone does not bound the bytes: 128 configs near the service's 1 MiB body limit would
#: hold about 1 GB. 2 Mi characters keep about 20 MB, or some 600 typical 3 KB configs; a
#: config over it is resolved again on every use.
MODEL_CACHE_CONFIG_CHARS = 2 << 20
#: raised by a plugin, these reach the user (a bad value; a configuration that cannot run)
_PROPAGATE = (InfeasibleError, InputError)
_RESULT_TYPES = {"memory": MemoryEstimate, "time": TimeEstimate, "tokens": TokensEstimate,
                 "cost": CostEstimate}


@frozen(kw_only=True)
class EstimatorInfo:
    """What an estimation plugin declared through ``fmest_register_estimators``: the bases its
    answers have, and whether it is cheap enough to be asked once per candidate in a search
    (``max_micro_batch``)."""

    plugin: str
    bases: tuple[str, ...]
    searchable: bool = True


def _checked(kind: str, item, cls):
    if not isinstance(item, cls):
        raise TypeError(f"registered a {type(item).__name__} as a {kind}; expected "
                        f"{cls.__module__}.{cls.__name__}")
    problem = registered_problem(item)  # right type, unusable numbers (negative memory, NaN)
    if problem:
        raise ValueError(f"registered {kind} {getattr(item, 'name', '')!r}: {problem}")
    return item


class Registries:
    """Every registry, filled once from the registration hooks of a plugin manager.

    A registration hook that raises or registers something of the wrong type is recorded in
    ``errors`` (a :class:`fmest.plugins.LoadError` naming the plugin) and the others go on.
    """

    def __init__(self, pm) -> None:
        self.gpus: Registry[GpuSpec] = Registry("GPU", "hardware.gpu")
        self.models: Registry[Callable[[], ModelSpec]] = Registry("model", "model")
        self.optimizers: Registry[OptimizerSpec] = Registry("optimizer", "training.optimizer")
        self.parallelism: Registry[ShardingStrategy] = Registry("sharding strategy",
                                                                "parallelism.fsdp")
        self.policies: Registry[Any] = Registry("policy", "options.method")
        self.stacks: Registry[StackProfile] = Registry("training stack", "training.stack")
        self.prices: ListRegistry[PriceQuote] = ListRegistry(
            "price", key=lambda q: (q.provider.lower(), q.instance.lower(), q.region.lower(),
                                    q.price_type))
        self.model_sources: dict[str, str] = {}
        #: model name -> what its plugin said about it at registration (model_type, retrieved)
        self.model_info: dict[str, dict] = {}
        self.estimators: dict[str, EstimatorInfo] = {}
        self.errors: list = []
        self._fill(pm)

    def _fill(self, pm) -> None:
        def named(registry, cls):
            def make(plugin):
                def register(item):
                    _checked(registry.kind, item, cls)
                    registry.add(item.name, item, aliases=getattr(item, "aliases", ()),
                                 source=plugin)
                return register
            return make

        def policies(plugin):
            def register(policy):
                if not (isinstance(getattr(policy, "name", None), str)
                        and callable(getattr(policy, "choose", None))):
                    raise TypeError(f"registered a {type(policy).__name__} as a policy; "
                                    "expected an object with name and choose(quantity, "
                                    "candidates) (fmest.policies.Policy)")
                self.policies.add(policy.name, policy, source=plugin)
            return register

        def models(plugin):
            def register(name, loader, aliases=(), source="", **info):
                if not isinstance(name, str) or not callable(loader):
                    raise TypeError("register(name, loader): name must be a string and loader "
                                    f"a zero-argument callable (got {name!r}, {loader!r})")
                self.models.add(name, loader, aliases=aliases, source=plugin)
                self.model_sources[name] = source
                self.model_info[name] = dict(info, aliases=tuple(aliases))
            return register

        def prices(plugin):
            def register(quote):
                self.prices.add(_checked("price", quote, PriceQuote), source=plugin)
            return register

        def estimators(plugin):
            def register(basis, searchable=True):
                bases = (basis,) if isinstance(basis, str) else tuple(basis)
                bad = [b for b in bases if b not in BASES]
                if bad or not bases:
                    raise InputError("basis", "not an accepted basis", value=bad or basis,
                                     accepted=BASES)
                old = self.estimators.get(plugin)
                if old is not None:
                    bases = tuple(dict.fromkeys(old.bases + bases))
                    searchable = old.searchable and searchable
                self.estimators[plugin] = EstimatorInfo(plugin=plugin, bases=bases,
                                                        searchable=bool(searchable))
            return register

        for hook, make in (("fmest_register_gpus", named(self.gpus, GpuSpec)),
                           ("fmest_register_models", models),
                           ("fmest_register_optimizers", named(self.optimizers, OptimizerSpec)),
                           ("fmest_register_parallelism",
                            named(self.parallelism, ShardingStrategy)),
                           ("fmest_register_stacks", named(self.stacks, StackProfile)),
                           ("fmest_register_policies", policies),
                           ("fmest_register_prices", prices),
                           ("fmest_register_estimators", estimators)):
            call_register(pm, hook, make, self.errors)


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


@frozen(kw_only=True, repr=False)
class Report:
    """The answer to a job: the chosen estimate per quantity plus every decision.

    ``to_dict()``/``to_json()`` give the ``fmest estimate --format json`` object; in a notebook
    the report shows as an HTML table (``_repr_html_``); ``repr`` is one line.
    """

    job: Job
    context: EstimateContext
    memory: Optional[MemoryEstimate]
    time: Optional[TimeEstimate] = None
    tokens: Optional[TokensEstimate] = None
    cost: Optional[CostEstimate] = None
    fits: Optional[bool] = None
    headroom_bytes: Optional[int] = None
    max_micro_batch: Optional[int] = None
    #: the P(fit) level ``max_micro_batch`` was judged at (``options.fit_confidence``); ``None``
    #: when the searched answers had no interval (the point estimate's verdict) or none ran
    max_micro_batch_confidence: Optional[float] = None
    decisions: dict[str, Decision] = field(factory=dict)
    warnings: tuple[str, ...] = ()
    #: where the job's values came from (an :class:`fmest.inputs.InputReport`), when the job
    #: came through the input door
    input: Any = None
    #: the reports of the other jobs of a multi-job input (an EstimateInput with several
    #: ``job_configs``); ``all_reports`` lists every job's report in input order
    others: tuple = ()
    #: ``memory.min_gpus``: a :class:`fmest.searches.MinGpus` (the fewest GPUs, the fewest in
    #: whole nodes, the P(fit) level used), when the use case searched it
    #: (:func:`fmest.api.estimate_jobs`); ``max_micro_batch`` likewise
    min_gpus: Any = field(default=None, eq=False, repr=False)
    #: ``memory.to_make_it_fit``: the ranked :class:`fmest.fit_advice.FitChange` list that makes
    #: a job that does not fit fit (``[]`` when it fits; ``None`` when not computed), when the
    #: use case searched it (:func:`fmest.api.estimate_jobs`)
    to_make_it_fit: Any = field(default=None, eq=False, repr=False)

    @property
    def all_reports(self) -> tuple["Report", ...]:
        return (self, *self.others)

    def to_dict(self) -> dict[str, Any]:
        """The ``fmest estimate --format json`` object (``{"jobs": [...]}`` for several)."""
        from fmest.output.report import reports_to_dict

        return reports_to_dict(self)

    def to_json(self, **dumps_kwargs: Any) -> str:
        """:meth:`to_dict` as JSON text (``indent=2`` unless given)."""
        import json

        dumps_kwargs.setdefault("indent", 2)
        return json.dumps(self.to_dict(), default=str, **dumps_kwargs)

    def __repr__(self) -> str:
        from fmest.output.report import short_repr

        return short_repr(self)

    def _repr_html_(self) -> str:
        from fmest.output.report import render_html

        return render_html(self)


def sharding_name(job: Job) -> str:
    """The registry key of the job's sharding strategy: ``parallelism.sharding`` when given,
    else ``zero0``..``zero3`` from ``zero_stage`` or ``fsdp_<strategy>`` from ``fsdp``."""
    par = job.parallelism
    if par.fsdp != "none" and par.zero_stage:
        raise InputError("parallelism", "give either zero_stage (DeepSpeed) or fsdp (PyTorch "
                         f"FSDP), not both (got zero_stage={par.zero_stage}, fsdp={par.fsdp!r})")
    implied = f"fsdp_{par.fsdp}" if par.fsdp != "none" else f"zero{par.zero_stage}"
    if implied == "zero0" and getattr(par, "distributed_optimizer", False):
        implied = "zero1"   # Megatron's distributed optimizer shards optimizer states over DP
    if par.sharding is None:
        return implied
    if (par.fsdp != "none" or par.zero_stage) and implied.lower() != par.sharding.lower():
        raise InputError("parallelism.sharding", f"names a strategy other than the one "
                         f"zero_stage/fsdp imply ({implied}); give one of them", value=par.sharding)
    return par.sharding


def calibrated(job: Job, memory: MemoryEstimate) -> MemoryEstimate:
    """``memory`` with the job's calibration knobs applied (fmest.physics.calibration)."""
    from fmest.physics.calibration import apply_calibration

    return apply_calibration(memory, job.calibration)


#: optimizer-state components of the memory plugins (memory_theory, the traced runner)
_OPTIMIZER_STATE_KEYS = ("optimizer_states", "optimizer_state")


def paged_to_host(job: Job, ctx: "EstimateContext", memory: MemoryEstimate) -> MemoryEstimate:
    """A paged optimizer's states spill to host memory when the GPU is full (issue 12).

    bitsandbytes paged optimizers (``OptimizerSpec.paged``) allocate their states in CUDA
    unified memory, which the driver evicts page by page to CPU RAM under GPU memory pressure
    and pages back on access (bitsandbytes docs, "Paged optimizers"; Dettmers et al. 2023,
    QLoRA, section 3). So a peak above the usable GPU memory is capped there, by moving up to
    the optimizer states' bytes to host (``host_bytes`` grows by them x GPUs per node); what the
    states cannot cover is still over, an OOM. Other memory answers pass unchanged."""
    if job.mode != "training" or not getattr(ctx.optimizer, "paged", False):
        return memory
    cap = usable_memory_bytes(job, ctx)
    key = next((k for k in _OPTIMIZER_STATE_KEYS if memory.components.get(k)), None)
    excess = memory.total_bytes - cap
    if key is None or excess <= 0:
        return memory
    states = memory.components[key]
    moved = int(min(excess, states))
    components = dict(memory.components)
    components[key] = states - moved
    phases = {ph: int(v - min(max(v - cap, 0), states))
              for ph, v in memory.phase_peaks_bytes.items()}
    over = " (all of them; the rest of the peak still exceeds the GPU)" if moved == states \
        else "; peak capped at the usable GPU memory"
    note = (f"paged optimizer {ctx.optimizer.name}: the GPU is full, so "
            f"{moved / 2**30:.2f} GiB of its {states / 2**30:.2f} GiB optimizer states page to "
            f"host memory{over}; steps that touch paged-out states run slower")
    return attrs.evolve(memory, total_bytes=memory.total_bytes - moved, components=components,
                        phase_peaks_bytes=phases, notes=(*memory.notes, note),
                        host_bytes=(memory.host_bytes or 0) + moved * ctx.layout.gpus_per_node)


def usable_memory_bytes(job: Job, ctx: "EstimateContext") -> float:
    """GPU memory the fits verdict may use: capacity less the safety margin (inference with no
    margin given: ``1 - gpu_memory_utilization``, what the serving runtime leaves free).

    The capacity is the total CUDA reports for the device (``GpuSpec.capacity_bytes``: an
    A100 80GB reports about 79.25 GiB, the driver keeps the rest), not the vendor label;
    GPUs with no published figure fall back to the label (issues 21/22)."""
    from fmest.physics.calibration import usable_bytes

    margin = job.calibration.safety_margin
    if not margin and job.mode == "inference":
        margin = 1.0 - job.inference.gpu_memory_utilization
    return usable_bytes(_capacity_bytes(ctx.gpu), margin)


def _capacity_bytes(gpu) -> int:
    """``gpu.capacity_bytes`` (GpuSpec), else ``memory_bytes`` for a spec-like object without it."""
    cap = getattr(gpu, "capacity_bytes", None)
    return int(cap) if cap else int(gpu.memory_bytes)


#: The note of a job whose model's transformers code runs every expert on every token
#: (``ModelSpec.expert_dispatch`` ``dense``) on a stack that runs that code
DENSE_EXPERTS_NOTE = ("{stack} runs the model's transformers code, whose MoE runs all {n} "
                      "experts on every token (Llama4TextMoe: hidden_states.repeat(num_experts) "
                      "x router scores, one bmm over every expert; transformers 5.24 "
                      "models/llama4/modeling_llama4.py): expert FLOPs and activations are "
                      "counted for every expert, not the routed top-k")


def _runs_transformers_code(stack) -> bool:
    """Whether the resolved stack (None: the default eager PyTorch profile) runs the model's
    transformers implementation (``StackProfile.model_code``)."""
    return stack is None or stack.profile.model_code == "transformers"


class Engine:
    """Estimates jobs with the plugins of one plugin manager.

    ``Engine()`` uses the installed plugins; tests pass a fresh manager
    (``fmest.testing.new_engine``). Every hook is called through :mod:`fmest.plugins`'s calling
    layer, and only from the typed methods below (``ask_*``, ``correct_*``, ``resolve_model``,
    ``commands``): hook names live in this file and :mod:`fmest.hookspecs`.

    ``plugin_timeout`` (seconds) gives each estimation-hook call and model resolution a
    deadline (:class:`fmest.plugins.PluginDeadline`): a plugin that does not answer in time is
    a failure naming it and the other plugins' answers are used. ``None`` takes
    ``$FMEST_PLUGIN_TIMEOUT``; ``0`` (or the variable unset or empty) means no deadline, and
    each hook is then called directly on the calling thread.
    """

    def __init__(self, pm=None, *, plugin_timeout: float | None = None) -> None:
        seconds = (plugin_timeout_from_env() if plugin_timeout is None
                   else parse_plugin_timeout(plugin_timeout, "plugin_timeout"))
        #: the per-call deadline of the plugins' estimation hooks, or None: direct calls
        self._deadline: Optional[PluginDeadline] = \
            PluginDeadline(seconds) if seconds is not None else None
        if pm is None:
            from fmest.plugins import new_plugin_manager

            pm = new_plugin_manager()
        self.pm = pm
        #: failures of loading plugins and of their command registrations
        self._errors: list = list(getattr(pm, "fmest_load_errors", []))
        # filled at start-up so a duplicate registration fails here, naming both plugins
        # (``fmest --help`` lists the plugins' commands without an engine)
        self._registries: Optional[Registries] = Registries(pm)
        #: (model, inline config text) -> spec, least recently used first (:meth:`resolve_model`)
        self._model_cache: OrderedDict[tuple[str, Optional[str]], ModelSpec] = OrderedDict()
        #: characters of inline config text among the keys of ``_model_cache``
        self._model_cache_chars = 0
        #: id(job) -> (job, job with its LoRA targets resolved); the job is kept so its id
        #: is not reused
        self._resolved: dict[int, tuple[Job, Job]] = {}
        self._asked_cache: dict[tuple, Callable[[str], bool]] = {}
        #: (resolved job, its context) of the last :meth:`estimate`: the searches of its report
        #: ask :meth:`context` of that same job object again (fmest.searches.min_gpus)
        self._last_context: Optional[tuple[Job, EstimateContext]] = None
        #: id(job) -> (job, its context, its calibrated memory answer) of the fewest-GPU
        #: search's probes (:meth:`remember_searched`); the job is kept so its id is not reused
        self._searched: dict[int, tuple[Job, EstimateContext, Optional[MemoryEstimate]]] = {}

    @property
    def plugin_timeout(self) -> Optional[float]:
        """Seconds each plugin call may take, or ``None`` (no deadline)."""
        return self._deadline.seconds if self._deadline is not None else None

    @property
    def registries(self) -> Registries:
        """Every registry, filled from the registration hooks at start-up."""
        if self._registries is None:
            self._registries = Registries(self.pm)
        return self._registries

    @property
    def load_errors(self) -> list:
        """Plugins that failed to load or to register something, each named."""
        return self._errors + self.registries.errors

    # -- the typed facade over the hooks ------------------------------------------------------
    def _asked(self, policy, searching: bool):
        """Which plugins a policy wants to hear (by their declared bases); memoised per policy
        (the registries do not change after start-up)."""
        key = (id(policy), searching)
        hit = self._asked_cache.get(key)
        if hit is not None:
            return hit
        asks = getattr(policy, "asks", None)
        declared = self.registries.estimators
        skipped = frozenset(
            plugin for plugin, info in declared.items()
            if (searching and not info.searchable)
            or (asks is not None and not any(asks(basis) for basis in info.bases)))

        def wanted(plugin: str) -> bool:
            return plugin not in skipped
        self._asked_cache[key] = wanted
        return wanted

    def search_asks_the_same(self, job: Job) -> bool:
        """Whether a search's memory decision for ``job`` (``decide(..., searching=True)``)
        asks the same plugins as the report's own: then the report's answer is the search's
        answer at the report's job, and a search may use it instead of deciding again."""
        policy = self.registries.policies.get(job.options.method)
        full, searched = self._asked(policy, False), self._asked(policy, True)
        return all(full(plugin) == searched(plugin) for plugin in self.registries.estimators)

    def plugins_with_basis(self, *bases: str):
        """A filter for ``ask_*(only=...)``: plugins that declared one of ``bases`` or declared
        nothing (a plugin that wants the analytic answers asks for ``"analytic"``)."""
        declared = self.registries.estimators

        def wanted(plugin: str) -> bool:
            info = declared.get(plugin)
            return info is None or any(b in bases for b in info.bases)
        return wanted

    def _each(self, hook: str, kwargs: dict, quantity: str, only=None):
        answers, failures = call_each(self.pm, hook, kwargs, expect=_RESULT_TYPES[quantity],
                                      reraise=_PROPAGATE, only=only, deadline=self._deadline)
        if not answers and not failures:
            return [], []
        sound, broken = [], [Failure(plugin=f.plugin, error=f.error) for f in failures]
        for plugin, result in answers:
            # the answer contract (finite, non-negative, components summing to the total): a
            # bad number is this plugin's failure, never a winning answer
            problem = answer_problem(result)
            if problem:
                broken.append(Failure(plugin=plugin, error=f"{hook} answered {problem}"))
            else:
                sound.append(with_plugin(result, plugin))
        return sound, broken

    def ask_memory(self, job: Job, ctx: EstimateContext, *, only=None):
        """Every ``fmest_estimate_memory`` answer: ``(answers, failures)``."""
        return self._each("fmest_estimate_memory", {"job": job, "ctx": ctx}, "memory", only)

    def correct_memory(self, job: Job, ctx: EstimateContext, candidates, *, only=None):
        """Every ``fmest_correct_memory`` answer given the memory ``candidates`` so far."""
        return self._each("fmest_correct_memory",
                          {"job": job, "ctx": ctx, "candidates": tuple(candidates)},
                          "memory", only)

    def ask_time(self, job: Job, ctx: EstimateContext, memory, *, only=None):
        return self._each("fmest_estimate_time", {"job": job, "ctx": ctx, "memory": memory},
                          "time", only)

    def correct_time(self, job: Job, ctx: EstimateContext, memory, candidates, *, only=None):
        return self._each("fmest_correct_time", {"job": job, "ctx": ctx, "memory": memory,
                                                  "candidates": tuple(candidates)}, "time", only)

    def ask_tokens(self, job: Job, ctx: EstimateContext, time, *, only=None):
        return self._each("fmest_estimate_tokens", {"job": job, "ctx": ctx, "time": time},
                          "tokens", only)

    def ask_cost(self, job: Job, ctx: EstimateContext, time, *, only=None):
        return self._each("fmest_estimate_cost", {"job": job, "ctx": ctx, "time": time},
                          "cost", only)

    def commands(self) -> dict:
        """CLI sub-commands from ``fmest_register_commands``: name -> (help, add_arguments,
        run); a plugin whose registration fails is named in ``load_errors``."""
        from fmest.plugins import plugin_commands

        return plugin_commands(self.pm, self._errors)

    # -- resolution ---------------------------------------------------------------------
    def resolve_model(self, job: Job) -> ModelSpec:
        key = (job.model, repr(sorted(job.model_config.items())) if job.model_config else None)
        cached = self._model_cache.get(key)
        if cached is not None:
            # the service serialises resolve_model (fmest.serve.app); without its lock a
            # concurrent eviction may have dropped the key, which costs only a reload
            with contextlib.suppress(KeyError):
                self._model_cache.move_to_end(key)
            return cached
        if job.model_config is not None:
            from fmest.models.hf import spec_from_hf_config

            spec = spec_from_hf_config(dict(job.model_config), name=job.model,
                                       source="inline model_config")
        else:
            plugin, spec = call_first(self.pm, "fmest_resolve_model",
                                      {"name": job.model, "registries": self.registries},
                                      reraise=(FmestError,), deadline=self._deadline)
            if spec is None:
                raise InputError("model", "no installed plugin resolves model names (is the "
                                 "model_resolver default plugin disabled?)", value=job.model)
            if not isinstance(spec, ModelSpec):
                raise PluginError(plugin, f"fmest_resolve_model returned "
                                  f"{type(spec).__name__}, expected fmest.models.ModelSpec")
        self._remember_model(key, spec)
        return spec

    def _remember_model(self, key: tuple[str, Optional[str]], spec: ModelSpec) -> None:
        """Keep ``spec`` in the bounded model cache (:data:`MODEL_CACHE_ENTRIES`,
        :data:`MODEL_CACHE_CONFIG_CHARS`), dropping the least recently used."""
        chars = len(key[1] or "")
        if chars > MODEL_CACHE_CONFIG_CHARS or key in self._model_cache:
            return
        self._model_cache[key] = spec
        self._model_cache_chars += chars
        while self._model_cache and (len(self._model_cache) > MODEL_CACHE_ENTRIES
                                     or self._model_cache_chars > MODEL_CACHE_CONFIG_CHARS):
            (_, dropped), _spec = self._model_cache.popitem(last=False)
            self._model_cache_chars -= len(dropped or "")

    def resolve_job(self, job: Job) -> Job:
        """``job`` with the defaults that depend on its model made explicit: empty
        ``training.lora_target_modules`` become PEFT's default for the model type
        (:func:`fmest.physics.counting.resolve_lora_targets`), so plugins, the report's job dict and
        the exporters all see the modules that are adapted."""
        if job.training.lora_target_modules or job.training.technique not in ("lora", "qlora"):
            return job
        hit = self._resolved.get(id(job))
        if hit is not None and hit[0] is job:    # the same job asked again (a search, a loop)
            return hit[1]
        if len(self._resolved) > 256:
            self._resolved.clear()
        resolved = resolve_lora_targets(job, self.resolve_model(job))
        self._resolved[id(job)] = (job, resolved)
        return resolved

    def context(self, job: Job) -> EstimateContext:
        """Resolve and cross-check a job; raises :class:`InputError` naming the field."""
        check_job(job)  # bounds and conflicts: a job built in Python skipped the input door
        resolved = self.resolve_job(job)
        last = self._last_context
        if last is not None and last[0] is resolved:    # the job a report was just made for
            return last[1]
        return self._context(resolved)

    def _context(self, job: Job) -> EstimateContext:
        """:meth:`context` of a job already checked and resolved (:meth:`resolve_job`)."""
        model = self.resolve_model(job)
        check_model(model)  # before any rule below divides by its dimensions
        gpu = self.registries.gpus.get(job.hardware.gpu)
        if job.hardware.inter_node_gbps is not None:   # the cluster's stated network
            gpu = with_network(gpu, job.hardware.inter_node_gbps)
        layout = resolve_layout(job)
        optimizer = self.registries.optimizers.get(job.training.optimizer)
        name = sharding_name(job)
        if job.parallelism.sharding is not None and name not in self.registries.parallelism:
            raise UnknownNameError("parallelism.sharding", "unknown sharding strategy",
                                   value=name, accepted=self.registries.parallelism.names())
        sharding = self.registries.parallelism.get(name)
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
        stack = resolve_job_stack(job, self.registries.stacks)
        dense_note: tuple[str, ...] = ()
        if model.expert_dispatch == "dense" and _runs_transformers_code(stack):
            model = with_dense_experts(model)
            dense_note = (DENSE_EXPERTS_NOTE.format(
                n=model.num_experts, stack=getattr(stack, "name", None) or "pytorch"),)
        answered = check_context(job, model=model, gpu=gpu, layout=layout,
                                 stack_name=getattr(stack, "name", "") or "")
        transforms = resolve_transforms(job, model=model, layout=layout, optimizer=optimizer,
                                        sharding=sharding, stack=stack)
        return EstimateContext(model=model, gpu=gpu, layout=layout, optimizer=optimizer,
                               sharding=sharding, registries=self.registries,
                               warnings=tuple(model.warnings) + dense_note + answered,
                               transforms=transforms)

    # -- deciding -------------------------------------------------------------------------
    def decide(self, quantity: str, job: Job, *, ctx: EstimateContext, memory=None, time=None,
               searching: bool = False) -> Decision:
        """Ask the plugins the job's policy wants, let correction hooks see the answers, and
        let the policy choose."""
        return self._decide(quantity, self.resolve_job(job), ctx=ctx, memory=memory, time=time,
                            searching=searching)

    def _decide(self, quantity: str, job: Job, *, ctx: EstimateContext, memory=None,
                time=None, searching: bool = False) -> Decision:
        """:meth:`decide` for a job already resolved."""
        policy = self.registries.policies.get(job.options.method)
        only = self._asked(policy, searching)
        if quantity == "memory":
            answers, failures = self.ask_memory(job, ctx, only=only)
            more, more_failures = self.correct_memory(job, ctx, answers, only=only)
        elif quantity == "time":
            answers, failures = self.ask_time(job, ctx, memory, only=only)
            more, more_failures = self.correct_time(job, ctx, memory, answers, only=only)
        elif quantity == "tokens":
            (answers, failures), (more, more_failures) = \
                self.ask_tokens(job, ctx, time, only=only), ([], [])
        else:
            (answers, failures), (more, more_failures) = \
                self.ask_cost(job, ctx, time, only=only), ([], [])
        decision = policy.choose(quantity, answers + more)
        if not failures and not more_failures:
            return decision
        return attrs.evolve(decision, failures=tuple(failures + more_failures))

    # -- public operations ------------------------------------------------------------------
    def estimate_memory(self, job: Job, ctx: EstimateContext | None = None) -> Decision:
        job = self.resolve_job(job)
        ctx = ctx or self.context(job)
        return self._decide("memory", job, ctx=ctx)

    def search_note(self, memory: MemoryEstimate) -> list[str]:
        """Say so when the chosen memory answer's plugin is too slow to be asked once per
        candidate of a search (``max_micro_batch``, ``min_gpus``: :mod:`fmest.searches`)."""
        info = self.registries.estimators.get(memory.provenance.plugin)
        if info is None or info.searchable:
            return []
        return [f"max_micro_batch comes from the plugins cheap enough to search (the chosen "
                f"answer's plugin {memory.provenance.plugin!r} is not: one "
                f"{memory.provenance.basis} answer per candidate batch would take minutes)"]

    def _memory(self, job: Job
                ) -> tuple[Job, EstimateContext, Decision, Optional[MemoryEstimate]]:
        """The memory part of :meth:`estimate`: ``(resolved job, context, memory decision,
        the answer the report shows)``, the decision's answer calibrated and paged
        (:func:`calibrated`, :func:`paged_to_host`) and the shown one with its interval."""
        job, ctx, mem_d = self.memory_decision(job)
        return job, ctx, mem_d, with_interval("memory", job, mem_d.chosen)

    def memory_decision(self, job: Job) -> tuple[Job, EstimateContext, Decision]:
        """``(resolved job, context, memory decision)`` of :meth:`_memory`: the decision's
        answer calibrated and paged, without the interval the report's answer gets (the fit
        advice judges each candidate on it, :func:`fmest.searches.judge` reading the same
        interval, and adds the interval only to a candidate that fits)."""
        check_job(job)  # before resolving the model: bad input names its field first
        job = self.resolve_job(job)
        ctx = self._context(job)
        mem_d = self._decide("memory", job, ctx=ctx)
        if mem_d.chosen is not None:  # the calibration knobs apply to whichever plugin answered
            chosen = paged_to_host(job, ctx, calibrated(job, mem_d.chosen))
            if chosen is not mem_d.chosen:     # the same answer without knobs or paging
                mem_d = attrs.evolve(mem_d, chosen=chosen)
        return job, ctx, mem_d

    def remember_searched(self, job: Job, ctx: EstimateContext,
                          memory: Optional[MemoryEstimate]) -> None:
        """Keep a search's probe of ``job`` (``memory``: its searched decision's answer with
        the job's calibration knobs applied, :func:`fmest.searches._judge_at`): the fit
        advice's "more GPUs" candidate is the fewest-GPU search's own job object
        (:meth:`searched_memory`)."""
        if len(self._searched) > 64:
            self._searched.clear()
        self._searched[id(job)] = (job, ctx, memory)

    def searched_memory(self, job: Job
                        ) -> Optional[tuple[Job, EstimateContext, Optional[MemoryEstimate]]]:
        """``(resolved job, context, memory)`` as :meth:`memory_decision` gives them (its
        decision's answer), taken from a search's probe of this same job object when that is
        the same answer: the search asked the same plugins (:meth:`search_asks_the_same`) on
        the same context and applied the same knobs, and no paged optimizer moves states to
        host memory (:func:`paged_to_host`, which the search does not apply). ``None``
        otherwise: decide it with :meth:`memory_decision`."""
        hit = self._searched.get(id(job))
        if hit is None or hit[0] is not job:
            return None
        ctx = hit[1]
        if getattr(ctx.optimizer, "paged", False) or not self.search_asks_the_same(job):
            return None
        return self.resolve_job(job), ctx, hit[2]

    def memory_answer(self, job: Job) -> tuple[Job, EstimateContext, Optional[MemoryEstimate]]:
        """``(resolved job, context, memory)``: the memory of ``estimate(job,
        quantities=("memory",))`` without the report around it (no warnings gathered)."""
        job, ctx, _, memory = self._memory(job)
        return job, ctx, memory

    def estimate(self, job: Job, *, quantities=QUANTITIES) -> Report:
        """Estimate ``quantities`` for ``job`` and return a :class:`Report` (the searches a
        report shows beside it, largest micro-batch and fewest GPUs, are the use case's:
        :func:`fmest.api.estimate_jobs`). The job is checked and resolved once, and each
        quantity's plugins are asked once."""
        for q in quantities:
            if q not in QUANTITIES:
                raise InputError("quantities", "unknown quantity", value=q, accepted=QUANTITIES)
        job, ctx, mem_d, memory = self._memory(job)
        self._last_context = (job, ctx)
        decisions: dict[str, Decision] = {}
        warnings = list(ctx.warnings) + [str(e) for e in self.load_errors]
        decisions["memory"] = mem_d
        fits = headroom = None
        if memory is not None:
            headroom = int(usable_memory_bytes(job, ctx) - memory.total_bytes)
            fits = headroom >= 0
        time = tokens = cost = None
        if any(q in quantities for q in ("time", "tokens", "cost")):
            decisions["time"] = self._decide("time", job, ctx=ctx, memory=memory)
            time = with_interval("time", job, decisions["time"].chosen)
        if time is not None and any(q in quantities for q in ("tokens", "cost")):
            decisions["tokens"] = self._decide("tokens", job, ctx=ctx, time=time)
            tokens = decisions["tokens"].chosen
        if time is not None and "cost" in quantities:
            decisions["cost"] = self._decide("cost", job, ctx=ctx, time=time)
            cost = decisions["cost"].chosen
        for d in decisions.values():
            warnings += [f"plugin {f.plugin!r} failed on {d.quantity}: {f.error} "
                         f"(disable it with FMEST_DISABLE_PLUGINS={f.plugin})" for f in d.failures]
        if "memory" in quantities and memory is None:
            warnings.append("no installed plugin answered memory for this job with policy "
                            f"{job.options.method!r} ({mem_d.rule})")
        warnings += _unanswered_time(job, ctx, quantities, time)
        return Report(job=job, context=ctx, memory=memory, time=time, tokens=tokens, cost=cost,
                      fits=fits, headroom_bytes=headroom, decisions=decisions,
                      warnings=tuple(dict.fromkeys(warnings)))


def _unanswered_time(job: Job, ctx: EstimateContext, quantities, time) -> list[str]:
    """Say why time (and so cost) is missing when the GPU table has no FLOP figure to time the
    job with, naming the table column (never drop time and cost silently)."""
    wanted = any(q in quantities for q in ("time", "tokens", "cost"))
    dtype = job.training.dtype
    if not wanted or time is not None or ctx.gpu.peak_flops_per_s(dtype) is not None:
        return []
    return [f"hardware.gpu: {ctx.gpu.name} has no {dtype} FLOP/s figure in the GPU table "
            f"(column {dtype}_tflops, empty: see the row's notes in fmest gpus), so time, "
            "throughput and cost are not estimated; pick a GPU with published figures or "
            "register one with them"]


@functools.lru_cache(maxsize=64)
def with_network(gpu, gbps: float):
    """``gpu`` on a cluster whose network between nodes is ``gbps`` Gb/s per GPU
    (``hardware.inter_node_gbps``): the GPU table's ``inter_node_gbit_per_s`` replaced, so the
    time model's inter-node collectives and the planner read the job's fabric."""
    return attrs.evolve(gpu, inter_node_bytes_per_s=float(gbps) * 1e9 / 8)


@functools.lru_cache(maxsize=1)
def default_engine() -> Engine:
    """The process-wide engine over the installed plugins (built on first use)."""
    return Engine()
