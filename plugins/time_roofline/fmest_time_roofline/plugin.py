"""The ``time_roofline`` plugin: analytic step time, total time and throughput.

One optimizer step on the most loaded GPU is ``grad_accum`` micro-batches of

* matmuls (each GEMM through a roofline at a shape-dependent fraction of peak) and the
  attention core (at the fused-attention efficiency of the GPU),
* memory-bound work (norms, activations, RoPE, loss, QLoRA dequant, fp8 casts) at HBM speed,
* tensor-parallel, expert-parallel and pipeline point-to-point communication (not overlapped),
* context-parallel ring attention (all-gathered K,V overlapping the local block, fp32 dK,dV
  rotation, eager merges; formulas.ring_attention_costs),

plus the pipeline bubble, the exposed part of data-parallel communication (overlapped with
compute up to the compute time), the optimizer update, host offload traffic and a framework
overhead share. Formulas and constants: :mod:`fmest_time_roofline.formulas` and
``docs/time_model.md``. No torch import on this path.
"""

from __future__ import annotations

import math
from typing import Optional

from fmest.counting import lora_modules, trainable_params
from fmest.errors import InputError
from fmest.estimates import Provenance, TimeEstimate, TokensEstimate
from fmest.hookspecs import hookimpl
from fmest.precision import resolve_precision

from fmest_time_roofline import formulas as F

BASIS = "analytic"


def _grad_reduce_bytes(training, sharding) -> float:
    """Gradient bytes on the wire: fp32 under amp/master (FSDP reduce_dtype fp32, Megatron
    fp32 grad all-reduce), the compute dtype under pure precision (the precision rule is
    core's :func:`fmest.precision.resolve_precision`, shared with the memory plugin)."""
    return 4.0 if resolve_precision(training, sharding) in ("amp", "master") else F.dtype_bytes(
        "bf16" if training.dtype == "fp8" else training.dtype)


def _optimizer_bytes(training, optimizer, sharding) -> dict:
    prec = resolve_precision(training, sharding)
    act = F.dtype_bytes("bf16" if training.dtype == "fp8" else training.dtype)
    if prec == "pure":
        param, grad, master, state = act, act, 0.0, act
    elif prec == "master":
        param, grad, master, state = act, act, 4.0, 4.0
    else:  # amp
        param, grad, master, state = 4.0, 4.0, 0.0, 4.0
    if optimizer.state_bytes_per_element is not None:
        state = optimizer.state_bytes_per_element + optimizer.quant_overhead_bytes_per_element
    impl = training.optimizer_impl if training.optimizer_impl != "auto" else optimizer.default_impl
    return dict(states=optimizer.states, state_bytes=state, param_bytes=param, grad_bytes=grad,
                master_bytes=master, impl=impl)


def _activation_bytes(memory, model, tokens: float, layers: float, act_bytes: float) -> float:
    """Saved-activation bytes of one micro-batch (from the memory estimate when it itemises
    them, else 34 s b h per layer, Korthikanti et al. 2022 eq. 1 without the s^2 term)."""
    if memory is not None:
        total = sum(v for k, v in memory.components.items() if "activation" in k.lower())
        if total > 0:
            return float(total)
    return 34.0 / 2.0 * act_bytes * tokens * model.hidden_size * layers


def _backward_prefetch(par) -> str:
    """``parallelism.fsdp_backward_prefetch``: ``pre`` (FSDP2's implicit prefetch; FSDP1
    ``BackwardPrefetch.BACKWARD_PRE``, the PyTorch/accelerate default), ``post``
    (``BACKWARD_POST``, Composer/llm-foundry's default, composer.utils.FSDPConfig) or
    ``none``."""
    return par.fsdp_backward_prefetch


def workload_tokens(job, model) -> tuple[Optional[float], str]:
    """Tokens the run trains on (epochs included) and how they were obtained; ``None`` when
    the job has no workload."""
    w = job.workload
    if w.dataset_tokens is not None:
        return w.dataset_tokens * w.epochs, f"dataset_tokens {w.dataset_tokens:.4g} x epochs {w.epochs:g}"
    if w.num_samples is not None:
        avg = w.avg_seq_len if w.avg_seq_len is not None else job.training.seq_len
        return w.num_samples * avg * w.epochs, (f"num_samples {w.num_samples} x avg_seq_len "
                                                f"{avg:g} x epochs {w.epochs:g}")
    if w.dataset_path:
        from fmest_time_roofline.dataset import count_dataset_tokens

        counted = count_dataset_tokens(w.dataset_path, model=model, model_ref=job.model)
        return counted.tokens * w.epochs, (f"dataset {w.dataset_path}: {counted.tokens:,} tokens "
                                           f"({counted.method}) x epochs {w.epochs:g}")
    return None, ""


def step_breakdown(job, ctx, memory=None) -> Optional[dict]:
    """Seconds of one optimizer step by component, with FLOPs and notes.

    Returns ``None`` when the GPU table lacks the peak FLOP/s or HBM bandwidth needed.
    """
    tr, par, lay, gpu, model = job.training, job.parallelism, ctx.layout, ctx.gpu, ctx.model
    notes: list[str] = []
    lin_dtype = tr.dtype
    act_dtype = "bf16" if tr.dtype == "fp8" else tr.dtype
    derate = F.power_cap_derate(gpu.name)
    lin_peak = gpu.peak_flops_per_s(lin_dtype)
    attn_peak = gpu.peak_flops_per_s(act_dtype if act_dtype != "fp32" else "fp32")
    if not lin_peak or not attn_peak or not gpu.hbm_bytes_per_s:
        return None
    lin_peak *= derate
    attn_peak *= derate
    hbm = gpu.hbm_bytes_per_s
    if derate != 1.0:
        notes.append(f"{gpu.name}: FLOP peaks derated x{derate:.3f} for its power cap")

    mfu_override = job.options.mfu
    if mfu_override is not None:
        if mfu_override > 1:
            raise InputError("options.mfu", "is a fraction of peak between 0 and 1",
                             value=mfu_override)
        lin_frac, half_dim = mfu_override, 0.0
        attn_eff = attn_eff_bwd = mfu_override
        notes.append(f"--mfu {mfu_override:g} replaces the matmul and attention efficiency "
                     "(no GEMM-shape fall-off); memory-bound work and communication are added")
    else:
        lin_frac = F.mamf_fraction(gpu.name, lin_dtype)
        half_dim = F.GEMM_HALF_SATURATION_DIM
        attn_eff = F.attention_efficiency(gpu.name, "fwd")
        attn_eff_bwd = F.attention_efficiency(gpu.name, "bwd")

    tp, pp, cp, ep, dp = lay.tp, lay.pp, lay.cp, lay.ep, lay.dp
    b, s, m = tr.micro_batch_size, tr.seq_len, tr.grad_accum_steps
    T = b * s / cp  # tokens per micro-batch on one GPU
    act_b = F.dtype_bytes(act_dtype)
    lin_b = F.dtype_bytes(lin_dtype)
    full = tr.technique == "full"
    ckpt = tr.activation_checkpointing
    stage_layers = model.num_layers / pp

    def gemm(mm, kk, nn):
        return F.gemm_seconds(mm, kk, nn, peak_flops_per_s=lin_peak, max_fraction=lin_frac,
                              hbm_bytes_per_s=hbm, bytes_per_element=lin_b, half_dim=half_dim)

    # ---- matmuls of one micro-batch on the slowest (last) pipeline stage -------------------
    fwd_mm = bwd_mm = rec_mm = 0.0
    extra_bytes = 0.0  # QLoRA dequant (bitsandbytes kernels, never fused)
    fp8_cast_bytes = 0.0  # float8 amax + cast (fused by torch.compile)
    last_mm_names = set()
    for lin in model.linears:
        if lin.kind in ("mlp", "expert", "shared_expert") and lin.out_features == model.hidden_size \
                and lin.in_features != model.hidden_size:
            last_mm_names.add((lin.name, lin.kind))
    base_params_local = 0.0
    for lin in model.linears:
        if lin.kind == "head":
            continue
        k, n = lin.in_features, lin.out_features
        if tp > 1 and lin.kind != "router":
            if n >= k:
                n = n / tp
            else:
                k = k / tp
        if lin.kind == "expert" and lin.copies > 0:
            rows = T * lin.active_copies * ep / lin.copies
            count = lin.layers / pp * lin.copies / ep
        else:
            rows = T * lin.active_copies
            count = lin.layers / pp
        t = gemm(rows, k, n) * count
        fwd_mm += t
        bwd_mm += t * (2.0 if full else 1.0)
        if ckpt == "full" and (lin.name, lin.kind) not in last_mm_names:
            rec_mm += t
        elems = (rows * k + k * n + rows * n) * count
        if lin_dtype == "fp8":
            fp8_cast_bytes += F.FP8_CAST_BYTES_PER_ELEMENT * elems * (3 if full else 2)
        if tr.technique == "qlora":
            uses = 2 + (1 if ckpt == "full" else 0)
            extra_bytes += F.QLORA_DEQUANT_BYTES_PER_PARAM * k * n * count * uses
        base_params_local += k * n * count
    # output head: last stage only, vocab split over tp; never recomputed
    for k, n in F.head_linears(model):
        t = gemm(T, k, n / tp)
        fwd_mm += t
        bwd_mm += t * (2.0 if full else 1.0)
    # LoRA adapters (trainable, tiny rank: the roofline makes them memory-bound)
    lora_mods = []
    if not full:
        lora_mods = lora_modules(model, tr)
        r = tr.lora_rank
        for mod in lora_mods:
            rows = T * mod.active_copies
            t = (gemm(rows, mod.in_features, r) + gemm(rows, r, mod.out_features)) \
                * mod.layers / pp * (mod.copies / mod.active_copies if mod.kind == "expert" else 1)
            fwd_mm += t
            bwd_mm += 2 * t
            if ckpt == "full":
                rec_mm += t

    # ---- attention core -------------------------------------------------------------------
    eager = tr.attention == "eager"
    attn_fwd_flops = F.attention_forward_flops_per_token(model, s, causal=not eager) \
        * T / tp / pp
    attn_bwd_factor = 2.0 if eager else F.FLASH_BACKWARD_FLOPS_FACTOR
    if eager:
        d = model.qk_head_dim or model.head_dim
        eff = (lin_frac if act_dtype == lin_dtype else F.mamf_fraction(gpu.name, act_dtype)) \
            * F.gemm_shape_efficiency(s, d, s, half_dim)
        eff_bwd = eff
    else:
        eff, eff_bwd = attn_eff, attn_eff_bwd
    attn_fwd = attn_fwd_flops / (attn_peak * eff)
    attn_bwd = attn_fwd_flops * attn_bwd_factor / (attn_peak * eff_bwd)
    attn_rec = attn_fwd if ckpt in ("full", "selective") else 0.0

    # ---- memory-bound work ------------------------------------------------------------------
    ew = F.elementwise_bytes_per_token_per_layer(model, act_bytes=act_b, tp=tp,
                                                  sequence_parallel=par.sequence_parallel)
    mem_bytes = ew * T * stage_layers
    if ckpt == "full":
        mem_bytes += ew * T * stage_layers / (1.0 + F.ELEMENTWISE_BACKWARD_FACTOR)
    mem_bytes += F.loss_bytes_per_token(model.vocab_size, tr.loss) * T / tp
    if eager:
        scores = F.eager_attention_bytes_per_token_per_layer(model.num_attention_heads / tp, s)
        mem_bytes += scores * T * stage_layers * (1.0 + (1.0 / 3.0 if ckpt != "none" else 0.0))
    if m > 1:  # gradient accumulation: read-add-write the gradient buffer per micro-batch
        grad_local = (trainable_params(model, tr) / (tp * pp))
        mem_bytes += 3 * _grad_reduce_bytes(tr, ctx.sharding) * grad_local * (m - 1) / m
    mem_t = F.memory_bound_seconds(mem_bytes, hbm, compiled=tr.compile) \
        + F.memory_bound_seconds(extra_bytes, hbm, compiled=False) \
        + F.memory_bound_seconds(fp8_cast_bytes, hbm, compiled=tr.compile)

    compute_mb = fwd_mm + bwd_mm + rec_mm + attn_fwd + attn_bwd + attn_rec
    fwd_share = (fwd_mm + attn_fwd) / max(compute_mb, 1e-30)

    # ---- per-micro-batch communication (not overlapped, except CP) ---------------------------
    gpn = lay.gpus_per_node

    def bw_of(size, stride):
        inter = F.group_is_inter_node(size, stride, gpn)
        return inter, F.link_bytes_per_s(gpu, inter_node=inter, size=size,
                                         nodes=F.group_nodes(size, stride, gpn))

    tp_t = ep_t = pp_t = cp_t = 0.0
    if tp > 1:
        inter, bw = bw_of(tp, 1)
        n_pass = 2 + (1 if ckpt == "full" else 0)  # fwd + bwd (+ recompute) per layer
        act_elems = T * model.hidden_size
        if par.sequence_parallel:
            # each all-reduce becomes an all-gather + a reduce-scatter (Korthikanti et al.
            # 2022, §4.2.2), 2 of each per pass per layer; float8 TP gathers fp8 (formulas
            # tp_all_gather_bytes_per_element), reductions stay in the activation dtype
            ag_b = F.tp_all_gather_bytes_per_element(lin_dtype, act_b)
            per_pass = 2 * (F.all_gather_seconds(act_elems * ag_b, tp, bw, inter)
                            + F.reduce_scatter_seconds(act_elems * act_b, tp, bw, inter))
        else:
            per_pass = 2 * F.all_reduce_seconds(act_elems * act_b, tp, bw, inter)
        tp_t = n_pass * stage_layers * per_pass
    if ep > 1 and model.is_moe:
        moe_layers = (model.num_moe_layers or model.num_layers) / pp
        inter, bw = bw_of(ep, tp * cp)
        n_a2a = 4 + (2 if ckpt == "full" else 0)
        ep_t = n_a2a * moe_layers * F.all_to_all_seconds(
            T * model.experts_per_token * model.hidden_size * act_b, ep, bw, inter)
    if pp > 1:
        inter = F.group_is_inter_node(pp, tp * cp * dp, gpn)
        bw = F.link_bytes_per_s(gpu, inter_node=inter, size=2, nodes=2)  # one hop
        pp_t = 2 * F.p2p_seconds(T * model.hidden_size * act_b / tp, bw, inter)
    if cp > 1:  # ring attention (PyTorch context_parallel): formulas.ring_attention_costs
        g_inter, g_bw = bw_of(cp, tp)
        p_inter = F.group_is_inter_node(2, tp, gpn)
        p_bw = F.link_bytes_per_s(gpu, inter_node=p_inter, size=2, nodes=2)
        ring = F.ring_attention_costs(
            cp=cp, tokens=T, q_heads=model.num_attention_heads / tp,
            head_dim=model.qk_head_dim or model.head_dim, act_bytes=act_b,
            fwd_seconds=attn_fwd / stage_layers, bwd_seconds=attn_bwd / stage_layers,
            recompute=ckpt in ("full", "selective"),
            gather_bytes_per_s=g_bw, p2p_bytes_per_s=p_bw, gather_inter_node=g_inter,
            p2p_inter_node=p_inter)
        cp_t = ring["exposed_seconds"] * stage_layers  # per layer x layers of the stage
        # the ring merges run in eager PyTorch (a graph break under torch.compile)
        mem_t += F.memory_bound_seconds(ring["memory_bytes"] * stage_layers, hbm)

    per_mb = compute_mb + mem_t + tp_t + ep_t + pp_t + cp_t
    compute = m * compute_mb
    memory_bound = m * mem_t
    bubble = F.pipeline_bubble_fraction(pp, m, schedule=par.pp_schedule,
                                        virtual_stages=par.pp_virtual_stages) * m * per_mb

    # ---- data-parallel communication (overlapped with compute up to the compute time) -------
    sh = ctx.sharding
    group = dp * cp  # cp ranks hold the same weights and reduce gradients with dp
    stride = tp
    total_params = model.param_counts().total + (0 if full else sum(
        tr.lora_rank * (mm.in_features + mm.out_features) * mm.layers * mm.copies for mm in lora_mods))
    params_local = total_params / (tp * pp)
    train_local = trainable_params(model, tr) / (tp * pp)
    gbytes = _grad_reduce_bytes(tr, ctx.sharding) * train_local
    pbytes = act_b * params_local
    dp_t = 0.0
    fwd_mb = per_mb * fwd_share
    bwd_mb = per_mb - fwd_mb
    if group > 1:
        shard_n = sh.shard_group_size(dp=group, gpus_per_node=gpn,
                                      hsdp_shard_size=par.hsdp_shard_size) if sh.shards else 1
        shard_inter, bw_shard = bw_of(shard_n, stride)
        tail = 1.0 / max(1.0, stage_layers)  # first gather / last reduce cannot overlap
        if not sh.shards or sh.grad_collective == "all_reduce" and "gradients" not in sh.shards:
            inter, bw = bw_of(group, stride)
            ar = F.all_reduce_seconds(gbytes, group, bw, inter)
            dp_t = F.exposed_comm_seconds(ar * (1 - tail), bwd_mb) + ar * tail  # DDP buckets
            if "optimizer" in sh.shards:  # ZeRO-1: updated parameters all-gathered after the step
                dp_t += F.all_gather_seconds(pbytes, group, bw, inter)
        else:
            replicas = group // shard_n
            rs = F.reduce_scatter_seconds(gbytes, shard_n, bw_shard, shard_inter)
            if replicas > 1:  # HSDP: all-reduce the gradient shard across replicas
                inter_r, bw_r = bw_of(replicas, stride * shard_n)
                rs += F.all_reduce_seconds(gbytes / shard_n, replicas, bw_r, inter_r)
            ag = F.all_gather_seconds(pbytes, shard_n, bw_shard, shard_inter)
            if sh.param_gather:  # ZeRO-3 / FULL_SHARD: gather for forward and for backward
                # recompute under checkpointing reuses the backward gather of its unit
                ag_fwd = ag
                if _backward_prefetch(par) in ("post", "none"):
                    # FSDP1 BACKWARD_POST (Composer's default): the next unit's all-gather is
                    # issued after the current unit's gradients, so the backward gathers wait
                    # in line; only the reduce-scatter overlaps the next unit's backward.
                    # Without prefetch ("none") the gathers are no better hidden.
                    per_mb_exposed = F.exposed_comm_seconds(ag_fwd * (1 - tail), fwd_mb) + ag \
                        + F.exposed_comm_seconds(rs * (1 - tail), bwd_mb) + (ag_fwd + rs) * tail
                else:
                    per_mb_exposed = F.exposed_comm_seconds(ag_fwd * (1 - tail), fwd_mb) \
                        + F.exposed_comm_seconds((ag + rs) * (1 - tail), bwd_mb) \
                        + (ag_fwd + ag + rs) * tail
                dp_t = m * per_mb_exposed
            elif "parameters" in sh.shards:  # SHARD_GRAD_OP: gather once per forward
                dp_t = m * (F.exposed_comm_seconds(ag * (1 - tail), fwd_mb)
                            + F.exposed_comm_seconds(rs * (1 - tail), bwd_mb) + (ag + rs) * tail)
            else:  # ZeRO-2: reduce-scatter per micro-batch, gather updated params per step
                dp_t = m * (F.exposed_comm_seconds(rs * (1 - tail), bwd_mb) + rs * tail) + ag

    # ---- optimizer step and offload -----------------------------------------------------------
    opt_shard = 1
    if "optimizer" in sh.shards and group > 1:
        opt_shard = sh.shard_group_size(dp=group, gpus_per_node=gpn,
                                        hsdp_shard_size=par.hsdp_shard_size)
    opt_params = train_local / opt_shard
    ob = _optimizer_bytes(tr, ctx.optimizer, ctx.sharding)
    offload = 0.0
    if par.cpu_offload in ("optimizer", "params"):
        # grads down, params up over PCIe; the update runs on the host CPUs of the node
        offload += F.pcie_seconds(opt_params * (ob["grad_bytes"] + act_b), gpu)
        opt_t = opt_params * min(gpn, lay.world_size) / F.CPU_ADAM_PARAMS_PER_S_PER_NODE
        if par.cpu_offload == "params":  # parameters stream in for forward and backward
            offload += m * F.pcie_seconds(2 * pbytes / max(1, opt_shard), gpu)
        notes.append("CPU offload: optimizer update on the host CPU (ZeRO-Offload CPU-Adam rate)")
    else:
        opt_t = F.memory_bound_seconds(opt_params * F.optimizer_update_bytes_per_param(**ob), hbm)
    if tr.activation_offload:
        acts = (act_b * T * model.hidden_size * stage_layers if ckpt == "full"  # layer inputs
                else _activation_bytes(memory, model, T, stage_layers, act_b))
        pcie = 2 * F.pcie_seconds(acts, gpu)  # out in forward, back in backward (own streams)
        offload += m * max(0.0, pcie - compute_mb)

    parts = {
        "compute": compute,
        "memory_bound": memory_bound,
        "communication_tp": m * tp_t,
        "communication_ep": m * ep_t,
        "communication_pp": m * pp_t,
        "communication_cp": m * cp_t,
        "communication_dp": dp_t,
        "pipeline_bubble": bubble,
        "optimizer_step": opt_t,
        "offload": offload,
    }
    busy = sum(parts.values())
    parts["framework_overhead"] = busy * F.FRAMEWORK_OVERHEAD_FRACTION \
        / (1.0 - F.FRAMEWORK_OVERHEAD_FRACTION)
    step = sum(parts.values())

    fl = F.training_flops_per_token(model, seq_len=s, technique=tr.technique,
                                    lora_modules=lora_mods, lora_rank=tr.lora_rank,
                                    checkpointing=ckpt)
    tokens_per_step = b * m * dp * s
    nominal_peak = gpu.peak_flops_per_s(lin_dtype)
    model_flops = fl["model"] * tokens_per_step
    hw_flops = fl["hardware"] * tokens_per_step
    mfu = model_flops / (step * lay.world_size * nominal_peak)
    hfu = hw_flops / (step * lay.world_size * nominal_peak)
    return {"breakdown": parts, "step_seconds": step, "tokens_per_step": tokens_per_step,
            "samples_per_step": b * m * dp, "flops_per_step": model_flops,
            "hardware_flops_per_step": hw_flops, "mfu": mfu, "hfu": hfu, "notes": notes}


@hookimpl
def fmest_estimate_time(job, ctx, memory):
    """Roofline step time (see module doc); total time from the job's workload."""
    res = step_breakdown(job, ctx, memory)
    if res is None:
        return None
    notes = list(res["notes"])
    total_steps = total_seconds = None
    if job.workload.max_steps is not None:
        total_steps = float(job.workload.max_steps)
        notes.append(f"total steps = max_steps {job.workload.max_steps}")
    else:
        tokens, how = workload_tokens(job, ctx.model)
        if tokens is not None:
            total_steps = float(math.ceil(tokens / res["tokens_per_step"]))
            notes.append(f"total steps = ceil({how} / {res['tokens_per_step']:,} tokens per step "
                         "(micro_batch x grad_accum x dp x seq_len, packed sequences))")
    if total_steps is not None:
        total_seconds = total_steps * res["step_seconds"]
    return TimeEstimate(
        step_seconds=res["step_seconds"],
        breakdown={k: v for k, v in res["breakdown"].items()
                   if v > 0 or k in ("compute", "memory_bound")},
        provenance=Provenance(basis=BASIS, detail="roofline: GEMM-shape matmul efficiency, HBM "
                              "for memory-bound work, ring/tree collectives; docs/time_model.md"),
        mfu=res["mfu"], hfu=res["hfu"], flops_per_step=res["flops_per_step"],
        total_seconds=total_seconds, total_steps=total_steps, notes=tuple(notes))


@hookimpl
def fmest_estimate_tokens(job, ctx, time):
    """Throughput implied by the chosen time estimate: tokens per step / step seconds."""
    if time is None or not time.step_seconds:
        return None
    tr, lay = job.training, ctx.layout
    samples = tr.micro_batch_size * tr.grad_accum_steps * lay.dp
    tokens = samples * tr.seq_len
    tps = tokens / time.step_seconds
    return TokensEstimate(
        tokens_per_second=tps, tokens_per_second_per_gpu=tps / lay.world_size,
        provenance=Provenance(basis=time.provenance.basis,
                              detail=f"{tokens:,} tokens per step / step seconds"),
        samples_per_second=samples / time.step_seconds, mfu=time.mfu, hfu=time.hfu)
