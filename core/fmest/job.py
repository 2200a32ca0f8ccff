"""The job: everything a user says about a training run.

Frozen, keyword-only attrs classes with units in the field names. Values are validated here
(each validator names its field and the accepted values); cross-field rules that need the
model (e.g. ``tp`` must divide the attention heads) are checked by :mod:`fmest.engine` once the
model is resolved. Build jobs from dicts/JSON with :func:`fmest.convert.job_from_dict`.
"""

from __future__ import annotations

import math
import re
from typing import Any, Optional

import attrs
from attrs import field, frozen

from fmest.errors import InputError
from fmest.estimates import DEFAULT_FIT_CONFIDENCE
from fmest.objectives import OBJECTIVES, REFERENCE_MODELS
from fmest.objectives import check as _check_objective

DTYPES = ("fp32", "bf16", "fp16", "fp8")
PRECISIONS = ("auto", "pure", "amp", "master")
#: ``adapter`` / ``adapter_v2``: LLaMA-Adapter (Zhang et al. 2023, arXiv:2303.16199) and
#: LLaMA-Adapter V2 (Gao et al. 2023, arXiv:2304.15010) as Lit-GPT implements them
#: (lit_gpt/adapter.py, adapter_v2.py at Lightning-AI/litgpt
#: 8641822b3249bb94f068c254aa5d13decbc9f0a0); ``qadapter`` / ``qadapter_v2``: the same on a
#: quantized base, as ``qlora`` is ``lora`` on one (``quantization_bits``,
#: ``double_quantization`` and ``quantization_method`` describe the base of every q-technique;
#: fmest.physics.counting.QUANTIZED_TECHNIQUES)
TECHNIQUES = ("full", "lora", "qlora", "adapter", "adapter_v2", "qadapter", "qadapter_v2")
CHECKPOINTING = ("none", "full", "selective")
ATTENTIONS = ("eager", "sdpa", "flash")
LOSSES = ("standard", "fused", "chunked")
OPTIMIZER_IMPLS = ("auto", "foreach", "fused", "for_loop")
FSDP_STRATEGIES = ("none", "full_shard", "shard_grad_op", "hybrid_shard", "no_shard")
CPU_OFFLOAD = ("none", "optimizer", "params")
PP_SCHEDULES = ("1f1b", "gpipe", "interleaved")
#: Megatron-Core MoE token dispatchers fmest prices (NVIDIA/Megatron-LM @
#: d98e8a64ddf34856e74b24714e3bedb2f5a39553 megatron/core/transformer/transformer_config.py
#: ``moe_token_dispatcher_type`` / ``moe_flex_dispatcher_backend``): ``alltoall``
#: (MoEAlltoAllTokenDispatcher) and the ``flex`` dispatcher's ``deepep`` / ``hybridep`` backends
MOE_DISPATCHERS = ("alltoall", "deepep", "hybridep")
FSDP_PREFETCH = ("pre", "post", "none")
PRICE_TYPES = ("on_demand", "spot", "reserved_1y", "reserved_3y")
QUANT_BITS = (4, 8)
QUANT_METHODS = ("bnb", "gptq")
#: PEFT's k-bit preparation of a quantized (QLoRA) base: ``none``; ``peft``
#: (``prepare_model_for_kbit_training``: every fp16/bf16 parameter that is not a 4-bit
#: ``Params4bit`` is cast to fp32, huggingface/peft 5d602fdbff04c33c1c4de55cda9d4ae1d7cb7e40
#: src/peft/utils/other.py, same at v0.13.2); ``peft_bf16_head`` (that, then TRL SFTTrainer's
#: ``peft_module_casting_to_bf16`` under ``bf16=True``: embeddings and ``lm_head`` back to bf16,
#: norms stay fp32; huggingface/trl v0.13.0 4ea33ced3dd017571de7a013e680e6333089a680
#: trl/trainer/sft_trainer.py and trl/trainer/utils.py)
KBIT_PREPS = ("none", "peft", "peft_bf16_head")
#: LoRA adapter storage dtypes a job may state (``Training.lora_adapter_dtype``)
LORA_ADAPTER_DTYPES = ("fp32", "compute")
#: how micro-batches are formed (issue 20): ``max_length`` every batch padded to
#: ``seq_len`` (fixed shapes), ``longest`` padded to its longest sample (HF
#: DataCollatorWithPadding's default ``padding=True``: shapes vary), ``packed`` samples
#: concatenated into ``seq_len`` rows (fixed shapes, no padding)
PADDINGS = ("max_length", "longest", "packed")
#: what attention sees in a packed row (``Training.packed_attention``): ``document`` (each
#: sample attends within itself only and the kernel skips the other samples' blocks:
#: FlashAttention varlen through position_ids / cu_seqlens, FlexAttention's block mask,
#: Transformer Engine's THD packing) or ``sequence`` (causal attention over the whole row,
#: samples see their predecessors: plain concatenation, or a dense mask whose masked blocks
#: are still computed)
PACKED_ATTENTIONS = ("document", "sequence")
#: a sample longer than ``seq_len``: ``truncate`` (cut to it: HF/TRL/LLaMA-Factory) or
#: ``delete`` (dropped: ms-swift 1.x ``truncation_strategy='delete'``,
#: swift/llm/utils/template.py @ 46922151)
TRUNCATIONS = ("truncate", "delete")
#: Megatron-Core ``--recompute-modules`` under ``--recompute-granularity selective``
#: (NVIDIA/Megatron-LM @ d98e8a64ddf34856e74b24714e3bedb2f5a39553
#: megatron/core/transformer/transformer_config.py ``recompute_modules``, default
#: ``["core_attn"]``): ``core_attn`` the attention core (attention.py), ``mla_up_proj`` MLA's
#: q/kv up projections and RoPE (multi_latent_attention.py), ``moe_act`` the routed experts'
#: activation (moe/experts.py, needs --moe-grouped-gemm), ``layernorm`` input_layernorm and
#: pre_mlp_layernorm (transformer_layer.py), ``mlp`` the dense (non-MoE) MLP
#: (transformer_layer.py ``recompute_mlp``), ``moe`` the whole MoE layer (moe/moe_layer.py),
#: ``shared_experts`` the shared experts (moe/shared_experts.py)
RECOMPUTE_MODULES = ("core_attn", "mla_up_proj", "moe_act", "layernorm", "mlp", "moe",
                     "shared_experts")
#: Megatron-Core CUDA-graph capture regions (``--cuda-graph-scope`` / ``--cuda-graph-modules``,
#: Megatron-Bridge ``cuda_graph_scope``), NVIDIA/Megatron-LM @
#: d98e8a64ddf34856e74b24714e3bedb2f5a39553 megatron/core/transformer/enums.py
#: ``CudaGraphModule`` (``attn``, ``mlp`` dense layers only, ``moe`` drop-and-pad MoE layers
#: only, ``moe_router``, ``moe_preprocess`` with ``moe_router``, ``mamba``) and the deprecated
#: spellings megatron/training/arguments.py ``_parse_cuda_graph_modules_arg`` still takes:
#: ``full`` (the whole layer, Megatron's empty list) and ``full_iteration``
#: (``--cuda-graph-impl full_iteration``: the whole forward-backward)
CUDA_GRAPH_SCOPES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba", "full",
                     "full_iteration")
#: Kernel chains a job may state as fused (``Training.fused_kernels``): the op families of
#: ``fmest.stacks.FUSIBLE`` a run replaces by one fused kernel each (norm = RMSNorm/LayerNorm,
#: activation = SwiGLU/GeGLU, rope = rotary embedding, residual, loss = fused cross-entropy,
#: fp8_cast, layout = transposes/copies, lora = a fused LoRA matmul chain); e.g.
#: fms-acceleration's fused-ops-and-kernels plugin (Unsloth's Triton RMSNorm, RoPE and
#: cross-entropy, and fused LoRA on a quantized base), or a model's remote code that calls
#: flash-attn's fused rotary
FUSED_KERNEL_OPS = ("norm", "activation", "rope", "residual", "loss", "fp8_cast", "layout",
                    "lora")


def _choice(values):
    def check(inst, attribute, value):
        if value not in values:
            raise InputError(attribute.name, "not an accepted value", value=value, accepted=values)
    return check


def _finite(attribute, value) -> None:
    # the one finiteness check of every numeric job field: NaN passes `value <= 0` and
    # inf every upper comparison, and both would flow into every formula
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(attribute.name, "must be a finite number", value=str(value))


def _positive(inst, attribute, value):
    if value is None:
        return
    _finite(attribute, value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise InputError(attribute.name, "must be a positive number", value=value)


def _at_least_one(inst, attribute, value):
    """A token count: fewer than one token is no data (1e-300 tokens is a unit slip)."""
    _positive(inst, attribute, value)
    if value is not None and value < 1:
        raise InputError(attribute.name, "is a number of tokens and must be at least 1",
                         value=value)


def _optional_share(inst, attribute, value):
    """A share in (0, 1] or None: ``training.checkpoint_fraction``."""
    if value is None:
        return
    _finite(attribute, value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise InputError(attribute.name, "is the share of blocks checkpointed and must be in "
                         "(0, 1]", value=value)


_CUDA_VERSION = re.compile(r"^\d{1,2}\.\d{1,2}$")


def _cuda_version(inst, attribute, value):
    """``MAJOR.MINOR`` of a CUDA toolkit (``11.5``, ``12.4``) or None."""
    if value is None:
        return
    if not isinstance(value, str) or not _CUDA_VERSION.match(value):
        raise InputError(attribute.name, "is a CUDA toolkit version MAJOR.MINOR, e.g. "
                         "'11.5' or '12.4'", value=value)


_TORCH_VERSION = re.compile(r"^[12]\.\d{1,2}(\.\d+)?(\+[a-z0-9.]+)?$")


def _torch_version(inst, attribute, value):
    """A PyTorch release: ``MAJOR.MINOR`` (``2.4``, ``2.11``), optionally with the patch
    and a local build tag as ``torch.__version__`` prints it (``2.11.0+cu130``), or None."""
    if value is None:
        return
    if not isinstance(value, str) or not _TORCH_VERSION.match(value):
        raise InputError(attribute.name, "is a PyTorch release, MAJOR.MINOR[.PATCH], e.g. "
                         "'2.4' or '2.11.0'", value=value)


def torch_at_least(version: Optional[str], major: int, minor: int) -> Optional[bool]:
    """Whether ``hardware.torch_version`` is at least ``major.minor`` (None: not stated)."""
    if version is None:
        return None
    got = tuple(int(x) for x in version.split("+")[0].split(".")[:2])
    return got >= (major, minor)


def _at_most_one(inst, attribute, value):
    if value is not None and value > 1:
        raise InputError(attribute.name, "is a fraction of peak and must be at most 1",
                         value=value)


def _positive_int(inst, attribute, value):
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(attribute.name, "must be a whole number >= 1", value=value)


def _non_negative(inst, attribute, value):
    if value is None:
        return
    _finite(attribute, value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise InputError(attribute.name, "must be a number >= 0", value=value)


def _dropout(inst, attribute, value):
    if value is None:
        return
    _finite(attribute, value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise InputError(attribute.name, "must be a dropout probability in [0, 1)", value=value)


def _non_negative_int(inst, attribute, value):
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(attribute.name, "must be a whole number >= 0", value=value)


def _hf_config(inst, attribute, value):
    if value is not None:
        from fmest.bounds import check_hf_config

        check_hf_config(value, attribute.name)


def _recompute_modules(inst, attribute, value):
    if value is None:
        return
    bad = [m for m in value if m not in RECOMPUTE_MODULES]
    if bad:
        raise InputError(attribute.name, "not an accepted module", value=bad[0],
                         accepted=RECOMPUTE_MODULES)


def _fused_kernels(inst, attribute, value):
    bad = [m for m in value if m not in FUSED_KERNEL_OPS]
    if bad:
        raise InputError(attribute.name, "not a fusible kernel chain", value=bad[0],
                         accepted=FUSED_KERNEL_OPS)


def _cuda_graph_scope(inst, attribute, value):
    if value is None:
        return
    bad = [m for m in value if m not in CUDA_GRAPH_SCOPES]
    if bad:
        raise InputError(attribute.name, "not a Megatron-Core CUDA-graph scope", value=bad[0],
                         accepted=CUDA_GRAPH_SCOPES)
    if "moe" in value and "moe_router" in value:
        # megatron/core/transformer/transformer_config.py __post_init__ asserts it
        raise InputError(attribute.name, "'moe' and 'moe_router' cannot be captured together "
                         "(Megatron-Core refuses it)", value=value)


#: the modules PEFT's ``modules_to_save`` can train in full beside the adapters that fmest
#: prices, by canonical name, with the module names models use for them (HF Llama/Qwen2
#: ``embed_tokens``/``lm_head``, GPT-2/Qwen-1 ``wte``/``lm_head``, GPT-NeoX ``embed_in``/
#: ``embed_out``, BLOOM ``word_embeddings``, Llama-original/torchtune ``tok_embeddings``/
#: ``output``)
MODULES_TO_SAVE = {"embedding": ("embedding", "embed_tokens", "wte", "word_embeddings",
                                 "tok_embeddings", "embed_in", "embeddings"),
                   "head": ("head", "lm_head", "embed_out", "output")}
_MODULE_TO_SAVE_ALIASES = {alias: name for name, aliases in MODULES_TO_SAVE.items()
                           for alias in aliases}


def module_to_save_name(name: str) -> Optional[str]:
    """The canonical name (``embedding``, ``head``) a module name stands for in
    ``lora_modules_to_save`` (``model.embed_tokens`` -> ``embedding``), None for a module fmest
    does not price; one rule for the job field, the config readers and the benchmark mapper."""
    return _MODULE_TO_SAVE_ALIASES.get(str(name).strip().lower().split(".")[-1])


def _modules_to_save(value: Any) -> tuple[str, ...]:
    """The canonical names (``embedding``, ``head``) of ``lora_modules_to_save``, in the given
    order without repeats; an unknown name stays as given for the validator to refuse."""
    out: list[str] = []
    for name in _tuple_of_str(value):
        canon = module_to_save_name(name) or name
        if canon not in out:
            out.append(canon)
    return tuple(out)


def _check_modules_to_save(inst, attribute, value):
    bad = [m for m in value if m not in MODULES_TO_SAVE]
    if bad:
        raise InputError(attribute.name, "not a module fmest can train in full beside the "
                         "adapters (PEFT modules_to_save)", value=bad[0],
                         accepted=sorted(_MODULE_TO_SAVE_ALIASES))


def _optional_capacity(inst, attribute, value):
    if value is None:
        return
    _finite(attribute, value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise InputError(attribute.name, "must be a capacity factor > 0", value=value)


def _optional_tuple_of_str(value: Any) -> Optional[tuple[str, ...]]:
    return None if value is None else _tuple_of_str(value)


def _tuple_of_str(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip())
    return tuple(str(v) for v in value)


@frozen(kw_only=True)
class Training:
    """How the model is trained: precision, technique, optimizer, batch and memory savers.

    ``dtype`` is the compute dtype. ``precision`` is the precision policy for what is stored:
    ``pure`` keeps weights, gradients and optimizer states in ``dtype``; ``amp`` keeps fp32
    weights/grads/states and computes in ``dtype`` under autocast (torch AMP, HF Trainer);
    ``master`` keeps ``dtype`` weights and grads plus an fp32 master copy and fp32 states
    (Megatron, DeepSpeed); ``auto`` lets the memory plugin choose by the documented rule in
    docs/memory_model.md ("Precision rule").
    """

    dtype: str = field(default="bf16", validator=_choice(DTYPES))
    precision: str = field(default="auto", validator=_choice(PRECISIONS))
    technique: str = field(default="full", validator=_choice(TECHNIQUES))
    lora_rank: int = field(default=16, validator=_positive_int)
    lora_alpha: float = field(default=32.0, validator=_positive)
    #: peft ``target_modules``; empty (the default) = PEFT's default for the model type
    #: (data/lora_default_targets.json), made explicit by ``Engine.resolve_job``
    lora_target_modules: tuple[str, ...] = field(default=(), converter=_tuple_of_str)
    #: PEFT ``modules_to_save`` (axolotl/TRL ``lora_modules_to_save``): modules trained in full
    #: beside the adapters, each a trainable copy of the frozen module
    #: (``ModulesToSaveWrapper``): ``embedding`` and/or ``head`` (model names such as
    #: ``embed_tokens``, ``wte``, ``lm_head`` are read as these, ``MODULES_TO_SAVE``)
    lora_modules_to_save: tuple[str, ...] = field(default=(), converter=_modules_to_save,
                                                  validator=_check_modules_to_save)
    #: peft ``lora_dropout`` in front of every adapter; None = the training stack's default
    #: (stacks.toml ``lora_dropout``; 0.0 without one: PEFT ``LoraConfig.lora_dropout``
    #: defaults to 0.0, huggingface/peft 5d602fdbff04c33c1c4de55cda9d4ae1d7cb7e40
    #: src/peft/tuners/lora/config.py). p > 0 is an ``nn.Dropout`` per adapted module: its
    #: bool mask and the dropped copy the adapter saves (docs/memory_model.md)
    lora_dropout: Optional[float] = field(default=None, validator=_dropout)
    #: the LoRA adapters' storage dtype (``LORA_ADAPTER_DTYPES``): ``fp32`` or ``compute`` (the
    #: base's ``dtype``); None = the precision rule (fp32 under amp/master; under pure fp32 on a
    #: stack whose LoRA is PEFT >= 0.12, ``get_peft_model(autocast_adapter_dtype=True)``, the
    #: compute dtype elsewhere). ``compute``: an older PEFT on a bf16 base, ``autocast_adapter_dtype
    #: =False``, or a script that casts the adapters down (QLoRA's qlora.py ``--bf16``)
    lora_adapter_dtype: Optional[str] = field(default=None,
                                              validator=_choice((None,) + LORA_ADAPTER_DTYPES))
    #: whether PEFT's k-bit preparation ran on the QLoRA base (``KBIT_PREPS``); None = the
    #: training stack's default (``none`` without one)
    kbit_prep: Optional[str] = field(default=None, validator=_choice((None,) + KBIT_PREPS))
    quantization_bits: int = field(default=4, validator=_choice(QUANT_BITS))
    #: how the QLoRA base is quantized: ``bnb`` (bitsandbytes NF4/int8, dequantized per use)
    #: or ``gptq`` (a GPTQ checkpoint, AutoGPTQ's unpacking kernels: time_roofline
    #: gptq_dequant_bytes_per_param)
    quantization_method: str = field(default="bnb", validator=_choice(QUANT_METHODS))
    double_quantization: bool = True
    optimizer: str = "adamw"
    optimizer_impl: str = field(default="auto", validator=_choice(OPTIMIZER_IMPLS))
    #: dtype the framework accumulates and reduces gradients in under ``master`` precision:
    #: None = the training stack's rule (stacks.toml ``fp32_grads``); ``fp32`` or ``compute``
    #: (the compute dtype) as stated: Megatron ``--grad-reduce-in-bf16`` is ``compute``
    #: (megatron/training/arguments.py turns accumulate_allreduce_grads_in_fp32 off)
    main_grads_dtype: Optional[str] = field(default=None,
                                            validator=_choice((None, "fp32", "compute")))
    seq_len: int = field(default=2048, validator=_positive_int)
    micro_batch_size: int = field(default=1, validator=_positive_int)
    grad_accum_steps: int = field(default=1, validator=_positive_int)
    activation_checkpointing: str = field(default="none", validator=_choice(CHECKPOINTING))
    #: the share of the transformer blocks under full checkpointing when
    #: ``activation_checkpointing`` is ``full`` (0 < f <= 1; None = every block): Megatron
    #: ``--recompute-method block --recompute-num-layers N`` (N / layers per stage), torchtitan
    #: ``selective_ac_option = "<N>"`` (every N-th block: 1/N), IBM fms-fsdp
    #: ``selective_checkpointing`` (p). The other blocks keep all their activations and are not
    #: recomputed (docs/memory_model.md, docs/time_model.md)
    checkpoint_fraction: Optional[float] = field(default=None, validator=_optional_share)
    #: the modules ``selective`` checkpointing recomputes, Megatron-Core's names
    #: (``RECOMPUTE_MODULES``, ``--recompute-modules``); None = ``("core_attn",)`` (Megatron's
    #: default; Korthikanti et al. 2022). Only with ``activation_checkpointing`` ``selective``
    recompute_modules: Optional[tuple[str, ...]] = field(
        default=None, converter=_optional_tuple_of_str, validator=_recompute_modules)
    #: Megatron-Core ``--moe-permute-fusion`` (Transformer Engine's fused permute/unpermute);
    #: None = fused, as the megatron-core stack prices it; False = the torch index_select /
    #: scatter_add path (moe/moe_utils.py ``permute``/``unpermute``, time_roofline
    #: formulas.moe_unfused_permute_bytes)
    moe_permute_fusion: Optional[bool] = None
    #: Megatron-Core ``--moe-router-fusion`` (TE's fused top-k with score function); None =
    #: fused; False = the router's eager score/top-k chain (moe/moe_utils.py
    #: ``topk_routing_with_score_function``, formulas.moe_unfused_router_bytes)
    moe_router_fusion: Optional[bool] = None
    #: Megatron-Core CUDA graphs (issue 20): the captured regions (``CUDA_GRAPH_SCOPES``;
    #: ``--cuda-graph-impl local|transformer_engine`` with ``--cuda-graph-scope`` /
    #: ``--cuda-graph-modules``, ``full`` = the whole layer, ``full_iteration`` = the whole
    #: step); None = no CUDA graphs. A captured region replays its kernels without the host's
    #: per-op dispatch (time_roofline formulas.moe_layer_host_profile)
    cuda_graph_scope: Optional[tuple[str, ...]] = field(
        default=None, converter=_optional_tuple_of_str, validator=_cuda_graph_scope)
    #: Megatron-Core ``--moe-expert-capacity-factor F`` (token drop): each expert takes at most
    #: ``ceil(F x tokens x k / experts)`` routed tokens per rank; None = dropless
    moe_expert_capacity_factor: Optional[float] = field(default=None,
                                                        validator=_optional_capacity)
    #: ``--moe-pad-expert-input-to-capacity`` (drop-and-pad): every expert runs exactly its
    #: capacity (padded), static shapes, no host sync in the dispatcher; needs
    #: ``moe_expert_capacity_factor``. None = not padded
    moe_pad_to_capacity: Optional[bool] = None
    attention: str = field(default="sdpa", validator=_choice(ATTENTIONS))
    loss: str = field(default="standard", validator=_choice(LOSSES))
    activation_offload: bool = False
    optimizer_in_backward: bool = False
    compile: bool = False
    #: fp32 matmuls on tensor cores as TF32 (``torch.backends.cuda.matmul.allow_tf32`` /
    #: ``torch.set_float32_matmul_precision("high")``; transformers TrainingArguments ``tf32``);
    #: None = PyTorch's default, off for matmuls since 1.12 (the "TensorFloat-32 (TF32) on
    #: Ampere (and later) devices" note of the torch.backends docs). Only an fp32 job's GEMMs
    #: change, and only on a GPU with TF32 units (the GPU table's ``tf32_tflops``)
    tf32: Optional[bool] = None
    #: whether ``compile`` also compiles the loss function (Inductor fuses the fp32 upcast, the
    #: log-softmax and its gradient: the compute-dtype logits and one compute-dtype gradient
    #: instead of three fp32 [tokens, vocab] tensors); None = the training stack's default
    #: (stacks.toml ``compiles_loss``: torchtitan compiles its loss under ``--compile``);
    #: only with ``compile`` and the ``standard`` loss (fmest.stacks.loss_compiled)
    compile_loss: Optional[bool] = None
    #: Megatron-Core ``gradient_accumulation_fusion``: the weight-gradient GEMM accumulates into
    #: the fp32 main gradient in place, so accumulated micro-batches need no read-add-write of
    #: the gradient buffer; None = the training stack's default (stacks.toml
    #: ``wgrad_accumulation_fused``: megatron-core on, since Megatron-LM 83b1e42f, 2022-02);
    #: False = ``--no-gradient-accumulation-fusion``
    grad_accumulation_fusion: Optional[bool] = None
    #: Megatron ``masked_softmax_fusion`` (``--no-masked-softmax-fusion`` = False): eager
    #: attention under a stack that runs Megatron's ``FusedScaleMaskSoftmax`` (stacks.toml
    #: ``fused_softmax_max_seq``) uses the fused kernel only where its shape constraints hold
    #: (fmest.physics.megatron_softmax) and the eager fp32 softmax chain otherwise; False: the
    #: eager chain always. None = on (Megatron's default)
    masked_softmax_fusion: Optional[bool] = None
    #: ``PADDINGS``; None = the training stack's default (stacks.toml ``padding``; without
    #: one: not stated, every sample counted at ``seq_len``). With ``workload.avg_seq_len``:
    #: ``longest`` runs shorter batches and the caching allocator's reserve grows with the
    #: varying shapes; ``longest`` and ``max_length`` count real tokens in tokens/s
    #: (docs/allocator.md)
    padding: Optional[str] = field(default=None, validator=_choice((None,) + PADDINGS))
    #: ``PACKED_ATTENTIONS``, for ``packed`` rows; None = the training stack's default
    #: (stacks.toml ``packed_attention``), else ``sequence``. ``document`` with
    #: ``workload.avg_seq_len`` prices each sample's own causal attention, sum of s_i^2 over
    #: the row instead of seq_len^2 (time_roofline ``attention_context_len``)
    packed_attention: Optional[str] = field(default=None,
                                            validator=_choice((None,) + PACKED_ATTENTIONS))
    #: ``TRUNCATIONS``; None = ``truncate``
    truncation: Optional[str] = field(default=None, validator=_choice((None,) + TRUNCATIONS))
    #: training stack (issue 12): a registered profile name or alias, case-insensitive
    #: (``fmest stacks``); None = ``pytorch`` (eager PyTorch) unless an importer inferred one
    stack: Optional[str] = None
    #: Liger kernels: fused RMSNorm, SwiGLU, RoPE and fused linear cross-entropy
    liger: bool = False
    #: kernel chains the run fuses beyond its stack's (``FUSED_KERNEL_OPS``), each priced as one
    #: read and one write per element (fmest.stacks.FUSED_KERNEL_BYTES; ``lora``: the fused
    #: LoRA matmul chain of fms-acceleration); () = the stack's own
    fused_kernels: tuple[str, ...] = field(default=(), converter=_tuple_of_str,
                                           validator=_fused_kernels)
    #: vision-language models (issue 14): image side in pixels (None: the model's default
    #: image), images per sample, and whether the vision tower is trained (frozen by default,
    #: as in the LLaVA / Qwen2-VL recipes; the projector is trained with the language model)
    image_size: Optional[int] = field(default=None, validator=_positive_int)
    images_per_sample: int = field(default=1, validator=_positive_int)
    train_vision_tower: bool = False
    #: encoder-decoder models: encoder (source) and decoder (target) tokens; None = seq_len
    source_len: Optional[int] = field(default=None, validator=_positive_int)
    target_len: Optional[int] = field(default=None, validator=_positive_int)
    #: the loss the step computes (fmest.objectives): ``lm`` (pre-training, SFT) or a
    #: preference objective (``dpo``, ``kto``, ``orpo``, ``simpo``, ``cpo``); pairwise ones run a
    #: chosen and a rejected sequence per sample of ``micro_batch_size``
    objective: str = field(default="lm", validator=_choice(OBJECTIVES))
    #: DPO/KTO's reference log-probs: ``auto`` (TRL's default: a frozen ``copy`` for full
    #: training, the policy with its adapters disabled, ``adapter``, for LoRA/QLoRA), ``copy``,
    #: ``adapter``, ``precomputed`` (before training: no reference pass) or ``none``
    reference_model: str = field(default="auto", validator=_choice(REFERENCE_MODELS))

    @property
    def recompute_share(self) -> float:
        """The share of the transformer blocks recomputed in full: ``checkpoint_fraction``
        (every block when None) under ``full`` checkpointing, 0 otherwise."""
        if self.activation_checkpointing != "full":
            return 0.0
        return 1.0 if self.checkpoint_fraction is None else float(self.checkpoint_fraction)

    @property
    def moe_drop_and_pad(self) -> bool:
        """Megatron-Core drop-and-pad: a capacity factor with ``moe_pad_to_capacity``."""
        return self.moe_expert_capacity_factor is not None and bool(self.moe_pad_to_capacity)

    @property
    def selective_modules(self) -> frozenset:
        """The modules recomputed under ``selective`` checkpointing (``recompute_modules``,
        ``core_attn`` when None); empty otherwise."""
        if self.activation_checkpointing != "selective":
            return frozenset()
        return frozenset(("core_attn",) if self.recompute_modules is None
                         else self.recompute_modules)

    def __attrs_post_init__(self) -> None:
        if self.recompute_modules is not None and self.activation_checkpointing != "selective":
            raise InputError("recompute_modules", "only with activation_checkpointing "
                             "'selective' (Megatron reads --recompute-modules only there)",
                             value=self.recompute_modules)
        if self.moe_pad_to_capacity and self.moe_expert_capacity_factor is None:
            # megatron/core/transformer/transformer_config.py __post_init__ raises the same
            raise InputError("moe_pad_to_capacity", "needs moe_expert_capacity_factor "
                             "(Megatron-Core pads each expert to its capacity)",
                             value=self.moe_pad_to_capacity)
        why = _check_objective(self.objective, self.reference_model, self.technique)
        if why is not None:
            raise InputError("reference_model", why, value=self.reference_model,
                             accepted=REFERENCE_MODELS)


@frozen(kw_only=True)
class Parallelism:
    """How the job is split over GPUs.

    ``dp`` of ``None`` means "all GPUs not used by tp/pp/cp". ``zero_stage`` (DeepSpeed) and
    ``fsdp`` (PyTorch FSDP) are two spellings of sharded data parallelism; give one of them.
    ``hsdp_shard_size`` is the size of the shard group for ``hybrid_shard`` (default: GPUs per
    node). ``fsdp_backward_prefetch`` is FSDP's ``backward_prefetch`` (``pre`` = BACKWARD_PRE,
    PyTorch's default and FSDP2's behaviour; ``post`` = BACKWARD_POST, Composer's default).
    """

    dp: Optional[int] = field(default=None, validator=_positive_int)
    tp: int = field(default=1, validator=_positive_int)
    pp: int = field(default=1, validator=_positive_int)
    cp: int = field(default=1, validator=_positive_int)
    ep: int = field(default=1, validator=_positive_int)
    #: tensor-parallel size of the routed experts (Megatron-Core
    #: ``--expert-tensor-parallel-size``); None = ``tp`` (Megatron's default)
    expert_tp: Optional[int] = field(default=None, validator=_positive_int)
    #: Megatron-Core's MoE token dispatcher: ``alltoall`` (``--moe-token-dispatcher-type
    #: alltoall``), ``deepep`` (``--moe-token-dispatcher-type flex`` with
    #: ``--moe-flex-dispatcher-backend deepep``, formerly ``--moe-enable-deepep``) or
    #: ``hybridep`` (``flex`` with ``--moe-flex-dispatcher-backend hybridep``); the flex
    #: backends send a token once per destination rank and, across nodes, once per remote node
    #: (time_roofline formulas.flex_dispatch_seconds); None = ``alltoall``
    moe_dispatcher: Optional[str] = field(default=None,
                                          validator=_choice((None,) + MOE_DISPATCHERS))
    #: Megatron-Core ``--overlap-moe-expert-parallel-comm``: the EP dispatch/combine of one
    #: micro-batch runs while another micro-batch computes (the merged 1F1B forward/backward
    #: schedule of megatron/core/pipeline_parallel/schedules.py)
    moe_a2a_overlap: bool = False
    sequence_parallel: bool = False
    pp_schedule: str = field(default="1f1b", validator=_choice(PP_SCHEDULES))
    pp_virtual_stages: int = field(default=1, validator=_positive_int)
    zero_stage: int = field(default=0, validator=_choice((0, 1, 2, 3)))
    fsdp: str = field(default="none", validator=_choice(FSDP_STRATEGIES))
    hsdp_shard_size: Optional[int] = field(default=None, validator=_positive_int)
    cpu_offload: str = field(default="none", validator=_choice(CPU_OFFLOAD))
    fsdp_backward_prefetch: str = field(default="pre", validator=_choice(FSDP_PREFETCH))
    sharding: Optional[str] = None
    #: tensor-parallel communication overlapped with GEMMs (Megatron ``--tp-comm-overlap``);
    #: None = the stack's default
    tp_comm_overlap: Optional[bool] = None
    #: torchtitan async tensor parallelism (micro-pipelined TP collectives)
    async_tp: bool = False
    #: Megatron's distributed optimizer (ZeRO-1 with overlapped grad reduce / param gather)
    distributed_optimizer: bool = False
    #: DeepSpeed ZeRO buffer settings (``zero_optimization`` keys of deepspeed/runtime/zero/
    #: config.py at deepspeedai/DeepSpeed edaa7221); None = DeepSpeed's default:
    #: ``reduce_bucket_size`` 5e8 elements, ``overlap_comm`` true at stage 3 else false,
    #: ``contiguous_gradients`` true, ``stage3_prefetch_bucket_size`` 5e7,
    #: ``stage3_max_live_parameters`` 1e9, ``sub_group_size`` 1e9 (``zero3_sub_group_elems``:
    #: the ZeRO-3 optimizer step flattens and casts one sub-group of at most this many
    #: partition elements at a time, ``stage3.py`` ``_prepare_fp32_grad_for_sub_group``)
    zero_reduce_bucket_elems: Optional[int] = field(default=None, validator=_non_negative_int)
    zero_overlap_comm: Optional[bool] = None
    zero_contiguous_gradients: Optional[bool] = None
    zero3_prefetch_bucket_elems: Optional[int] = field(default=None,
                                                       validator=_non_negative_int)
    zero3_max_live_params: Optional[int] = field(default=None, validator=_non_negative_int)
    zero3_sub_group_elems: Optional[int] = field(default=None, validator=_positive_int)

    @property
    def model_parallel_size(self) -> int:
        return self.tp * self.pp * self.cp


@frozen(kw_only=True)
class Hardware:
    """Where the job runs. ``gpus_per_node`` of ``None`` means: all GPUs the parallelism needs,
    up to 8 per node."""

    gpu: str = "H100-SXM"
    gpus_per_node: Optional[int] = field(default=None, validator=_positive_int)
    nodes: int = field(default=1, validator=_positive_int)
    #: the cluster's network between nodes, Gb/s per GPU (e.g. 8 x 400 Gb/s InfiniBand NDR per
    #: 8-GPU node = 400; AWS p5 EFA 3200 Gb/s per 8 GPUs = 400); None = the GPU table's
    #: ``inter_node_gbit_per_s`` (a typical cloud fabric for that GPU)
    inter_node_gbps: Optional[float] = field(default=None, validator=_positive)
    #: the CUDA toolkit the run's PyTorch was built with (``MAJOR.MINOR``, what
    #: ``torch.version.cuda`` prints): it chooses the cuBLAS whose kernels run a GEMM with a
    #: misaligned operand (fmest/data/gemm_alignment.csv: before 11.7 a bf16 one ran ~11x
    #: slower on A100). None = a current toolkit (11.7 or later)
    cuda_version: Optional[str] = field(default=None, validator=_cuda_version)
    #: the run's PyTorch release (``MAJOR.MINOR``, what ``torch.__version__`` starts with), for
    #: the behaviours that changed between releases: which kernel
    #: ``scaled_dot_product_attention`` runs first on sm90/sm100 (cuDNN attention from 2.11, and
    #: 2.10 built with CUDA 13), and where FSDP2 allocates its reduce-scatter input (the
    #: reduce-scatter stream's pool before 2.5). None = not stated: the behaviour of most
    #: releases (SDPA's FlashAttention-2 backend first; FSDP2 as in 2.5 and later)
    torch_version: Optional[str] = field(default=None, validator=_torch_version)


@frozen(kw_only=True)
class Workload:
    """How much data the run sees: ``dataset_tokens``, or ``num_samples`` x ``avg_seq_len``
    (default: ``seq_len``), times ``epochs``; or a fixed ``max_steps``; or a ``dataset_path``
    whose tokens are counted."""

    dataset_tokens: Optional[float] = field(default=None, validator=_at_least_one)
    num_samples: Optional[int] = field(default=None, validator=_positive_int)
    avg_seq_len: Optional[float] = field(default=None, validator=_at_least_one)
    #: standard deviation of the sample lengths in tokens as trained (after the ``seq_len``
    #: cap, like ``avg_seq_len``), where a dataset states it; None = unknown (with
    #: ``training.padding`` ``longest``: the coefficient of variation 0.6 of the reserve
    #: table's middle column is assumed, fmest.allocator.PADDED_DEFAULT_CV)
    seq_len_std: Optional[float] = field(default=None, validator=_at_least_one)
    epochs: float = field(default=1.0, validator=_positive)
    max_steps: Optional[int] = field(default=None, validator=_positive_int)
    dataset_path: Optional[str] = None


@frozen(kw_only=True)
class Pricing:
    """What the user wants priced: a provider (or ``cheapest``), region, price type, or a flat
    ``price_per_gpu_hour`` override; optional fixed overheads."""

    provider: Optional[str] = None
    region: Optional[str] = None
    price_type: str = field(default="on_demand", validator=_choice(PRICE_TYPES))
    price_per_gpu_hour: Optional[float] = field(default=None, validator=_positive)
    startup_overhead_hours: float = field(default=0.0, validator=_non_negative)
    checkpoint_overhead_fraction: float = field(default=0.0, validator=_non_negative)


def _open_probability(inst, attribute, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not (math.isfinite(value) and 0 < value < 1):
        raise InputError(attribute.name, "must be a probability strictly between 0 and 1",
                         value=value)


@frozen(kw_only=True)
class Options:
    """How to answer: the policy (``method``), an MFU override, the learned model to use, and
    ``fit_confidence``: the P(fit) at which an answer counts as fitting where it has an interval
    (the searches ``memory.max_micro_batch`` / ``memory.min_gpus``, ``fmest plan``'s
    feasibility, ``--fail-if-no-fit``; :func:`fmest.estimates.fits_probability`)."""

    method: str = "theory"
    mfu: Optional[float] = field(default=None, validator=[_positive, _at_most_one])
    learned_model: Optional[str] = None
    explain: bool = False
    fit_confidence: float = field(default=DEFAULT_FIT_CONFIDENCE, validator=_open_probability)


MODES = ("training", "inference")
KV_DTYPES = ("auto", "bf16", "fp16", "fp8", "int8")
#: weight storage formats of served models beside ``training.dtype`` (docs/inference.md)
QUANTIZATIONS = ("none", "gptq", "awq", "int4", "int8", "nf4", "fp8")
RUNTIMES = ("vllm", "transformers")


def _fraction(inst, attribute, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise InputError(attribute.name, "must be a fraction in (0, 1]", value=value)


def _utilization(inst, attribute, value):
    _fraction(inst, attribute, value)
    if value < MIN_UTILIZATION:
        raise InputError(attribute.name, f"must be at least {MIN_UTILIZATION:g}: a runtime "
                         "given less than 1 % of a GPU (0.8 GB of an 80 GB card) holds no "
                         "model's weights", value=value)


#: the smallest inference.gpu_memory_utilization (below it the fits verdict's margin rounds
#: to the whole GPU)
MIN_UTILIZATION = 0.01


def _margin(inst, attribute, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise InputError(attribute.name, "must be a fraction in [0, 1)", value=value)


@frozen(kw_only=True)
class Inference:
    """How a model is served (``mode: inference``; docs/inference.md).

    ``batch`` concurrent sequences of ``context`` tokens each (prompt + ``output_tokens``);
    ``kv_dtype`` of the KV cache (``auto``: the compute dtype); ``kv_block_size`` tokens per
    paged block; ``quantization`` of the weights (``none``: ``training.dtype``), GPTQ/AWQ with
    ``group_size``; the serving ``runtime`` and its ``gpu_memory_utilization`` (the share of
    GPU memory it may use), ``max_num_batched_tokens`` (largest prefill chunk),
    ``max_num_seqs`` and ``cuda_graphs`` (vLLM's engine arguments and defaults).
    """

    batch: int = field(default=1, validator=_positive_int)
    context: int = field(default=4096, validator=_positive_int)
    output_tokens: int = field(default=256, validator=_positive_int)
    kv_dtype: str = field(default="auto", validator=_choice(KV_DTYPES))
    kv_block_size: int = field(default=16, validator=_positive_int)
    quantization: str = field(default="none", validator=_choice(QUANTIZATIONS))
    group_size: int = field(default=128, validator=_positive_int)
    runtime: str = field(default="vllm", validator=_choice(RUNTIMES))
    gpu_memory_utilization: float = field(default=0.9, validator=_utilization)
    max_num_batched_tokens: int = field(default=8192, validator=_positive_int)
    max_num_seqs: int = field(default=256, validator=_positive_int)
    cuda_graphs: bool = True


@frozen(kw_only=True)
class Calibration:
    """The LLM/VLM memory estimator's calibration knobs, applied to any memory answer
    (fmest.physics.calibration): ``activation_factor`` scales activations, ``logits_factor`` the
    logits and loss, ``fragmentation_gib`` and ``misc_overhead_gib`` add components,
    ``cuda_context_gib`` replaces the CUDA context term, ``safety_margin`` is the share of GPU
    memory the fits verdict keeps free (inference: ``1 - gpu_memory_utilization`` when 0)."""

    activation_factor: float = field(default=1.0, validator=_positive)
    fragmentation_gib: float = field(default=0.0, validator=_non_negative)
    misc_overhead_gib: float = field(default=0.0, validator=_non_negative)
    safety_margin: float = field(default=0.0, validator=_margin)
    #: scales the ``logits_and_loss`` component (the estimator's ``--logits-factor``)
    logits_factor: float = field(default=1.0, validator=_non_negative)
    #: replaces the ``cuda_context`` component, in GiB (the estimator's ``--cuda-libs-gib``);
    #: None keeps fmest's device term
    cuda_context_gib: Optional[float] = field(default=None, validator=_non_negative)


@frozen(kw_only=True)
class Job:
    """A training run to estimate.

    ``model`` is a preset name (``fmest models``), a local ``config.json`` or model folder, or a
    Hugging Face Hub id (looked up only when the Hub is reachable). ``model_config`` may carry an
    inline Hugging Face config dict instead (for services that already hold the config).
    """

    model: str
    model_config: Optional[dict] = field(default=None, validator=_hf_config)
    training: Training = field(factory=Training)
    parallelism: Parallelism = field(factory=Parallelism)
    hardware: Hardware = field(factory=Hardware)
    workload: Workload = field(factory=Workload)
    pricing: Pricing = field(factory=Pricing)
    options: Options = field(factory=Options)
    #: ``training`` (a training step) or ``inference`` (serving: the ``inference`` section)
    mode: str = field(default="training", validator=_choice(MODES))
    inference: Inference = field(factory=Inference)
    calibration: Calibration = field(factory=Calibration)

    def evolve(self, **sections: Any) -> "Job":
        """A copy with some fields replaced; ``sections`` maps a section name to a dict of its
        fields (``job.evolve(training={"micro_batch_size": 4})``) or to a new section object."""
        changes: dict[str, Any] = {}
        for name, value in sections.items():
            if isinstance(value, dict):
                changes[name] = _evolved(getattr(self, name), value)
            else:
                changes[name] = value
        return _evolved(self, changes)


#: attrs class -> ``(attribute name, __init__ argument)`` of each field its ``__init__`` takes
_INIT_FIELDS: dict[type, tuple[tuple[str, str], ...]] = {}


def _evolved(inst: Any, changes: dict[str, Any]) -> Any:
    """``attrs.evolve(inst, **changes)``, the class's ``__init__`` fields read once per class
    (the searches and the fit advice evolve jobs a few dozen times per report, and
    ``attrs.evolve`` walks ``attrs.fields`` on every call): the same ``__init__`` call, so the
    same validators and converters, and an unknown name raises the same ``TypeError``."""
    cls = inst.__class__
    names = _INIT_FIELDS.get(cls)
    if names is None:
        names = _INIT_FIELDS[cls] = tuple((a.name, a.alias) for a in attrs.fields(cls)
                                          if a.init)
    kwargs = dict(changes)
    for name, alias in names:
        if alias not in kwargs:
            kwargs[alias] = getattr(inst, name)
    return cls(**kwargs)


@frozen(kw_only=True)
class Layout:
    """The resolved GPU layout of a job: world size and every parallel degree, derived once."""

    world_size: int
    gpus_per_node: int
    nodes: int
    dp: int
    tp: int
    pp: int
    cp: int
    ep: int
    #: tensor-parallel size of the routed experts (``parallelism.expert_tp``, resolved: = tp
    #: when the job leaves it unset); 0 = not resolved (a hand-made layout): read it through
    #: :func:`expert_tp_of`
    expert_tp: int = 0

    @property
    def dp_shard(self) -> int:
        """GPUs one data-parallel shard group spans (== dp unless hybrid sharding)."""
        return self.dp


#: GPUs per node when the job gives none: the 8-GPU server of DGX/HGX A100, H100, H200 and
#: B200 (NVIDIA DGX user guides) and of the clouds' 8-GPU instances (AWS p4d/p5, GCP a3)
DEFAULT_GPUS_PER_NODE = 8


def _default_world(dp: Optional[int], mp: int, nodes: int) -> tuple[int, int]:
    """``(world size, nodes)`` when ``gpus_per_node`` is not given.

    With ``dp``, the world is ``dp x mp`` over the given ``nodes``; a single-node default that
    would exceed :data:`DEFAULT_GPUS_PER_NODE` spreads over the fewest nodes that divide it
    evenly (``--dp 16`` is 2 nodes of 8). Without ``dp``, ``nodes`` > 1 means nodes of the
    default size (``--nodes 2`` is 16 GPUs) when the model-parallel size divides that world;
    otherwise one model-parallel group spread over the nodes."""
    if dp is None:
        full = DEFAULT_GPUS_PER_NODE * nodes
        world = full if nodes > 1 and full % mp == 0 else mp
    else:
        world = dp * mp
    if nodes == 1 and world > DEFAULT_GPUS_PER_NODE:
        nodes = next(n for n in range(-(-world // DEFAULT_GPUS_PER_NODE), world + 1)
                     if world % n == 0)
    if world % nodes:
        raise InputError("hardware.nodes", f"the {world} GPUs (dp*tp*pp*cp) do not split "
                         "evenly over the nodes; give hardware.gpus_per_node", value=nodes)
    return world, nodes


def resolve_layout(job: Job) -> Layout:
    """Derive world size and ``dp`` from the job, checking they agree.

    The world is ``gpus_per_node x nodes`` when ``gpus_per_node`` is given, else
    ``dp x tp x pp x cp`` (dp defaulting to what fills the nodes, see :func:`_default_world`)
    on nodes of at most :data:`DEFAULT_GPUS_PER_NODE` GPUs.
    """
    par, hw = job.parallelism, job.hardware
    mp = par.tp * par.pp * par.cp
    if hw.gpus_per_node is not None:
        world = hw.gpus_per_node * hw.nodes
        if world % mp:
            raise InputError("parallelism", f"tp*pp*cp = {mp} does not divide the {world} GPUs "
                             f"(gpus_per_node {hw.gpus_per_node} x nodes {hw.nodes})")
        dp = world // mp
        if par.dp is not None and par.dp != dp:
            raise InputError("parallelism.dp", f"dp*tp*pp*cp must equal the {world} GPUs "
                             f"(gpus_per_node x nodes); that needs dp = {dp}", value=par.dp)
        gpn = hw.gpus_per_node
    else:
        dp_given = par.dp
        expert_grid = par.ep * (par.expert_tp or par.tp)
        if dp_given is None and expert_grid > par.tp and hw.nodes == 1:
            # no GPU count anywhere: the fewest GPUs the expert grid allows (tp x cp x dp
            # must be a multiple of expert_tp x ep, :func:`_check_expert_grid`)
            dp_given = expert_grid // math.gcd(expert_grid, par.tp * par.cp)
        world, nodes = _default_world(dp_given, mp, hw.nodes)
        dp = world // mp
        gpn = world // nodes
        return Layout(world_size=world, gpus_per_node=gpn, nodes=nodes, dp=dp, tp=par.tp,
                      pp=par.pp, cp=par.cp, ep=par.ep, expert_tp=_check_expert_grid(par, dp))
    return Layout(world_size=world, gpus_per_node=gpn, nodes=hw.nodes, dp=dp, tp=par.tp,
                  pp=par.pp, cp=par.cp, ep=par.ep, expert_tp=_check_expert_grid(par, dp))


def _check_expert_grid(par: Parallelism, dp: int) -> int:
    """The experts' tensor-parallel size, checked against the expert rank grid.

    Megatron-Core builds, per pipeline stage, a second grid for the MoE layers: its
    ``tp x cp x dp`` ranks are ``expert_tp x ep x expert_dp`` (NVIDIA/Megatron-LM @
    d98e8a64ddf34856e74b24714e3bedb2f5a39553 megatron/core/parallel_state.py
    ``initialize_model_parallel``: ``expert_tensor_parallel_size`` defaults to
    ``tensor_model_parallel_size``, ``expert_data_parallel_size = world_size //
    (expert_tensor_parallel_size * expert_model_parallel_size * pipeline_model_parallel_size)``
    and a RuntimeError unless that divides). So ``expert_tp x ep`` must divide
    ``tp x cp x dp``; with ``expert_tp = tp`` that is "ep divides dp x cp"."""
    etp = par.expert_tp or par.tp
    ranks = par.tp * par.cp * dp
    if (etp * par.ep) > 1 and ranks % (etp * par.ep):
        if par.expert_tp is None:
            raise InputError("parallelism.ep", f"ep x expert_tp ({par.ep} x {etp}, expert_tp "
                             f"defaults to tp) must divide tp x cp x dp ({ranks}): give an ep "
                             f"dividing dp x cp ({dp * par.cp}) or parallelism.expert_tp "
                             "(Megatron --expert-tensor-parallel-size)", value=par.ep)
        raise InputError("parallelism.expert_tp", f"expert_tp x ep ({etp} x {par.ep}) must "
                         f"divide tp x cp x dp ({par.tp} x {par.cp} x {dp} = {ranks}): the "
                         "expert rank grid of Megatron-Core", value=par.expert_tp)
    return etp


def expert_tp_of(layout: Any) -> int:
    """The routed experts' tensor-parallel size of a resolved layout (``tp`` when unset)."""
    return int(getattr(layout, "expert_tp", 0) or layout.tp)
