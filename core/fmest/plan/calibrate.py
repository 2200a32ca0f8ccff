"""Per-job coefficients for the vectorized planner, read from the engine itself.

The planner evaluates hundreds of thousands of layouts with numpy array formulas
(:mod:`fmest.plan.vector`). Their per-model coefficients (bytes per parameter of each kind of
state, activation bytes per token per layer, seconds of compute per token) are not re-derived
here: they are measured by asking the installed engine a handful of reference questions
("probes": one GPU, one micro-batch; then the same with tp=2, with sequence parallelism, with
two data-parallel ranks ...). The array formulas then only apply the *structure* the analytic
plugins document (ZeRO/FSDP divisors, Korthikanti's ``a + b/t`` activation split, the 1F1B
in-flight count, the pipeline bubble, ring collectives), so whatever estimator the engine's
policy chooses sets the scale and no plugin package is imported (plugins meet only in the
engine). ``tests/test_plan_vector.py`` checks the result against the full engine.
"""

from __future__ import annotations

from typing import Optional

from attrs import frozen

from fmest.errors import FmestError


@frozen(kw_only=True)
class StateBytes:
    """Unsharded per-replica state of the whole model (tp = pp = 1), allocated bytes.

    ``weights`` includes LoRA adapters; ``temporaries`` exist only in the optimizer phase.
    """

    weights: float
    master: float
    gradients: float
    optimizer: float
    temporaries: float


@frozen(kw_only=True)
class TimeCoefficients:
    """Seconds per token of one micro-batch on one GPU type at pp = cp = 1:
    ``replicated + split/tp`` for compute and memory-bound work (norms and residuals are not
    split by tp unless sequence parallel: ``membound_sp_whole/tp``), and the framework
    overhead share of the busy time."""

    compute_replicated: float
    compute_split: float
    membound_replicated: float
    membound_split: float
    membound_sp_whole: float
    last_stage_compute: float
    last_stage_membound: float
    compute_mb_share: float
    overhead_fraction: float
    #: the GEMMs' share of the compute (time_roofline metrics ``matmul_share``): the window
    #: TP and PP traffic overlaps
    matmul_share: float = 1.0
    #: host seconds to dispatch one micro-batch's eager ops: per whole model's layers (split
    #: over pipeline stages) and outside them (0 when the step never waits for the host)
    host_layers: float = 0.0
    host_outside: float = 0.0


def _mem_probe(engine, job, **sections):
    j = job.evolve(**sections)
    ctx = engine.context(j)
    est = engine.estimate_memory(j, ctx).chosen
    if est is None:
        raise FmestError(f"no memory estimate for the planner's probe job ({sections})")
    return est, ctx


def _alloc(total_bytes: float, world: int, ctx=None) -> float:
    """Allocated bytes from a reported peak (undo the allocator reserve and the context;
    ``ctx``: the probe's context, whose stack may run expandable segments)."""
    from fmest.physics.device_terms import allocated_from_reserved, cuda_context_bytes

    return allocated_from_reserved(total_bytes - cuda_context_bytes(world), expandable(ctx))


def _phase_alloc(est, phase: str, world: int, ctx) -> float:
    """Allocated bytes of one phase of a probe: the estimate's ``allocated_bytes_<phase>``
    metric where it gives one (memory_theory: exact, before the allocator reserve and the cap
    at the device), else the phase's peak with the reserve and context undone."""
    exact = (est.metrics or {}).get(f"allocated_bytes_{phase}")
    if exact is not None:
        return float(exact)
    return _alloc((est.phase_peaks_bytes or {}).get(phase, est.total_bytes), world, ctx)


def expandable(ctx) -> bool:
    """Whether the context's training stack runs the allocator with expandable segments
    (stacks.toml ``expandable_segments``)."""
    stack = ctx.transforms.stack if ctx is not None and ctx.transforms is not None else None
    return bool(stack is not None and stack.profile.expandable_segments)


def _single(**extra):
    base = {"dp": 1, "tp": 1, "pp": 1, "cp": 1, "ep": 1, "sequence_parallel": False,
            "pp_virtual_stages": 1, "pp_schedule": "1f1b", "hsdp_shard_size": None,
            "sharding": None}
    base.update(extra)
    return base


def _sharding_fields(name: str) -> dict:
    """Job fields naming a registered strategy: the ``zero_stage``/``fsdp`` spelling for the
    built-in names (what the exporters read), ``parallelism.sharding`` for any other."""
    if name.startswith("fsdp_"):
        return {"fsdp": name[len("fsdp_"):], "zero_stage": 0, "sharding": None}
    if name in ("zero0", "zero1", "zero2", "zero3"):
        return {"fsdp": "none", "zero_stage": int(name[len("zero"):]), "sharding": None}
    return {"fsdp": "none", "zero_stage": 0, "sharding": name}


def state_bytes(engine, job, sharding: str, offload: str) -> StateBytes:
    """Probe the state bytes of ``job`` under one sharding strategy and offload choice."""
    hw = {"gpus_per_node": None, "nodes": 1}
    par = dict(_single(**_sharding_fields(sharding)), cpu_offload=offload)
    tr = {"micro_batch_size": 1, "grad_accum_steps": 2, "activation_checkpointing": "full"}
    est, probe_ctx = _mem_probe(engine, job, parallelism=par, training=tr, hardware=hw)
    comp = est.components
    # a DPO/KTO reference copy is the policy's weights again, sharded and staged like them
    weights = comp.get("weights", 0) + comp.get("lora_adapters", 0) \
        + comp.get("reference_weights", 0)
    master = comp.get("master_weights", 0)
    grads = comp.get("gradients", 0)
    opt = comp.get("optimizer_states", 0)
    peaks = est.phase_peaks_bytes or {}
    temps = 0.0
    if "optimizer" in peaks:
        temps = max(0.0, _phase_alloc(est, "optimizer", 1, probe_ctx)
                    - (weights + master + grads + opt))
    return StateBytes(weights=float(weights), master=float(master), gradients=float(grads),
                      optimizer=float(opt), temporaries=float(temps))


def _act_slope(engine, job, par: dict, ckpt: str, accum: int = 2) -> float:
    """Bytes per token of one micro-batch: the slope of the backward-phase peak between two
    micro-batch sizes (``accum`` > 1 keeps the accumulated gradients in every candidate, so
    the saved activations decide the backward peak)."""
    seq = job.training.seq_len / par.get("cp", 1)
    # large enough that the saved activations decide the backward peak (at small batches the
    # end-of-backward candidate, all gradients plus one layer, can win and bend the line)
    low, high = 8, 16
    peaks = []
    for mb in (low, high):
        est, ctx = _mem_probe(engine, job, parallelism=par, hardware={"gpus_per_node": None,
                                                                      "nodes": 1},
                              training={"micro_batch_size": mb, "grad_accum_steps": accum,
                                        "activation_checkpointing": ckpt})
        peaks.append(_phase_alloc(est, "backward", ctx.layout.world_size, ctx))
    return max(0.0, (peaks[1] - peaks[0]) / ((high - low) * seq))


def activation_slope(engine, job, strategy: str, ckpt: str, *, tp: int, sp: bool,
                     pp: int, vstages: int, ep: int = 1) -> float:
    """Bytes one more token of micro-batch adds to the per-GPU backward peak of the busiest
    stage of a layout (tp, sequence parallel, pp stages of ``vstages`` chunks, the pipeline
    full: ``pp x vstages`` micro-batches in flight under 1F1B/interleaved).
    ``strategy`` names the registered sharding strategy to probe with (one standing for every
    strategy with the same ``native_tensor_parallel``: PyTorch-native TP saves differently)."""
    par = dict(_single(**_sharding_fields(strategy)), tp=tp, sequence_parallel=sp,
               pp=pp, pp_virtual_stages=vstages, ep=ep, dp=ep,
               pp_schedule="interleaved" if vstages > 1 else "1f1b")
    return _act_slope(engine, job, par, ckpt, accum=max(2, pp * vstages))


def _time_probe(engine, job, gpu: str, ckpt: str, tp: int, sp: bool, pp: int = 1,
                mb: int = 1, accum: int = 1):
    j = job.evolve(parallelism=_single(fsdp="none", zero_stage=0, cpu_offload="none", tp=tp,
                                       sequence_parallel=sp, pp=pp),
                   hardware={"gpu": gpu, "gpus_per_node": None, "nodes": 1},
                   training={"micro_batch_size": mb, "grad_accum_steps": accum,
                             "activation_checkpointing": ckpt},
                   workload={"max_steps": 1, "dataset_tokens": None})
    report = engine.estimate(j, quantities=("memory", "time"))
    t = report.time
    if t is None or not t.step_seconds:
        return None
    parts = dict(t.breakdown)
    # Megatron-Core MoE dispatcher syncs: the time_roofline estimator reports their wait inside
    # framework_overhead (metrics["moe_sync_wait"]); the arrays compute it per configuration
    # (vector.moe_sync_wait_seconds), so it is not part of the overhead share the probe reads
    parts["framework_overhead"] = parts.get("framework_overhead", 0.0) \
        - t.metrics.get("moe_sync_wait", 0.0)
    # a preference step's no-grad passes (fmest.objectives): their GEMM/attention and
    # memory-bound shares scale with the tokens like the trained passes' (time_roofline's
    # metrics); on one GPU they have no gathers of their own
    parts.pop("reference_forward", None)
    for part in ("compute", "memory_bound"):
        parts[part] = parts.get(part, 0.0) + t.metrics.get(f"reference_forward_{part}", 0.0)
    return parts, float(j.training.seq_len * mb), float(t.metrics.get("matmul_share", 1.0))


#: Sequence length of the host-dispatch probe: so little GPU work that the step is the host's
#: time to dispatch the eager ops, which does not depend on the sequence (time_roofline
#: ``eager_host_seconds``: ops per layer x layers x micro-batches).
HOST_PROBE_SEQ_LEN = 8
#: Micro-batches of that probe: enough that the optimizer step, paid once, stays below the
#: host time of the micro-batches.
HOST_PROBE_MICRO_BATCHES = 64


def _host_seconds(engine, job, gpu: str, ckpt: str, pp: int) -> float:
    """Host dispatch seconds of one micro-batch on a stage of ``pp``, read as the step time of
    a job with almost no GPU work; 0 when the engine does not make that step host-bound (a
    compiled or fused stack)."""
    probe = job.evolve(training={"seq_len": HOST_PROBE_SEQ_LEN})
    got = _time_probe(engine, probe, gpu, ckpt, 1, False, pp=pp,
                      accum=HOST_PROBE_MICRO_BATCHES)
    if got is None:
        return 0.0
    parts = got[0]
    busy = sum(v for k, v in parts.items() if k != "framework_overhead")
    over = parts.get("framework_overhead", 0.0)
    # host-bound: the overhead part is the host's excess over the GPU's work, far above the
    # proportional framework overhead
    return sum(parts.values()) / HOST_PROBE_MICRO_BATCHES if busy and over > busy else 0.0


def host_coefficients(engine, job, gpu: str, ckpt: str) -> tuple[float, float]:
    """(host seconds per micro-batch for the whole model's layers, outside the layers), from
    host-bound probes at pp = 1 and 2: ``h(pp) = layers / pp + outside``."""
    one = _host_seconds(engine, job, gpu, ckpt, 1)
    if not one or engine.resolve_model(job).num_layers < 2:
        return one, 0.0
    two = _host_seconds(engine, job, gpu, ckpt, 2)
    if not two:
        return one, 0.0
    return max(0.0, 2 * (one - two)), max(0.0, 2 * two - one)


def time_coefficients(engine, job, gpu: str, ckpt: str,
                      tp_probe: int) -> Optional[TimeCoefficients]:
    """Probe compute and memory-bound seconds per token on one GPU of type ``gpu`` at tp = 1
    and tp = ``tp_probe`` (with and without sequence parallelism)."""
    one = _time_probe(engine, job, gpu, ckpt, 1, False)
    if one is None:
        return None
    parts, tokens, matmul_share = one
    busy = sum(v for k, v in parts.items() if k != "framework_overhead")
    overhead = parts.get("framework_overhead", 0.0) / busy if busy else 0.0
    c1 = parts.get("compute", 0.0) / tokens
    m1 = parts.get("memory_bound", 0.0) / tokens
    # the last of two stages runs half the layers plus the output head and loss
    staged = _time_probe(engine, job, gpu, ckpt, 1, False, pp=2) \
        if engine.resolve_model(job).num_layers >= 2 else None
    four = _time_probe(engine, job, gpu, ckpt, 1, False, mb=4)
    if four is not None:   # a host-bound probe inflates the overhead share: take the least
        busy4 = sum(v for k, v in four[0].items() if k != "framework_overhead")
        if busy4:
            overhead = min(overhead, four[0].get("framework_overhead", 0.0) / busy4)
    try:
        host_layers, host_outside = host_coefficients(engine, job, gpu, ckpt)
    except FmestError:
        host_layers = host_outside = 0.0
    c4 = four[0].get("compute", 0.0) / four[1] if four is not None else c1
    # c(mb) = c_inf + (c1 - c_inf)/mb through c(1) and c(4)
    mb_share = min(1.0, max(0.0, (c1 - c4) * 4 / 3 / c1)) if c1 > 0 else 0.0
    head_c = head_m = 0.0
    if staged is not None:
        head_c = max(0.0, 2 * staged[0].get("compute", 0.0) / staged[1] - c1)
        head_m = max(0.0, 2 * staged[0].get("memory_bound", 0.0) / staged[1] - m1)
    if tp_probe > 1:
        at_tp = _time_probe(engine, job, gpu, ckpt, tp_probe, False)
        at_sp = _time_probe(engine, job, gpu, ckpt, tp_probe, True)
        c2 = at_tp[0].get("compute", 0.0) / tokens
        m2 = at_tp[0].get("memory_bound", 0.0) / tokens
        msp = at_sp[0].get("memory_bound", 0.0) / tokens
        c_split = max(0.0, (c1 - c2) * tp_probe / (tp_probe - 1))
        m_split = max(0.0, (m1 - m2) * tp_probe / (tp_probe - 1))
        return TimeCoefficients(compute_replicated=max(0.0, c1 - c_split),
                                compute_split=c_split,
                                membound_replicated=max(0.0, m1 - m_split),
                                membound_split=m_split, membound_sp_whole=msp * tp_probe,
                                last_stage_compute=head_c, last_stage_membound=head_m,
                                compute_mb_share=mb_share, overhead_fraction=overhead,
                                host_layers=host_layers, host_outside=host_outside,
                                matmul_share=matmul_share)
    return TimeCoefficients(compute_replicated=0.0, compute_split=c1, membound_replicated=0.0,
                            membound_split=m1, membound_sp_whole=m1,
                            last_stage_compute=head_c, last_stage_membound=head_m,
                            compute_mb_share=mb_share, overhead_fraction=overhead,
                            host_layers=host_layers, host_outside=host_outside,
                            matmul_share=matmul_share)


def context_parallel_core(engine, job, gpu: str, ckpt: str, tp: int, cp: int,
                          gpus_per_node: int, sp: bool = False) -> tuple[float, float]:
    """(intercept, slope per micro-batch) of the seconds one micro-batch spends in compute,
    memory-bound work and exposed ring-attention traffic with ``cp`` context ranks, from the
    engine at micro-batches 1 and 4 (the ring's exposure depends on the local attention time,
    so it is probed rather than rebuilt; ``gpus_per_node`` decides whether the ring crosses
    nodes)."""
    world = tp * cp
    gpn = min(world, gpus_per_node)

    def core(mb: int) -> float:
        j = job.evolve(parallelism=_single(fsdp="none", zero_stage=0, cpu_offload="none", tp=tp,
                                           cp=cp, dp=1, sequence_parallel=sp),
                       hardware={"gpu": gpu, "gpus_per_node": gpn, "nodes": world // gpn},
                       training={"micro_batch_size": mb, "grad_accum_steps": 1,
                                 "activation_checkpointing": ckpt},
                       workload={"max_steps": 1, "dataset_tokens": None})
        t = engine.estimate(j, quantities=("memory", "time")).time
        parts = t.breakdown if t is not None else {}
        return sum(parts.get(k, 0.0) for k in ("compute", "memory_bound", "communication_cp"))

    one, four = core(1), core(4)
    slope = (four - one) / 3.0
    return one - slope, slope


def optimizer_seconds_per_param(engine, job, gpu: str, sharding: str) -> float:
    """Optimizer-update seconds per trainable parameter on one GPU under ``sharding`` (its
    precision policy sets the bytes each update moves)."""
    j = job.evolve(parallelism=dict(_single(**_sharding_fields(sharding)), cpu_offload="none"),
                   hardware={"gpu": gpu, "gpus_per_node": None, "nodes": 1},
                   training={"micro_batch_size": 1, "grad_accum_steps": 1},
                   workload={"max_steps": 1, "dataset_tokens": None})
    report = engine.estimate(j, quantities=("memory", "time"))
    if report.time is None:
        return 0.0
    from fmest.physics.counting import trainable_params

    trainable = float(trainable_params(report.context.model, j.training)) or 1.0
    return report.time.breakdown.get("optimizer_step", 0.0) / trainable
