"""``fmest plan``: search GPU types, counts and layouts for the cheapest or fastest run that fits.

Flow: the job and :class:`Constraints` -> calibration probes through the engine
(:mod:`fmest.plan.calibrate`) -> for each GPU type and count, the structural layouts
(:mod:`fmest.plan.space`) crossed with sharding x offload x checkpointing x micro-batch as
numpy arrays -> memory and step time by array formulas (:mod:`fmest.plan.vector`) -> pruning
with a counted reason -> the best candidates by the objective are re-estimated by the full
engine, and the plans report the engine's numbers (so every number printed comes from the
product's estimator and each plan's job reproduces with ``fmest estimate -f``).
"""

from __future__ import annotations

import math
import time as _time
from typing import Any, Callable, Optional

import attrs
import numpy as np
from attrs import field, frozen

from fmest.default_plugins.parallelism import zero_step_grad_copy_rule
from fmest.errors import InputError
from fmest.flags import OBJECTIVES
from fmest.job import PRICE_TYPES, Job, _tuple_of_str, resolve_layout
from fmest.physics import time_constants as tc
from fmest.physics.device_terms import (
    FSDP_STREAM_POOL_STACKS,
    STREAM_POOL_KIND_CODES,
    fsdp2_rs_input_in_side_pool,
)
from fmest.physics.gpu_prefix import value_by_gpu_prefix
from fmest.plan import calibrate as cal
from fmest.plan import space as sp
from fmest.plan import vector as vec
from fmest.stacks import loss_compiled, wgrad_accumulation_fused

#: Global batch used when neither ``--global-batch-tokens`` nor the job fixes one (the job is
#: one sample per step): 2^20 tokens, inside the 0.5M-4M token batches of published LLM
#: pre-training and fine-tuning runs (Brown et al. 2020, GPT-3 Table 2.1: 0.5M-3.2M; Touvron
#: et al. 2023, Llama 2 section 2.2: 4M).
DEFAULT_GLOBAL_BATCH_TOKENS = 1 << 20
#: Candidates re-estimated by the full engine per plan asked for (the array formulas agree
#: with the engine within ~10 %, so the engine re-ranks a margin of near-best candidates).
RECHECK_FACTOR = 4
#: Largest instance of a node when the price table gives none (8-GPU HGX/DGX boards).
DEFAULT_GPUS_PER_NODE = 8


def _pos_int(name):
    def check(inst, attribute, value):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise InputError(name, "must be a whole number >= 1", value=value)
    return check


def _pos_num(name):
    def check(inst, attribute, value):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or value <= 0):
            raise InputError(name, "must be a positive number", value=value)
    return check


def _choice(name, values):
    def check(inst, attribute, value):
        if value not in values:
            raise InputError(name, "not an accepted value", value=value, accepted=values)
    return check


@frozen(kw_only=True)
class Constraints:
    """What the plan may use and what it optimises. ``gpus`` empty: every registered GPU that
    has a price; ``providers`` empty: every provider."""

    gpus: tuple[str, ...] = field(default=(), converter=_tuple_of_str)
    max_gpus: int = field(default=64, validator=_pos_int("--max-gpus"))
    max_nodes: Optional[int] = field(default=None, validator=_pos_int("--max-nodes"))
    budget_usd: Optional[float] = field(default=None, validator=_pos_num("--budget-usd"))
    deadline_hours: Optional[float] = field(default=None, validator=_pos_num("--deadline-hours"))
    providers: tuple[str, ...] = field(default=(), converter=_tuple_of_str)
    price_type: str = field(default="on_demand", validator=_choice("--price-type", PRICE_TYPES))
    global_batch_tokens: Optional[float] = field(default=None,
                                                 validator=_pos_num("--global-batch-tokens"))
    objective: str = field(default="pareto", validator=_choice("--objective", OBJECTIVES))
    top: int = field(default=10, validator=_pos_int("--top"))
    refine: int = field(default=0)


@frozen(kw_only=True)
class Plan:
    """One configuration, with the full engine's numbers (``predicted_*`` are the array
    formulas' numbers that ranked it)."""

    job: Job
    gpu: str
    gpus: int
    nodes: int
    layout: str
    strategy: str
    micro_batch_size: int
    grad_accum_steps: int
    checkpointing: str
    memory_bytes: int
    gpu_memory_bytes: int
    headroom_bytes: int
    step_seconds: float
    tokens_per_second: float
    total_seconds: Optional[float]
    usd: Optional[float]
    usd_per_hour: Optional[float]
    provider: Optional[str]
    instance: Optional[str]
    predicted_memory_bytes: float
    predicted_step_seconds: float
    method: str
    pareto: bool = False
    #: P(the job fits) from the engine's memory answer and its P10-P90 interval
    #: (:func:`fmest.estimates.fits_probability`); ``None`` without an interval
    fits_probability: Optional[float] = None
    #: the step time's P10-P90 (the engine's time answer's interval); ``None`` without one
    step_seconds_p10: Optional[float] = None
    step_seconds_p90: Optional[float] = None
    #: the price quote behind ``usd`` was observed longer ago than the price table's limit
    #: (the cost answer's ``stale``: ``FMEST_PRICE_MAX_AGE_DAYS``, ``fmest prices``)
    price_stale: bool = False


@frozen(kw_only=True)
class PlanResult:
    plans: tuple[Plan, ...]
    evaluated: int
    seconds: float
    rejected: dict
    global_batch_tokens: int
    total_tokens: Optional[float]
    objective: str
    warnings: tuple[str, ...] = ()
    #: the P(fit) a plan needs (the job's ``options.fit_confidence``, ``--fit-confidence``)
    fit_confidence: float = 0.9

    @property
    def configs_per_second(self) -> float:
        return self.evaluated / self.seconds if self.seconds > 0 else float("inf")


# ---------------------------------------------------------------------------------------------
# prices and GPUs
# ---------------------------------------------------------------------------------------------

@frozen(kw_only=True)
class _GpuOption:
    spec: Any
    quotes: tuple   # PriceQuote rows allowed by the constraints
    gpus_per_node: int
    counts: tuple[int, ...]


def _gpu_options(engine, cons: Constraints) -> list[_GpuOption]:
    reg = engine.registries
    by_gpu: dict[str, list] = {}
    wanted_providers = {p.lower() for p in cons.providers}
    for quote in reg.prices.values():
        spec = reg.gpus.find(quote.gpu)
        if spec is None or quote.price_type != cons.price_type:
            continue
        if wanted_providers and quote.provider.lower() not in wanted_providers:
            continue
        by_gpu.setdefault(spec.name, []).append(quote)
    if cons.gpus:
        names = [reg.gpus.get(g).name for g in cons.gpus]   # raises naming accepted GPUs
    else:
        names = sorted(by_gpu)
        if not names:
            raise InputError("--gpus", "no registered GPU has a price with these providers "
                             "and price type; name the GPUs to plan on",
                             accepted=reg.gpus.names())
    out = []
    for name in dict.fromkeys(names):
        quotes = tuple(by_gpu.get(name, ()))
        sizes = sorted({q.gpus_per_instance for q in quotes}) or [1, 2, 4, DEFAULT_GPUS_PER_NODE]
        gpn = max(sizes)
        counts = sp.gpu_counts(sizes, cons.max_gpus)
        out.append(_GpuOption(spec=reg.gpus.get(name), quotes=quotes, gpus_per_node=gpn,
                              counts=tuple(counts)))
    return out


def _bill(quotes, count: int, gpus_per_node: int):
    """(usd per hour, quote) of the cheapest rental of ``count`` GPUs in whole instances of at
    least ``gpus_per_node`` GPUs (the cost plugin's rule), or (nan, None)."""
    best, best_q = math.nan, None
    for q in quotes:
        if q.gpus_per_instance < min(gpus_per_node, count) or count % q.gpus_per_instance:
            continue
        bill = count // q.gpus_per_instance * q.usd_per_instance_hour
        key = (bill, q.provider.lower(), q.instance.lower(), q.region.lower())
        if best_q is None or key < (best, best_q.provider.lower(), best_q.instance.lower(),
                                    best_q.region.lower()):
            best, best_q = bill, q
    return best, best_q


# ---------------------------------------------------------------------------------------------
# the job's fixed facts
# ---------------------------------------------------------------------------------------------

def _global_batch_tokens(job: Job, cons: Constraints) -> int:
    seq = job.training.seq_len
    if cons.global_batch_tokens is not None:
        return sp.global_samples(cons.global_batch_tokens, seq) * seq
    dp = resolve_layout(job).dp
    own = job.training.micro_batch_size * job.training.grad_accum_steps * dp
    if own > 1:
        return own * seq
    return sp.global_samples(DEFAULT_GLOBAL_BATCH_TOKENS, seq) * seq


def _total_tokens(job: Job) -> tuple[Optional[float], Optional[int]]:
    """(tokens the run trains on, fixed optimizer steps): from the workload fields; a
    ``dataset_path`` was counted into ``dataset_tokens`` at the input door
    (:func:`fmest.datasets.resolve_dataset`), so the plan reads no file."""
    w = job.workload
    if w.max_steps is not None:
        return None, w.max_steps
    if w.dataset_tokens is not None:
        return w.dataset_tokens * w.epochs, None
    if w.num_samples is not None:
        avg = w.avg_seq_len if w.avg_seq_len is not None else job.training.seq_len
        return w.num_samples * avg * w.epochs, None
    return None, None


def _shardings(engine) -> list[tuple[str, Any]]:
    """Every registered sharding strategy (third-party ones included: a job names them with
    ``parallelism.sharding``), in name order so answers never depend on install order."""
    reg = engine.registries.parallelism
    return sorted(reg.items(), key=lambda item: item[0])


def effective_behaviour(strategy, *, precision: str, data_parallel: bool,
                        tensor_parallel: bool, pipeline: bool) -> tuple:
    """What a sharding strategy does to a job in effect, as a hashable key: two strategies
    with equal keys on the same layout are the same run (one GPU under FSDP NO_SHARD and under
    ZeRO-0 is one job). Read from the strategy's declared behaviour, never its name, and only
    the behaviour the layout exercises, as the engine reads it: the precision policy it
    resolves to; what it shards (declared: a strategy that shards with one data rank is
    pruned before, ``no_dp``), hybrid, per-layer gathers and their prefetch, the gradient
    collective (only with shards, else DDP's all-reduce); DDP's bucket copy only with dp > 1
    (``fmest.transforms.ShardingStrategy.collectives``), DeepSpeed's reduce buffers whatever
    dp is (memory_theory's ``_bucket_bytes``); PyTorch-native TP only with tp > 1; an unsharded stage and fp32
    accumulation under PP only for a parameter-sharding strategy with pp > 1 (memory_theory's
    ``_gathered_param_buffers``). ``framework``, ``name`` and ``source`` are labels."""
    shards = frozenset(strategy.shards)
    params_sharded = "parameters" in shards
    gathers = params_sharded and strategy.param_gather
    return (
        precision, shards, strategy.hybrid if shards else False, gathers,
        strategy.backward_prefetch if gathers else None,
        strategy.grad_collective if shards and data_parallel else None,
        (strategy.ddp_bucket and not shards) if data_parallel else None,
        (strategy.reduce_bucket_elements, strategy.allgather_bucket_elements),
        strategy.native_tensor_parallel if tensor_parallel else None,
        (strategy.pp_unsharded_params, strategy.fp32_grad_accum)
        if params_sharded and pipeline else None,
    )


def probe_strategy(shardings, strategy) -> str:
    """The strategy whose activation probes stand for ``strategy``: activations depend on the
    strategy only through PyTorch-native tensor parallelism (it composes with FSDP and saves
    differently), so one representative per value of ``native_tensor_parallel``."""
    return min(name for name, other in shardings
               if other.native_tensor_parallel == strategy.native_tensor_parallel)


# ---------------------------------------------------------------------------------------------
# evaluation of one GPU count
# ---------------------------------------------------------------------------------------------

def hardware_refusal(job: Job, gpu) -> Optional[str]:
    """Why ``job`` cannot run on ``gpu`` as written, by the capability columns of the GPU
    table (:data:`fmest.bounds.HARDWARE_RULES`: fp8 or bf16 matrix units, FlashAttention-2),
    e.g. ``"V100-SXM2-32GB: no BF16 matrix units (training.dtype bf16)"``; None when it can.
    The engine refuses such a job, or, for a field left at its default, estimates it with the
    GPU table's fallback figures and a warning; a plan's job must run as written, so the
    planner skips the GPU type either way."""
    from fmest.bounds import HARDWARE_RULES

    for path, value, capability, missing, _ in HARDWARE_RULES:
        section, _, name = path.partition(".")
        if getattr(getattr(job, section), name, None) == value \
                and getattr(gpu, capability, None) is False:
            return f"{gpu.name}: no {missing} ({path} {value})"
    return None


class _Calibration:
    """Probe results, memoised per key (each probe is a few engine calls)."""

    #: Probes ask the analytic policy: one answer costs microseconds, and the array formulas
    #: mirror the analytic plugins; ``--refine`` re-estimates the best with the job's method.
    PROBE_METHOD = "theory"

    def __init__(self, engine, job: Job, model, gpus=()) -> None:
        self.engine, self.model = engine, model
        self.refused: dict = {}
        #: GPU name -> the rejection reason when the engine refuses the job on that GPU for a
        #: capability it lacks (:func:`hardware_refusal`); None when it accepts the job
        self.gpu_refusals: dict[str, Optional[str]] = {}
        self.job = self._probe_job(job.evolve(options={"method": self.PROBE_METHOD}), gpus)
        #: the job without Megatron's ``recompute_modules``, which the job accepts only under
        #: selective checkpointing: what the none/full candidates and the probes that run
        #: full checkpointing (states, optimizer) start from
        self.plain_job = without_recompute_modules(self.job)
        self.tp_probe = 2 if model.num_attention_heads % 2 == 0 and (
            model.num_kv_heads % 2 == 0 or 2 % model.num_kv_heads == 0) else 1
        self._states: dict = {}
        self._slopes: dict = {}
        self._cp: dict = {}
        self._times: dict = {}
        self._opt: dict = {}

    def _probe_job(self, job: Job, gpus) -> Job:
        """The job on a GPU the engine accepts it on (memory probes do not depend on the GPU,
        but the engine refuses e.g. an explicit fp8 on a GPU without fp8 units): the job's own
        GPU, else the first candidate that takes it. When no GPU takes it, every candidate is
        rejected with its reason (:meth:`gpu_refusal`) and the plan is empty."""
        for name in dict.fromkeys((job.hardware.gpu, *gpus)):
            if self.gpu_refusal(name, job) is None:
                return job.evolve(hardware={"gpu": name, "gpus_per_node": None, "nodes": 1},
                                  parallelism={"dp": None})
        return job

    def gpu_refusal(self, name: str, job: Optional[Job] = None) -> Optional[str]:
        """The rejection reason of GPU type ``name`` when the engine refuses the job on it for
        a capability the GPU lacks ("V100-SXM2-32GB: no BF16 matrix units (training.dtype
        bf16)"), else None. Another refusal on this GPU only is counted under
        ``"<gpu>: the engine refuses the job (<field>)"``."""
        if name not in self.gpu_refusals:
            job = job if job is not None else self.job
            probe = job.evolve(hardware={"gpu": name, "gpus_per_node": None, "nodes": 1},
                               parallelism={"dp": None})
            reason = hardware_refusal(probe, self.engine.registries.gpus.get(name))
            if reason is None:
                try:
                    self.engine.context(probe)
                except InputError as exc:
                    reason = f"{name}: the engine refuses the job ({exc.field})"
            self.gpu_refusals[name] = reason
        return self.gpu_refusals[name]

    def job_for(self, ckpt: str) -> Job:
        """The probe job of checkpointing ``ckpt``: the job's ``recompute_modules`` only under
        ``selective``."""
        return self.job if ckpt == "selective" else self.plain_job

    def _guarded(self, key, table: dict, fn, refused_value):
        if key not in table:
            try:
                table[key] = fn()
            except InputError as exc:
                table[key] = refused_value
                self.refused[key] = str(exc)
        return table[key]

    def states(self, sharding: str, offload: str) -> Optional[cal.StateBytes]:
        """State bytes, or None when the engine refuses the strategy with this offload (a
        conflict rule of the job input, e.g. offload on a strategy without ZeRO/FSDP)."""
        return self._guarded((sharding, offload), self._states, lambda: cal.state_bytes(
            self.engine, self.plain_job, sharding, offload), None)

    def slope(self, rep: str, ckpt: str, tp: int, sp: bool, pp: int,
              vstages: int, ep: int = 1) -> float:
        """Activation bytes per token of a layout, probed with strategy ``rep`` (infinite, so
        the layout cannot fit, when the engine refuses the probe)."""
        return self._guarded((rep, ckpt, tp, sp, pp, vstages, ep), self._slopes,
                             lambda: cal.activation_slope(self.engine, self.job_for(ckpt), rep, ckpt,
                                                          tp=tp, sp=sp, pp=pp, vstages=vstages,
                                                          ep=ep), float("inf"))

    def layer_probe(self, rep: str, ckpt: str, tp: int, sp: bool, pp: int,
                    vstages: int, ep: int = 1) -> tuple[float, float, float]:
        """(layer block per token, largest layer tensor per token, largest weight gradient)
        from one memory probe of the layout at micro-batch 16 ((0, 0, 0) where refused)."""
        def probe() -> tuple[float, float, float]:
            par = dict(cal._single(**cal._sharding_fields(rep)), tp=tp, sequence_parallel=sp,
                       pp=pp, pp_virtual_stages=vstages, ep=ep, dp=ep,
                       pp_schedule="interleaved" if vstages > 1 else "1f1b")
            mb, job = 16, self.job_for(ckpt)
            est, _ = cal._mem_probe(self.engine, job, parallelism=par,
                                    hardware={"gpus_per_node": None, "nodes": 1},
                                    training={"micro_batch_size": mb,
                                              "grad_accum_steps": max(2, pp * vstages),
                                              "activation_checkpointing": ckpt})
            metrics = est.metrics or {}
            tokens = mb * job.training.seq_len / par.get("cp", 1)
            return (float(metrics.get("allocator_layer_block_bytes", 0.0)) / tokens,
                    float(metrics.get("allocator_largest_layer_tensor_bytes", 0.0)) / tokens,
                    float(metrics.get("allocator_largest_grad_tensor_bytes", 0.0)))
        return self._guarded(("layer", rep, ckpt, tp, sp, pp, vstages, ep), self._slopes,
                             probe, (0.0, 0.0, 0.0))

    def cp_core(self, gpu: str, ckpt: str, tp: int, cp: int, gpus_per_node: int,
                sp: bool) -> tuple[float, float]:
        return self._guarded((gpu, ckpt, tp, cp, gpus_per_node, sp), self._cp,
                             lambda: cal.context_parallel_core(self.engine, self.job_for(ckpt), gpu, ckpt,
                                                               tp, cp, gpus_per_node, sp),
                             (float("inf"), 0.0))

    def times(self, gpu: str, ckpt: str) -> Optional[cal.TimeCoefficients]:
        """Time coefficients on ``gpu``, or None when it cannot be timed or the engine refuses
        the job on it (a dtype the GPU lacks)."""
        return self._guarded((gpu, ckpt), self._times, lambda: cal.time_coefficients(
            self.engine, self.job_for(ckpt), gpu, ckpt, self.tp_probe), None)

    def opt(self, gpu: str, sharding: str) -> float:
        return self._guarded((gpu, sharding), self._opt,
                             lambda: cal.optimizer_seconds_per_param(self.engine, self.plain_job, gpu,
                                                                     sharding), float("inf"))


def _inner_axes(shardings, ckpts, mbs):
    """Every (sharding index, offload, checkpointing index, micro-batch) combination."""
    h, o, c, m = np.meshgrid(np.arange(len(shardings)), np.array([0, 1]),
                             np.arange(len(ckpts)), np.array(mbs), indexing="ij")
    return h.ravel(), o.ravel(), c.ravel(), m.ravel()


def _autocast(job: Job, strategy, stack) -> bool:
    """Whether the step runs under torch.autocast (core's precision rule: ``amp``)."""
    from fmest.physics.precision import resolve_precision

    return strategy is not None and resolve_precision(job.training, strategy, stack) == "amp"


def _norm_autocast_bytes(ctx: dict, recompute_share: float) -> float:
    """Bytes per token per layer the two eager norm families of a layer move under autocast
    beyond the bf16 stream's (time_roofline ``formulas.elementwise_bytes_fwd_bwd`` with
    ``autocast``: ``fmest.physics.time_constants.AUTOCAST_NORM_FAMILY_BYTES`` less
    ``PURE_NORM_FAMILY_BYTES``; the forward once more in the recomputed share); 0 where the
    stack fuses the norm or the blocks are compiled (their own kernels)."""
    stack, job, model = ctx["stack"], ctx["job"], ctx["model"]
    if job.training.compile or (stack is not None and stack.fuses("norm")):
        return 0.0
    kind = "layer_norm" if model.layer_norm else "rms_norm"
    amp_f, amp_b = tc.AUTOCAST_NORM_FAMILY_BYTES[kind]
    pure_f, pure_b = tc.PURE_NORM_FAMILY_BYTES[kind]
    return 2.0 * model.hidden_size * ((amp_f - pure_f) * (1.0 + recompute_share)
                                      + (amp_b - pure_b))


def _precision_bytes(job: Job, strategy, stack) -> tuple[float, float, float]:
    """(gradient bytes on the wire, gradient bytes per trainable param, activation bytes):
    fp32 reductions under amp/master, the compute dtype under pure (core's precision rule)."""
    from fmest.physics.precision import resolve_precision
    from fmest.stacks import fp32_main_grads
    from fmest.transforms import dtype_info

    act = 4.0 if job.training.dtype == "fp32" else 2.0
    prec = resolve_precision(job.training, strategy, stack)
    wire = 4.0 if prec in ("amp", "master") else act
    per_param = 4.0 if prec == "amp" else act
    # the stack's fp32 gradient buffer under master precision (fmest.stacks.apply_to_sizing:
    # Megatron main_grad, DeepSpeed BF16_Optimizer), as the memory plugin sizes the gradients
    if prec == "master" and stack is not None and job.training.technique == "full" \
            and "gradients" not in strategy.shards and fp32_main_grads(
                stack.profile, job.training, dtype_info(job.training.dtype).storage_dtype):
        per_param = 4.0
    return wire, per_param, act


class _Pruner:
    """Drops configurations by named rule, counting each under the first rule it breaks."""

    def __init__(self, rejected: dict) -> None:
        self.rejected = rejected

    def apply(self, arrays: dict, rule: str, bad) -> dict:
        bad = np.broadcast_to(np.asarray(bad, dtype=bool), arrays["tp"].shape)
        hits = int(bad.sum())
        if hits:
            self.rejected[rule] = self.rejected.get(rule, 0) + hits
            keep = ~bad
            arrays = {name: (value[keep] if isinstance(value, np.ndarray)
                             and value.shape == bad.shape else value)
                      for name, value in arrays.items()}
        return arrays


def _gpus_per_node(opt: _GpuOption, count: int) -> int:
    gpn = opt.gpus_per_node
    while count % gpn:
        gpn //= 2
    return gpn


def _cross_product(shapes: list, inner_axes) -> dict:
    """Structural layouts x (sharding, offload, checkpointing, micro-batch) as flat arrays."""
    hs, offs, cks, mbv = inner_axes
    per_shape = len(hs)
    shape_index = np.repeat(np.arange(len(shapes)), per_shape)

    def shape_array(attr, dtype=float):
        return np.array([getattr(s, attr) for s in shapes], dtype=dtype)[shape_index]

    arrays = {attr: shape_array(attr) for attr in ("tp", "pp", "cp", "dp", "ep", "vstages",
                                                   "nodes")}
    arrays["sp"] = shape_array("sp", bool)
    for name, axis in (("hidx", hs), ("off", offs), ("ckidx", cks), ("mb", mbv)):
        arrays[name] = np.tile(axis, len(shapes))
    arrays["mb"] = arrays["mb"].astype(float)
    return arrays


def _prune_structure(arrays: dict, ctx: dict, gpn: int, pruner: _Pruner) -> dict:
    """The rules of :data:`fmest.plan.space.RULES` from the global batch to duplicates
    (global batch, pipeline fill, sharding duplicates, DeepSpeed's ZeRO-2/3 + PP limit,
    offload without a sharded optimizer, engine refusals, equivalent strategies)."""
    shardings = ctx["shardings"]

    def per_sharding(test):
        return np.array([test(strategy) for _, strategy in shardings], dtype=bool)

    accum = ctx["samples"] / (arrays["mb"] * arrays["dp"])
    arrays["accum"] = accum
    arrays = pruner.apply(arrays, sp.RULE["batch"], (accum < 1) | (np.abs(accum - np.round(accum))
                                                              > 1e-9))
    arrays["accum"] = np.round(arrays["accum"])
    arrays = pruner.apply(arrays, sp.RULE["pipeline_fill"], (arrays["pp"] > 1)
                          & (arrays["accum"] < arrays["pp"] * arrays["vstages"]))
    group = arrays["dp"] * arrays["cp"]
    sharded = per_sharding(lambda st: bool(st.shards))[arrays["hidx"]]
    arrays = pruner.apply(arrays, sp.RULE["no_dp"], sharded & (group <= 1))
    group = arrays["dp"] * arrays["cp"]
    hybrid = per_sharding(lambda st: bool(st.hybrid))[arrays["hidx"]]
    arrays = pruner.apply(arrays, sp.RULE["hybrid_node"], hybrid & (group <= gpn))
    # DeepSpeed's pipeline engine runs ZeRO-1 only (its docs: "ZeRO-2 and ZeRO-3 are
    # incompatible with pipeline parallelism")
    zero23 = np.array([name in ("zero2", "zero3") for name, _ in shardings])[arrays["hidx"]]
    arrays = pruner.apply(arrays, sp.RULE["zero_pp"], zero23 & (arrays["pp"] > 1))
    opt_sharded = per_sharding(lambda st: "optimizer" in st.shards)[arrays["hidx"]]
    arrays = pruner.apply(arrays, sp.RULE["offload"], (arrays["off"] == 1) & ~opt_sharded)
    etp = ctx["job"].parallelism.expert_tp
    if etp is not None:   # the job's expert TP x ep must divide tp x cp x dp (resolve_layout)
        ranks = arrays["tp"] * arrays["cp"] * arrays["dp"]
        arrays = pruner.apply(arrays, sp.RULE["ep"], np.mod(ranks, etp * arrays["ep"]) != 0)
    calib = ctx["calib"]
    refused = np.zeros((len(shardings), 2), dtype=bool)
    for h_idx, off in set(zip(arrays["hidx"].tolist(), arrays["off"].tolist(), strict=True)):
        refused[h_idx, off] = calib.states(shardings[h_idx][0],
                                           ("none", "optimizer")[off]) is None
    arrays = pruner.apply(arrays, sp.RULE["refused"], refused[arrays["hidx"], arrays["off"]])
    return pruner.apply(arrays, sp.RULE["duplicate"], _duplicates(arrays, ctx))


def _preference(strategy) -> tuple:
    """Which of equivalent strategies a plan names: the one declaring the least behaviour
    (plain DDP/ZeRO-0 over FSDP NO_SHARD on one GPU), then by name."""
    return (len(strategy.shards), strategy.hybrid, strategy.param_gather,
            strategy.native_tensor_parallel, strategy.pp_unsharded_params,
            strategy.fp32_grad_accum, strategy.ddp_bucket,
            strategy.reduce_bucket_elements + strategy.allgather_bucket_elements, strategy.name)


def _duplicates(arrays: dict, ctx: dict) -> np.ndarray:
    """True for each configuration that is the same job in effect as another one kept: the
    same layout, offload, checkpointing and micro-batch under a strategy whose
    :func:`effective_behaviour` on that layout is equal (one GPU count, one GPU type)."""
    from fmest.physics.precision import resolve_precision

    size = arrays["tp"].size
    if size == 0:
        return np.zeros(0, dtype=bool)
    shardings, training = ctx["shardings"], ctx["job"].training
    flags = np.stack([arrays["hidx"], arrays["dp"] > 1, arrays["tp"] > 1, arrays["pp"] > 1],
                     axis=1).astype(np.int64)
    keys, inverse = np.unique(flags, axis=0, return_inverse=True)
    ids: dict = {}
    behaviour = np.array([ids.setdefault(effective_behaviour(
        shardings[h][1], precision=resolve_precision(training, shardings[h][1], ctx["stack"]),
        data_parallel=bool(d), tensor_parallel=bool(t), pipeline=bool(p)), len(ids))
        for h, d, t, p in keys])[inverse.ravel()]
    if len(ids) == len(keys):     # every strategy behaves differently here
        return np.zeros(size, dtype=bool)
    by_preference = sorted(range(len(shardings)), key=lambda h: _preference(shardings[h][1]))
    rank = np.empty(len(shardings), dtype=np.int64)
    rank[by_preference] = np.arange(len(shardings))
    order = np.argsort(rank[arrays["hidx"]], kind="stable")
    row_key = np.stack([arrays[name] for name in ("tp", "pp", "cp", "dp", "ep", "vstages",
                                                  "sp", "off", "ckidx", "mb")]
                       + [behaviour], axis=1).astype(np.float64)[order]
    _, first = np.unique(row_key, axis=0, return_index=True)
    dup = np.ones(size, dtype=bool)
    dup[order[first]] = False
    return dup


def _evaluate_count(opt: _GpuOption, count: int, ctx: dict, rejected: dict):
    """Array evaluation of every configuration of ``count`` GPUs of one type; returns
    ``(feasible configurations as a dict of arrays or None, configurations evaluated)``."""
    job, model, cons = ctx["job"], ctx["model"], ctx["cons"]
    gpn = _gpus_per_node(opt, count)
    per_shape = len(ctx["inner"][0])
    shapes = list(sp.shapes(count, gpus_per_node=gpn, heads=model.num_attention_heads,
                            kv_heads=model.num_kv_heads, layers=model.num_layers,
                            seq_len=job.training.seq_len, rejected=rejected, inner=per_shape,
                            experts=model.num_experts if model.is_moe else 0))
    total = len(shapes) * per_shape
    if not shapes:
        return None, 0
    refusal = ctx["calib"].gpu_refusal(opt.spec.name)
    if refusal is not None:     # e.g. bf16 asked of a V100: this GPU type is skipped
        rejected[refusal] = rejected.get(refusal, 0) + total
        return None, total
    if ctx["calib"].times(opt.spec.name, "none") is None:
        reason = f"{opt.spec.name}: {sp.NO_TIME}"
        rejected[reason] = rejected.get(reason, 0) + total
        return None, total
    pruner = _Pruner(rejected)
    arrays = _prune_structure(_cross_product(shapes, ctx["inner"]), ctx, gpn, pruner)
    if arrays["tp"].size == 0:
        return None, total
    cfg = _coefficients(arrays, opt, count, gpn, ctx)
    # model state alone (no activations) is a lower bound: what cannot fit without
    # activations is pruned before the per-layout activation probes are asked
    # (both at the job's fit confidence: the peak's quantile there, a constant times the point
    # for the analytic answers the plans are re-estimated with)
    cfg["act_per_token"] = np.zeros(cfg["tp"].size)
    cfg = pruner.apply(cfg, sp.RULE["fit"],
                       vec.memory_bytes(cfg) * ctx["fit_factor"] > opt.spec.capacity_bytes)
    if cfg["tp"].size == 0:
        return None, total
    cfg["act_per_token"] = _activation_slopes(cfg, ctx)
    cfg["layer_per_token"], cfg["tensor_per_token"], cfg["grad_block"] = _layer_blocks(cfg, ctx)
    cfg["memory"] = vec.memory_bytes(cfg)
    cfg = pruner.apply(cfg, sp.RULE["fit"],
                       cfg["memory"] * ctx["fit_factor"] > opt.spec.capacity_bytes)
    cfg = pruner.apply(cfg, sp.RULE["nodes"], cons.max_nodes is not None
                       and count / gpn > cons.max_nodes)
    usd_per_hour, quote = _bill(opt.quotes, count, gpn)
    needs_price = cons.objective in ("cost", "pareto") or cons.budget_usd is not None
    cfg = pruner.apply(cfg, sp.RULE["price"], needs_price and math.isnan(usd_per_hour))
    if cfg["tp"].size == 0:
        return None, total
    cfg["step"] = vec.step_seconds(cfg)
    steps = ctx["steps"]
    cfg["total_s"] = cfg["step"] * steps if steps is not None else np.full(cfg["tp"].size,
                                                                            np.nan)
    cfg["usd"] = cfg["total_s"] / 3600.0 * usd_per_hour
    if cons.budget_usd is not None:
        cfg = pruner.apply(cfg, sp.RULE["budget"], ~(cfg["usd"] <= cons.budget_usd))
    if cons.deadline_hours is not None:
        cfg = pruner.apply(cfg, sp.RULE["deadline"], ~(cfg["total_s"] <= cons.deadline_hours * 3600))
    size = cfg["tp"].size
    out = {name: cfg[name] for name in (*arrays, "memory", "step", "total_s", "usd")}
    out.update(count=np.full(size, count), gpn=np.full(size, gpn),
               gpu=np.full(size, ctx["gpu_index"][opt.spec.name]), quote=[quote] * size)
    return out, total


def zero3_hook_seconds(sharding: str, layers: int, ckpt: str, host_layers: float,
                       share: float = 1.0) -> float:
    """Host seconds per micro-batch that DeepSpeed ZeRO-3's module hooks add over all layers
    (time_roofline ``eager_host_seconds``), only where the probe found an eager host floor.
    ``share``: the blocks recomputed under full checkpointing (``checkpoint_fraction``), the
    others counted as not checkpointed (time_roofline ``_blend_recompute``)."""
    if sharding != "zero3" or host_layers <= 0.0:
        return 0.0
    # (fmest.physics.time_constants ZERO3_HOOK_OPS_PER_LAYER x HOST_SECONDS_PER_EAGER_OP, the
    # rule of time_roofline ``host_dispatch_seconds``; the host probes of fmest.plan.calibrate
    # run at zero_stage 0, so the ZeRO-3 rows add it here)
    ops_of = tc.ZERO3_HOOK_OPS_PER_LAYER
    ops = ops_of.get(ckpt, ops_of["none"])
    if ckpt == "full" and share < 1.0:
        ops = share * ops + (1.0 - share) * ops_of["none"]
    return layers * ops * tc.HOST_SECONDS_PER_EAGER_OP


def _eager_stack(ctx: dict) -> bool:
    """A stack whose model code runs op by op (time_roofline ``zero3_hook_host_seconds`` /
    ``stack_fuses_its_code``: its own profile fuses nothing, not compiled; Liger's or the job's
    kernels keep it eager): the one whose ZeRO-3 hooks cost host time."""
    stack = ctx["stack"]
    return stack is not None and not stack.profile.fused and not ctx["job"].training.compile


def _probed_arrays(sel: dict, gpu, ctx: dict) -> dict:
    """Per configuration: the probed state bytes (by sharding and offload), time coefficients
    (by checkpointing) and precision bytes (by sharding)."""
    job, calib, shardings = ctx["job"], ctx["calib"], ctx["shardings"]
    ckpts = sp.CHECKPOINTING
    size = sel["tp"].size
    arr: dict = {}
    keys = sorted(set(zip(sel["hidx"].tolist(), sel["off"].tolist(), sel["ckidx"].tolist(), strict=True)))
    # the share of blocks full checkpointing recomputes (training.checkpoint_fraction)
    share = float(job.training.checkpoint_fraction or 1.0)
    # the one-GPU time probes run unsharded (zero0, calibrate._time_probe): their precision,
    # against which each sharding's norm family is corrected (_norm_autocast_bytes)
    probe_amp = _autocast(job, dict(shardings).get("zero0"), ctx["stack"])
    # Megatron-Core MoE: a fused stack has no eager host floor (time_roofline
    # eager_host_seconds), so a host-bound probe there is the MoE dispatcher syncs' wait, which
    # the arrays compute per configuration (vector.moe_sync_wait_seconds, the local experts'
    # grouped-GEMM host time included): not a floor for every configuration
    sync_probe = ctx["stack"] is not None and ctx["stack"].name == "megatron-core" \
        and bool(ctx["model"].is_moe)
    for h_idx, offload, ck_idx in keys:
        name, strategy = shardings[h_idx]
        states = calib.states(name, "optimizer" if offload else "none")
        times = calib.times(gpu.name, ckpts[ck_idx])
        wire, per_param, act_b = _precision_bytes(job, strategy, ctx["stack"])
        rows = (sel["hidx"] == h_idx) & (sel["off"] == offload) & (sel["ckidx"] == ck_idx)
        # DeepSpeed's step gradient copy (one rule with memory_theory): capped per ZeRO-3
        # sub-group, so it does not shrink with the shard divisor like the other temporaries
        copy_bpe, copy_cap = (0.0, None) if offload else zero_step_grad_copy_rule(
            strategy, ctx["stack"], per_param, job.parallelism.zero3_sub_group_elems)
        values = dict(copy_bpe=copy_bpe,
                      copy_cap=float("inf") if copy_cap is None else copy_cap,
            w_bytes=states.weights, master_bytes=states.master, opt_bytes=states.optimizer,
            grad_bytes=states.gradients, temp_bytes=states.temporaries,
            head_compute=times.last_stage_compute,
            head_membound=times.last_stage_membound, compute_repl=times.compute_replicated,
            compute_split=times.compute_split, membound_repl=times.membound_replicated,
            membound_split=times.membound_split, membound_sp=times.membound_sp_whole,
            compute_mb_share=times.compute_mb_share, matmul_share=times.matmul_share,
            optimizer_s_per_param=calib.opt(gpu.name, name),
            overhead_fraction=times.overhead_fraction,
            host_layers=0.0 if sync_probe else times.host_layers + zero3_hook_seconds(
                name, ctx["model"].num_layers, ckpts[ck_idx], times.host_layers, share),
            # the part a stack's DeepSpeed runtime serializes at world size > 1, host floor
            # or not (time_roofline estimator.apply_deepspeed_runtime runs with an eager stack)
            zero3_hooks=zero3_hook_seconds(name, ctx["model"].num_layers, ckpts[ck_idx],
                                           1.0 if _eager_stack(ctx) else 0.0, share),
            host_outside=0.0 if sync_probe else times.host_outside, grad_wire_bytes=wire,
            grad_bytes_per_param=per_param, act_bytes=act_b,
            # forward share of a micro-batch's compute: 1 of 3 matmul passes, 1 of 3 + share
            # when full checkpointing recomputes the forward of that share of the blocks
            # (Narayanan et al. 2021, section 3.5; time_roofline matmul_times)
            fwd_share=1.0 / (3.0 + (share if ckpts[ck_idx] == "full" else 0.0)),
            # bytes per token per layer the norm family adds (or saves) under this
            # sharding's precision over the probes' (time_roofline: the autocast family)
            norm_amp_bytes=(float(_autocast(job, strategy, ctx["stack"])) - float(probe_amp))
            * _norm_autocast_bytes(ctx, share if ckpts[ck_idx] == "full" else 0.0))
        for field_name, value in values.items():
            arr.setdefault(field_name, np.zeros(size))[rows] = value
    return arr


def _per_layout(sel: dict, ctx: dict, probe) -> np.ndarray:
    """``probe(strategy, checkpointing, tp, sp, pp, virtual stages, ep)`` for each
    configuration, asked once per distinct layout key (probe strategy x checkpointing x tp x
    sp x pp x virtual stages x ep)."""
    shardings, ckpts = ctx["shardings"], sp.CHECKPOINTING
    reps = [probe_strategy(shardings, strategy) for _, strategy in shardings]
    rep_index = np.array([sorted(set(reps)).index(r) for r in reps])[sel["hidx"]]
    shape_key = np.stack([rep_index, sel["ckidx"], sel["tp"], sel["sp"], sel["pp"],
                          sel["vstages"], sel["ep"]], axis=1).astype(np.int64)
    keys, inverse = np.unique(shape_key, axis=0, return_inverse=True)
    values = np.array([probe(sorted(set(reps))[r], ckpts[ck], int(tp), bool(seq_par), int(pp),
                             int(vst), int(ep))
                       for r, ck, tp, seq_par, pp, vst, ep in keys])
    return values[inverse.ravel()]


def _activation_slopes(sel: dict, ctx: dict) -> np.ndarray:
    """Probed activation bytes per token for each configuration's layout."""
    return _per_layout(sel, ctx, ctx["calib"].slope)


def _layer_blocks(sel: dict, ctx: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each configuration's layout, from one memory probe each (memory_theory's metrics):
    the allocator reserve's per-layer block per token (``allocator_layer_block_bytes``, one
    layer's backward working set: fmest.physics.device_terms.allocator_reserve_bytes' second
    term), a layer's largest single tensor per token and the largest weight gradient
    (``allocator_largest_layer_tensor_bytes``, ``allocator_largest_grad_tensor_bytes``: the
    blocks DeepSpeed's flat step copies are compared with, vector.memory_bytes)."""
    probes = _per_layout(sel, ctx, ctx["calib"].layer_probe).reshape(-1, 3)
    return probes[:, 0], probes[:, 1], probes[:, 2]


def _context_parallel_arrays(sel: dict, gpu, ctx: dict, sel_gpn: int):
    """Probed per-micro-batch core seconds ``a + b mb`` for the context-parallel rows."""
    a_arr, b_arr = np.zeros(sel["tp"].size), np.zeros(sel["tp"].size)
    rows_cp = sel["cp"] > 1
    if rows_cp.any():
        key = np.stack([sel["ckidx"], sel["tp"], sel["cp"], sel["sp"]],
                       axis=1).astype(np.int64)
        keys, inverse = np.unique(key[rows_cp], axis=0, return_inverse=True)
        pairs = np.array([ctx["calib"].cp_core(gpu.name, sp.CHECKPOINTING[ck], int(tp), int(cp),
                                               int(sel_gpn), bool(seq_par))
                          for ck, tp, cp, seq_par in keys])
        a_arr[rows_cp] = pairs[inverse.ravel(), 0]
        b_arr[rows_cp] = pairs[inverse.ravel(), 1]
    return a_arr, b_arr


def _zero_buffer_elements(sel: dict, rows: np.ndarray, strategy, ctx: dict) -> np.ndarray:
    """DeepSpeed's IPG reduce-buffer elements of each configuration in ``rows``, as memory_theory
    ``_bucket_bytes`` counts them: none when the stack reduces from its contiguous gradient
    buffer (fp32 gradients under DeepSpeed's ZeRO) and the strategy does not shard gradients,
    else
    :func:`fmest.default_plugins.parallelism.zero_reduce_buffer_elements` (pipeline
    parallelism and optimizer offload change it)."""
    from fmest.default_plugins.parallelism import zero_reduce_buffer_elements

    stack = ctx["stack"]
    # compute-dtype gradients under DeepSpeed's ZeRO run the ZeRO optimizer's buckets, not
    # the contiguous fp32 buffer (memory_theory ``_bucket_bytes``)
    grad_bytes = _precision_bytes(ctx["job"], strategy, stack)[1]
    if stack is not None and stack.profile.contiguous_grad_buffer \
            and "gradients" not in strategy.shards \
            and not (strategy.reduce_bucket_elements and grad_bytes != 4.0):
        return np.zeros(int(rows.sum()))
    par = ctx["job"].parallelism
    pipeline, offload = sel["pp"][rows] > 1, sel["off"][rows] == 1
    out = np.zeros(int(rows.sum()))
    for pp_on in (False, True):
        for off_on in (False, True):
            out[(pipeline == pp_on) & (offload == off_on)] = zero_reduce_buffer_elements(
                strategy, par, pipeline=pp_on, offload_optimizer=off_on)
    return out


def _sharding_arrays(sel: dict, gpn: int, ctx: dict) -> dict:
    """What each configuration's strategy shards, over how many ranks (the registered
    :class:`fmest.transforms.ShardingStrategy` answers), and its precision policy."""
    from fmest.physics.precision import resolve_precision

    size = sel["tp"].size
    out = {name: np.ones(size) for name in ("s_shard_group", "s_params", "s_grads", "s_opt")}
    out.update({name: np.zeros(size, dtype=bool) for name in (
        "pp_unsharded", "fp32_acc", "ddp_bucket", "amp", "param_gather", "params_sharded",
        "grads_sharded", "opt_sharded")})
    out["bucket_elements"] = np.zeros(size)
    out["stream_pools"] = np.zeros(size)
    # FSDP2 before PyTorch 2.5 keeps the root's reduce-scatter input in its stream's pool
    # (device_terms.fsdp2_rs_input_in_side_pool)
    out["fsdp2_root_rs"] = np.full(size, fsdp2_rs_input_in_side_pool(
        ctx["job"].hardware.torch_version))
    pools = STREAM_POOL_KIND_CODES.get(FSDP_STREAM_POOL_STACKS.get(ctx["stack"].name, "")
                                       if ctx["stack"] is not None else "", 0.0)
    group = sel["dp"] * sel["cp"]
    contiguous = ctx["stack"] is not None and ctx["stack"].profile.contiguous_grad_buffer
    for h_idx, (_, strategy) in enumerate(ctx["shardings"]):
        rows = sel["hidx"] == h_idx
        if not rows.any():
            continue
        # the strategy's behaviour, never its framework label (issue 10)
        out["pp_unsharded"][rows] = strategy.pp_unsharded_params
        out["fp32_acc"][rows] = strategy.fp32_grad_accum
        # a stack whose gradients accumulate in the flat buffer it reduces keeps no DDP
        # bucket copy (memory_theory ``_bucket_bytes``: stacks.toml contiguous_grad_buffer)
        out["ddp_bucket"][rows] = strategy.ddp_bucket and not (
            contiguous and "gradients" not in strategy.shards)
        out["bucket_elements"][rows] = _zero_buffer_elements(sel, rows, strategy, ctx)
        out["amp"][rows] = resolve_precision(ctx["job"].training, strategy,
                                             ctx["stack"]) == "amp"
        if not strategy.shards:
            continue
        shard_n = np.minimum(group[rows], gpn) if strategy.hybrid else group[rows]
        out["s_shard_group"][rows] = shard_n
        for what, divisor, flag in (("parameters", "s_params", "params_sharded"),
                                    ("gradients", "s_grads", "grads_sharded"),
                                    ("optimizer", "s_opt", "opt_sharded")):
            if what in strategy.shards:
                out[divisor][rows] = shard_n
                out[flag][rows] = True
        out["param_gather"][rows] = strategy.param_gather
        # FSDP's side-stream pools (memory_theory ``_stream_pool_bytes``): per-unit gathers
        # without DeepSpeed's buckets, under a stack whose FSDP implementation is known
        if strategy.param_gather and not strategy.reduce_bucket_elements:
            out["stream_pools"][rows] = pools
    return out


def _coefficients(sel: dict, opt: _GpuOption, count: int, gpn: int, ctx: dict) -> dict:
    """The arrays :mod:`fmest.plan.vector` reads, per selected configuration."""
    from fmest.objectives import no_grad_calls, sequences_per_sample
    from fmest.physics.counting import trainable_params

    job, model, gpu = ctx["job"], ctx["model"], opt.spec
    if job.hardware.inter_node_gbps is not None:
        # the cluster's stated network, as the engine's context reads it
        from fmest.engine import with_network

        gpu = with_network(gpu, job.hardware.inter_node_gbps)
    size = sel["tp"].size
    # a preference objective's pairs and no-grad passes (fmest.objectives): the compute
    # probes already run them; the TP/PP traffic formulas scale by them
    tr = job.training
    pair = sequences_per_sample(tr.objective)
    calls = no_grad_calls(tr)
    counts = model.param_counts()
    # a stack whose model code builds its own output head for a tied checkpoint (stacks.toml
    # unties_embeddings, LitGPT: memory_theory head_params_of): one more embedding-sized weight
    if not counts.head and ctx["stack"] is not None \
            and ctx["stack"].profile.unties_embeddings:
        counts = attrs.evolve(counts, head=counts.embedding,
                              total=counts.total + counts.embedding)
    params = float(counts.total)
    root = float(counts.embedding + counts.head)
    arr = dict(sel)
    # the routed experts' tensor-parallel size: the job's parallelism.expert_tp (the planner
    # does not search it), else each configuration's tp (Megatron-Core's default)
    etp = job.parallelism.expert_tp
    arr["etp"] = sel["tp"] if etp is None else np.full(size, float(etp))
    arr.update(_probed_arrays(sel, gpu, ctx))
    arr["cp_core_a"], arr["cp_core_b"] = _context_parallel_arrays(sel, gpu, ctx, gpn)
    arr.update(_sharding_arrays(sel, gpn, ctx))
    arr.update(
        lora=job.training.technique != "full", compiled=bool(job.training.compile),
        hbm_bw=float(gpu.hbm_bytes_per_s), offload=sel["off"] == 1,
        ckpt_full=sel["ckidx"] == sp.CHECKPOINTING.index("full"),
        # the share of blocks a full-checkpointing configuration recomputes (the job's
        # training.checkpoint_fraction; every block when it states none)
        ckpt_share=float(job.training.checkpoint_fraction or 1.0),
        world=np.full(size, float(count)), gpn=np.full(size, float(gpn)),
        seq=float(job.training.seq_len), layers=float(model.num_layers),
        pair=float(pair), fwd_only=float(sum(calls)) / pair,
        expandable=bool(ctx["stack"] is not None
                        and ctx["stack"].profile.expandable_segments),
        # the stack's fitted allocator reserve fraction (stacks_fitted.json), else physics
        reserve_fraction=(ctx["stack"].fitted.reserve_fraction
                          if ctx["stack"] is not None else None),
        # DeepSpeed PipelineEngine p2p (time_roofline estimator.deepspeed_pipeline_seconds)
        ds_pipe=bool(ctx["stack"] is not None
                     and ctx["stack"].profile.pipeline_engine == "deepspeed"),
        **_stack_time_flags(ctx),
        # sequence-parallel all-gathers under float8 carry fp8 (time_roofline _tp_seconds,
        # formulas.tp_all_gather_bytes_per_element; None: the activations' bytes)
        tp_gather_bytes=1.0 if job.training.dtype == "fp8" else None,
        # the total CUDA reports, else the label (GpuSpec.capacity_bytes)
        capacity=float(gpu.capacity_bytes or 0),
        hidden=float(model.hidden_size), kv_dim=float(model.num_kv_heads * model.head_dim),
        # the allocator reserve's transient block per token: the fp32 logits of each TP
        # rank's vocabulary shard (fmest.physics.device_terms.transient_block_bytes); the
        # compute-dtype logits under a compiled loss (fmest.stacks.loss_compiled)
        logits_per_token=float(model.vocab_size) / sel["tp"] * (
            (4.0 if tr.dtype == "fp32" else 2.0) if loss_compiled(tr, ctx["stack"]) else 4.0),
        params=params, root_params=root,
        **_stage_arrays(sel["pp"], model, counts),
        head_params=float(counts.head or counts.embedding),
        layer_params=(params - root) / model.num_layers,
        expert_fraction=float(counts.experts) / params if params else 0.0,
        moe_layers=float((model.num_moe_layers or model.num_layers) if model.is_moe else 0),
        experts_per_token=float(model.experts_per_token or 0),
        num_experts=float(model.num_experts or 0),
        # the job's MoE dispatcher and EP overlap (time_roofline moe_dispatch_seconds)
        moe_flex=job.parallelism.moe_dispatcher in ("deepep", "hybridep"),
        moe_overlap=bool(job.parallelism.moe_a2a_overlap),
        # GPUs of one NVLink domain (time_roofline formulas.nvlink_domain_gpus): the EP
        # all-to-all's NVLink reach
        nvlink_domain=float(max(gpn, value_by_gpu_prefix(tc.NVLINK_DOMAIN_GPUS, gpu.name, 0))),
        # host seconds per op of the GPU's host CPU (Grace hosts slower: time_constants
        # host_seconds_per_op), for the MoE dispatcher syncs' host time
        host_op_s=tc.host_seconds_per_op(gpu.name),
        trainable=float(trainable_params(model, job.training)) or params,
        intra_bw=_intra_bw(gpu),
        nic_bw=float(gpu.inter_node_bytes_per_s or tc.DEFAULT_INTER_NODE_BYTES_PER_S),
        pcie_bw=float(gpu.pcie_bytes_per_s or tc.DEFAULT_PCIE_BYTES_PER_S))
    return arr


def _stage_arrays(pp: np.ndarray, model, counts) -> dict:
    """The busiest pipeline stage's parameters per configuration, as memory_theory stages them
    (``pipeline_stages``, ``stage_params``): ``ceil(layers / pp)`` layers on every stage, the
    embedding on the first, the output head and final norm on the last; the arrays take the
    larger of the two (its state and buffers; the activation probes take the busiest stage's
    too). ``stage_dense``: share of the dense (non-expert) parameters, ``stage_expert``: of
    the routed experts', ``stage_root``: the root unit (embedding + head) that stage holds."""
    emb, head = float(counts.embedding), float(counts.head)
    final_norm = float(sum(g.params for g in model.groups
                           if g.kind == "norm" and "final" in g.name))
    dense = float(counts.total - counts.experts)
    blocks = max(0.0, dense - emb - head - final_norm)
    staged = pp > 1
    layers = np.ceil(model.num_layers / pp) / model.num_layers
    ends = max(emb, head + final_norm)
    return dict(
        stage_dense=np.where(staged, (layers * blocks + ends) / max(dense, 1.0), 1.0),
        stage_expert=np.where(staged, layers, 1.0),
        stage_root=np.where(staged, ends, emb + head))


def _stack_time_flags(ctx: dict) -> dict:
    """What the job's resolved stack changes in the step-time formulas (time_roofline reads
    the same stack): the collectives it overlaps (``tp``, ``pp_p2p``, ``dp_reduce``,
    ``dp_gather``: fmest.stacks ``ResolvedStack.overlaps``, ``apply_to_collectives``; no stack:
    eager PyTorch, bucketed DDP reduction overlapped), the bytes per local trainable
    parameter its optimizer moves each micro-batch into fp32 gradients (time_roofline
    ``estimator.hp_grad_accum_bytes``) and Megatron-Core's MoE dispatcher host syncs
    (``estimator.moe_sync_wait_seconds``)."""
    from fmest.stacks import fp32_main_grads
    from fmest.transforms import dtype_info

    stack, training, model = ctx["stack"], ctx["job"].training, ctx["model"]
    if stack is None:
        return dict(tp_overlap=False, pp_overlap=False, dp_reduce_overlap=True,
                    dp_gather_overlap=False, hp_accum_bytes=0.0, moe_sync=False,
                    wgrad_fused=wgrad_accumulation_fused(training, None),
                    fp8_weight_cast_bytes=0.0)
    hp = float(stack.profile.hp_grad_accum_bytes or 0.0)
    if not hp or training.technique != "full" or not fp32_main_grads(
            stack.profile, training, dtype_info(training.dtype).storage_dtype):
        hp = 0.0
    return dict(tp_overlap=stack.overlaps("tp"), pp_overlap=stack.overlaps("pp_p2p"),
                dp_reduce_overlap=stack.overlaps("dp_reduce"),
                dp_gather_overlap=stack.overlaps("dp_gather"), hp_accum_bytes=hp,
                moe_sync=stack.name == "megatron-core" and bool(model.is_moe),
                # CUDA graphs and drop-and-pad (vector.moe_layer_host_profile)
                cuda_graph_scope=tuple(training.cuda_graph_scope or ()),
                moe_drop_and_pad=training.moe_drop_and_pad,
                moe_dispatcher=ctx["job"].parallelism.moe_dispatcher,
                # the weight-gradient GEMM accumulates in place (time_roofline
                # memory_bound_seconds: no read-add-write per micro-batch)
                wgrad_fused=wgrad_accumulation_fused(training, stack),
                # fp8 weights cast once per step (time_roofline matmul_times: TE
                # is_first_microbatch): bytes per weight element the probes' single
                # micro-batch casts three times (cast, transpose, backward)
                fp8_weight_cast_bytes=3.0 * float(stack.profile.fp8_cast_bytes_per_element or 0.0)
                if training.dtype == "fp8" and training.technique == "full"
                and stack.profile.fp8_weight_cast_per_step and stack.fuses("fp8_cast")
                else 0.0)


def _intra_bw(gpu) -> float:
    """Achieved collective bandwidth within a node: the link (NVLink, else PCIe) times the
    ring efficiency the time plugin uses for this GPU (one rule: fmest.physics)."""
    link = gpu.intra_node_bytes_per_s or gpu.pcie_bytes_per_s or tc.DEFAULT_PCIE_BYTES_PER_S
    return float(link) * tc.intra_node_collective_efficiency(gpu.name)


# ---------------------------------------------------------------------------------------------
# choosing and re-estimating
# ---------------------------------------------------------------------------------------------

def pareto_mask(cost: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    """True where no other point is both no dearer and no slower (and better in one)."""
    order = np.lexsort((seconds, cost))
    best = np.inf
    mask = np.zeros(cost.size, dtype=bool)
    for i in order:
        if seconds[i] < best:
            mask[i] = True
            best = seconds[i]
    return mask


def pareto_layers(cost: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    """Non-dominated sorting: 0 for the Pareto front, 1 for the front of the rest, ..."""
    layer = np.full(cost.size, -1)
    left = np.arange(cost.size)
    depth = 0
    while left.size:
        front = pareto_mask(cost[left], seconds[left])
        layer[left[front]] = depth
        left = left[~front]
        depth += 1
    return layer


def _order(res: dict, objective: str, want: int) -> np.ndarray:
    """Indices of the best ``want`` configurations by the objective (pareto: front first,
    then the next fronts, each by cost)."""
    cost = np.nan_to_num(res["usd"], nan=np.inf)
    secs = np.nan_to_num(res["total_s"], nan=np.inf)
    if not np.isfinite(secs).any():
        secs = res["step"]
    by_cost = np.lexsort((secs, cost))
    by_time = np.lexsort((cost, secs))
    if objective == "cost":
        return by_cost[:want]
    if objective == "time":
        return by_time[:want]
    pool = np.unique(np.concatenate([by_cost[:want], by_time[:want]]))
    layers = pareto_layers(cost[pool], secs[pool])
    return pool[np.lexsort((secs[pool], cost[pool], layers))][:want]


def without_recompute_modules(job: Job) -> Job:
    """``job`` without Megatron's selective ``recompute_modules`` (valid under selective
    checkpointing only), for the planner's none/full candidates."""
    if job.training.recompute_modules is None:
        return job
    return job.evolve(training={"recompute_modules": None})


def config_job(job: Job, res: dict, i: int, shardings, *, method: str) -> Job:
    """The job of configuration ``i`` of ``res``."""
    name, _ = shardings[int(res["hidx"][i])]
    fields = cal._sharding_fields(name)
    vst = int(res["vstages"][i])
    quote = res["quote"][i]
    count, gpn = int(res["count"][i]), int(res["gpn"][i])
    pricing = {"provider": quote.provider, "region": quote.region} if quote else {}
    if sp.CHECKPOINTING[int(res["ckidx"][i])] != "selective":
        job = without_recompute_modules(job)
    return job.evolve(
        training={"micro_batch_size": int(res["mb"][i]),
                  "grad_accum_steps": int(res["accum"][i]),
                  "activation_checkpointing": sp.CHECKPOINTING[int(res["ckidx"][i])]},
        parallelism={"dp": int(res["dp"][i]), "tp": int(res["tp"][i]), "pp": int(res["pp"][i]),
                     "cp": int(res["cp"][i]), "ep": int(res["ep"][i]),
                     "sequence_parallel": bool(res["sp"][i]),
                     "pp_schedule": "interleaved" if vst > 1 else "1f1b",
                     "pp_virtual_stages": vst, **fields, "hsdp_shard_size": None,
                     "cpu_offload": "optimizer" if res["off"][i] else "none"},
        hardware={"gpu": res["gpu_name"][i], "gpus_per_node": gpn, "nodes": count // gpn},
        pricing=pricing, options={"method": method})


def _describe(job: Job) -> tuple[str, str]:
    par = job.parallelism
    layout = f"dp{par.dp} tp{par.tp} pp{par.pp}" + (f" cp{par.cp}" if par.cp > 1 else "") \
        + (f" ep{par.ep}" if par.ep > 1 else "") \
        + (f" etp{par.expert_tp}" if par.expert_tp not in (None, par.tp) else "") \
        + (" sp" if par.sequence_parallel else "") \
        + (f" v{par.pp_virtual_stages}" if par.pp_virtual_stages > 1 else "")
    strategy = (par.sharding or (f"fsdp {par.fsdp}" if par.fsdp != "none"
                                 else f"zero{par.zero_stage}")) \
        + (" +offload" if par.cpu_offload != "none" else "")
    return layout, strategy


def fit_factor(job: Job) -> float:
    """The peak at the job's ``options.fit_confidence`` over the point estimate, for the
    analytic memory answer the engine gives a plan (the quantile of
    :func:`fmest.searches.peak_quantile` over the interval of
    :func:`fmest.uncertainty.with_interval`); 1.0 when that answer gets no interval (an
    inference job, calibration knobs, no table)."""
    from fmest.estimates import MemoryEstimate, Provenance
    from fmest.searches import peak_quantile
    from fmest.uncertainty import with_interval

    unit = float(1 << 30)
    est = with_interval("memory", job, MemoryEstimate(
        total_bytes=int(unit), components={}, provenance=Provenance(basis="analytic")))
    return peak_quantile(unit, est.provenance.interval, job.options.fit_confidence) / unit


def _to_plan(engine, job: Job, predicted_mem: float, predicted_step: float) -> Optional[Plan]:
    from fmest.engine import usable_memory_bytes
    from fmest.estimates import fits_probability

    try:
        report = engine.estimate(job)
    except InputError:      # an input rule the array formulas do not know refuses the job
        return None
    if report.memory is None or report.time is None:
        return None
    mem = report.memory
    # feasible at the job's fit confidence: P(fit) >= it, or the point verdict without an
    # interval (the report's own rule: fmest.output.report, --fail-if-no-fit)
    p_fit = fits_probability(mem.total_bytes, mem.provenance.interval,
                             usable_memory_bytes(job, report.context))
    if not (report.fits if p_fit is None else p_fit >= job.options.fit_confidence):
        return None
    step_interval = report.time.provenance.interval
    layout, strategy = _describe(job)
    cost = report.cost
    lay = report.context.layout
    return Plan(job=job, gpu=report.context.gpu.name, gpus=lay.world_size, nodes=lay.nodes,
                layout=layout, strategy=strategy,
                micro_batch_size=job.training.micro_batch_size,
                grad_accum_steps=job.training.grad_accum_steps,
                checkpointing=job.training.activation_checkpointing,
                memory_bytes=report.memory.total_bytes,
                gpu_memory_bytes=report.context.gpu.memory_bytes,
                headroom_bytes=report.headroom_bytes, step_seconds=report.time.step_seconds,
                tokens_per_second=report.tokens.tokens_per_second if report.tokens else
                math.nan, total_seconds=report.time.total_seconds,
                usd=cost.usd if cost else None, usd_per_hour=cost.usd_per_hour if cost else None,
                provider=cost.provider if cost else None,
                instance=cost.instance if cost else None,
                price_stale=bool(cost.stale) if cost else False,
                predicted_memory_bytes=float(predicted_mem),
                predicted_step_seconds=float(predicted_step), method=job.options.method,
                fits_probability=p_fit,
                step_seconds_p10=None if step_interval is None else step_interval[0],
                step_seconds_p90=None if step_interval is None else step_interval[1])


def _plan_key(p: Plan, objective: str):
    cost = p.usd if p.usd is not None else math.inf
    secs = p.total_seconds if p.total_seconds is not None else p.step_seconds
    return (cost, secs) if objective in ("cost", "pareto") else (secs, cost)


# ---------------------------------------------------------------------------------------------
# the entry point
# ---------------------------------------------------------------------------------------------

def evaluate_space(job: Job, cons: Constraints, *, engine=None,
                   progress: Optional[Callable[[int, int], None]] = None):
    """Every feasible configuration as arrays, with the evaluation count and rejections.

    Returns ``(res, evaluated, seconds, rejected, context)`` where ``res`` maps a field name
    to one array entry per feasible configuration.
    """
    if engine is None:
        from fmest.engine import default_engine

        engine = default_engine()
    started = _time.perf_counter()
    try:
        engine.context(job)    # validates the job (raises InputError naming the field)
    except InputError:
        # a capability the job's own GPU lacks is no error of the plan, which searches other
        # GPUs: each GPU type that lacks it is rejected with the reason
        gpu = engine.registries.gpus.find(job.hardware.gpu)
        if gpu is None or hardware_refusal(job, gpu) is None:
            raise
    model = engine.resolve_model(job)
    options = _gpu_options(engine, cons)
    shardings = _shardings(engine)
    gbt = _global_batch_tokens(job, cons)
    tokens, fixed_steps = _total_tokens(job)
    steps = fixed_steps if fixed_steps is not None else (
        math.ceil(tokens / gbt) if tokens is not None else None)
    from fmest.stacks import resolve_job_stack

    ctx = dict(job=job, model=model,
               # the stack decides precision before the sharding strategy does (one rule:
               # fmest.physics.precision.resolve_precision, as the engine applies it)
               stack=resolve_job_stack(job, engine.registries.stacks),
               calib=_Calibration(engine, job, model, [o.spec.name for o in options]),
               cons=cons,
               shardings=shardings, samples=gbt // job.training.seq_len, steps=steps,
               inner=_inner_axes(shardings, sp.CHECKPOINTING, sp.MICRO_BATCHES),
               fit_factor=fit_factor(job),
               gpu_index={o.spec.name: i for i, o in enumerate(options)},
               gbt=gbt, tokens=tokens)
    rejected: dict = {}
    parts = []
    evaluated = 0
    work = [(o, n) for o in options for n in o.counts]
    for done, (opt, count) in enumerate(work, 1):
        res, n = _evaluate_count(opt, count, ctx, rejected)
        evaluated += n
        if res is not None:
            res["gpu_name"] = [opt.spec.name] * len(res["quote"])
            parts.append(res)
        if progress is not None:
            progress(done, len(work))
    merged: dict = {}
    for part in parts:
        for k, v in part.items():
            merged.setdefault(k, []).append(v)
    res = {k: (np.concatenate(v) if isinstance(v[0], np.ndarray) else sum(v, []))
           for k, v in merged.items()}
    seconds = _time.perf_counter() - started
    ctx["warnings"] = [f"the engine refused a probe ({', '.join(map(str, key))}): {msg}"
                       for key, msg in ctx["calib"].refused.items()]
    return res, evaluated, seconds, rejected, ctx


def plan(job: Job, cons: Constraints = Constraints(), *, engine=None,
         progress: Optional[Callable[[int, int], None]] = None) -> PlanResult:
    """Search the space for ``job`` under ``cons``; see the module doc."""
    if engine is None:
        from fmest.engine import default_engine

        engine = default_engine()
    res, evaluated, seconds, rejected, ctx = evaluate_space(job, cons, engine=engine,
                                                            progress=progress)
    warnings = list(ctx.get("warnings", ()))
    if ctx["steps"] is None:
        warnings.append("no workload (--dataset-tokens, --num-samples, --max-steps): plans are "
                        "ranked by step time and cost per hour")
    plans: list[Plan] = []
    if res:
        order = _order(res, cons.objective, cons.top * RECHECK_FACTOR)
        dropped = 0
        for rank, i in enumerate(order):
            method = job.options.method if rank < cons.refine else "theory"
            j = config_job(job, res, int(i), ctx["shardings"], method=method)
            p = _to_plan(engine, j, res["memory"][i], res["step"][i])
            if p is None:
                dropped += 1
                continue
            if cons.budget_usd is not None and (p.usd is None or p.usd > cons.budget_usd):
                dropped += 1
                continue
            if cons.deadline_hours is not None and p.total_seconds is not None and \
                    p.total_seconds > cons.deadline_hours * 3600:
                dropped += 1
                continue
            plans.append(p)
        if dropped:
            rejected["does not fit or breaks a limit by the full engine"] = dropped
        if plans:
            cost = np.array([p.usd if p.usd is not None else np.inf for p in plans])
            secs = np.array([p.total_seconds if p.total_seconds is not None else p.step_seconds
                             for p in plans])
            layers = pareto_layers(cost, secs)
            plans = [attrs.evolve(p, pareto=bool(lay == 0)) for p, lay in zip(plans, layers, strict=True)]
            layer_of = {id(p): int(lay) for p, lay in zip(plans, layers, strict=True)}
            plans.sort(key=lambda p: ((layer_of[id(p)],) if cons.objective == "pareto" else ())
                       + _plan_key(p, cons.objective))
            plans = plans[:cons.top]
    return PlanResult(plans=tuple(plans), evaluated=evaluated, seconds=seconds,
                      rejected=dict(sorted(rejected.items(), key=lambda kv: -kv[1])),
                      global_batch_tokens=ctx["gbt"], total_tokens=ctx["tokens"],
                      objective=cons.objective, warnings=tuple(warnings),
                      fit_confidence=job.options.fit_confidence)
