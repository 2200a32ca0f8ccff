"""The ``time_roofline`` estimator: analytic step time, total time and throughput (the plugin's
hooks are in :mod:`fmest_time_roofline.plugin`).

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

import functools
import math
from typing import Optional

import attrs
from attrs import frozen

from fmest.errors import InputError
from fmest.estimates import ACTIVATION_COMPONENTS, Provenance, TimeEstimate, TokensEstimate
from fmest.job import expert_tp_of
from fmest.models.images import vlm_sequence_len
from fmest.objectives import no_grad_calls, sequences_per_sample
from fmest.physics.counting import (
    lora_modules,
    quantized_base,
    tokens_per_sample,
    total_params,
    trainable_params,
)
from fmest.physics.time_constants import host_seconds_per_op
from fmest.stacks import (
    fp32_main_grads,
    packed_attention_of,
    scores_bytes,
    wgrad_accumulation_fused,
)
from fmest.stacks import padding_of as stacks_padding_of
from fmest.transforms import CommunicationPlan, Transforms, transforms_of
from fmest_time_roofline import formulas as F

BASIS = "analytic"
#: ``ModelSpec.model_type`` of a ``--params N`` model (fmest.models.hf.spec_from_param_count)
WEIGHTS_ONLY_MODEL_TYPE = "weights_only"
_COLLECTIVE_SECONDS = {"all_reduce": F.all_reduce_seconds,
                       "reduce_scatter": F.reduce_scatter_seconds,
                       "all_gather": F.all_gather_seconds,
                       "all_to_all": F.all_to_all_seconds}
_REDUCTIONS = ("all_reduce", "reduce_scatter")
#: every training time answer's provenance, one frozen record; it names this plugin's entry
#: point (pyproject.toml), so the engine's stamp (fmest.estimates.with_plugin) keeps the
#: answer as is instead of copying it (under another registered name it stamps that name)
PROVENANCE = Provenance(basis=BASIS, plugin="time_roofline",
                        detail="roofline: GEMM-shape matmul efficiency, HBM for memory-bound "
                        "work, ring/tree collectives; docs/time_model.md")


def _activation_bytes(memory, model, tokens: float, layers: float, act_bytes: float) -> float:
    """Saved-activation bytes of one micro-batch: the memory estimate's
    ``fmest.estimates.ACTIVATION_COMPONENTS`` when it itemises them, else 34 s b h per layer
    (Korthikanti et al. 2022 eq. 1 without the s^2 term)."""
    if memory is not None:
        total = sum(memory.components.get(name, 0) for name in ACTIVATION_COMPONENTS)
        if total > 0:
            return float(total)
    return 34.0 / 2.0 * act_bytes * tokens * model.hidden_size * layers


# ---------------------------------------------------------------------------------------------
# the phases of one step (small frozen records; step_breakdown composes them)
# ---------------------------------------------------------------------------------------------

@frozen(kw_only=True)
class Rates:
    """Achievable rates of the GPU for this job (derated peaks, efficiencies)."""

    linear_peak: float           # FLOP/s of the matmul dtype
    attention_peak: float        # FLOP/s of the activation dtype
    hbm_bytes_per_s: float
    linear_fraction: float       # MAMF fraction
    sm_count: Optional[int]      # SMs of the GPU: width of a wave of GEMM tiles (None: no waves)
    attention_fwd_eff: float
    attention_bwd_eff: float
    #: eager attention's batched GEMMs under a head dim whose rows are not 16-byte aligned:
    #: the fraction of ``attention_peak`` their kernel reaches at most
    #: (:func:`eager_attention_alignment`); None otherwise
    eager_alignment_cap: Optional[float] = None
    notes: tuple = ()


def matmul_dtype(training, gpu) -> str:
    """The format an fp32 job's GEMMs run in: ``tf32`` with ``training.tf32`` on a GPU with
    TF32 units (the GPU table's ``tf32_tflops``), else the training dtype."""
    if training.dtype == "fp32" and training.tf32 and gpu.peak_flops_per_s("tf32"):
        return "tf32"
    return training.dtype


def device_rates(job, gpu, stack=None, model=None,
                 attention_seq_len: Optional[float] = None) -> Optional[Rates]:
    """Phase 1: peaks (power-cap derated) and efficiencies; ``None`` when the GPU table lacks
    a needed peak. ``options.mfu`` does not change them: it sets the step at the end
    (:func:`apply_mfu_override`), and these rates give the breakdown's shares. The attention
    efficiencies are those of the kernel at ``attention_seq_len`` keys (default the job's
    sequence) and ``model``'s head dim (default 128)."""
    training, notes = job.training, []
    act_dtype = F.storage_dtype(training.dtype)
    derate = F.power_cap_derate(gpu.name)
    lin_dtype = matmul_dtype(training, gpu)
    lin_peak = gpu.peak_flops_per_s(lin_dtype)
    attn_peak = gpu.peak_flops_per_s(act_dtype if act_dtype != "fp32" else "fp32")
    if not lin_peak or not attn_peak or not gpu.hbm_bytes_per_s:
        return None
    if derate != 1.0:
        notes.append(f"{gpu.name}: FLOP peaks derated x{derate:.3f} for its power cap")
    mfu = job.options.mfu
    if mfu is not None and mfu > 1:
        raise InputError("options.mfu", "is a fraction of peak between 0 and 1", value=mfu)
    # the sustained (power-limited) GEMM rate of a step, not the burst MAMF figure
    fraction, gemm_note = F.gemm_fraction_and_note(gpu.name, training.dtype)
    if gemm_note:
        notes.append(gemm_note)
    if lin_dtype == "tf32":
        notes.append(f"fp32 GEMMs as TF32 (training.tf32): {gpu.name}'s TF32 tensor-core peak "
                     f"at its bf16 GEMM fraction {fraction:.3f} (measured on an H100, TF32 "
                     f"GEMMs reach the fraction of their peak bf16 ones do: 0.811 vs 0.804 "
                     f"at their best shapes, benchmarks/gpu/results/H100-SXM-80GB-2026-11-27)")
    elif training.dtype == "fp32" and training.tf32:
        notes.append(f"training.tf32: {gpu.name} has no TF32 units (no tf32 peak in the GPU "
                     f"table): fp32 GEMMs at its fp32 rate")
    kernel = stack.profile.attention_kernel if stack is not None else "sdpa"
    hw = job.hardware
    if kernel == "sdpa" and training.attention == "sdpa" and F.sdpa_prefers_cudnn(
            hw.torch_version, hw.cuda_version, gpu.compute_capability):
        kernel = "sdpa-cudnn"
        notes.append(f"SDPA on PyTorch {hw.torch_version} runs cuDNN attention first on "
                     f"{gpu.name} (compute capability {gpu.compute_capability}): cuDNN's rates")
    fwd_eff, bwd_eff, att_notes = attention_efficiencies(job, gpu, kernel, model,
                                                         attention_seq_len)
    align_cap = None
    if job.training.attention != "eager":
        notes.extend(att_notes)
    elif model is not None:
        align_rate, align_note = eager_attention_alignment(job, gpu, model)
        if align_rate is not None:
            align_cap = align_rate / (attn_peak * derate)
        if align_note:
            notes.append(align_note)
    return Rates(linear_peak=lin_peak * derate, attention_peak=attn_peak * derate,
                 hbm_bytes_per_s=gpu.hbm_bytes_per_s, linear_fraction=fraction,
                 sm_count=F.sm_count(gpu.name), attention_fwd_eff=fwd_eff,
                 attention_bwd_eff=bwd_eff, eager_alignment_cap=align_cap,
                 notes=tuple(notes))


def eager_attention_alignment(job, gpu, model) -> tuple[Optional[float], Optional[str]]:
    """(FLOP/s or None, note) of eager attention's batched GEMMs (Q K^T, P V and their
    gradients) when the head dim leaves their operands short of 16-byte alignment: each head's
    rows, and the offsets between the q, k and v views of a fused projection, are ``head_dim``
    elements apart, so the operands are aligned to the largest power of two dividing head_dim
    x the element size (formulas.operand_alignment_bytes); the rate is the published one of
    that alignment on the GPU under the job's CUDA toolkit (``hardware.cuda_version``;
    formulas.misaligned_gemm_rate, fmest/data/gemm_alignment.csv). None: aligned, or no
    published figure (the note says which)."""
    dtype = F.storage_dtype(job.training.dtype)
    element = F.dtype_info(dtype).storage_bytes
    dims = {d for d in (model.qk_head_dim or model.head_dim, model.v_head_dim or model.head_dim)
            if d}
    if not dims:
        return None, None
    align = min(F.operand_alignment_bytes(d, element) for d in dims)
    if align >= F.GEMM_FULL_ALIGNMENT_BYTES:
        return None, None
    rate, note = F.misaligned_gemm_rate(gpu.name, dtype, align, job.hardware.cuda_version)
    head = "/".join(str(d) for d in sorted(dims))
    if rate is None:
        return None, f"eager attention, head dim {head} ({align}-byte-aligned rows): {note}"
    return rate, (f"eager attention, head dim {head}: its GEMMs' rows are {align}-byte "
                  f"aligned; cuBLAS of CUDA {F.cuda_range(job.hardware.cuda_version)} runs them "
                  f"at most {rate / 1e12:.1f} TFLOP/s (fmest/data/gemm_alignment.csv)")


def attention_efficiencies(job, gpu, kernel: str, model=None,
                           seq_len: Optional[float] = None) -> tuple[float, float, list]:
    """(forward, backward, notes) fraction of peak of the attention ``kernel`` on ``gpu`` at
    the kernel's sequence length and head dim (formulas.attention_efficiency_and_note; causal,
    as training runs decoders)."""
    head_dim = (model.qk_head_dim or model.head_dim) if model is not None else 128
    seq = seq_len if seq_len is not None else job.training.seq_len
    out, notes = [], []
    for direction in ("fwd", "bwd"):
        eff, note = F.attention_efficiency_and_note(gpu.name, direction, kernel, seq_len=seq,
                                                    head_dim=head_dim or 128, causal=True)
        out.append(eff)
        if note:
            notes.append(note)
    return out[0], out[1], notes


def eager_kernel_rates(job, gpu, rates: Rates, model=None,
                       attention_seq_len: Optional[float] = None) -> Rates:
    """``rates`` with PyTorch SDPA's attention efficiencies instead of a stack's kernel: what
    ``device_rates`` gives without the stack (the stack changes nothing else)."""
    fwd_eff, bwd_eff, _ = attention_efficiencies(job, gpu, "sdpa", model, attention_seq_len)
    return attrs.evolve(rates, attention_fwd_eff=fwd_eff, attention_bwd_eff=bwd_eff)


@frozen(kw_only=True)
class StepShape:
    """The job's shape on the slowest (last) pipeline stage."""

    tp: int
    pp: int
    cp: int
    ep: int
    dp: int
    micro_batch: int
    seq_len: int
    grad_accum: int
    tokens: float                # tokens of one micro-batch on one GPU
    act_bytes: float
    linear_bytes: float          # matmul operand bytes (fp8: 1)
    linear_dtype: str
    full: bool                   # full fine-tuning (weight gradients of every matmul)
    checkpointing: str
    stage_layers: float
    #: the routed experts' tensor-parallel size (``parallelism.expert_tp``); 0 = tp
    expert_tp: int = 0
    #: the share of the blocks recomputed in full (``Training.recompute_share``: the
    #: ``checkpoint_fraction`` under full checkpointing, 0 otherwise): the recompute's FLOPs,
    #: bytes and passes scale with it
    recompute_share: float = 0.0
    #: the modules selective checkpointing recomputes (``Training.selective_modules``,
    #: Megatron-Core's names: ``core_attn`` by default); empty unless ``selective``
    selective_modules: frozenset = frozenset()
    #: routed rows per expert relative to balanced dropless routing under Megatron-Core's
    #: capacity factor (formulas.moe_capacity_row_factor: drop-and-pad > 1 at F > 1)
    expert_row_factor: float = 1.0
    #: the length the attention core runs over when packed samples attend within
    #: themselves (:func:`attention_context_len`); None: ``seq_len``
    attention_len: Optional[float] = None

    @property
    def moe_recomputed(self) -> float:
        """Extra forward passes of the MoE layers per micro-batch: the full-checkpoint share,
        or 1 when selective recomputes the whole MoE layer (``moe``)."""
        return self.recompute_share + (1.0 if "moe" in self.selective_modules else 0.0)

    @property
    def etp(self) -> int:
        """The experts' tensor-parallel size (``tp`` unless the job sets ``expert_tp``)."""
        return self.expert_tp or self.tp


#: E[max of b standard normals] (b = 1, 2, 4, 8, 16; Tippett 1925, Biometrika 17: 364-387,
#: table of the mean range / 2): the expected longest of b samples is mean + this x sd
_NORMAL_MAX_MEAN = {1: 0.0, 2: 0.5642, 4: 1.0294, 8: 1.4236, 16: 1.7660}


def padding_of(job, stack=None) -> Optional[str]:
    """:func:`fmest.stacks.padding_of` of the job's training section."""
    return stacks_padding_of(job.training, stack)


def padded_seq_len(job, stack=None) -> Optional[float]:
    """The length a pad-to-longest micro-batch runs at (issue 20): the expected longest of its
    ``micro_batch_size`` samples (mean + E[max of b normals] x ``seq_len_std``; the mean alone
    at b = 1), at most ``seq_len``; None unless batches are padded to their longest and the job
    states ``workload.avg_seq_len``."""
    w, tr = job.workload, job.training
    if w.avg_seq_len is None or padding_of(job, stack) != "longest":
        return None
    b = tr.micro_batch_size
    k = min(_NORMAL_MAX_MEAN, key=lambda n: abs(math.log(n) - math.log(b)))
    return min(float(tr.seq_len), w.avg_seq_len + _NORMAL_MAX_MEAN[k] * (w.seq_len_std or 0.0))


def attention_context_len(job, stack=None) -> Optional[float]:
    """The length the attention core of a packed row runs over when each sample attends within
    itself (``packed_attention`` ``document``, :func:`fmest.stacks.packed_attention_of`: the
    kernel skips the other samples' blocks) and the job states ``workload.avg_seq_len``: a row
    of S tokens holds S / E[s] samples whose causal attention costs sum s_i^2 = S E[s] (1 +
    cv^2) score elements against S^2 for the whole row (cv = ``seq_len_std`` / E[s]), so it
    runs as over rows of E[s] (1 + cv^2) tokens, at most ``seq_len``. None otherwise: rows not
    packed, attention over the whole row, no stated lengths, or eager attention (a dense
    document mask computes every block)."""
    tr, w = job.training, job.workload
    if w.avg_seq_len is None or tr.attention == "eager" \
            or packed_attention_of(tr, stack) != "document":
        return None
    mean = min(float(tr.seq_len), float(w.avg_seq_len))
    cv = (w.seq_len_std or 0.0) / w.avg_seq_len if w.avg_seq_len > 0 else 0.0
    return min(float(tr.seq_len), mean * (1.0 + cv * cv))


def packed_attention_note(job, stack=None) -> Optional[str]:
    """Why a packed job's attention is priced as it is (None when its rows are not packed)."""
    kind = packed_attention_of(job.training, stack)
    if kind is None:
        return None
    length = attention_context_len(job, stack)
    if length is not None:
        return (f"packed rows attend per sample (packed_attention document): attention as over "
                f"{length:,.0f}-token rows, E[s] (1 + cv^2) of workload.avg_seq_len "
                f"{job.workload.avg_seq_len:g}")
    if kind == "document" and job.training.attention == "eager":
        return ("packed rows attend per sample, but eager attention computes the whole row's "
                "scores under its document mask")
    if kind == "document":
        return ("packed rows attend per sample (packed_attention document) but "
                "workload.avg_seq_len is not stated: attention priced over whole rows")
    return None


def real_tokens_per_sample(model, job, stack=None) -> float:
    """Dataset tokens of one sample, what tokens/s counts: ``workload.avg_seq_len`` when
    batches are padded (``longest`` or ``max_length``: padding is not data), else
    ``physics.counting.tokens_per_sample`` (packed rows are full)."""
    if job.workload.avg_seq_len is not None \
            and padding_of(job, stack) in ("longest", "max_length") \
            and not model.vision and not model.is_encoder_decoder:
        return min(float(job.training.seq_len), job.workload.avg_seq_len)
    return tokens_per_sample(model, job.training)


def step_shape(job, model, layout, stack=None) -> StepShape:
    training = job.training
    info = F.dtype_info(training.dtype)
    # VLMs: the language model also runs over the image tokens (fmest.models.images)
    seq_len = vlm_sequence_len(training.seq_len, model.vision, image_size=training.image_size,
                               images=training.images_per_sample)
    padded = padded_seq_len(job, stack) if not model.vision else None
    if padded is not None and not model.is_encoder_decoder:
        # pad-to-longest batches run at their own longest sample, not the cap
        seq_len = max(1, round(padded))
    if model.is_encoder_decoder and (training.source_len or training.target_len):
        # encoder layers run over the source, decoder layers over the target: the step's
        # per-layer work is that of their layer-weighted mean length
        source = training.source_len or training.seq_len
        target = training.target_len or training.seq_len
        seq_len = round((model.num_encoder_layers * source + model.num_decoder_layers * target)
                        / model.num_layers)
    # pairwise preference objectives run the chosen and the rejected sequence of each sample
    # in one batch (fmest.objectives)
    batch = training.micro_batch_size * sequences_per_sample(training.objective)
    return StepShape(
        tp=layout.tp, pp=layout.pp, cp=layout.cp, ep=layout.ep, dp=layout.dp,
        expert_tp=expert_tp_of(layout), micro_batch=batch, seq_len=seq_len,
        grad_accum=training.grad_accum_steps,
        tokens=batch * seq_len / layout.cp,
        act_bytes=float(info.storage_bytes), linear_bytes=float(info.operand_bytes),
        linear_dtype=training.dtype, full=training.technique == "full",
        checkpointing=training.activation_checkpointing,
        stage_layers=model.num_layers / layout.pp, recompute_share=training.recompute_share,
        selective_modules=training.selective_modules,
        expert_row_factor=F.moe_capacity_row_factor(
            batch * seq_len / layout.cp / max(layout.tp, 1), model.experts_per_token or 0, model.num_experts or 0,
            training.moe_expert_capacity_factor, training.moe_drop_and_pad)
        if model.is_moe else 1.0,
        attention_len=None if (model.vision or model.is_encoder_decoder)
        else attention_context_len(job, stack))


def kernel_seq_len(shape: StepShape) -> float:
    """Keys per query block the attention kernel sees: the sequence (a packed sample's length
    when samples attend within themselves: ``StepShape.attention_len``), split over the
    context-parallel ranks (ring attention runs the kernel on ``seq / cp`` blocks)."""
    return (shape.attention_len or shape.seq_len) / shape.cp


@frozen(kw_only=True)
class MatmulTimes:
    """Seconds of one micro-batch's matmuls and the memory-bound bytes they bring."""

    forward: float
    backward: float
    recompute: float
    dequant_bytes: float         # QLoRA dequantization (bitsandbytes kernels, never fused)
    fp8_cast_bytes: float        # float8 amax + cast (fused by torch.compile)
    lora_modules: tuple


@functools.lru_cache(maxsize=256)
def _last_matmul_names(model) -> frozenset:
    """Each layer's last matmul (MLP down projection): never recomputed (early stop). Cached
    per model: the spec is frozen and hashes once (``cache_hash``)."""
    return frozenset((lin.name, lin.kind) for lin in model.linears
            if lin.kind in ("mlp", "expert", "shared_expert")
            and lin.out_features == model.hidden_size and lin.in_features != model.hidden_size)


def _gemm(shape: StepShape, rates: Rates):
    def seconds(rows, inner, cols):
        return F.gemm_seconds(rows, inner, cols, peak_flops_per_s=rates.linear_peak,
                              max_fraction=rates.linear_fraction,
                              hbm_bytes_per_s=rates.hbm_bytes_per_s,
                              bytes_per_element=shape.linear_bytes, sms=rates.sm_count)
    return seconds


def _lora_module_seconds(training, model, shape: StepShape, gemm) -> tuple[tuple, list]:
    """(modules, forward seconds of each) of the LoRA adapters (tiny rank: memory-bound);
    none for full training and for the Adapter techniques (no LoRA modules: their prefix
    attention is formulas.adapter_forward_flops_per_token)."""
    if shape.full or training.technique not in ("lora", "qlora"):
        return (), []
    mods = tuple(lora_modules(model, training))
    rank, out = training.lora_rank, []
    for mod in mods:
        rows = shape.tokens * mod.active_copies
        out.append((gemm(rows, mod.in_features, rank) + gemm(rows, rank, mod.out_features))
                   * mod.layers / shape.pp * (mod.copies / mod.active_copies
                                              if mod.kind == "expert" else 1))
    return mods, out


def moe_permute_bytes(model, shape: StepShape) -> float:
    """HBM bytes of one micro-batch's MoE token permutation (formulas.moe_permute_bytes: the
    Megatron-Core dispatcher's permute, sort_chunks, unsort and unpermute) over the stage's
    MoE layers, forward and backward (+ the recompute's forward under full checkpointing).
    ``experts / ep`` experts are local to a rank. The sort/unsort runs over the ``tokens x k x
    expert_tp / tp`` routed copies the expert-TP all-gather brings (``tokens x k`` when the
    experts' tensor-parallel size is TP's, formulas.moe_permute_bytes)."""
    if not model.is_moe or not model.experts_per_token:
        return 0.0
    moe_layers = (model.num_moe_layers or model.num_layers) / shape.pp
    passes = 2 + shape.moe_recomputed
    local = (model.num_experts or 1) / max(1, shape.ep)
    per_pass = F.moe_permute_bytes(
        shape.tokens, model.experts_per_token, model.hidden_size, shape.act_bytes, local,
        shape.tp)
    if shape.etp != shape.tp and local > 1 and shape.tokens > 0:
        per_pass -= F.MOE_SORT_ELEMENTS_PER_ROUTED_COPY * model.experts_per_token \
            * shape.tokens * (1.0 - shape.etp / shape.tp) * model.hidden_size * shape.act_bytes
    return passes * moe_layers * per_pass


def moe_dispatch_seconds(model, shape: StepShape, gpu, gpus_per_node: int, *,
                         dispatcher: Optional[str] = None,
                         overlap_window: Optional[float] = None) -> float:
    """Expert-parallel token traffic of one micro-batch (Megatron-Core
    MoEAlltoAllTokenDispatcher, NVIDIA/Megatron-LM @ d98e8a64ddf34856e74b24714e3bedb2f5a39553
    megatron/core/transformer/moe/token_dispatcher.py): per MoE layer and pass, a dispatch and a
    combine all-to-all over the EP group of the rank's sequence-parallel shard
    ``tokens / tp`` x ``k`` routed copies x hidden, plus (expert TP > 1) an all-gather and a
    reduce-scatter of the ``tokens x k x expert_tp / tp`` copies over the expert-TP group;
    forward, backward (+ the recompute's forward). The EP group: Megatron's expert rank grid is
    ordered tp-ep-dp-pp with cp folded into it (megatron/core/parallel_state.py
    ``expert_decoder_rank_generator``: tp = ``expert_tensor_parallel_size``, cp=1), expert TP
    defaulting to TP, so its ranks are ``expert_tp`` apart (consecutive with expert TP 1);
    beyond the NVLink domain (the node, or GB200 NVL72's 72 GPUs: formulas.nvlink_domain_gpus)
    the all-to-all's off-domain share runs at the NIC rate (formulas.all_to_all_seconds).

    ``dispatcher`` (``parallelism.moe_dispatcher``) ``deepep`` / ``hybridep``: the flex
    dispatcher, one group over the expert-TP x EP ranks (no separate expert-TP gather),
    a token sent once per destination rank and once per remote node
    (formulas.flex_dispatch_seconds). ``overlap_window`` (``parallelism.moe_a2a_overlap``,
    Megatron ``--overlap-moe-expert-parallel-comm``): the seconds of another micro-batch's
    compute the traffic runs under (formulas.exposed_comm_seconds); Megatron refuses the
    overlap with full recomputation (transformer_config.py), so it is not applied there."""
    if shape.ep <= 1 or not model.is_moe:
        return 0.0
    moe_layers = (model.num_moe_layers or model.num_layers) / shape.pp
    passes = 2 + shape.moe_recomputed
    shard = shape.tokens / shape.tp * model.hidden_size * shape.act_bytes
    # drop-and-pad sends each expert's full capacity (token_dispatcher.py num_out_tokens =
    # capacity x experts)
    routed = shard * model.experts_per_token * shape.expert_row_factor
    etp = shape.etp
    domain = F.nvlink_domain_gpus(getattr(gpu, "name", "") or "", gpus_per_node)
    bus = F.link_bytes_per_s(gpu, inter_node=False)
    gather = 0.0
    if dispatcher in ("deepep", "hybridep"):
        ranks = shape.ep * etp
        a2a = F.flex_dispatch_seconds(shard, model.num_experts or model.experts_per_token,
                                      model.experts_per_token, ranks, domain, bus,
                                      F.nic_bytes_per_s(gpu), expert_tp=etp,
                                      inter_node=ranks > domain)
    else:
        inter = F.group_is_inter_node(shape.ep, etp, domain)
        per_node = max(1, domain // max(1, etp))
        a2a = F.all_to_all_seconds(routed, shape.ep, bus, inter,
                                   ranks_per_node=min(per_node, shape.ep),
                                   nic_bytes_per_s=F.nic_bytes_per_s(gpu))
        if etp > 1:
            t_inter, t_bw = _links(gpu, gpus_per_node)(etp, 1)
            gathered = routed * etp
            gather = F.all_gather_seconds(gathered, etp, t_bw, t_inter) \
                + F.reduce_scatter_seconds(gathered, etp, t_bw, t_inter)
    total = passes * moe_layers * (2 * a2a + gather)
    if overlap_window is not None and shape.checkpointing != "full":
        total = F.exposed_comm_seconds(total, overlap_window)
    return total


def matmul_times(job, model, shape: StepShape, rates: Rates, stack=None) -> MatmulTimes:
    """Phase 2: every linear through the GEMM roofline (formulas.gemm_seconds), the output head
    (last stage, vocab split over tp, never recomputed) and the LoRA adapters. Backward is 2x
    forward for full training (input + weight gradients), 1x for a frozen base."""
    training, gemm = job.training, _gemm(shape, rates)
    # a GPTQ base (``training.quantization_method``): AutoGPTQ's
    # torch unpacking instead of bitsandbytes' dequantize kernels
    gptq = training.quantization_method == "gptq"
    fwd = bwd = rec = dequant = fp8_cast = 0.0
    cast_bytes = F.fp8_cast_bytes_per_element(
        None if stack is None else stack.fp8_cast_bytes(F.FP8_CAST_BYTES_PER_ELEMENT),
        compiled=bool(training.compile))
    bwd_factor = 2.0 if shape.full else 1.0
    last = _last_matmul_names(model)
    # read once, not per linear (the loop's arithmetic is unchanged)
    etp, tp, pp, ep, tokens = shape.etp, shape.tp, shape.pp, shape.ep, shape.tokens
    recomputing, fp8 = shape.checkpointing == "full", shape.linear_dtype == "fp8"
    weight_cast_share = 1.0 / max(1, shape.grad_accum) \
        if stack is not None and stack.profile.fp8_weight_cast_per_step else 1.0
    selective = shape.selective_modules
    quantized = quantized_base(training)
    for lin in model.linears:
        if lin.kind == "head":
            continue
        inner, cols = lin.in_features, lin.out_features
        # routed experts split over their own tensor-parallel size (parallelism.expert_tp)
        split = etp if lin.kind == "expert" else tp
        if split > 1 and lin.kind != "router":
            if cols >= inner:
                cols = cols / split
            else:
                inner = inner / split
        if lin.kind == "expert" and lin.copies > 0:
            # each rank's local experts see the routed copies of the expert_tp x ep ranks'
            # sequence-parallel shards: (tokens / tp) x k x ep x expert_tp / experts rows each
            # (= tokens x k x ep / experts with expert TP = TP)
            rows = tokens * lin.active_copies * ep * (etp / tp) / lin.copies \
                * shape.expert_row_factor
            count = lin.layers / pp * lin.copies / ep
        else:
            rows = tokens * lin.active_copies
            count = lin.layers / pp
        seconds = gemm(rows, inner, cols) * count
        fwd += seconds
        bwd += seconds * bwd_factor
        if recomputing and (lin.name, lin.kind) not in last:
            rec += seconds * shape.recompute_share
        reselected = bool(selective) and F.selective_recomputes_linear(lin.name, lin.kind,
                                                                       selective)
        if reselected:
            # Megatron-Core's selective recompute_modules rerun the whole module's forward
            # (the checkpointed function), its last matmul included
            rec += seconds
        if fp8:
            # the weight's casts: every micro-batch, or once per step where the stack caches
            # the fp8 weight and its transpose (stacks.toml fp8_weight_cast_per_step: TE
            # is_first_microbatch under Megatron-Core)
            weight = inner * cols * count * (weight_cast_share if shape.full else 1.0)
            elements = (rows * inner + rows * cols) * count + weight
            fp8_cast += cast_bytes * elements * (3 if shape.full else 2) \
                + (cast_bytes * elements if reselected else 0.0)
        if quantized and gptq:
            # the matmul keeps the unpacked weight for backward (formulas
            # .gptq_dequant_bytes_per_param): unpacked in forward and in the recompute
            uses = 1 + shape.recompute_share
            dequant += F.gptq_dequant_bytes_per_param(training.quantization_bits) \
                * inner * cols * count * uses
        elif quantized:
            uses = 2 + shape.recompute_share
            dequant += F.QLORA_DEQUANT_BYTES_PER_PARAM * inner * cols * count * uses
    # the routed experts' token permutation: memory-bound bytes at HBM speed like the
    # dequantization's (MatmulTimes has no field of its own for them)
    dequant += moe_permute_bytes(model, shape)
    # PEFT modules_to_save trains a copy of the head beside the adapters: its weight gradient
    # runs where a frozen head runs only the input gradient
    saved_head = not shape.full and "head" in (training.lora_modules_to_save or ()) \
        and training.technique in ("lora", "qlora")
    for inner, cols in F.head_linears(model):
        seconds = gemm(shape.tokens, inner, cols / shape.tp)
        fwd += seconds
        bwd += seconds * (bwd_factor + (1.0 if saved_head else 0.0))
    mods, lora_seconds = _lora_module_seconds(training, model, shape, gemm)
    for seconds in lora_seconds:
        fwd += seconds
        bwd += 2 * seconds
        rec += seconds * shape.recompute_share
    return MatmulTimes(forward=fwd, backward=bwd, recompute=rec, dequant_bytes=dequant,
                       fp8_cast_bytes=fp8_cast, lora_modules=mods)


@frozen(kw_only=True)
class AttentionTimes:
    forward: float
    backward: float
    recompute: float


def attention_times(job, model, shape: StepShape, rates: Rates, gpu) -> AttentionTimes:
    """Phase 3: the attention core as its own op class: fused kernels at the GPU's flash
    efficiency (FLOPs counted the FlashAttention way, backward 2.5x); eager attention as two
    GEMMs of the (s x d) @ (d x s) shape."""
    eager = job.training.attention == "eager"
    # packed samples attending within themselves: each token's context is its own sample
    # (StepShape.attention_len); eager attention never sets it
    fwd_flops = F.attention_forward_flops_per_token(model, shape.attention_len or shape.seq_len,
                                                    causal=not eager) \
        * shape.tokens / shape.tp / shape.pp
    bwd_factor = 2.0 if eager else F.FLASH_BACKWARD_FLOPS_FACTOR
    if eager:
        head_dim = model.qk_head_dim or model.head_dim
        act_dtype = F.storage_dtype(shape.linear_dtype)
        eff = (rates.linear_fraction if act_dtype == shape.linear_dtype
               else F.gemm_fraction(gpu.name, act_dtype)) \
            * F.gemm_shape_efficiency(shape.seq_len, head_dim, shape.seq_len, rates.sm_count,
                                      batch=shape.micro_batch * model.num_attention_heads
                                      / shape.tp)
        if rates.eager_alignment_cap is not None:
            eff = min(eff, rates.eager_alignment_cap)
        eff_bwd = eff
    else:
        eff, eff_bwd = rates.attention_fwd_eff, rates.attention_bwd_eff
    fwd = fwd_flops / (rates.attention_peak * eff)
    bwd = fwd_flops * bwd_factor / (rates.attention_peak * eff_bwd)
    rec = fwd if "core_attn" in shape.selective_modules else fwd * shape.recompute_share
    return AttentionTimes(forward=fwd, backward=bwd, recompute=rec)


def stack_loss(training, stack) -> str:
    """The cross-entropy implementation that runs: a stack (or Liger) that fuses the loss
    turns the standard eager loss into a fused one (fmest.stacks). A loss kernel only the job
    states (``training.fused_kernels``: fms-acceleration's Unsloth fast cross-entropy) stays
    ``standard``: under transformers >= 4.46 its ``FastForCausalLMLoss`` still upcasts the
    logits to fp32 and makes the shifted contiguous copy before the Triton kernel, whose
    forward reads and backward rewrites that fp32 copy in place, about the eager chain's
    bytes (memory_theory ``effective_loss``, same source)."""
    if stack is not None and stack.replaces_loss and training.loss == "standard":
        return "fused"
    return training.loss


def lora_dropout_probability(training, stack) -> float:
    """The adapters' dropout: ``training.lora_dropout`` when given, else the stack's
    (stacks.toml ``lora_dropout``), else PEFT's default 0.0 (the rule of memory_theory's
    ``lora_dropout_of``)."""
    if training.technique not in ("lora", "qlora"):
        return 0.0
    if training.lora_dropout is not None:
        return float(training.lora_dropout)
    return float(stack.profile.lora_dropout) if stack is not None else 0.0


def lora_elementwise_bytes(training, shape: StepShape, stack, lora_mods,
                           precision: str = "amp",
                           adapter_fp32: bool = True) -> tuple[float, float]:
    """(forward, backward) HBM bytes of one micro-batch that the stack's LoRA layer adds around
    the adapted linears, beyond the adapters' GEMMs (:func:`_lora_module_seconds`): for a stack
    on huggingface/peft (stacks.toml ``lora_impl = "peft"``) the fp32 casts of each adapter
    input, its dropout, ``* scaling`` and the add (formulas.peft_lora_bytes_per_row), over the
    ``tokens x active copies`` rows of each module and the stage's layers; a stack (or job)
    that fuses ``lora`` (fms-acceleration's fused LoRA kernels on a quantized base) moves the
    fused kernels' bytes instead; 0 otherwise. ``precision`` (the resolved policy): under
    ``pure`` the fp32 adapters run without autocast (formulas.peft_lora_bytes_per_row
    ``autocast=False``); ``amp`` runs them under autocast, as does the ``master`` policy's
    default (the bytes traced under HF Trainer's bf16 autocast). ``adapter_fp32`` False:
    adapters in the compute dtype (``training.lora_adapter_dtype = "compute"``), no casts."""
    if not lora_mods or stack is None or stack.profile.lora_impl != "peft":
        return 0.0, 0.0
    dropout = lora_dropout_probability(training, stack) > 0.0
    fused = "lora" in getattr(stack, "fused", ())   # ResolvedStack.fused (fuses("lora"))
    fwd = bwd = 0.0
    for mod in lora_mods:
        rows = shape.tokens * mod.active_copies * mod.layers / shape.pp
        f, b = F.peft_lora_bytes_per_row(mod.in_features, mod.out_features, dropout=dropout,
                                         fused=fused, autocast=precision != "pure",
                                         adapter_fp32=adapter_fp32)
        fwd += f * rows
        bwd += b * rows
    return fwd, bwd


def kbit_prep_of(training, stack) -> str:
    """PEFT's k-bit preparation as it ran (``fmest.job.KBIT_PREPS``), the rule of
    memory_theory's ``kbit_prep_of``: ``training.kbit_prep``, else a stack's ``kbit_prep``
    profile field where one states it, else ``none``; only a bitsandbytes QLoRA base is
    prepared (PEFT skips the cast for GPTQ/AQLM/EETQ/HQQ/torchao: huggingface/peft
    5d602fdbff04c33c1c4de55cda9d4ae1d7cb7e40 src/peft/utils/other.py)."""
    if training.technique != "qlora" or training.quantization_method != "bnb":
        return "none"
    stated = getattr(training, "kbit_prep", None)
    if stated is None and stack is not None:
        stated = getattr(stack.profile, "kbit_prep", None)
    return str(stated) if stated else "none"


def kbit_prep_elementwise_bytes(training, model, shape: StepShape, stack,
                                lora_mods) -> tuple[float, float]:
    """(forward, backward) HBM bytes of one micro-batch that PEFT's k-bit preparation of a
    4-bit bitsandbytes base adds (formulas.kbit_fp32_stream_bytes_per_token: the fp32
    residual stream, bitsandbytes' casts in and out of each 4-bit linear, fp32 norms, RoPE,
    activation and gradient sums; PEFT's own input cast, counted by
    :func:`lora_elementwise_bytes`, becomes a no-op for an fp32 input). 0 when no preparation
    ran, for the 8-bit path (not traced; memory_theory keeps its compute-dtype stream too) and
    under torch.compile (Inductor fuses the casts into its kernels: not modelled)."""
    if kbit_prep_of(training, stack) == "none" or training.quantization_bits != 4 \
            or training.compile:
        return 0.0, 0.0
    peft = stack is not None and stack.profile.lora_impl == "peft" \
        and "lora" not in getattr(stack, "fused", ())
    adapted = frozenset(mod.name for mod in lora_mods) if peft else frozenset()
    fwd, bwd = F.kbit_fp32_stream_bytes_per_token(model, stage_layers=shape.stage_layers,
                                                  pp=shape.pp, adapted=adapted)
    return fwd * shape.tokens, bwd * shape.tokens


def hp_grad_accum_bytes(training, stack) -> float:
    """Bytes per trainable parameter the stack's optimizer wrapper moves every micro-batch to
    accumulate into fp32 gradients (``StackProfile.hp_grad_accum_bytes``, e.g. DeepSpeed's
    BF16_Optimizer under Megatron-DeepSpeed), 0 when it does not apply to the job: no such
    stack, not full fine-tuning, or the job's gradients are not kept in fp32
    (:func:`fmest.stacks.fp32_main_grads`)."""
    own = 0.0 if stack is None else stack.profile.hp_grad_accum_bytes
    if not own or training.technique != "full" \
            or not fp32_main_grads(stack.profile, training, F.storage_dtype(training.dtype)):
        return 0.0
    return float(own)


def megatron_module_bytes(training, model, shape: StepShape, sequence_parallel: bool) -> float:
    """HBM bytes of one micro-batch that Megatron-Core's module switches add (issue 20): the
    pointwise ops the selective ``recompute_modules`` rerun
    (formulas.selective_recompute_elementwise_elements_per_token; the attention core and the
    linears are counted in their own phases) and the unfused MoE permute / router
    (``training.moe_permute_fusion`` / ``moe_router_fusion`` False:
    formulas.moe_unfused_permute_bytes / moe_unfused_router_bytes), forward, backward and the
    MoE layer's recompute."""
    moved = 0.0
    if shape.selective_modules:
        divisor = shape.tp if sequence_parallel else 1
        moved += F.selective_recompute_elementwise_elements_per_token(
            model, shape.selective_modules, tp=shape.tp, expert_tp=shape.etp,
            norm_divisor=divisor) * shape.tokens * shape.act_bytes / shape.pp
    if model.is_moe and model.experts_per_token:
        moe_layers = (model.num_moe_layers or model.num_layers) / shape.pp
        again = shape.moe_recomputed
        if training.moe_permute_fusion is False:
            fwd, bwd = F.moe_unfused_permute_bytes(shape.tokens, model.experts_per_token,
                                                   model.hidden_size, shape.act_bytes, shape.tp)
            moved += (fwd * (1.0 + again) + bwd) * moe_layers
        if training.moe_router_fusion is False:
            fwd, bwd = F.moe_unfused_router_bytes(shape.tokens, model.num_experts or 0,
                                                  shape.tp)
            moved += (fwd * (1.0 + again) + bwd) * moe_layers
    return moved


def memory_bound_seconds(job, model, shape: StepShape, rates: Rates, matmuls: MatmulTimes,
                         comm: CommunicationPlan, stack=None, sizing=None) -> float:
    """Phase 4: elementwise traffic (norms, activations, RoPE, layouts; recomputed under full
    checkpointing), the loss, eager attention scores, gradient accumulation read-add-write,
    the LoRA layer's and PEFT k-bit preparation's casts (:func:`lora_elementwise_bytes`,
    :func:`kbit_prep_elementwise_bytes`), QLoRA dequantization and fp8 casts, at HBM speed
    (formulas.memory_bound_seconds). ``sizing``: the job's ``OptimizerSizing``
    (``transforms.optimizer``); None reads as no autocast and fp32 adapters under amp's casts."""
    # the resolved precision policy (transforms.optimizer): autocast under amp, PEFT's casts
    # by policy and adapter dtype (lora_elementwise_bytes)
    precision = sizing.precision if sizing is not None else "amp"
    autocast = sizing is not None and sizing.precision == "amp"
    adapter_fp32 = sizing is None or sizing.trainable_bytes >= 4
    training, par = job.training, job.parallelism
    compiled = bool(training.compile)
    fwd_tok, bwd_tok = F.elementwise_bytes_fwd_bwd(
        model, act_bytes=shape.act_bytes, tp=shape.tp, sequence_parallel=par.sequence_parallel,
        per_element=None if stack is None else stack.bytes_per_element, compiled=compiled,
        autocast=autocast)
    moved = (fwd_tok + bwd_tok) * shape.tokens * shape.stage_layers
    # the recompute runs the forward kernels once more, in the recomputed blocks
    moved += fwd_tok * shape.tokens * shape.stage_layers * shape.recompute_share
    # a compiled model compiles its loss too unless the job says not (training.compile_loss
    # false: the loss runs eager beside the compiled blocks)
    moved += F.loss_bytes_per_token(model.vocab_size, stack_loss(training, stack),
                                    compiled=compiled and training.compile_loss is not False) \
        * shape.tokens / shape.tp
    if training.attention == "eager":
        # a stack whose eager attention runs its own fused scale-mask-softmax gives the
        # chain's (forward, backward) bytes per score (stacks.toml elementwise_bytes
        # scores / scores_backward, e.g. Megatron's ScaledUpperTriangMaskedSoftmax), and
        # the eager fp32 chain's where the fused kernel's shape constraints fail
        # (fmest.stacks.scores_bytes)
        stack_bytes = scores_bytes(
            training, stack, heads_per_rank=max(model.num_attention_heads // shape.tp, 1),
            seq_len=shape.seq_len)
        scores = F.eager_attention_bytes_per_token_per_layer(
            model.num_attention_heads / shape.tp, shape.seq_len, compiled=compiled,
            stack_bytes=stack_bytes)
        fwd_share = 1.0 / (1.0 + F.ELEMENTWISE_BACKWARD_FACTOR["scores"]) \
            if stack_bytes is None else stack_bytes[0] / sum(stack_bytes)
        moved += scores * shape.tokens * shape.stage_layers * (
            1.0 + fwd_share * (1.0 if "core_attn" in shape.selective_modules
                               else shape.recompute_share))
    # PEFT modules_to_save trains a copy of the embedding: its backward writes a dense
    # vocabulary x hidden gradient every micro-batch (aten embedding_dense_backward: zeros,
    # then the tokens' rows added)
    if "embedding" in (training.lora_modules_to_save or ()) \
            and training.technique in ("lora", "qlora"):
        moved += model.vocab_size * model.hidden_size / shape.tp * shape.act_bytes
    # the model's own dropout (attention probabilities of eager attention, the two branch
    # outputs before the residual adds); Inductor fuses it into the compiled chains
    if not compiled and model.dropout > 0:
        s_fwd, s_bwd, h_fwd, h_bwd = F.dropout_bytes_per_token_per_layer(
            probability=model.dropout, heads=model.num_attention_heads / shape.tp,
            seq_len=shape.seq_len, eager_scores=training.attention == "eager",
            hidden=model.hidden_size / (shape.tp if par.sequence_parallel else 1),
            fused_residual=stack is not None and stack.fuses("residual"))
        score_again = 1.0 if "core_attn" in shape.selective_modules else shape.recompute_share
        moved += (s_fwd * (1.0 + score_again) + s_bwd
                  + h_fwd * (1.0 + shape.recompute_share) + h_bwd) \
            * shape.tokens * shape.stage_layers
    # the LoRA layer's own casts, dropout, scaling and add around each adapted linear
    # (forward, backward, and the recompute's forward under full checkpointing)
    lora_fwd, lora_bwd = lora_elementwise_bytes(training, shape, stack, matmuls.lora_modules,
                                                precision=precision, adapter_fp32=adapter_fp32)
    moved += lora_fwd * (1.0 + shape.recompute_share) + lora_bwd
    moved += megatron_module_bytes(training, model, shape, par.sequence_parallel)
    # PEFT's k-bit preparation: the fp32 residual stream's casts and fp32 elementwise chains
    kbit_fwd, kbit_bwd = kbit_prep_elementwise_bytes(training, model, shape, stack,
                                                     matmuls.lora_modules)
    moved += kbit_fwd * (1.0 + shape.recompute_share) + kbit_bwd
    accum = shape.grad_accum
    if hp_grad_accum_bytes(training, stack):
        # the stack's optimizer folds every micro-batch's low-precision gradients into its
        # fp32 copy (DeepSpeed BF16_Optimizer.update_hp_grads), the first micro-batch included
        moved += hp_grad_accum_bytes(training, stack) \
            * local_trainable_params(model, training, shape)
    elif accum > 1 and not wgrad_accumulation_fused(training, stack):
        # gradient accumulation: read-add-write the gradient buffer per micro-batch; a stack
        # whose weight-gradient GEMM accumulates into the main gradient in place (stacks.toml
        # wgrad_accumulation_fused: Megatron-Core gradient_accumulation_fusion) has no such pass
        grad_local = local_trainable_params(model, training, shape)
        moved += 3 * comm.grad_bytes_per_element * grad_local * (accum - 1) / accum
    hbm = rates.hbm_bytes_per_s
    # gradient accumulation runs in autograd's AccumulateGrad, outside the compiled graph
    return F.memory_bound_seconds(moved, hbm) \
        + F.memory_bound_seconds(matmuls.dequant_bytes, hbm) \
        + F.memory_bound_seconds(matmuls.fp8_cast_bytes, hbm)


@frozen(kw_only=True)
class ModelParallelComm:
    """Exposed seconds per micro-batch of the model-parallel groups (+ ring-attention merges)."""

    tp: float = 0.0
    ep: float = 0.0
    pp: float = 0.0
    cp: float = 0.0
    cp_memory_seconds: float = 0.0


def _links(gpu, gpus_per_node):
    def link(size, stride):
        inter = F.group_is_inter_node(size, stride, gpus_per_node)
        return inter, F.link_bytes_per_s(gpu, inter_node=inter, size=size,
                                         nodes=F.group_nodes(size, stride, gpus_per_node))
    return link


def _tp_seconds(job, model, shape: StepShape, link) -> float:
    """Tensor-parallel all-reduces (or SP all-gather + reduce-scatter, Korthikanti et al. 2022
    section 4.2.2), 2 per pass per layer; float8 TP gathers fp8 (formulas
    .tp_all_gather_bytes_per_element); fwd + bwd (+ recompute) passes, not overlapped."""
    inter, bandwidth = link(shape.tp, 1)
    passes = 2 + shape.recompute_share
    act_elems = shape.tokens * model.hidden_size
    if job.parallelism.sequence_parallel:
        gather_b = F.tp_all_gather_bytes_per_element(shape.linear_dtype, shape.act_bytes)
        per_pass = 2 * (F.all_gather_seconds(act_elems * gather_b, shape.tp, bandwidth, inter)
                        + F.reduce_scatter_seconds(act_elems * shape.act_bytes, shape.tp,
                                                   bandwidth, inter))
    else:
        per_pass = 2 * F.all_reduce_seconds(act_elems * shape.act_bytes, shape.tp, bandwidth,
                                            inter)
    return passes * shape.stage_layers * per_pass


def model_parallel_comm(job, model, shape: StepShape, attention: AttentionTimes, gpu,
                        layout, rates: Rates, stack=None,
                        matmul_seconds: float = 0.0) -> ModelParallelComm:
    """Phase 5: TP, EP all-to-all (GShard), PP point-to-point and CP ring attention
    (formulas.ring_attention_costs) per micro-batch. A stack that overlaps TP communication
    with the GEMMs (Megatron ``--tp-comm-overlap`` userbuffers, torchtitan async TP) hides it
    behind ``matmul_seconds`` (formulas.exposed_comm_seconds: the part that does not fit plus
    the interference share); one that overlaps pipeline p2p (Megatron ``overlap_p2p_comm``)
    hides the sends behind the micro-batch's compute."""
    gpn, link = layout.gpus_per_node, _links(gpu, layout.gpus_per_node)
    tp_t = _tp_seconds(job, model, shape, link) if shape.tp > 1 else 0.0
    if tp_t and stack is not None and stack.overlaps("tp"):
        tp_t = F.exposed_comm_seconds(tp_t, matmul_seconds)
    ep_t = pp_t = cp_t = cp_mem = 0.0
    if shape.ep > 1 and model.is_moe:
        # the dispatcher the job states (alltoall, DeepEP/HybridEP) and Megatron's EP
        # all-to-all overlap behind the micro-batch's GEMMs (--overlap-moe-expert-parallel-comm)
        ep_t = moe_dispatch_seconds(
            model, shape, gpu, gpn, dispatcher=job.parallelism.moe_dispatcher,
            overlap_window=matmul_seconds if job.parallelism.moe_a2a_overlap else None)
    if shape.pp > 1:
        inter = F.group_is_inter_node(shape.pp, shape.tp * shape.cp * shape.dp, gpn)
        bandwidth = F.link_bytes_per_s(gpu, inter_node=inter, size=2, nodes=2)  # one hop
        pp_t = 2 * F.p2p_seconds(shape.tokens * model.hidden_size * shape.act_bytes / shape.tp,
                                 bandwidth, inter)
        if stack is not None and stack.overlaps("pp_p2p"):
            pp_t = F.exposed_comm_seconds(pp_t, matmul_seconds)
    if shape.cp > 1 and stack is not None and stack.profile.attention_kernel == "te-fused":
        # Transformer Engine's DotProductAttention runs the CP ring itself (p2p, GQA K,V)
        p_inter = F.group_is_inter_node(2, shape.tp, gpn)
        p_bw = F.link_bytes_per_s(gpu, inter_node=p_inter, size=2, nodes=2)
        ring = F.te_p2p_ring_attention_costs(
            cp=shape.cp, tokens=shape.tokens, q_heads=model.num_attention_heads / shape.tp,
            kv_heads=max(1.0, (model.num_kv_heads or model.num_attention_heads) / shape.tp),
            head_dim=model.qk_head_dim or model.head_dim, act_bytes=shape.act_bytes,
            fwd_seconds=attention.forward / shape.stage_layers,
            bwd_seconds=attention.backward / shape.stage_layers,
            recompute=shape.checkpointing == "full"
            or "core_attn" in shape.selective_modules,
            p2p_bytes_per_s=p_bw, p2p_inter_node=p_inter)
        cp_t = ring["exposed_seconds"] * shape.stage_layers
        cp_mem = F.memory_bound_seconds(ring["memory_bytes"] * shape.stage_layers,
                                        rates.hbm_bytes_per_s)
    elif shape.cp > 1:  # ring attention (PyTorch context_parallel)
        g_inter, g_bw = link(shape.cp, shape.tp)
        p_inter = F.group_is_inter_node(2, shape.tp, gpn)
        p_bw = F.link_bytes_per_s(gpu, inter_node=p_inter, size=2, nodes=2)
        ring = F.ring_attention_costs(
            cp=shape.cp, tokens=shape.tokens, q_heads=model.num_attention_heads / shape.tp,
            head_dim=model.qk_head_dim or model.head_dim, act_bytes=shape.act_bytes,
            fwd_seconds=attention.forward / shape.stage_layers,
            bwd_seconds=attention.backward / shape.stage_layers,
            recompute=shape.checkpointing == "full"
            or "core_attn" in shape.selective_modules,
            gather_bytes_per_s=g_bw, p2p_bytes_per_s=p_bw, gather_inter_node=g_inter,
            p2p_inter_node=p_inter)
        cp_t = ring["exposed_seconds"] * shape.stage_layers
        # the ring merges run in eager PyTorch (a graph break under torch.compile)
        cp_mem = F.memory_bound_seconds(ring["memory_bytes"] * shape.stage_layers,
                                        rates.hbm_bytes_per_s)
    return ModelParallelComm(tp=tp_t, ep=ep_t, pp=pp_t, cp=cp_t, cp_memory_seconds=cp_mem)


def _phase_totals(priced, phase: str) -> tuple[float, float, float]:
    """(overlappable gathers, overlappable reductions, non-overlappable seconds) of the
    collectives ``priced`` = ((collective, seconds), ...) issued in ``phase``."""
    mine = [(coll, sec) for coll, sec in priced if coll.phase == phase]
    gathers = sum(sec for coll, sec in mine if coll.overlappable and coll.kind not in _REDUCTIONS)
    reductions = sum(sec for coll, sec in mine if coll.overlappable and coll.kind in _REDUCTIONS)
    direct = sum(sec for coll, sec in mine if not coll.overlappable)
    return gathers, reductions, direct


def _phase_sums(totals: tuple[float, float, float], window: float, tail: float):
    """(exposed part of the overlappable collectives, non-overlappable seconds, gathers,
    reductions) of one phase (``totals``: :func:`_phase_totals`); the overlappable ones hide
    behind the phase's compute except the first gather / last reduction (``tail``)."""
    gathers, reductions, direct = totals
    hidden = F.exposed_comm_seconds((gathers + reductions) * (1 - tail), window)
    return hidden, direct, gathers, reductions


def _exposed_seconds(totals: dict, windows: dict, tail: float) -> float:
    """Exposed seconds of collectives issued once (per micro-batch or per step) in forward
    and backward, ``totals``: phase -> :func:`_phase_totals`."""
    fwd_hidden, fwd_direct, fwd_gathers, fwd_reductions = _phase_sums(
        totals["forward"], windows["forward"], tail)
    bwd_hidden, bwd_direct, bwd_gathers, bwd_reductions = _phase_sums(
        totals["backward"], windows["backward"], tail)
    return fwd_hidden + fwd_direct + bwd_direct + bwd_hidden \
        + ((fwd_gathers + bwd_gathers) + (fwd_reductions + bwd_reductions)) * tail


#: (id(plan), id(gpu), gpus per node) -> (plan, gpu, its priced totals): the collectives'
#: seconds read only the communication plan, the GPU (both frozen records, the context's
#: own, the same for every estimate of a context, each micro-batch candidate included) and
#: the node size; the entry keeps both records alive and checks identity, so an id cannot
#: name another record
_PRICED: dict[tuple, tuple[object, object, tuple]] = {}


def _priced_totals(comm: CommunicationPlan, gpu, gpus_per_node: int) -> tuple:
    """(per-micro-batch totals, per-step totals, seconds after the step) of the plan's
    collectives priced as ring collectives (phase totals: :func:`_phase_totals`)."""
    key = (id(comm), id(gpu), gpus_per_node)
    hit = _PRICED.get(key)
    if hit is not None and hit[0] is comm and hit[1] is gpu:
        return hit[2]
    link = _links(gpu, gpus_per_node)

    def price(coll):
        inter, bandwidth = link(coll.group_size, coll.group_stride)
        return coll, _COLLECTIVE_SECONDS[coll.kind](coll.payload_bytes, coll.group_size,
                                                    bandwidth, inter)

    priced = [price(coll) for coll in comm.collectives]
    per_mb = [(coll, sec) for coll, sec in priced if coll.per_micro_batch]
    per_step = [(coll, sec) for coll, sec in priced
                if not coll.per_micro_batch and coll.phase != "step"]
    after_step = sum(sec for coll, sec in priced if coll.phase == "step")
    value = ({phase: _phase_totals(per_mb, phase) for phase in ("forward", "backward")},
             {phase: _phase_totals(per_step, phase) for phase in ("forward", "backward")},
             after_step)
    if len(_PRICED) >= 256:
        _PRICED.clear()
    _PRICED[key] = (comm, gpu, value)
    return value


def data_parallel_seconds(comm: CommunicationPlan, shape: StepShape, gpu, layout,
                          per_mb_seconds: float, fwd_share: float) -> float:
    """Phase 6: the communication transform's collectives (ctx.transforms.communication),
    priced as ring collectives and overlapped with the compute of their phase up to its
    length (formulas.exposed_comm_seconds); step-phase collectives are exposed."""
    if not comm.collectives:
        return 0.0
    per_mb, per_step, after_step = _priced_totals(comm, gpu, layout.gpus_per_node)
    fwd_mb = per_mb_seconds * fwd_share
    windows = {"forward": fwd_mb, "backward": per_mb_seconds - fwd_mb}
    tail = 1.0 / max(1.0, shape.stage_layers)  # first gather / last reduce cannot overlap
    return shape.grad_accum * _exposed_seconds(per_mb, windows, tail) \
        + _exposed_seconds(per_step, windows, tail) + after_step


def forward_only_passes(job) -> float:
    """Forwards of the micro-batch a preference step adds without gradients (0 for ``lm``):
    the sequences of its no-grad passes over the sequences trained (fmest.objectives)."""
    training = job.training
    return sum(no_grad_calls(training)) / sequences_per_sample(training.objective)


def forward_only_seconds(job, comm: CommunicationPlan, shape: StepShape, gpu, layout,
                         forward_seconds: float) -> float:
    """The no-grad forward passes of a preference step (fmest.objectives: DPO's reference pass
    over the pair, KTO's KL and reference passes), per optimizer step. Each pass is the
    forward of the policy's micro-batch (its GEMMs and attention, the forward share of its
    memory-bound kernels and ring traffic, one pipeline hop: ``forward_seconds`` for the whole
    micro-batch; its TP/EP collectives are in their own parts) scaled by its sequences, and
    repeats the forward-phase parameter gathers of a ZeRO-3/FSDP plan (the
    copy is sharded like the policy; the adapter-disabled policy is the policy), overlapped
    with that pass as in :func:`data_parallel_seconds`. The LoRA matmuls an adapter-disabled
    pass skips are counted (a few percent of a pass)."""
    training = job.training
    calls = no_grad_calls(training)
    if not calls:
        return 0.0
    per_seq = forward_seconds / sequences_per_sample(training.objective)
    gathers = CommunicationPlan(collectives=tuple(
        c for c in comm.collectives if c.per_micro_batch and c.phase == "forward"))
    total = 0.0
    for seqs in calls:
        seconds = per_seq * seqs
        total += shape.grad_accum * seconds
        if gathers.collectives:
            total += data_parallel_seconds(gathers, shape, gpu, layout, seconds, 1.0)
    return total


def local_trainable_params(model, training, shape: StepShape) -> float:
    """Trainable parameters held by one GPU: split over tensor and pipeline parallelism, and
    expert weights also over expert parallelism (each EP rank owns ``experts / ep`` experts:
    Megatron-Core ``MoELayer`` local experts; the memory plugin shards them the same way)."""
    trainable = trainable_params(model, training)
    if (shape.ep > 1 or shape.etp != shape.tp) and training.technique == "full":
        # expert weights over ep x the experts' tensor-parallel size (parallelism.expert_tp)
        experts = model.param_counts().experts
        trainable -= experts * (1.0 - shape.tp / (shape.ep * shape.etp))
    return trainable / (shape.tp * shape.pp)


def optimizer_and_offload_seconds(job, model, shape: StepShape, transforms: Transforms, gpu,
                                  layout, memory, rates: Rates, compute_mb: float, *,
                                  optimizer_name: str = "") -> tuple[float, float, list]:
    """Phase 7: (optimizer step, exposed offload, notes). The update streams the optimizer
    transform's bytes per parameter (formulas.optimizer_update_bytes_per_param) over the
    sharded trainable parameters, at the bandwidth fraction the optimizer's kernels reach
    (formulas.optimizer_bandwidth_fraction; ``optimizer_name``: the catalogue name of
    ``ctx.optimizer``); ZeRO-Offload runs it on the host CPUs instead, with
    gradients down and parameters up over PCIe; activation offload streams the saved
    activations out and back on their own streams."""
    training, par, sizing = job.training, job.parallelism, transforms.optimizer
    notes = []
    train_local = local_trainable_params(model, training, shape)
    opt_params = train_local / transforms.sharding.optimizer_divisor
    offload = 0.0
    fsdp_params = par.cpu_offload == "params" and par.fsdp != "none"
    if par.cpu_offload in ("optimizer", "params"):
        # FSDP keeps the updated parameter shard on the host: only gradients go down
        moved = sizing.grad_bytes + (0 if fsdp_params else shape.act_bytes)
        offload += F.pcie_seconds(opt_params * moved, gpu)
        opt_t = opt_params * min(layout.gpus_per_node, layout.world_size) \
            / F.CPU_ADAM_PARAMS_PER_S_PER_NODE
        if fsdp_params:
            h2d = fsdp_offload_h2d_bytes(model, training, sizing, shape,
                                         max(1.0, transforms.sharding.params_divisor))
            offload += shape.grad_accum * F.exposed_comm_seconds(F.pcie_seconds(h2d, gpu),
                                                                 compute_mb)
            notes.append("FSDP CPU offload: each unit's parameter shard is copied to the GPU "
                         "before its forward and its backward (packed 4-bit QLoRA weights at "
                         "their stored bytes), on FSDP's pre-unshard stream beside compute")
        elif par.cpu_offload == "params":  # parameters stream in for forward and backward
            params_local = total_params(model, training) / (shape.tp * shape.pp)
            offload += shape.grad_accum * F.pcie_seconds(
                2 * (shape.act_bytes * params_local)
                / max(1, transforms.sharding.optimizer_divisor), gpu)
        notes.append("CPU offload: optimizer update on the host CPU (ZeRO-Offload CPU-Adam rate)")
    else:
        # (an own-kernel optimizer's sizing names its kernel: OptimizerSpec.own_kernel)
        impl = sizing.impl
        per_param = F.optimizer_update_bytes_per_param(
            states=sizing.states, state_bytes=sizing.state_bytes + sizing.state_overhead_bytes,
            param_bytes=sizing.trainable_bytes, grad_bytes=sizing.grad_bytes,
            master_bytes=sizing.master_bytes, impl=impl)
        # at the bandwidth the optimizer's kernels reach (torch AdamW: measured; others: the
        # streaming HBM efficiency)
        opt_t = F.memory_bound_seconds(
            opt_params * per_param, rates.hbm_bytes_per_s,
            efficiency=F.optimizer_bandwidth_fraction(optimizer_name, impl,
                                                      sizing.trainable_bytes,
                                                      sizing.master_bytes, gpu_name=gpu.name))
    if training.activation_offload:
        acts = _activation_bytes(memory, model, shape.tokens, shape.stage_layers,
                                 shape.act_bytes) if shape.recompute_share < 1.0 else 0.0
        if shape.checkpointing == "full":  # the recomputed blocks' layer inputs
            acts = acts * (1.0 - shape.recompute_share) + shape.recompute_share \
                * shape.act_bytes * shape.tokens * model.hidden_size * shape.stage_layers
        pcie = 2 * F.pcie_seconds(acts, gpu)  # out in forward, back in backward (own streams)
        offload += shape.grad_accum * max(0.0, pcie - compute_mb)
    return opt_t, offload, notes


def fsdp_offload_h2d_bytes(model, training, sizing, shape: StepShape, shards: float) -> float:
    """Host-to-device bytes of PyTorch FSDP's parameter CPU offload per micro-batch on one GPU.

    FSDP1 keeps each unit's parameter shard pinned on the host
    (``FlatParamHandle.init_flat_param_attributes``: ``_local_shard.pin_memory()``) and, before
    every unshard, ``pre_unshard`` copies it to the GPU (``flat_param_to(device,
    non_blocking=True)``) on ``state._pre_unshard_stream`` ("CPU offloading (H2D copy)"), which
    the all-gather's unshard stream waits on; every reshard points the parameter back at the
    host shard (``reshard`` -> ``_use_sharded_flat_param``, "implicitly offloads the sharded flat
    parameter"), the root's after forward too (``_post_forward_reshard`` only keeps its unsharded
    copy), so every unit, root included, is copied before its forward and again before its
    backward (pytorch/pytorch v2.2.0 torch/distributed/fsdp/_runtime_utils.py ``_unshard``,
    ``_post_forward_reshard``; _flat_param.py). What moves is the shard as stored: a QLoRA
    linear's packed 4-bit values (``bnb_4bit_quant_storage`` = the compute dtype, 2 values per
    byte: ``bits / 8`` bytes per parameter; the quantization constants are not parameters and
    never move), the other tensors (norms counted with the blocks) at the stored weights' bytes
    (``sizing.weight_bytes``: fp32 under full ``amp`` training, whose ``_use_low_precision_shard``
    copies the fp32 shard up before the cast), the LoRA adapters at ``sizing.trainable_bytes``."""
    counts = model.param_counts()
    blocks = counts.attention + counts.mlp + counts.experts
    quantized = blocks if quantized_base(training) else 0.0
    per_q = training.quantization_bits / 8
    block_bytes = quantized * per_q + (blocks - quantized + counts.norms + counts.other) \
        * sizing.weight_bytes
    adapters = (trainable_params(model, training) * sizing.trainable_bytes
                if training.technique != "full" else 0.0)
    root = (counts.embedding + counts.head) * sizing.weight_bytes
    return 2 * (block_bytes + adapters + root) / (shape.tp * shape.pp) / shards


def _flops_figures(model, training, shape: StepShape, lora_mods, step: float, gpu,
                   layout) -> dict:
    """Model/hardware FLOPs per step and MFU/HFU at the nominal (undereated) peak, and the
    dataset tokens of a step (``physics.counting.tokens_per_sample``: what tokens/s and the
    total steps count; the FLOPs run over the layers' own lengths, ``shape.seq_len``)."""
    flops = F.training_flops_per_token(model, seq_len=shape.seq_len, technique=training.technique,
                                       lora_modules=lora_mods, lora_rank=training.lora_rank,
                                       checkpointing=shape.checkpointing)
    samples = shape.micro_batch * shape.grad_accum * shape.dp
    layer_tokens = samples * shape.seq_len
    nominal_peak = gpu.peak_flops_per_s(matmul_dtype(training, gpu))
    model_flops = flops["model"] * layer_tokens
    # full checkpointing of a share of the blocks recomputes that share
    recompute = flops["recompute"] * (shape.recompute_share if shape.checkpointing == "full"
                                      else 1.0)
    if shape.checkpointing == "selective" and shape.selective_modules != {"core_attn"}:
        # Megatron-Core recompute_modules: the attention core only when listed, plus the
        # forward FLOPs of the recomputed linears
        recompute = (recompute if "core_attn" in shape.selective_modules else 0.0) \
            + F.selective_recompute_linear_flops_per_token(model, shape.selective_modules)
    hw_flops = (flops["model"] + recompute) * layer_tokens
    return {"tokens_per_step": samples * tokens_per_sample(model, training),
            "samples_per_step": samples,
            "flops_per_step": model_flops, "hardware_flops_per_step": hw_flops,
            "mfu": model_flops / (step * layout.world_size * nominal_peak),
            "hfu": hw_flops / (step * layout.world_size * nominal_peak)}


def step_breakdown(job, ctx, memory=None) -> Optional[dict]:
    """Seconds of one optimizer step by component, with FLOPs and notes (phases above).

    Returns ``None`` when the GPU table lacks the peak FLOP/s or HBM bandwidth needed.
    """
    model, gpu, layout = ctx.model, ctx.gpu, ctx.layout
    transforms = transforms_of(job, ctx)
    stack = transforms.stack
    shape = step_shape(job, model, layout, stack)
    rates = device_rates(job, gpu, stack, model, kernel_seq_len(shape))
    if rates is None:
        return None
    matmuls = matmul_times(job, model, shape, rates, stack)
    attention = attention_times(job, model, shape, rates, gpu)
    mem_t = memory_bound_seconds(job, model, shape, rates, matmuls, transforms.communication,
                                 stack, sizing=transforms.optimizer)
    compute_mb = matmuls.forward + matmuls.backward + matmuls.recompute + attention.forward \
        + attention.backward + attention.recompute
    fwd_share = (matmuls.forward + attention.forward) / max(compute_mb, 1e-30)
    mp = model_parallel_comm(job, model, shape, attention, gpu, layout, rates, stack,
                             matmuls.forward + matmuls.backward + matmuls.recompute)
    if shape.cp > 1:
        mem_t += mp.cp_memory_seconds
    per_mb = compute_mb + mem_t + mp.tp + mp.ep + mp.pp + mp.cp
    accum, par = shape.grad_accum, job.parallelism
    # a preference step's no-grad passes (fmest.objectives), in micro-batch forwards: each
    # runs the micro-batch's GEMMs and attention, the forward share of the memory-bound
    # kernels and ring traffic and one of the two pipeline hops (reference_forward), and one
    # more of the TP/EP passes (2 + recompute per micro-batch), counted in their own parts;
    # in a pipeline they are micro-batches of the schedule like the trained ones
    passes = forward_only_passes(job)
    tp_passes = 2 + shape.recompute_share
    forward_mb = matmuls.forward + attention.forward + (mem_t + mp.cp) * fwd_share + mp.pp / 2
    reference_t = forward_only_seconds(job, transforms.communication, shape, gpu, layout,
                                       forward_mb) if passes else 0.0
    # its GEMM/attention and memory-bound shares, for the planner's per-token probes
    reference_metrics = {
        "reference_forward_compute": accum * passes * (matmuls.forward + attention.forward),
        "reference_forward_memory_bound": accum * passes * (mem_t + mp.cp) * fwd_share,
    } if passes else {}
    # the GEMMs' share of the micro-batch's compute: the window TP and PP traffic overlaps
    # (model_parallel_comm), for the planner's arrays (fmest.plan.vector)
    matmul_mb = matmuls.forward + matmuls.backward + matmuls.recompute
    reference_metrics["matmul_share"] = matmul_mb / compute_mb if compute_mb > 0 else 1.0
    scheduled_mb = per_mb + passes * (forward_mb + (mp.tp + mp.ep) / tp_passes)
    # the GPU's waits on the host after each MoE layer's dispatcher sync lengthen every
    # micro-batch, in the pipeline's fill and drain too
    sync_wait = moe_sync_wait_seconds(job, model, shape, stack,
                                      gpu_mb=per_mb - mp.pp, fwd_share=fwd_share,
                                      gpu_name=gpu.name)
    scheduled_mb += sync_wait
    if sync_wait > 0.0:
        # the syncs' wait per step (in framework_overhead), for the planner's probes: its
        # arrays compute the wait per configuration (fmest.plan.vector.moe_sync_wait_seconds)
        reference_metrics = {**reference_metrics, "moe_sync_wait": accum * sync_wait}
    bubble = F.pipeline_bubble_fraction(shape.pp, accum, schedule=par.pp_schedule,
                                        virtual_stages=par.pp_virtual_stages) \
        * accum * scheduled_mb
    dp_t = data_parallel_seconds(transforms.communication, shape, gpu, layout, per_mb,
                                 fwd_share)
    opt_t, offload, opt_notes = optimizer_and_offload_seconds(
        job, model, shape, transforms, gpu, layout, memory, rates, compute_mb,
        optimizer_name=getattr(ctx.optimizer, "name", ""))
    parts = {
        "compute": accum * compute_mb, "memory_bound": accum * mem_t,
        "communication_tp": accum * mp.tp * (1 + passes / tp_passes),
        "communication_ep": accum * mp.ep * (1 + passes / tp_passes),
        "communication_pp": accum * mp.pp, "communication_cp": accum * mp.cp,
        "communication_dp": dp_t, "pipeline_bubble": bubble, "optimizer_step": opt_t,
        "offload": offload,
    }
    if reference_t:
        parts["reference_forward"] = reference_t
    busy = sum(parts.values())
    parts["framework_overhead"] = busy * F.FRAMEWORK_OVERHEAD_FRACTION \
        / (1.0 - F.FRAMEWORK_OVERHEAD_FRACTION)
    # launch and framework overhead includes the MoE dispatcher syncs' exposed host time
    parts["framework_overhead"] += accum * sync_wait
    host = eager_host_seconds(job, model, shape, stack, matmuls.lora_modules)
    # the optimizer's kernels run once the backward's last kernel has been issued and run: on
    # a host-bound step they follow the host's dispatch instead of hiding under it
    host_bound = host + opt_t > busy + parts["framework_overhead"]
    if host_bound:
        # the GPU waits for the host to dispatch eager ops: the step is the host's time, then
        # the optimizer step
        parts["framework_overhead"] = host + opt_t - busy
    stack_notes: list[str] = []
    if stack is not None:
        parts, stack_notes = apply_stack_time(job, model, shape, rates, matmuls, attention,
                                              transforms, stack, parts, gpu, layout, host=host)
    step = sum(parts.values())
    host_notes = [f"host-bound: eager PyTorch dispatches its ops in {host:.3g} s per step, more "
                  f"than the GPU's {busy - opt_t:.3g} s of forward and backward work "
                  f"(formulas.host_dispatch_seconds); the optimizer's {opt_t:.3g} s follow"] \
        if host_bound else []
    if sync_wait > 0:
        host_notes.append(f"MoE dispatcher host syncs: the GPU waits {accum * sync_wait:.3g} s per "
                          f"step for the host after each MoE layer's sync "
                          f"(formulas.moe_sync_exposed_seconds; in framework_overhead)")
    packed_note = packed_attention_note(job, stack)
    if packed_note is not None:
        host_notes.append(packed_note)
    figures = _flops_figures(model, job.training, shape, matmuls.lora_modules, step, gpu, layout)
    mfu_notes: list[str] = []
    if job.options.mfu is not None:
        parts, step, figures, mfu_notes = apply_mfu_override(job.options.mfu, parts, step,
                                                             figures)
    return {"breakdown": parts, "step_seconds": step, **figures, "metrics": reference_metrics,
            "notes": list(rates.notes) + opt_notes + stack_notes + host_notes + mfu_notes}


def apply_mfu_override(mfu: float, parts: dict, step: float,
                       figures: dict) -> tuple[dict, float, dict, list]:
    """``--mfu X`` states the model FLOPs utilisation of the whole step, so the step is
    ``flops_per_step / (X * nominal peak * GPUs)``: nothing is added on top (MFU already counts
    every part of the step). The roofline's parts keep their shares, scaled to that step, and
    the reported MFU is X (HFU keeps its ratio to MFU)."""
    roofline_mfu = figures["mfu"]
    new_step = step * roofline_mfu / mfu   # = flops_per_step / (mfu * peak * GPUs)
    factor = new_step / step
    scaled = {name: value * factor for name, value in parts.items()}
    out = dict(figures, mfu=mfu, hfu=figures["hfu"] / factor)
    note = (f"--mfu {mfu:g} sets the step: model FLOPs per step / ({mfu:g} x peak x GPUs) = "
            f"{new_step:.4g} s (the roofline's own step: {step:.4g} s, MFU "
            f"{roofline_mfu:.1%}); every part scaled x{factor:.3f} to it")
    return scaled, new_step, out, [note]


def eager_host_seconds(job, model, shape: StepShape, stack, lora_mods) -> float:
    """Host dispatch time of a step when the model code runs op by op (no torch.compile, a
    stack whose own code fuses nothing), else 0: fused and compiled stacks launch far fewer
    ops. Kernel chains fused on an eager stack by Liger or by the job
    (``training.liger``, ``training.fused_kernels``) dispatch the ops they replace fewer
    (formulas.EAGER_*_OPS_REPLACED_BY_FUSED). ``zero_stage`` 3 (DeepSpeed's spelling of
    parameter sharding; FSDP is ``fsdp``) adds ZeRO-3's per-module Python fetch/release hooks,
    which run even on one GPU."""
    if job.training.compile or stack_fuses_its_code(stack):
        return 0.0
    fused = stack.fused if stack is not None else frozenset()
    layers = model.num_layers / max(shape.pp, 1)
    # lora_modules lists one entry per adapted linear, with the layers it spans
    per_layer = sum(m.layers * (m.copies if m.kind == "expert" else 1)
                    for m in lora_mods) / max(model.num_layers, 1) if lora_mods else 0.0
    def host(checkpointing: str) -> float:
        return F.host_dispatch_seconds(layers=layers, checkpointing=checkpointing,
                                       lora_modules_per_layer=per_layer,
                                       micro_batches=shape.grad_accum,
                                       zero3_hooks=job.parallelism.zero_stage == 3,
                                       fused=fused)
    return _blend_recompute(shape, host)


def stack_fuses_its_code(stack) -> bool:
    """Whether the stack's own code runs fused kernels (its profile's ``fused``: Megatron-Core,
    torchtitan, ...), so no eager host floor is modelled; Liger's and the job's own kernels on
    an eager stack only shorten it (:func:`eager_host_seconds`)."""
    return stack is not None and bool(stack.profile.fused)


def _blend_recompute(shape: StepShape, seconds) -> float:
    """``seconds(checkpointing)`` of the step, with a share of the blocks under full
    checkpointing (``StepShape.recompute_share``) and the others not: the per-layer counts are
    linear in the layers, so the blend of the two counts."""
    if shape.checkpointing != "full" or shape.recompute_share >= 1.0:
        return seconds(shape.checkpointing)
    share = shape.recompute_share
    return share * seconds("full") + (1.0 - share) * seconds("none")


def moe_sync_wait_seconds(job, model, shape: StepShape, stack, *, gpu_mb: float,
                          fwd_share: float, gpu_name: str = "") -> float:
    """Seconds per micro-batch the GPU waits for the host at Megatron-Core's MoE dispatcher
    syncs (one per MoE layer forward, every dispatcher: formulas.moe_sync_exposed_seconds,
    ``MEGATRON_MOE_LAYER_HOST_OPS``), 0 for other stacks and dense models. ``gpu_mb``: the
    micro-batch's GPU seconds on the stage less its pipeline hops, spread evenly over the
    stage's layers, ``fwd_share`` of it forward. CUDA graphs and drop-and-pad, which remove
    host ops or the sync, are not job fields yet: every Megatron-Core MoE job pays it."""
    if stack is None or stack.name != "megatron-core" or not model.is_moe \
            or shape.stage_layers <= 0:
        return 0.0
    moe_share = (model.num_moe_layers or model.num_layers) / max(model.num_layers, 1)
    per_layer = gpu_mb / shape.stage_layers
    # CUDA graphs and drop-and-pad (training.cuda_graph_scope, moe_drop_and_pad): the captured
    # regions' host ops and the sync (formulas.moe_layer_host_profile)
    ops, sync, experts_eager = F.moe_layer_host_profile(
        job.training.cuda_graph_scope, drop_and_pad=job.training.moe_drop_and_pad,
        dispatcher=job.parallelism.moe_dispatcher)
    return F.moe_sync_exposed_seconds(
        host_ops=ops, sync=sync,
        moe_layers=shape.stage_layers * moe_share,
        gpu_forward_per_layer=per_layer * fwd_share,
        gpu_backward_per_layer=per_layer * (1.0 - fwd_share),
        recompute_share=shape.recompute_share,
        op_seconds=host_seconds_per_op(gpu_name),
        # TE GroupedLinear issues one cuBLASLt GEMM per local expert (formulas
        # .moe_expert_gemm_host_seconds)
        local_experts=(model.num_experts or 1) / max(1, shape.ep) if experts_eager else 1.0)


def deepspeed_pipeline_seconds(job, model, shape: StepShape, gpu, layout) -> float:
    """Seconds per micro-batch that DeepSpeed's ``PipelineEngine`` adds to the pipeline
    traffic ``model_parallel_comm`` charges (formulas.deepspeed_pipe_extra_seconds): its
    ``TrainSchedule`` runs blocking send/recv before each step's compute (4 transfers per
    micro-batch on a middle stage, not 2) and, with TP, rebuilds each TP-partitioned stage
    output and gradient by TP all-gathers. The hop and the TP group are priced as in
    ``model_parallel_comm``."""
    if shape.pp <= 1:
        return 0.0
    gpn = layout.gpus_per_node
    inter = F.group_is_inter_node(shape.pp, shape.tp * shape.cp * shape.dp, gpn)
    hop = F.link_bytes_per_s(gpu, inter_node=inter, size=2, nodes=2)
    tp_inter, tp_bw = _links(gpu, gpn)(shape.tp, 1)
    return F.deepspeed_pipe_extra_seconds(
        pp=shape.pp, tp=shape.tp,
        activation_bytes=shape.tokens * model.hidden_size * shape.act_bytes,
        p2p_bytes_per_s=hop, p2p_inter_node=inter, tp_bytes_per_s=tp_bw,
        tp_inter_node=tp_inter)


def deepspeed_zero3_host_serialized(job, shape: StepShape) -> bool:
    """Whether DeepSpeed ZeRO-3's fetch path ties the host to the GPU, so the hooks' host time
    adds to the step instead of hiding under the GPU's (:func:`apply_deepspeed_runtime`):
    ZeRO-3 over a data-parallel group of more than one rank (real all-gathers).

    From the code (deepspeedai/DeepSpeed @8640b8e52a93ba4e6b0da0e953c5761fc6977aa9, v0.12 era,
    deepspeed/runtime/zero/): ``PartitionedParameterCoordinator.fetch_sub_module``, the
    forward pre-hook of every submodule (and of its backward), records an event on the
    all-gather stream per fetched parameter and, with more than ``__max_ongoing_fetch_events``
    = 2 in flight, blocks the host on the oldest (``Event.synchronize``); the all-gathers
    share the data-parallel group's one NCCL stream with the gradient reduce-scatters, which
    wait for the compute stream (stage3.py ``__add_grad_to_ipg_bucket``:
    ``reduce_and_partition_stream.wait_stream(default_stream)``), and
    ``independent_gradient_partition_epilogue`` synchronizes the reduce stream every
    micro-batch; the HF "auto" prefetch bucket (0.9 h^2 elements) is smaller than one MLP
    weight, so at most the next parameter's gather runs ahead. The host therefore runs at
    most two fetched parameters (about two submodules) ahead of the gathers, and in backward
    of the compute: after each wait the GPU's queue is nearly empty while the hook's own
    Python (bookkeeping, prefetch walk, release, the backward-function wrappers:
    ``ZERO3_HOOK_OPS_PER_LAYER``) runs, so that hook time adds to the step. The module's own
    eager ops are still dispatched op by op while their kernels run (no wait between ops),
    so they keep overlapping: step = max(GPU, eager dispatch) + hooks. At world size 1 the
    handles are ``NoGatherHandle``s whose events complete at once (no NCCL work), so the
    hooks overlap too (max of GPU and all host time), as before."""
    return job.parallelism.zero_stage == 3 and shape.dp * shape.cp > 1


def apply_deepspeed_runtime(job, model, shape: StepShape, matmuls: MatmulTimes, stack,
                            parts: dict, gpu, layout,
                            host: Optional[float] = None) -> tuple[dict, list]:
    """DeepSpeed's runtime costs read from its code: the ``PipelineEngine``'s blocking p2p and
    partitioned-activation gathers per micro-batch (:func:`deepspeed_pipeline_seconds`, also
    in the bubble, which scales the scheduled micro-batch), and ZeRO-3's host/GPU
    serialization at world size > 1 (:func:`deepspeed_zero3_host_serialized`). The framework
    overhead share is then re-derived as in ``step_breakdown``: GPU work = busy / (1 -
    ``FRAMEWORK_OVERHEAD_FRACTION``), step = max(GPU work, host), or max(GPU work, host -
    hooks) + hooks where ZeRO-3 serializes its hooks (:func:`zero3_hook_host_seconds`).
    ``host``: :func:`eager_host_seconds` of the job when the caller has it (None: computed)."""
    notes: list[str] = []
    accum, par = shape.grad_accum, job.parallelism
    pipe = deepspeed_pipeline_seconds(job, model, shape, gpu, layout) \
        if stack.profile.pipeline_engine == "deepspeed" else 0.0
    if host is None:
        host = eager_host_seconds(job, model, shape, stack, matmuls.lora_modules)
    hooks = zero3_hook_host_seconds(job, model, shape, stack) \
        if host > 0 and deepspeed_zero3_host_serialized(job, shape) else 0.0
    if not pipe and not hooks:
        return parts, notes
    parts = dict(parts)
    if pipe:
        bubble = F.pipeline_bubble_fraction(shape.pp, accum, schedule=par.pp_schedule,
                                            virtual_stages=par.pp_virtual_stages)
        parts["communication_pp"] = parts.get("communication_pp", 0.0) + accum * pipe
        parts["pipeline_bubble"] = parts.get("pipeline_bubble", 0.0) + bubble * accum * pipe
        notes.append(f"DeepSpeed PipelineEngine: blocking send/recv "
                     f"({F.deepspeed_pipe_transfers(shape.pp)} transfers per micro-batch) and "
                     f"TP-partitioned activations add {accum * pipe * 1e3:.1f} ms "
                     f"(+ bubble share)")
    busy = sum(v for k, v in parts.items() if k != "framework_overhead")
    gpu_t = busy / (1.0 - F.FRAMEWORK_OVERHEAD_FRACTION)
    # the ZeRO-3 hooks' host time runs while the GPU waits; the eager ops' dispatch overlaps
    # their kernels (the larger of the two)
    opt = parts.get("optimizer_step", 0.0)   # after the host's last dispatch (step_breakdown)
    parts["framework_overhead"] = max(gpu_t, host - hooks + opt) + hooks - busy
    if hooks:
        notes.append(f"DeepSpeed ZeRO-3 over {shape.dp * shape.cp} ranks: the fetch hooks "
                     f"block the host on in-flight all-gathers, so their {hooks:.3g} s of host "
                     f"work adds to the step (eager dispatch {host - hooks:.3g} s, GPU "
                     f"{gpu_t:.3g} s: the larger)")
    return parts, notes


def zero3_hook_host_seconds(job, model, shape: StepShape, stack) -> float:
    """Host seconds of a step in DeepSpeed ZeRO-3's module hooks (``ZERO3_HOOK_OPS_PER_LAYER``
    x ``HOST_SECONDS_PER_EAGER_OP`` per layer and micro-batch: the part of
    :func:`eager_host_seconds` that ZeRO-3 adds), 0 where no eager host time is modelled."""
    if job.training.compile or stack_fuses_its_code(stack) \
            or job.parallelism.zero_stage != 3:
        return 0.0
    return _blend_recompute(shape, lambda checkpointing: F.zero3_hook_seconds(
        layers=model.num_layers / max(shape.pp, 1), checkpointing=checkpointing,
        micro_batches=shape.grad_accum))


def apply_stack_time(job, model, shape: StepShape, rates: Rates, matmuls: MatmulTimes,
                     attention: AttentionTimes, transforms: Transforms, stack, parts: dict,
                     gpu, layout, host: Optional[float] = None) -> tuple[dict, list]:
    """Phase 8: DeepSpeed's runtime costs (:func:`apply_deepspeed_runtime`), then the stack's
    fitted step-time factor (``stacks_fitted.json``; 1 = physics only) scales every part, and
    notes name what the stack fused and overlapped, each with the eager figure it replaced
    (the same phase functions run without the stack)."""
    parts, ds_notes = apply_deepspeed_runtime(job, model, shape, matmuls, stack, parts, gpu,
                                              layout, host=host)
    factor = stack.fitted.time_factor
    scaled = {name: value * factor for name, value in parts.items()}
    notes = [stack.summary(), *ds_notes]
    accum = shape.grad_accum
    # the eager figures only go into the notes below: each is computed when its note is
    # written (a stack that fuses nothing and keeps SDPA needs none of them)
    fused = [op for op in ("norm", "activation", "rope", "residual", "layout", "loss",
                           "fp8_cast") if stack.fuses(op)]
    attention_note = stack.profile.attention_kernel != "sdpa" \
        and job.training.attention != "eager"
    eager_rates = eager_kernel_rates(job, gpu, rates, model, kernel_seq_len(shape)) \
        if fused or attention_note else rates
    if fused:
        eager_mm = matmul_times(job, model, shape, eager_rates)
        eager_mem = memory_bound_seconds(job, model, shape, eager_rates, eager_mm,
                                         transforms.communication,
                                         sizing=transforms.optimizer)
        notes.append(f"{stack.name} fused {', '.join(fused)}: memory_bound "
                     f"{parts['memory_bound'] * 1e3:.1f} ms (eager kernels: "
                     f"{accum * eager_mem * 1e3:.1f} ms)")
    if attention_note:
        eager_att = attention_times(job, model, shape, eager_rates, gpu)
        notes.append(f"{stack.name} attention kernel {stack.profile.attention_kernel}: "
                     f"{accum * (attention.forward + attention.backward) * 1e3:.1f} ms "
                     f"(FlashAttention-2 figures: "
                     f"{accum * (eager_att.forward + eager_att.backward) * 1e3:.1f} ms)")
    hidden = [kind for kind in ("tp", "pp_p2p") if stack.overlaps(kind)
              and parts.get("communication_" + kind.split("_")[0], 0.0) > 0]
    dp_overlap = [kind for kind in ("dp_reduce", "dp_gather") if stack.overlaps(kind)]
    if hidden or dp_overlap:
        notes.append(f"{stack.name} overlapped with compute: "
                     f"{', '.join(hidden + dp_overlap)} (exposed share in communication_*)")
    if factor != 1.0:
        notes.append(f"every part x{factor:.3f}: {stack.name}'s fitted step-time factor "
                     f"({stack.fitted.origin}; docs/time_model.md 'Training stacks')")
    return scaled, notes


def workload_tokens(job, model=None) -> tuple[Optional[float], str]:
    """Tokens the run trains on (epochs included) and how they were obtained; ``None`` when
    the job has no workload. A ``dataset_path`` was counted into ``dataset_tokens`` at the
    input door (:func:`fmest.datasets.resolve_dataset`); this plugin reads no file.
    ``num_samples`` without ``avg_seq_len`` counts a full sample each (``tokens_per_sample``
    of ``model``: an encoder-decoder's source + target; ``seq_len`` without a model)."""
    w = job.workload
    if w.dataset_tokens is not None:
        return w.dataset_tokens * w.epochs, f"dataset_tokens {w.dataset_tokens:.4g} x epochs {w.epochs:g}"
    if w.num_samples is not None:
        full = tokens_per_sample(model, job.training) if model is not None \
            else job.training.seq_len
        avg = w.avg_seq_len if w.avg_seq_len is not None else full
        return w.num_samples * avg * w.epochs, (f"num_samples {w.num_samples} x avg_seq_len "
                                                f"{avg:g} x epochs {w.epochs:g}")
    return None, ""


def uncounted_dataset_note(job) -> Optional[str]:
    """Why a job sized by an uncounted ``dataset_path`` (a Job built in Python that skipped
    the input door) has no total steps; ``None`` otherwise."""
    if not job.workload.dataset_path:
        return None
    from fmest.datasets import needs_counting

    if not needs_counting(job.workload):
        return None
    return (f"no total steps: the dataset {job.workload.dataset_path} was not counted; count "
            "it at the input door (fmest.inputs, or fmest.datasets.resolve_dataset(job)) or "
            "give dataset_tokens")


def estimate_time(job, ctx, memory):
    """Roofline step time (see module doc); total time from the job's workload. Inference
    jobs: prefill + decode (fmest_time_roofline.inference)."""
    if job.mode == "inference":
        from fmest_time_roofline.inference import estimate_inference_time

        return estimate_inference_time(job, ctx, memory)
    if ctx.model.model_type == WEIGHTS_ONLY_MODEL_TYPE:
        # --params N: no dimensions, so no FLOPs nor activations to time (the model's warning
        # says so); an optimizer-only step and a 0 % MFU would be numbers it does not know
        return None
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
        uncounted = uncounted_dataset_note(job)
        if uncounted is not None:
            notes.append(uncounted)
        if tokens is not None:
            total_steps = float(math.ceil(tokens / res["tokens_per_step"]))
            per_sample = ("(source_len + target_len)" if ctx.model.is_encoder_decoder
                          else "seq_len")
            if sequences_per_sample(job.training.objective) > 1:
                per_sample = f"2 x {per_sample} (a chosen and a rejected sequence)"
            notes.append(f"total steps = ceil({how} / {res['tokens_per_step']:,} tokens per step "
                         f"(micro_batch x grad_accum x dp x {per_sample}, packed sequences))")
    if total_steps is not None:
        total_seconds = total_steps * res["step_seconds"]
    return TimeEstimate(
        step_seconds=res["step_seconds"],
        breakdown={k: v for k, v in res["breakdown"].items()
                   if v > 0 or k in ("compute", "memory_bound")},
        provenance=PROVENANCE,
        mfu=res["mfu"], hfu=res["hfu"], flops_per_step=res["flops_per_step"],
        total_seconds=total_seconds, total_steps=total_steps, notes=tuple(notes),
        metrics=dict(res.get("metrics") or {}))


def estimate_tokens(job, ctx, time):
    """Throughput implied by the chosen time estimate: tokens per step / step seconds
    (inference: generated tokens per second)."""
    if time is None or not time.step_seconds:
        return None
    if job.mode == "inference":
        from fmest_time_roofline.inference import estimate_inference_tokens

        return estimate_inference_tokens(job, ctx, time)
    tr, lay = job.training, ctx.layout
    samples = tr.micro_batch_size * tr.grad_accum_steps * lay.dp
    # as the total steps count them; padded batches count their real tokens (issue 20)
    tokens = samples * real_tokens_per_sample(ctx.model, job, transforms_of(job, ctx).stack)
    tps = tokens / time.step_seconds
    return TokensEstimate(
        tokens_per_second=tps, tokens_per_second_per_gpu=tps / lay.world_size,
        provenance=Provenance(basis=time.provenance.basis,
                              detail=f"{tokens:,} tokens per step / step seconds"),
        samples_per_second=samples / time.step_seconds, mfu=time.mfu, hfu=time.hfu)
