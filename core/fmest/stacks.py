"""Training stacks: the third transform axis (issue 12).

The same model, batch and layout costs different memory and time under different software.
A :class:`StackProfile` states what one framework does, with a source per value
(``core/fmest/data/stacks.toml``): which elementwise chains it fuses and what they then move
per element, its attention kernel, which collectives it overlaps with compute, what the
optimizer's ``auto`` implementation is, its default precision policy, whether gradients
accumulate in an fp32 buffer, its persistent workspaces and its fp8 recipe.

Profiles are registered through ``fmest_register_stacks`` (built-ins: the ``stacks`` default
plugin) and looked up case-insensitively by name or alias. The engine resolves the job's stack
(``training.stack``; default ``pytorch``) with the job's feature flags into a
:class:`ResolvedStack` and puts it on ``ctx.transforms.stack``; the stack is applied first (it
sets the default precision), then the optimizer, sharding and communication transforms
(:mod:`fmest.transforms`). Estimators ask the resolved stack (``bytes_per_element(op)``,
``overlaps(kind)``, ...) and never compare stack names.

Fitted constants (a small number, each fitted by a stated procedure and refitted per held-out
source by ``benchmarks/stack_fitting.py``) live in ``core/fmest/data/stacks_fitted.json``;
``$FMEST_FITTED_CONSTANTS`` (a JSON file whose ``stacks`` entry has the same shape) replaces
them, which is how the benchmark scores a source with constants fitted without it.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any, Mapping, Optional

import tomllib
from attrs import evolve, field, frozen

from fmest.errors import InputError

DATA = Path(__file__).resolve().parent / "data"
PROFILES_FILE = DATA / "stacks.toml"
FITTED_FILE = DATA / "stacks_fitted.json"
FITTED_ENV = "FMEST_FITTED_CONSTANTS"
DEFAULT_STACK = "pytorch"

#: Elementwise chains a stack may fuse (``lora``: the LoRA adapters' casts, dropout and adds
#: fused around the base GEMM, fms-acceleration's fused LoRA kernels; time_roofline
#: ``estimator.lora_elementwise_bytes``).
FUSIBLE = ("norm", "activation", "rope", "residual", "loss", "fp8_cast", "layout", "lora")
#: Collectives a stack may overlap with compute.
OVERLAPS = ("tp", "dp_reduce", "dp_gather", "fsdp_prefetch", "pp_p2p")
ATTENTION_KERNELS = ("sdpa", "flash", "te-fused", "eager")
#: How a stack puts the model in memory before training (host RAM at load time): every
#: process materialises the full model on the host (``per_process_full``, HF from_pretrained
#: without low_cpu_mem_usage), one copy per node (``one_per_node``), each rank builds only its
#: tensor/pipeline shard on the GPU (``per_rank_shard``, Megatron), or the model is built on the
#: meta device and materialised on the GPU (``meta_init``, torchtitan).
HOST_MODEL_COPIES = ("per_process_full", "one_per_node", "per_rank_shard", "meta_init")
FP8_RECIPES = ("none", "te-delayed", "te-current", "torchao-tensorwise", "torchao-rowwise")

#: Liger kernels (``training.liger``): fused RMSNorm, SwiGLU, RoPE and fused linear
#: cross-entropy, one read + one write per kernel (linkedin/Liger-Kernel
#: src/liger_kernel/ops/rms_norm.py, swiglu.py, rope.py, fused_linear_cross_entropy.py).
LIGER_FUSED = ("norm", "activation", "rope", "loss")
LIGER_BYTES = {"norm": 6.0, "activation": 6.0, "rope": 4.0}
#: A job's own fused kernels (``training.fused_kernels``, a subset of :data:`FUSIBLE`, where
#: the job model has that field): fms-acceleration's fused-ops-and-kernels plugin ("foak") puts
#: Unsloth's Triton RMSNorm, RoPE and cross-entropy kernels (``fast_rms_layernorm``,
#: ``fast_rope_embeddings``, ``fast_loss``) and, on a quantized base, its fused LoRA
#: (``fused_lora``) into HF Trainer runs (foundation-model-stack/fms-acceleration
#: 876e2ed6fc4e966785e3f4315f5ee3cdf8e3d097 plugins/fused-ops-and-kernels/src/
#: fms_acceleration_foak/models/llama.py, mistral.py, mixtral.py; kernels/unsloth/). One read +
#: one write per fused kernel, the bytes of the ``unsloth`` profile (stacks.toml) and Liger's.
FUSED_KERNEL_BYTES = dict(LIGER_BYTES)


#: pipeline runtimes a stack can name (``StackProfile.pipeline_engine``)
PIPELINE_ENGINES = ("", "deepspeed")
#: LoRA layer implementations a stack can name (``StackProfile.lora_impl``)
LORA_IMPLS = ("", "peft")
#: The counters a stack's own log line can print its peak memory from
#: (``StackProfile.memory_log_counter``): torch.cuda.max_memory_allocated / max_memory_reserved
MEMORY_LOG_COUNTERS = ("", "max_memory_allocated", "max_memory_reserved")
#: ... and the units it prints them in (``StackProfile.memory_log_unit``), bytes per unit:
#: ``GB`` is 10^9 bytes (``x / 1e9``), ``GiB`` 2^30 (``x / 1024**3``)
MEMORY_LOG_UNITS = {"": 0, "GB": 10**9, "GiB": 2**30}


def _subset(allowed):
    def check(inst, attribute, value):
        bad = sorted(set(value) - set(allowed))
        if bad:
            raise ValueError(f"StackProfile.{attribute.name}: {bad} not in {allowed}")
    return check


@frozen(kw_only=True)
class StackProfile:
    """What one training framework does (module doc). ``sources`` maps a field name to the
    public file or document its value comes from."""

    name: str
    title: str = ""
    aliases: tuple[str, ...] = ()
    fused: frozenset[str] = field(default=frozenset(), converter=frozenset,
                                  validator=_subset(FUSIBLE))
    elementwise_bytes: Mapping[str, float] = field(factory=dict)
    fp8_cast_bytes_per_element: Optional[float] = None
    attention_kernel: str = "sdpa"
    overlap: frozenset[str] = field(default=frozenset(), converter=frozenset,
                                    validator=_subset(OVERLAPS))
    overlap_needs_flag: frozenset[str] = field(default=frozenset(), converter=frozenset,
                                               validator=_subset(OVERLAPS))
    tp_comm_overlap_default: bool = False
    optimizer_impl: str = "foreach"
    auto_precision: Optional[str] = None
    fp32_grads: Optional[str] = None
    contiguous_grad_buffer: bool = False
    workspace_bytes: float = 0.0
    fp8_recipe: str = "none"
    host_model_copy: str = field(default="per_process_full")
    #: the stack's launcher sets ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``: the
    #: caching allocator's reserve follows the expandable-segments rule
    #: (fmest.physics.device_terms.allocator_reserve_bytes)
    expandable_segments: bool = False
    #: under ``training.compile`` the stack compiles its cross-entropy too: the ``standard``
    #: loss runs as Inductor's fused kernels (fmest.stacks.loss_compiled)
    compiles_loss: bool = False
    #: the weight-gradient GEMM accumulates into the fp32 main gradient in place (Megatron-Core
    #: gradient_accumulation_fusion): no read-add-write pass per accumulated micro-batch
    wgrad_accumulation_fused: bool = False
    #: fp8 weights (and their transposes) are cast once per step and reused by the other
    #: micro-batches (Transformer Engine ``is_first_microbatch``)
    fp8_weight_cast_per_step: bool = False
    #: how the stack's default collator forms batches (fmest.job.PADDINGS): a job's
    #: ``training.padding`` of None takes it; None: not stated (fixed shapes, every sample
    #: counted at ``seq_len``: what fmest did before the field)
    padding: Optional[str] = field(default=None)
    #: what attention sees in the stack's packed rows (fmest.job.PACKED_ATTENTIONS) when a
    #: job packs and states none; None: ``sequence``
    packed_attention: Optional[str] = field(default=None)
    #: gradient accumulation under FSDP's ``no_sync()`` (Lightning Fabric's
    #: ``no_backward_sync``): full unsharded gradients held until the last micro-batch
    fsdp_no_sync_accumulation: bool = False
    #: FSDP1 ``use_orig_params=True``: a FlatParameter holding any trainable tensor (LoRA A/B)
    #: gets a gradient the size of its whole unit
    fsdp_flat_param_grads: bool = False
    #: the quantization plugin replaces every linear, the output head included
    quantize_head: bool = False
    #: PyTorch FSDP1 with frozen per-block units (PEFT's wrap policy) under reentrant
    #: checkpointing: every block's recomputed input and its gradient live until the end of
    #: backward (memory_theory ``fsdp1_keeps_checkpoint_inputs``)
    fsdp1_frozen_units_keep_ckpt_inputs: bool = False
    #: the 4-bit matmul saves its input for backward (bitsandbytes 0.41.1 ``MatMul4Bit``)
    quant_saves_gemm_inputs: bool = False
    #: HBM bytes per trainable parameter that the stack's optimizer wrapper moves on EVERY
    #: micro-batch to fold the fresh low-precision gradients into its fp32 gradient copy, when
    #: it keeps fp32 gradients (``fp32_grads``); 0 = autograd's read-add-write of the gradient
    #: buffer (3 x gradient bytes on all but the first micro-batch). time_roofline
    #: ``memory_bound_seconds``
    hp_grad_accum_bytes: float = 0.0
    #: when it keeps fp32 gradients (``fp32_grads``), the stack's optimizer wrapper leaves the
    #: compute-dtype (bf16) ``param.grad`` of every parameter alive beside the fp32 accumulator
    #: from each backward through the step (DeepSpeed BF16_Optimizer under the PipelineEngine:
    #: ``update_hp_grads(clear_lp_grads=False)``): memory_theory counts one more unsharded
    #: gradient of the compute dtype (``estimator.model_state_terms``)
    lp_grads_kept: bool = False
    #: whose model code the stack runs: ``transformers`` (the model's transformers
    #: implementation, e.g. Llama 4's dense expert loop) or ``own`` (the stack's own model
    #: and MoE code: routed top-k experts)
    model_code: str = "transformers"
    #: the model code's norms compute in the activations' dtype (no fp32 upcast copy): what
    #: a norm saves is its input in the compute dtype (Lit-GPT ``RMSNorm``, ``nn.LayerNorm``)
    norm_keeps_compute_dtype: bool = False
    #: fused q/k/v projection split by views (Lit-GPT ``CausalSelfAttention``): the roped q
    #: and k are new tensors and, where v stays a view (MHA, MQA), attention keeps the whole
    #: fused qkv output alive; with grouped queries k and v are expanded copies
    fused_qkv_views: bool = False
    #: with ``fused_qkv_views``: a single key/value head (MQA) is expanded to every query head
    #: in training too, as grouped queries are (LitGPT 2024+)
    fused_qkv_expands_mqa: bool = False
    #: dropout the stack's LoRA applies to each adapter input (0: none): its output and mask
    #: are saved for backward
    lora_dropout: float = 0.0
    #: LoRA on a fused qkv projection with some of q/k/v off pads the adapter output with
    #: zeros through ``index_copy``, which saves its source (Lit-GPT ``LoRAQKVLinear.zero_pad``)
    lora_qkv_zero_pad: bool = False
    #: the chunked cross-entropy keeps every chunk's compute-dtype log-probabilities for
    #: backward (Lit-GPT ``chunked_cross_entropy`` on the bf16 logit chunks)
    chunked_loss_keeps_log_probs: bool = False
    #: the training loop keeps the model's output alive through backward (``output =
    #: model(...); loss = output.loss; loss.backward()``), and with it the logits that
    #: transformers' causal-LM forward returns upcast to fp32 when given labels
    #: (``logits = logits.float()``, transformers 4.38.2 LlamaForCausalLM): one more fp32
    #: [tokens, vocab] tensor beside the loss's own from the loss until the end of backward
    output_logits_held: bool = False
    #: bitsandbytes' quantization constants (``QuantState``: absmax, nested absmax) stay
    #: unsharded on every GPU: FSDP flattens parameters only, and under CPU offload they stay
    #: on the GPU where each weight was quantized
    quant_state_replicated: bool = False
    #: the output head's vocabulary-sharded logits are all-gathered to every TP rank before the
    #: loss (``ColwiseParallel(output_layouts=Replicate())``, KempnerForge): the logits and the
    #: loss's tensors are full-vocabulary on every rank, not divided by TP
    tp_logits_replicated: bool = False
    #: the cross-entropy runs on the compute-dtype logits (``F.cross_entropy`` on bf16 logits,
    #: no ``.float()``): its saved log-softmax output and backward gradients are compute-dtype
    #: tensors, and a held output (``output_logits_held``) is the compute-dtype logits
    loss_in_compute_dtype: bool = False
    #: bytes per element of the unsharded gradients FSDP accumulates without sync
    #: (``fsdp_no_sync_accumulation``); 0: the gradient dtype. FSDP2 upcasts each accumulated
    #: unsharded gradient to ``MixedPrecisionPolicy.reduce_dtype`` (``FSDPParam.
    #: to_accumulated_grad_if_needed``): 4 under a bf16 compute / fp32 reduce policy
    no_sync_grad_bytes: float = 0.0
    #: the stack's own model code runs every MLP activation as one torch op (``F.gelu``,
    #: ``F.silu``), whatever name the HF config's ``hidden_act`` gives it: the eager
    #: multi-op versions' extra saved tensors (``gelu_new``: memory_theory
    #: ``formulas.ACTIVATION_EXTRA_SAVED``) do not apply (LitGPT ``GptNeoxMLP``)
    mlp_activation_one_op: bool = False
    #: the model code builds its output head as its own parameter even when the HF config
    #: ties it to the embedding (LitGPT ``GPT.lm_head``; the converter copies the embedding
    #: into ``lm_head.weight``): one more vocabulary x hidden weight, trained in full
    #: fine-tuning
    unties_embeddings: bool = False
    #: under pipeline parallelism a head tied to the embedding gets its own copy of the
    #: embedding weight on the last stage (trained, with its gradient and optimizer state; the
    #: two copies' gradients are all-reduced): Megatron ``initialize_word_embeddings`` /
    #: ``setup_embeddings_and_output_layer``, DeepSpeed ``TiedLayerSpec``
    pp_tied_head_copy: bool = False
    #: the pipeline schedule frees each stage output's data once it is sent (Megatron
    #: ``deallocate_pipeline_outputs``): no in-flight stage output stays resident
    pp_output_deallocated: bool = False
    #: the pipeline runtime: ``""`` (the model code's own schedule, two activation transfers
    #: per micro-batch) or ``"deepspeed"`` (DeepSpeed ``PipelineEngine``: blocking p2p,
    #: TP-partitioned stage outputs; time_roofline ``estimator.deepspeed_pipeline_seconds``)
    pipeline_engine: str = field(default="")
    #: whose LoRA layers wrap the adapted linears: ``""`` (the stack's own, or no elementwise
    #: cost modelled) or ``"peft"`` (huggingface/peft ``lora.Linear``: fp32 adapters, the input
    #: cast to fp32 and back, dropout, scaling and the add per adapted module; time_roofline
    #: ``estimator.lora_elementwise_bytes``)
    lora_impl: str = field(default="")
    #: the peak-memory line the stack's own training loop logs: the counter it reads
    #: (:data:`MEMORY_LOG_COUNTERS`, ``""``: none, or several) and the unit it divides by
    #: (:data:`MEMORY_LOG_UNITS`): the report prints the estimate as that line would read it
    #: (:func:`memory_log_line`), and a measurement quoted from that line is read in that unit
    memory_log_counter: str = field(default="")
    #: eager attention runs Megatron's ``FusedScaleMaskSoftmax``: the fused kernel where its
    #: shape constraints hold, keys up to this length (fmest.physics.megatron_softmax), else
    #: the fp32 eager chain, whose bytes per score are ``elementwise_bytes``
    #: ``scores_unfused`` / ``scores_unfused_backward``; 0 = no such constraint (the stack's
    #: ``scores`` bytes always apply)
    fused_softmax_max_seq: int = 0
    memory_log_unit: str = field(default="")
    sources: Mapping[str, str] = field(factory=dict)
    plugin: str = ""

    @host_model_copy.validator
    def _check_host_model_copy(self, attribute, value):
        if value not in HOST_MODEL_COPIES:
            raise ValueError(f"StackProfile.host_model_copy: {value!r} not in {HOST_MODEL_COPIES}")

    @padding.validator
    def _check_padding(self, attribute, value):
        from fmest.job import PADDINGS

        if value is not None and value not in PADDINGS:
            raise ValueError(f"StackProfile.padding: {value!r} not in {PADDINGS}")

    @packed_attention.validator
    def _check_packed_attention(self, attribute, value):
        from fmest.job import PACKED_ATTENTIONS

        if value is not None and value not in PACKED_ATTENTIONS:
            raise ValueError(f"StackProfile.packed_attention: {value!r} not in "
                             f"{PACKED_ATTENTIONS}")

    @pipeline_engine.validator
    def _check_pipeline_engine(self, attribute, value):
        if value not in PIPELINE_ENGINES:
            raise ValueError(f"StackProfile.pipeline_engine: {value!r} not in {PIPELINE_ENGINES}")

    @lora_impl.validator
    def _check_lora_impl(self, attribute, value):
        if value not in LORA_IMPLS:
            raise ValueError(f"StackProfile.lora_impl: {value!r} not in {LORA_IMPLS}")

    @memory_log_counter.validator
    def _check_memory_log_counter(self, attribute, value):
        if value not in MEMORY_LOG_COUNTERS:
            raise ValueError(f"StackProfile.memory_log_counter: {value!r} not in "
                             f"{MEMORY_LOG_COUNTERS}")

    @memory_log_unit.validator
    def _check_memory_log_unit(self, attribute, value):
        if value not in MEMORY_LOG_UNITS:
            raise ValueError(f"StackProfile.memory_log_unit: {value!r} not in "
                             f"{tuple(MEMORY_LOG_UNITS)}")
        if bool(value) != bool(self.memory_log_counter):
            raise ValueError("StackProfile.memory_log_unit and memory_log_counter: give both "
                             "or neither")

    @classmethod
    def from_table(cls, name: str, table: Mapping[str, Any]) -> "StackProfile":
        """A profile from one ``[name]`` table of ``stacks.toml``."""
        fields: dict[str, Any] = {key: tuple(value) if key == "aliases" else value
                                  for key, value in table.items()}
        return cls(name=name, **fields)


@functools.lru_cache(maxsize=4)
def load_profiles(path: Path = PROFILES_FILE) -> tuple[StackProfile, ...]:
    """The built-in profiles of ``stacks.toml`` (a bad file names the profile and field)."""
    with open(path, "rb") as fh:
        data = tomllib.load(fh)
    out = []
    for name, table in data.items():
        try:
            out.append(StackProfile.from_table(name, table))
        except (TypeError, ValueError) as exc:
            raise InputError(f"{path.name}: [{name}]", str(exc)) from None
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# fitted constants
# ---------------------------------------------------------------------------------------------

@frozen(kw_only=True)
class FittedConstants:
    """The per-stack constants fitted on the evidence set (``stacks_fitted.json``):
    ``time_factor`` (step-time multiplier of the stack over the roofline; 1 = physics only)
    and ``reserve_fraction`` (allocator reserve over allocated bytes; ``None`` = the physics
    default of memory_theory)."""

    time_factor: float = 1.0
    reserve_fraction: Optional[float] = None
    origin: str = "physics only (no fitted constant)"


@functools.lru_cache(maxsize=8)
def _fitted_table(path: str, mtime_ns: int) -> dict:
    with open(path) as fh:
        data = json.load(fh)
    return data.get("stacks", data) if isinstance(data, dict) else {}


def fitted_constants(stack: str) -> FittedConstants:
    """The fitted constants of ``stack``: from ``$FMEST_FITTED_CONSTANTS`` when set (its
    ``stacks`` entry, or a fitter's overrides under any key holding ``time_factor`` /
    ``reserve_fraction`` maps), else the shipped ``stacks_fitted.json``. The file is read
    once per version (path and modification time): one ``stat`` per call after that."""
    path = os.environ.get(FITTED_ENV) or str(FITTED_FILE)
    try:
        mtime = os.stat(path).st_mtime_ns
    except OSError:
        return FittedConstants()
    return _constants_of(path, mtime, stack)


@functools.lru_cache(maxsize=64)
def _constants_of(path: str, mtime_ns: int, stack: str) -> FittedConstants:
    table = _fitted_table(path, mtime_ns)
    merged: dict = {}
    if "time_factor" in table or "reserve_fraction" in table:
        merged = table
    else:   # the benchmark's overrides file: {fitter name: {...}}
        for value in table.values():
            if isinstance(value, dict):
                for key in ("time_factor", "reserve_fraction"):
                    if key in value:
                        merged.setdefault(key, {}).update(value[key])
    time_factor = (merged.get("time_factor") or {}).get(stack, 1.0)
    reserve = (merged.get("reserve_fraction") or {}).get(stack)
    return FittedConstants(time_factor=float(time_factor),
                           reserve_fraction=None if reserve is None else float(reserve),
                           origin=f"fitted ({os.path.basename(path)})")


# ---------------------------------------------------------------------------------------------
# resolution
# ---------------------------------------------------------------------------------------------

#: id(resolved stack) -> (that stack, its summary line) (ResolvedStack.summary)
_SUMMARIES: dict[int, tuple[Any, str]] = {}


@frozen(kw_only=True)
class ResolvedStack:
    """A profile applied to one job (``ctx.transforms.stack``): the profile, the feature
    flags in force, the fitted constants and why this stack was chosen (``reason``)."""

    profile: StackProfile
    reason: str
    fused: frozenset[str]
    elementwise_bytes: Mapping[str, float]
    overlap: frozenset[str]
    liger: bool = False
    distributed_optimizer: bool = False
    fitted: FittedConstants = FittedConstants()
    #: the chains fused only because the job states them (``training.fused_kernels``), not by
    #: the profile or Liger
    job_fused: frozenset[str] = frozenset()

    @property
    def name(self) -> str:
        return self.profile.name

    def fuses(self, op: str) -> bool:
        """Whether elementwise chain ``op`` (one of :data:`FUSIBLE`) is fused."""
        return op in self.fused

    @property
    def replaces_loss(self) -> bool:
        """Whether a standard loss runs as a fused one: the profile or Liger fuses ``loss``. A
        loss kernel only the job states (``job_fused``: fms-acceleration's Unsloth CE under
        transformers >= 4.46, which still upcasts and copies the logits in fp32 first) keeps
        the standard loss's logits and bytes (memory_theory ``effective_loss``, time_roofline
        ``stack_loss``)."""
        return "loss" in self.fused and "loss" not in self.job_fused

    def overlaps(self, kind: str) -> bool:
        """Whether collectives of ``kind`` (one of :data:`OVERLAPS`) overlap compute."""
        return kind in self.overlap

    def bytes_per_element(self, op: str, eager: float) -> float:
        """HBM bytes per element of ``op`` under this stack (``eager`` when not fused)."""
        if op in self.fused and op in self.elementwise_bytes:
            return float(self.elementwise_bytes[op])
        return eager

    def fp8_cast_bytes(self, eager: float) -> float:
        """Bytes per GEMM operand element of the fp8 amax + cast (fused into the producing
        kernel by Transformer Engine: only the fp8 copy is written)."""
        if "fp8_cast" in self.fused and self.profile.fp8_cast_bytes_per_element is not None:
            return float(self.profile.fp8_cast_bytes_per_element)
        return eager

    def optimizer_impl(self, requested: str) -> str:
        """``training.optimizer_impl``; ``auto`` becomes the stack's implementation."""
        return requested if requested != "auto" else self.profile.optimizer_impl

    def summary(self) -> str:
        """One line for notes and ``--explain``, built once per resolved stack (every memory
        and time estimate of a context notes it; the record is frozen, and the entry keeps it
        alive and checks identity, so its ``id`` cannot name another stack)."""
        hit = _SUMMARIES.get(id(self))
        if hit is not None and hit[0] is self:
            return hit[1]
        if len(_SUMMARIES) >= 256:
            _SUMMARIES.clear()
        line = self._summary()
        _SUMMARIES[id(self)] = (self, line)
        return line

    def _summary(self) -> str:
        fused = ", ".join(op for op in FUSIBLE if op in self.fused) or "none"
        overlap = ", ".join(kind for kind in OVERLAPS if kind in self.overlap) or "none"
        return (f"stack {self.name} ({self.reason}): fused {fused}; overlapped {overlap}; "
                f"attention {self.profile.attention_kernel}; time x{self.fitted.time_factor:.3f}"
                f" ({self.fitted.origin})")


#: (id(profile), the job fields and fitted constants :func:`resolve_stack` reads) -> (that
#: profile, the resolved stack): equal inputs give the same record, so the estimators' caches
#: keyed on its identity (``fmest_memory_theory.memo``) hit across the jobs of one report (the
#: fit advice's candidates, the searches' probes); the entry keeps the profile alive and
#: checks identity, so an id cannot name another profile
_RESOLVED: dict[tuple, tuple[StackProfile, ResolvedStack]] = {}


def resolve_stack(profile: StackProfile, job, *, reason: str) -> ResolvedStack:
    """``profile`` with the job's feature flags: ``parallelism.tp_comm_overlap`` /
    ``async_tp`` switch on the TP overlap the profile can do (``overlap_needs_flag``; None
    = the profile's default), ``training.liger`` adds Liger's fused kernels,
    ``training.fused_kernels`` (where the job model has it) the job's own fused chains,
    ``parallelism.distributed_optimizer`` adds overlapped gradient reduce-scatter and
    parameter all-gather (Megatron's distributed optimizer). A pure function of those
    fields, the profile and its fitted constants: memoised (:data:`_RESOLVED`)."""
    training, par = job.training, job.parallelism
    tp_flag = getattr(par, "tp_comm_overlap", None)
    async_tp = bool(getattr(par, "async_tp", False))
    dist_opt = bool(getattr(par, "distributed_optimizer", False))
    liger = bool(getattr(training, "liger", False))
    kernels = tuple(getattr(training, "fused_kernels", None) or ())
    fitted = fitted_constants(profile.name)
    key = (id(profile), reason, tp_flag, type(tp_flag), async_tp, dist_opt, liger, kernels,
           fitted)
    hit = _RESOLVED.get(key)
    if hit is not None and hit[0] is profile:
        return hit[1]
    resolved = _resolve_stack(profile, reason, tp_flag, async_tp, dist_opt, liger, kernels,
                              fitted)
    if len(_RESOLVED) >= 256:
        _RESOLVED.clear()
    _RESOLVED[key] = (profile, resolved)
    return resolved


def _resolve_stack(profile: StackProfile, reason: str, tp_flag: Optional[bool], async_tp: bool,
                   dist_opt: bool, liger: bool, kernels: tuple, fitted: FittedConstants
                   ) -> ResolvedStack:
    """:func:`resolve_stack` of the fields it reads."""
    overlap = set(profile.overlap - profile.overlap_needs_flag)
    if "tp" in profile.overlap_needs_flag:
        wanted = tp_flag if tp_flag is not None else profile.tp_comm_overlap_default
        if wanted or async_tp:
            overlap.add("tp")
    elif "tp" in profile.overlap and tp_flag is False:
        overlap.discard("tp")
    if dist_opt:
        overlap |= {"dp_reduce", "dp_gather"}
    fused, per_element = set(profile.fused), dict(profile.elementwise_bytes)
    if liger:
        fused |= set(LIGER_FUSED)
        for op, value in LIGER_BYTES.items():
            per_element[op] = min(per_element.get(op, value), value)
    job_fused = frozenset(op for op in kernels if op in FUSIBLE and op not in fused)
    for op in kernels:
        if op in FUSIBLE:   # the job's own fused kernels (FUSED_KERNEL_BYTES)
            fused.add(op)
            if op in FUSED_KERNEL_BYTES:
                value = FUSED_KERNEL_BYTES[op]
                per_element[op] = min(per_element.get(op, value), value)
    return ResolvedStack(profile=profile, reason=reason, fused=frozenset(fused),
                         elementwise_bytes=per_element, overlap=frozenset(overlap),
                         liger=liger, distributed_optimizer=dist_opt, fitted=fitted,
                         job_fused=job_fused)


def stack_name(job) -> tuple[str, str]:
    """(the job's stack name, why): ``training.stack`` when set, else the default."""
    stated = getattr(job.training, "stack", None)
    if stated:
        return stated, "stated (training.stack)"
    return DEFAULT_STACK, "default: no stack stated (eager PyTorch)"


def apply_to_sizing(stack: Optional[ResolvedStack], sizing, training, strategy, optimizer,
                    storage_dtype: Optional[str] = None):
    """The stack's effect on the optimizer transform: the job's stated LoRA adapter dtype
    (``training.lora_adapter_dtype``), else fp32 LoRA adapters under ``pure`` precision on a
    stack whose LoRA is huggingface/peft (``lora_impl = "peft"``); the ``auto``
    implementation; and fp32 gradients where the framework accumulates unsharded
    gradients in an fp32 buffer (Megatron main_grad, DeepSpeed BF16_Optimizer) under bf16
    compute with fp32 master weights."""
    changes: dict[str, Any] = {}
    stated = getattr(training, "lora_adapter_dtype", None)
    if training.technique in ("lora", "qlora") and stated is not None:
        # the job states the adapters' dtype: it wins over the precision and stack rules;
        # torch optimizer states are created like the parameter (a master policy keeps its
        # fp32 states)
        nbytes = 4 if stated == "fp32" else sizing.compute_bytes
        changes.update(trainable_bytes=nbytes, grad_bytes=nbytes)
        if optimizer.state_bytes_per_element is None and sizing.precision != "master":
            changes["state_bytes"] = nbytes
    if stack is None:
        return evolve(sizing, **changes) if changes else sizing
    impl = stack.optimizer_impl(training.optimizer_impl)
    if (impl != sizing.impl and training.optimizer_impl == "auto" and not optimizer.own_kernel
            and impl in optimizer.step_temp_states):   # an implementation this optimizer has
        changes.update(impl=impl, temp_states=optimizer.step_temp_states[impl])
    if (stated is None and training.technique in ("lora", "qlora")
            and sizing.precision == "pure" and stack.profile.lora_impl == "peft"
            and sizing.trainable_bytes < 4):
        # PEFT upcasts fp16/bf16 adapters to fp32 whatever the base dtype
        # (get_peft_model(autocast_adapter_dtype=True) -> BaseTuner._cast_adapter_dtype;
        # huggingface/peft 5d602fdbff04c33c1c4de55cda9d4ae1d7cb7e40 src/peft/peft_model.py,
        # src/peft/tuners/tuners_utils.py): under pure precision the base stays in the compute
        # dtype, the adapters, their gradients and torch optimizer states (created like the
        # parameter) are fp32
        changes.update(trainable_bytes=4, grad_bytes=4)
        if optimizer.state_bytes_per_element is None:
            changes["state_bytes"] = 4
    if fp32_main_grads(stack.profile, training, storage_dtype) and sizing.precision == "master" \
            and training.technique == "full" and "gradients" not in strategy.shards:
        changes["grad_bytes"] = 4
    return evolve(sizing, **changes) if changes else sizing


def fp32_main_grads(profile: StackProfile, training, storage_dtype: Optional[str]) -> bool:
    """Whether gradients accumulate in fp32: ``training.main_grads_dtype`` when stated, else
    the profile's ``fp32_grads`` rule matched on the storage dtype (``fmest.transforms.DTYPES``)
    so fp8 (bf16 parameters, fp8 GEMM casts: Megatron requires --bf16 with --fp8-format,
    megatron/training/arguments.py) counts as bf16."""
    stated = getattr(training, "main_grads_dtype", None)
    if stated is not None:
        return stated == "fp32"
    return profile.fp32_grads is not None and profile.fp32_grads == (
        storage_dtype or training.dtype)


def apply_to_collectives(stack: Optional[ResolvedStack], collectives: tuple) -> tuple:
    """The stack's overlap of data-parallel collectives: with ``dp_gather`` the parameter
    all-gather after the step overlaps the next forward (Megatron ``overlap_param_gather``);
    with ``dp_reduce`` gradient reductions overlap backward (as bucketed DDP does)."""
    if stack is None:
        return collectives
    out = []
    for coll in collectives:
        if coll.what == "parameters" and coll.phase == "step" and stack.overlaps("dp_gather"):
            coll = evolve(coll, phase="forward", overlappable=True)
        elif coll.what == "gradients" and not stack.overlaps("dp_reduce"):
            coll = evolve(coll, overlappable=False)
        out.append(coll)
    return tuple(out)


def resolve_job_stack(job, registry) -> Optional[ResolvedStack]:
    """The job's stack looked up in ``registry`` (the engine's stack registry) and resolved;
    an unknown name is an :class:`fmest.errors.UnknownNameError` on ``training.stack`` listing
    the registered profiles. ``None`` when no profile is registered at all (the ``stacks``
    default plugin disabled): the estimators then model eager PyTorch."""
    name, reason = stack_name(job)
    if not len(registry.names()):
        return None
    profile = registry.get(name)   # case-insensitive, aliases; raises naming the field
    if profile.name != name and name.lower() != profile.name:
        reason = f"{reason}: {name!r} is an alias of {profile.name}"
    return resolve_stack(profile, job, reason=reason)


@functools.lru_cache(maxsize=1)
def _builtin_by_key() -> dict:
    out = {}
    for profile in load_profiles():
        for key in (profile.name, *profile.aliases):
            out[key.lower()] = profile
    return out


def resolve_builtin_stack(job) -> Optional[ResolvedStack]:
    """The job's stack from the built-in profiles only (for a context built without the
    engine, e.g. :func:`fmest.transforms.transforms_of` on a hand-made context)."""
    name, reason = stack_name(job)
    profile = _builtin_by_key().get(name.strip().lower())
    return None if profile is None else resolve_stack(profile, job, reason=reason)


def memory_log_line(profile: Optional[StackProfile], counters: Mapping[str, int]
                    ) -> Optional[dict[str, Any]]:
    """The estimate as the stack's own peak-memory log line prints it: ``{"stack", "counter",
    "unit", "value"}`` (``value`` in ``unit``), from :func:`fmest.estimates.memory_counters`;
    None when the profile names no such line."""
    if profile is None or not profile.memory_log_counter:
        return None
    key = {"max_memory_allocated": "allocated_bytes",
           "max_memory_reserved": "reserved_bytes"}[profile.memory_log_counter]
    return {"stack": profile.name, "counter": profile.memory_log_counter,
            "unit": profile.memory_log_unit,
            "value": counters[key] / MEMORY_LOG_UNITS[profile.memory_log_unit]}


def scores_bytes(training, stack: Optional["ResolvedStack"], *, heads_per_rank: int,
                 seq_len: int) -> Optional[tuple[float, float]]:
    """(forward, backward) bytes per eager attention score of the stack's own softmax chain:
    ``scores`` / ``scores_backward`` of its ``elementwise_bytes``; under a stack whose
    eager attention is Megatron's ``FusedScaleMaskSoftmax`` (``fused_softmax_max_seq``), the
    fused kernel's bytes only where it runs (``training.masked_softmax_fusion`` not false and
    the shape constraints of :func:`fmest.physics.megatron_softmax.fused_softmax_available`),
    else ``scores_unfused`` / ``scores_unfused_backward``. None: the stack gives none (the
    generic eager chain applies)."""
    own = None if stack is None else stack.elementwise_bytes
    if not own or "scores" not in own or "scores_backward" not in own:
        return None
    max_seq = stack.profile.fused_softmax_max_seq if stack is not None else 0
    if max_seq and "scores_unfused" in own and "scores_unfused_backward" in own:
        from fmest.physics.megatron_softmax import fused_softmax_available

        fused = training.masked_softmax_fusion is not False and fused_softmax_available(
            micro_batch=training.micro_batch_size, heads_per_rank=heads_per_rank,
            seq_len=seq_len, max_seq=max_seq)
        if not fused:
            return float(own["scores_unfused"]), float(own["scores_unfused_backward"])
    return float(own["scores"]), float(own["scores_backward"])


def padding_of(training, stack: Optional["ResolvedStack"]) -> Optional[str]:
    """How batches are formed: ``training.padding``, else the stack's default (stacks.toml
    ``padding``); None: not stated (fixed shapes, every sample counted at ``seq_len``). The one
    rule the memory, time and traced estimates read."""
    if training.padding is not None:
        return training.padding
    return stack.profile.padding if stack is not None else None


def packed_attention_of(training, stack: Optional["ResolvedStack"]) -> Optional[str]:
    """What attention sees in a packed row: ``training.packed_attention``, else the stack's
    default (stacks.toml ``packed_attention``), else ``sequence``; None when the job's rows are
    not packed (:func:`padding_of`)."""
    if padding_of(training, stack) != "packed":
        return None
    if training.packed_attention is not None:
        return training.packed_attention
    own = stack.profile.packed_attention if stack is not None else None
    return own or "sequence"


def loss_compiled(training, stack: Optional["ResolvedStack"]) -> bool:
    """Whether torch.compile compiles the step's ``standard`` cross-entropy: only under
    ``training.compile``; ``training.compile_loss`` when given, else the stack's default
    (stacks.toml ``compiles_loss``). The one rule the memory estimate and the planner read."""
    if not training.compile or training.loss != "standard":
        return False
    if training.compile_loss is not None:
        return bool(training.compile_loss)
    return bool(stack is not None and stack.profile.compiles_loss)


def wgrad_accumulation_fused(training, stack: Optional["ResolvedStack"]) -> bool:
    """Whether the weight-gradient GEMM accumulates into the main gradient in place
    (``training.grad_accumulation_fusion``, else the stack's ``wgrad_accumulation_fused``):
    the time model and the planner then price no read-add-write per accumulated
    micro-batch."""
    if training.grad_accumulation_fusion is not None:
        return bool(training.grad_accumulation_fusion)
    return bool(stack is not None and stack.profile.wgrad_accumulation_fused)
