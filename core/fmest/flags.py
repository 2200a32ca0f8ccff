"""Every command-line option of ``fmest estimate``/``export``/``plan`` in one declarative table.

A :class:`Flag` row says what the option is called (a contract: names are added, never
renamed), which job field it sets, how its text is read, which values it takes and what it
means. Every door is generated from the table:

* the command line (:func:`add_arguments` builds the argparse groups),
* the service (:func:`json_flags` maps a request body's JSON names to rows, :func:`convert`
  reads a JSON value through the row's parser and choices, :func:`json_schema` gives the
  OpenAPI property with ``x-flag``/``x-group``, from which the page builds its form),
* the input door (:func:`read_flags`: the options given, as an input layer),
* the planner's and the probe's job keys (:func:`job_path`: a flag name or a job field path).

Adding a flag is adding one row: it then appears in ``fmest estimate --help``, the service's
schema and the page (``tests/test_flags.py`` adds one and looks for it in all three).
"""

from __future__ import annotations

import argparse
import functools
import math
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from attrs import field, frozen

from fmest.errors import InputError
from fmest.objectives import OBJECTIVES as TRAINING_OBJECTIVES
from fmest.objectives import REFERENCE_MODELS

#: A reader's ``put(path, value, origin)``: set a job field from a flag.
Put = Callable[[str, Any, str], None]


# -- how option text is read -------------------------------------------------------------------

def parse_bool(text: str) -> bool:
    t = str(text).strip().lower()
    if t in ("true", "1", "yes", "on"):
        return True
    if t in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def parse_count(text: str) -> float:
    """Numbers such as ``2e10``, ``20_000_000``, ``1.5B``, ``300M``, ``20k``."""
    t = str(text).strip().replace("_", "").replace(",", "")
    mult = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
    try:
        if t and t[-1].lower() in mult:
            return float(t[:-1]) * mult[t[-1].lower()]
        return float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number such as 2e10 or 300M, got {text!r}") from None


def parse_count_int(text: str) -> int:
    """A whole number >= 0 (``5e8`` allowed): DeepSpeed's element counts."""
    try:
        v = float(parse_count(text))
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}") from None
    if v < 0 or not v.is_integer():
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return int(v)


def parse_positive_int(text: str) -> int:
    try:
        v = float(parse_count(text))
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if v < 1 or not v.is_integer():
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(v)


def parse_probability(text: str) -> float:
    """A probability strictly between 0 and 1 (``0.9``)."""
    try:
        v = float(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a probability between 0 and 1, got "
                                         f"{text!r}") from None
    if not 0.0 < v < 1.0:
        raise argparse.ArgumentTypeError(f"expected a probability between 0 and 1 (exclusive), "
                                         f"got {text!r}")
    return v


def parse_fraction(text: str) -> float:
    """A share in (0, 1] (``0.5``)."""
    try:
        v = float(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1], got {text!r}") from None
    if not 0.0 < v <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1], got {text!r}")
    return v


#: How docs/cli.md names the values of a parser without choices or metavar.
VALUE_NAMES = {parse_probability: "P (0-1)", parse_positive_int: "N (>= 1)", parse_count: "N (2e10, 300M)", float: "X",
               int: "N", parse_bool: "true/false"}


# -- the row -----------------------------------------------------------------------------------

@frozen(kw_only=True)
class Flag:
    """One option. ``names[0]`` is its long name; the JSON name (service body, error field) is
    the long name without ``--`` and with ``_`` for ``-``; every other long name is an alias.

    ``path`` is the job field the value sets (``training.seq_len``), or ``None`` for options
    that are not a job field (output format, files, plan constraints) or that a composite
    reader handles (:data:`COMPOSITE_READERS`). ``to_job`` maps the parsed value to the field's
    value when they differ (``--fused-loss true`` -> ``loss: fused``)."""

    names: tuple[str, ...]
    group: str
    help: str = ""
    path: Optional[str] = None
    parse: Optional[Callable[[str], Any]] = None
    choices: Optional[tuple[Any, ...]] = None
    metavar: Optional[str] = None
    #: "?" for a boolean flag (bare or true/false), "+" for one or more values
    nargs: Optional[str] = None
    default: Any = None
    #: argparse action: "store_true" for the few switches that take no value, "append" for a
    #: repeatable option (``--config``)
    action: Optional[str] = None
    required: bool = False
    to_job: Optional[Callable[[Any], Any]] = None
    #: the service does not take it from a body (files on the server's disk, output format)
    server_side: bool = False
    dest: str = field()

    @dest.default
    def _dest(self) -> str:
        long = next((n for n in self.names if n.startswith("--")), self.names[0])
        return long.lstrip("-").replace("-", "_")

    @property
    def name(self) -> str:
        """The long option, ``--seq-len``."""
        return next(n for n in self.names if n.startswith("--"))

    @property
    def json_names(self) -> tuple[str, ...]:
        """``dest`` and every long option by JSON name (``per_device_batch``, ``micro_batch``)."""
        return tuple(dict.fromkeys([self.dest] + [n[2:].replace("-", "_") for n in self.names
                                                  if n.startswith("--")]))

    @property
    def is_bool(self) -> bool:
        return self.nargs == "?" and self.parse is parse_bool

    def accepted(self) -> Optional[list[Any]]:
        return [True, False] if self.is_bool else (list(self.choices) if self.choices else None)

    def argparse_kwargs(self) -> dict[str, Any]:
        if self.action == "store_true":
            return {"action": self.action, "help": self.help, "dest": self.dest,
                    "default": self.default if self.default is not None else False}
        kw: dict[str, Any] = {"help": self.help, "dest": self.dest, "default": self.default}
        if self.is_bool:
            kw.update(nargs="?", const=True, type=parse_bool, metavar=self.metavar or "true|false")
            return kw
        for key in ("choices", "metavar", "nargs", "action"):
            if getattr(self, key) is not None:
                kw[key] = getattr(self, key)
        if self.parse is not None:
            kw["type"] = self.parse
        if self.required:
            kw["required"] = True
        return kw


def _bool(*names: str, group: str, help: str, path: Optional[str] = None,
          to_job: Optional[Callable[[Any], Any]] = None, server_side: bool = False) -> Flag:
    return Flag(names=names, group=group, help=help, path=path, parse=parse_bool, nargs="?",
                to_job=to_job, server_side=server_side)


def _names(name: str, *, group: str, path: str, metavar: str, help: str) -> Flag:
    """A flag taking one or more names, space- or comma-separated (``--x a b`` or ``--x a,b``)."""
    return Flag(names=(name,), group=group, path=path, nargs="+", metavar=metavar,
                to_job=_split_names, help=help)


def _split_names(values: list[str]) -> list[str]:
    return [m for item in values for m in item.split(",") if m]


# -- the table ---------------------------------------------------------------------------------
# Rows are in the order --help shows them; a group's title is the argparse group's.

_INPUT = "input"
_TRAIN = "training"
_PAR = "parallelism"
_HW = "hardware"
_WORK = "workload"
_PRICE = "pricing"
_INFER = "inference (--mode inference; docs/inference.md)"
_VLM = "vision-language and encoder-decoder models (docs/models.md)"
_DIMS = "raw model dimensions (instead of --model; docs/models.md)"
_CAL = "calibration knobs (docs/inference.md)"
_LLMEST = "LLM/VLM GPU Memory Estimator flags, mapped onto fmest's (docs/compat.md)"
_ANSWER = "answer"
#: the command's own options (argparse's default group)
OPTIONS = "options"

#: the options that describe a job (estimate, export, plan, probe and the service take them)
JOB_FLAGS: tuple[Flag, ...] = (
    Flag(names=("--model",), group=_INPUT, path="model",
         help="preset name (fmest models), local config.json or folder, or Hugging Face Hub "
              "id"),
    Flag(names=("-f", "--input-file"), group=_INPUT, metavar="FILE", server_side=True,
         help="job JSON (fmest layout or fm-training-estimator EstimateInput); flags override "
              "it; - reads stdin"),
    Flag(names=("--config",), group=_INPUT, metavar="FILE", server_side=True, action="append",
         help="a training tool's config (TrainingArguments, DeepSpeed, accelerate, axolotl, "
              "torchtune, LLaMA-Factory, EstimateInput, torchtitan TOML, Megatron-LM arguments "
              "/ Megatron-Bridge / NeMo YAML, LitGPT, TRL / alignment-handbook recipes, ms-swift "
              "and OpenRLHF command lines, shell launch scripts; docs/configs/README.md); "
              "repeatable, later files win, flags win over files"),
    Flag(names=("--config-format",), group=_INPUT, metavar="NAME", server_side=True,
         help="skip detection: training-args, deepspeed, accelerate, axolotl, torchtune, "
              "llama-factory, fm-training-estimator, torchtitan, megatron, litgpt, trl, "
              "launch-script, ms-swift, openrlhf"),
    # training
    Flag(names=("--dtype",), group=_TRAIN, choices=("fp32", "bf16", "fp16", "fp8", "int8", "nf4"),
         help="compute dtype; int8/nf4 = quantized base weights (QLoRA training with bf16 "
              "compute, or quantized serving with --mode inference)"),
    Flag(names=("--precision",), group=_TRAIN, path="training.precision",
         choices=("auto", "pure", "amp", "master"),
         help="precision policy for stored weights/grads/states (default auto)"),
    Flag(names=("--seq-len",), group=_TRAIN, path="training.seq_len", parse=parse_positive_int,
         help="tokens per sample"),
    Flag(names=("--per-device-batch", "--micro-batch"), group=_TRAIN,
         path="training.micro_batch_size", parse=parse_positive_int,
         help="micro-batch size per GPU (per data-parallel rank)"),
    Flag(names=("--grad-accum",), group=_TRAIN, path="training.grad_accum_steps",
         parse=parse_positive_int, help="gradient accumulation steps"),
    Flag(names=("--technique",), group=_TRAIN, path="training.technique",
         choices=("full", "lora", "qlora", "adapter", "adapter_v2", "qadapter", "qadapter_v2"),
         help="what is trained: full, LoRA/QLoRA, Lit-GPT's LLaMA-Adapter / Adapter-v2 "
              "(q: on a quantized base)"),
    _bool("--lora", group=_TRAIN, help="same as --technique lora"),
    _bool("--qlora", group=_TRAIN, help="same as --technique qlora"),
    Flag(names=("--lora-rank",), group=_TRAIN, path="training.lora_rank",
         parse=parse_positive_int, help="LoRA rank r"),
    Flag(names=("--lora-alpha",), group=_TRAIN, path="training.lora_alpha", parse=float,
         help="LoRA alpha (no effect on memory or time)"),
    _names("--lora-modules-to-save", group=_TRAIN, path="training.lora_modules_to_save",
           metavar="MODULE",
           help="PEFT modules_to_save: modules trained in full beside the adapters, embedding "
                "and/or head (embed_tokens, wte, lm_head ... accepted); default none"),
    _names("--lora-target-modules", group=_TRAIN, path="training.lora_target_modules",
           metavar="NAME",
           help="module names (q_proj v_proj ...) or all-linear; commas also accepted"),
    Flag(names=("--lora-dropout",), group=_TRAIN, path="training.lora_dropout", parse=float,
         metavar="P", help="peft lora_dropout in [0, 1) (default: the stack's; PEFT's 0.0): "
         "p > 0 saves a bool mask and a dropped copy per adapted module input"),
    Flag(names=("--lora-adapter-dtype",), group=_TRAIN, path="training.lora_adapter_dtype",
         choices=("fp32", "compute"),
         help="LoRA adapters' dtype (default: fp32 under amp/master and on PEFT >= 0.12 stacks, "
              "else the compute dtype); compute: older PEFT, autocast_adapter_dtype=False, or "
              "adapters cast to bf16"),
    Flag(names=("--kbit-prep",), group=_TRAIN, path="training.kbit_prep",
         choices=("none", "peft", "peft_bf16_head"),
         help="QLoRA: PEFT prepare_model_for_kbit_training ran (peft: non-quantized "
              "weights fp32; peft_bf16_head: TRL bf16 re-cast of embeddings and head); "
              "default: the stack's"),
    Flag(names=("--quant-bits",), group=_TRAIN, path="training.quantization_bits", parse=int,
         choices=(4, 8), help="QLoRA base weight bits"),
    Flag(names=("--quant-method",), group=_TRAIN, path="training.quantization_method",
         choices=("bnb", "gptq"), help="QLoRA base quantization: bnb (bitsandbytes) or gptq "
         "(a GPTQ checkpoint through AutoGPTQ's kernels)"),
    Flag(names=("--optimizer",), group=_TRAIN, path="training.optimizer", metavar="NAME",
         help="adamw, adamw_8bit, paged_adamw_8bit, adafactor, sgd, sgd_momentum, lion, ... "
              "(HF optim names accepted)"),
    Flag(names=("--optimizer-impl",), group=_TRAIN, path="training.optimizer_impl",
         choices=("auto", "foreach", "fused", "for_loop"),
         help="optimizer implementation (foreach adds one parameter-sized temporary)"),
    _bool("--optimizer-in-backward", group=_TRAIN, path="training.optimizer_in_backward",
          help="fuse the optimizer step into backward"),
    Flag(names=("--grad-checkpoint",), group=_TRAIN, metavar="none|full|selective|true|false",
         help="activation checkpointing (true = full)"),
    Flag(names=("--checkpoint-fraction",), group=_TRAIN, path="training.checkpoint_fraction",
         parse=parse_fraction, metavar="F (0-1]",
         help="with --grad-checkpoint full: the share of transformer blocks checkpointed (Megatron "
              "--recompute-method block, torchtitan selective_ac_option N = 1/N); default all"),
    _names("--recompute-modules", group=_TRAIN, path="training.recompute_modules",
           metavar="MODULE",
           help="with --grad-checkpoint selective: the modules recomputed, Megatron-Core's names "
                "(core_attn mla_up_proj moe_act layernorm mlp moe shared_experts; commas also "
                "accepted); default core_attn"),
    _bool("--moe-permute-fusion", group=_TRAIN, path="training.moe_permute_fusion",
          help="Megatron-Core --moe-permute-fusion (TE fused permute/unpermute; default: "
               "fused); false = the torch index_select/scatter_add path"),
    _bool("--moe-router-fusion", group=_TRAIN, path="training.moe_router_fusion",
          help="Megatron-Core --moe-router-fusion (TE fused top-k and score function; "
               "default: fused); false = the eager router chain"),
    _names("--cuda-graph-scope", group=_TRAIN, path="training.cuda_graph_scope",
           metavar="SCOPE",
           help="Megatron-Core CUDA graphs: the captured regions (attn mlp moe moe_router "
                "moe_preprocess mamba; full = the whole layer, full_iteration = the whole step; "
                "commas also accepted); default none"),
    Flag(names=("--moe-expert-capacity-factor",), group=_TRAIN,
         path="training.moe_expert_capacity_factor", parse=parse_count, metavar="F",
         help="Megatron-Core token drop: each expert takes at most F x tokens x k / experts "
              "tokens; default dropless"),
    _bool("--moe-pad-expert-input-to-capacity", group=_TRAIN,
          path="training.moe_pad_to_capacity",
          help="Megatron-Core drop-and-pad (with --moe-expert-capacity-factor): every expert "
               "runs its full capacity, static shapes, no dispatcher host sync"),
    _bool("--flashattn", group=_TRAIN, help="same as --attn flash"),
    Flag(names=("--attn",), group=_TRAIN, path="training.attention",
         choices=("eager", "sdpa", "flash"),
         help="attention implementation (eager keeps the s^2 scores)"),
    Flag(names=("--padding",), group=_TRAIN, path="training.padding",
         choices=("max_length", "longest", "packed"),
         help="how batches are formed: padded to --seq-len, to their longest sample (shapes "
              "vary: shorter steps, a larger allocator reserve), or packed (default: the "
              "stack's)"),
    Flag(names=("--packed-attention",), group=_TRAIN, path="training.packed_attention",
         choices=("document", "sequence"),
         help="packed rows: each sample attends within itself, the kernel skipping the others "
              "(FlashAttention varlen / position_ids, FlexAttention block mask, TE THD), or "
              "causally over the whole row (default: the stack's, else sequence); document "
              "with --avg-seq-len prices each sample's own attention"),
    Flag(names=("--truncation",), group=_TRAIN, path="training.truncation",
         choices=("truncate", "delete"),
         help="a sample over --seq-len: cut to it (default) or dropped (ms-swift 1.x)"),
    _bool("--fused-loss", group=_TRAIN, path="training.loss",
          to_job=lambda v: "fused" if v else "standard",
          help="fused/chunked cross-entropy (no full fp32 logits)"),
    Flag(names=("--loss",), group=_TRAIN, path="training.loss",
         choices=("standard", "fused", "chunked"), help="cross-entropy implementation"),
    Flag(names=("--training-objective",), group=_TRAIN, path="training.objective",
         choices=TRAINING_OBJECTIVES, help="lm (pre-training, SFT) or a preference objective: dpo, "
         "kto, orpo, simpo, cpo (pairwise ones run chosen + rejected sequences per sample)"),
    Flag(names=("--reference-model",), group=_TRAIN, path="training.reference_model",
         choices=REFERENCE_MODELS, help="DPO/KTO reference log-probs: auto (a frozen copy for "
         "full training, the adapter-disabled policy for LoRA), copy, adapter, precomputed, "
         "none"),
    _bool("--activation-offload", group=_TRAIN, path="training.activation_offload",
          help="offload saved activations to CPU"),
    _bool("--compile", group=_TRAIN, path="training.compile", help="torch.compile the model"),
    _bool("--grad-accumulation-fusion", group=_TRAIN, path="training.grad_accumulation_fusion",
          help="Megatron-Core gradient_accumulation_fusion (the weight-gradient GEMM "
               "accumulates into the fp32 main gradient; default: the stack's, on for "
               "megatron-core); false = --no-gradient-accumulation-fusion"),
    _bool("--masked-softmax-fusion", group=_TRAIN, path="training.masked_softmax_fusion",
          help="Megatron masked_softmax_fusion for eager attention (default on: the fused "
               "softmax kernel where its shape constraints hold, the fp32 eager chain "
               "elsewhere); false = --no-masked-softmax-fusion"),
    _bool("--compile-loss", group=_TRAIN, path="training.compile_loss",
          help="with --compile: the loss function is compiled too (fused upcast and "
               "log-softmax: no fp32 [tokens, vocab] copies); default: the stack's (torchtitan "
               "compiles its loss, others do not)"),
    Flag(names=("--stack",), group=_TRAIN, path="training.stack", metavar="NAME",
         help="training stack (fmest stacks): pytorch, hf-trainer, deepspeed, megatron-core, "
              "megatron-deepspeed, torchtitan, torchtune, llm-foundry, unsloth; aliases such "
              "as nemo, megatron; any case"),
    _bool("--tf32", group=_TRAIN, path="training.tf32",
          help="fp32 matmuls as TF32 on tensor cores (torch allow_tf32 / "
               "set_float32_matmul_precision('high'); default off, PyTorch's since 1.12)"),
    _bool("--liger", group=_TRAIN, path="training.liger",
          help="Liger kernels: fused RMSNorm, SwiGLU, RoPE, linear cross-entropy"),
    _names("--fused-kernels", group=_TRAIN, path="training.fused_kernels", metavar="OP",
           help="kernel chains the run fuses beyond its stack's (norm activation rope residual "
                "loss fp8_cast layout lora; commas also accepted), e.g. fms-acceleration's "
                "fused-ops-and-kernels: norm rope loss; default none"),
    # parallelism
    Flag(names=("--dp",), group=_PAR, path="parallelism.dp", parse=parse_positive_int,
         help="data-parallel degree (default: the GPUs left by tp*pp*cp)"),
    Flag(names=("--tp",), group=_PAR, path="parallelism.tp", parse=parse_positive_int,
         help="tensor-parallel degree"),
    Flag(names=("--pp",), group=_PAR, path="parallelism.pp", parse=parse_positive_int,
         help="pipeline-parallel stages"),
    Flag(names=("--cp",), group=_PAR, path="parallelism.cp", parse=parse_positive_int,
         help="context-parallel degree"),
    Flag(names=("--ep",), group=_PAR, path="parallelism.ep", parse=parse_positive_int,
         help="expert-parallel degree (MoE)"),
    Flag(names=("--expert-tp",), group=_PAR, path="parallelism.expert_tp",
         parse=parse_positive_int,
         help="tensor-parallel size of the routed experts (Megatron "
              "--expert-tensor-parallel-size; default: tp)"),
    Flag(names=("--moe-dispatcher",), group=_PAR, path="parallelism.moe_dispatcher",
         choices=("alltoall", "deepep", "hybridep"),
         help="Megatron-Core MoE token dispatcher: alltoall (--moe-token-dispatcher-type "
              "alltoall, default) or flex with --moe-flex-dispatcher-backend deepep|hybridep "
              "(a token sent once per destination rank and remote node)"),
    _bool("--moe-a2a-overlap", group=_PAR, path="parallelism.moe_a2a_overlap",
          help="overlap the EP dispatch/combine with another micro-batch's compute (Megatron "
               "--overlap-moe-expert-parallel-comm; not with full recompute)"),
    _bool("--sequence-parallel", group=_PAR, path="parallelism.sequence_parallel",
          help="Megatron sequence parallelism with tp"),
    Flag(names=("--pp-schedule",), group=_PAR, path="parallelism.pp_schedule",
         choices=("1f1b", "gpipe", "interleaved"), help="pipeline schedule"),
    Flag(names=("--pp-virtual-stages",), group=_PAR, path="parallelism.pp_virtual_stages",
         parse=parse_positive_int, help="model chunks per stage (interleaved)"),
    Flag(names=("--zero",), group=_PAR, path="parallelism.zero_stage", parse=int,
         choices=(0, 1, 2, 3), help="DeepSpeed ZeRO stage"),
    Flag(names=("--fsdp",), group=_PAR, path="parallelism.fsdp",
         choices=("full_shard", "shard_grad_op", "hybrid_shard", "no_shard"),
         help="PyTorch FSDP sharding strategy"),
    Flag(names=("--fsdp-backward-prefetch",), group=_PAR,
         path="parallelism.fsdp_backward_prefetch", choices=("pre", "post", "none"),
         help="FSDP backward_prefetch: pre (BACKWARD_PRE, default), post (Composer's default), "
              "none"),
    Flag(names=("--sharding",), group=_PAR, path="parallelism.sharding", metavar="NAME",
         help="a registered sharding strategy by name (zero0..zero3, fsdp_full_shard, ..., or "
              "a plugin's); zero/fsdp may only repeat it"),
    _bool("--tp-comm-overlap", group=_PAR, path="parallelism.tp_comm_overlap",
          help="overlap tensor-parallel communication with GEMMs (Megatron --tp-comm-overlap; "
               "default: the stack's)"),
    _bool("--async-tp", group=_PAR, path="parallelism.async_tp",
          help="torchtitan async tensor parallelism"),
    _bool("--distributed-optimizer", group=_PAR, path="parallelism.distributed_optimizer",
          help="Megatron distributed optimizer (optimizer states sharded over DP, overlapped "
               "grad reduce-scatter / param all-gather)"),
    Flag(names=("--zero-reduce-bucket",), group=_PAR,
         path="parallelism.zero_reduce_bucket_elems", parse=parse_count_int, metavar="ELEMS",
         help="DeepSpeed zero_optimization.reduce_bucket_size in elements (default 5e8)"),
    _bool("--zero-overlap-comm", group=_PAR, path="parallelism.zero_overlap_comm",
          help="DeepSpeed zero_optimization.overlap_comm (default: true at stage 3, else "
               "false)"),
    _bool("--zero-contiguous-gradients", group=_PAR,
          path="parallelism.zero_contiguous_gradients",
          help="DeepSpeed zero_optimization.contiguous_gradients (default true)"),
    Flag(names=("--zero3-prefetch-bucket",), group=_PAR,
         path="parallelism.zero3_prefetch_bucket_elems", parse=parse_count_int,
         metavar="ELEMS",
         help="DeepSpeed stage3_prefetch_bucket_size in elements (default 5e7)"),
    Flag(names=("--zero3-max-live-params",), group=_PAR,
         path="parallelism.zero3_max_live_params", parse=parse_count_int, metavar="ELEMS",
         help="DeepSpeed stage3_max_live_parameters in elements (default 1e9)"),
    Flag(names=("--zero3-sub-group-size",), group=_PAR,
         path="parallelism.zero3_sub_group_elems", parse=parse_count_int, metavar="ELEMS",
         help="DeepSpeed zero_optimization.sub_group_size in elements (default 1e9): the "
              "ZeRO-3 step casts one sub-group's gradients to fp32 at a time"),
    Flag(names=("--hsdp-shard-size",), group=_PAR, path="parallelism.hsdp_shard_size",
         parse=parse_positive_int,
         help="shard group size for hybrid_shard (default: GPUs per node)"),
    Flag(names=("--cpu-offload",), group=_PAR, path="parallelism.cpu_offload",
         choices=("none", "optimizer", "params"),
         help="offload optimizer states (and master weights) or also parameters to CPU"),
    # hardware
    Flag(names=("--gpu",), group=_HW, path="hardware.gpu", metavar="NAME",
         help="GPU name or alias (fmest gpus)"),
    Flag(names=("--gpus-per-node",), group=_HW, path="hardware.gpus_per_node",
         parse=parse_positive_int,
         help="GPUs per node (default: what the parallelism needs, up to 8)"),
    Flag(names=("--nodes",), group=_HW, path="hardware.nodes", parse=parse_positive_int,
         help="number of nodes"),
    Flag(names=("--inter-node-gbps",), group=_HW, path="hardware.inter_node_gbps",
         parse=parse_count, metavar="GBPS",
         help="network between nodes, Gb/s per GPU (e.g. 400 for 8 x 400G NICs per 8-GPU "
              "node; default: the GPU table's inter_node_gbit_per_s)"),
    Flag(names=("--cuda-version",), group=_HW, path="hardware.cuda_version", metavar="X.Y",
         help="CUDA toolkit of the run's PyTorch (torch.version.cuda, e.g. 11.5): before "
              "11.7, cuBLAS ran GEMMs with a misaligned operand (eager attention with a head "
              "dim not a multiple of 8) far slower; default: a current one"),
    Flag(names=("--torch-version",), group=_HW, path="hardware.torch_version", metavar="X.Y",
         help="PyTorch release of the run (e.g. 2.4, 2.11): SDPA runs cuDNN attention first "
              "on H100/B200 from 2.11 (2.10 with CUDA 13), FSDP2 kept its reduce-scatter "
              "input in a side stream's pool before 2.5; default: unstated (FlashAttention-2 "
              "first, FSDP2 as in 2.5+)"),
    # workload
    Flag(names=("--dataset-tokens",), group=_WORK, path="workload.dataset_tokens",
         parse=parse_count, metavar="N", help="tokens in the dataset, e.g. 2e10"),
    Flag(names=("--num-samples",), group=_WORK, path="workload.num_samples", parse=parse_count,
         metavar="N", help="samples in the dataset"),  # the converter makes it whole
    Flag(names=("--avg-seq-len",), group=_WORK, path="workload.avg_seq_len", parse=parse_count,
         metavar="N", help="average tokens per sample (default: --seq-len)"),
    Flag(names=("--seq-len-std",), group=_WORK, path="workload.seq_len_std", parse=parse_count,
         metavar="N", help="standard deviation of the tokens per sample, after the "
                           "--seq-len cap (with --padding longest)"),
    Flag(names=("--epochs",), group=_WORK, path="workload.epochs", parse=float,
         help="passes over the dataset (default 1)"),
    Flag(names=("--max-steps",), group=_WORK, path="workload.max_steps",
         parse=parse_positive_int, help="fixed number of optimizer steps instead of a dataset"),
    Flag(names=("--dataset",), group=_WORK, path="workload.dataset_path", metavar="FILE",
         help="JSONL/CSV/Parquet/text file to count"),
    # pricing
    Flag(names=("--provider",), group=_PRICE, path="pricing.provider", metavar="NAME|cheapest",
         help="cloud provider to price on (fmest prices)"),
    Flag(names=("--region",), group=_PRICE, path="pricing.region", metavar="R",
         help="provider region"),
    Flag(names=("--price-type",), group=_PRICE, path="pricing.price_type",
         choices=("on_demand", "spot", "reserved_1y", "reserved_3y"),
         help="price type (default on_demand)"),
    Flag(names=("--price-per-gpu-hour",), group=_PRICE, path="pricing.price_per_gpu_hour",
         parse=float, metavar="USD", help="flat price that overrides the price table"),
    # inference
    Flag(names=("--mode",), group=_INFER, choices=("training", "inference"),
         help="estimate a training step (default) or serving"),
    Flag(names=("--batch",), group=_INFER, path="inference.batch", parse=parse_positive_int,
         help="concurrent sequences served"),
    Flag(names=("--context",), group=_INFER, path="inference.context", parse=parse_positive_int,
         help="tokens per sequence (prompt + output; default 4096)"),
    Flag(names=("--output-tokens",), group=_INFER, path="inference.output_tokens",
         parse=parse_positive_int, help="generated tokens per sequence (default 256)"),
    Flag(names=("--kv-dtype",), group=_INFER, path="inference.kv_dtype",
         choices=("auto", "bf16", "fp16", "fp8", "int8"),
         help="KV cache dtype (auto: the compute dtype)"),
    Flag(names=("--kv-block-size",), group=_INFER, path="inference.kv_block_size",
         parse=parse_positive_int, help="paged KV block in tokens (default 16, vLLM's)"),
    Flag(names=("--quantization",), group=_INFER, path="inference.quantization",
         choices=("none", "gptq", "awq", "int4", "int8", "nf4", "fp8"),
         help="weight storage format of the served model (default: --dtype)"),
    Flag(names=("--group-size",), group=_INFER, path="inference.group_size",
         parse=parse_positive_int, help="GPTQ/AWQ group size (128)"),
    Flag(names=("--runtime",), group=_INFER, path="inference.runtime",
         choices=("vllm", "transformers"), help="serving runtime (default vllm)"),
    Flag(names=("--gpu-memory-utilization",), group=_INFER,
         path="inference.gpu_memory_utilization", parse=float,
         help="share of GPU memory the runtime may use (default 0.9)"),
    Flag(names=("--max-num-batched-tokens",), group=_INFER,
         path="inference.max_num_batched_tokens", parse=parse_positive_int,
         help="largest prefill chunk (default 8192)"),
    # vision-language and encoder-decoder
    Flag(names=("--image-size",), group=_VLM, path="training.image_size",
         parse=parse_positive_int, help="image side in pixels (default: the model's)"),
    Flag(names=("--images-per-sample",), group=_VLM, path="training.images_per_sample",
         parse=parse_positive_int, help="images per sample (default 1)"),
    _bool("--train-vision-tower", group=_VLM, path="training.train_vision_tower",
          help="train the vision tower too (default frozen)"),
    Flag(names=("--source-len",), group=_VLM, path="training.source_len",
         parse=parse_positive_int, help="encoder tokens (default --seq-len)"),
    Flag(names=("--target-len",), group=_VLM, path="training.target_len",
         parse=parse_positive_int, help="decoder tokens (default --seq-len)"),
    # raw model dimensions (read together: COMPOSITE_READERS)
    Flag(names=("--hidden-size",), group=_DIMS, parse=parse_positive_int, help="hidden size"),
    Flag(names=("--num-layers",), group=_DIMS, parse=parse_positive_int,
         help="transformer layers"),
    Flag(names=("--num-heads",), group=_DIMS, parse=parse_positive_int, help="attention heads"),
    Flag(names=("--num-kv-heads",), group=_DIMS, parse=parse_positive_int,
         help="key/value heads (GQA)"),
    Flag(names=("--intermediate-size",), group=_DIMS, parse=parse_positive_int,
         help="MLP width"),
    Flag(names=("--vocab-size",), group=_DIMS, parse=parse_positive_int, help="vocabulary size"),
    Flag(names=("--params",), group=_DIMS, parse=parse_count, metavar="N",
         help="parameter count for a weights-only answer (e.g. 7e9)"),
    # calibration
    Flag(names=("--activation-factor",), group=_CAL, path="calibration.activation_factor",
         parse=float, help="multiply activations (default 1)"),
    Flag(names=("--fragmentation-gib",), group=_CAL, path="calibration.fragmentation_gib",
         parse=float, help="add GiB for allocator fragmentation"),
    Flag(names=("--misc-overhead-gib",), group=_CAL, path="calibration.misc_overhead_gib",
         parse=float, help="add GiB of other memory"),
    Flag(names=("--safety-margin",), group=_CAL, path="calibration.safety_margin", parse=float,
         help="share of GPU memory the fits verdict keeps free (0-1)"),
    Flag(names=("--logits-factor",), group=_CAL, path="calibration.logits_factor",
         parse=float, help="multiply the logits and loss memory (default 1)"),
    Flag(names=("--cuda-libs-gib",), group=_CAL, path="calibration.cuda_context_gib",
         parse=float, metavar="GIB",
         help="CUDA context and libraries in GiB, instead of fmest's device term"),
    # the LLM/VLM GPU Memory Estimator's flags (MiaoDX/llm_vlm_memory_estimator @61cdbab,
    # llm_memory_estimator/cli.py), each mapped onto fmest's fields by LLMEST_READERS
    Flag(names=("--attn-act-factor-fa",), group=_LLMEST, parse=float, metavar="F",
         help="its attention activation factor with FlashAttention (0.8): scales activations"),
    Flag(names=("--attn-act-factor-no-fa",), group=_LLMEST, parse=float, metavar="F",
         help="its attention activation factor without FlashAttention (4.0)"),
    Flag(names=("--mlp-act-factor",), group=_LLMEST, parse=float, metavar="F",
         help="its MLP activation factor (6.0)"),
    Flag(names=("--grad-ckpt-reduction",), group=_LLMEST, parse=float, metavar="F",
         help="its share of activations kept under checkpointing (0.35)"),
    Flag(names=("--deepspeed-overhead-gib",), group=_LLMEST, parse=float, metavar="GIB",
         help="added to --misc-overhead-gib (fmest counts DeepSpeed's buffers itself)"),
    _bool("--dp-offload-optimizer", "--cpu-offload-optimizer", group=_LLMEST,
          help="same as --cpu-offload optimizer"),
    Flag(names=("--optimizer-bits",), group=_LLMEST, parse=int, choices=(8, 32),
         help="8: 8-bit AdamW states (adamw_8bit); 32: the optimizer as given"),
    _bool("--master-weights", group=_LLMEST,
          help="false: --precision pure (no fp32 copy); true: fmest's default keeps one"),
    _bool("--kv-cache", group=_LLMEST,
          help="training with use_cache: not modelled (a warning); serving: --mode inference"),
    _bool("--is-seq2seq", group=_LLMEST,
          help="fmest reads encoder-decoder structure from the model's config (a warning)"),
    _bool("--use-vision", group=_LLMEST,
          help="fmest counts a VLM's vision tower from the model's config (a warning)"),
    Flag(names=("--vision-hidden",), group=_LLMEST, parse=parse_positive_int, metavar="N",
         help="its vision-tower size: fmest reads the model's config instead (a warning)"),
    Flag(names=("--vision-layers",), group=_LLMEST, parse=parse_positive_int, metavar="N",
         help="as --vision-hidden"),
    Flag(names=("--vision-image-size",), group=_LLMEST, parse=parse_positive_int, metavar="N",
         help="as --vision-hidden"),
    Flag(names=("--vision-patch",), group=_LLMEST, parse=parse_positive_int, metavar="N",
         help="as --vision-hidden"),
    Flag(names=("--lora-params-override",), group=_LLMEST, parse=parse_positive_int,
         metavar="N", help="LoRA parameter count: fmest counts it from the target modules (a "
                           "warning)"),
    # answer
    Flag(names=("--method",), group=_ANSWER, path="options.method",
         metavar="theory|traced|learned|hybrid", help="policy that chooses among plugin answers"),
    Flag(names=("--mfu",), group=_ANSWER, path="options.mfu", parse=float,
         help="override the model FLOPs utilisation (0-1)"),
    _bool("--explain", group=_ANSWER, path="options.explain",
          help="print every candidate answer and the rule that chose"),
    Flag(names=("--learned-model",), group=_ANSWER, path="options.learned_model",
         metavar="NAME|PATH",
         help="learned-model bundle for --method learned/hybrid: an installed name (fmest "
              "learned-models) or a bundle directory (default: the shipped default bundle)"),
    Flag(names=("--fit-confidence",), group=_ANSWER, path="options.fit_confidence",
         parse=parse_probability, default=None, server_side=True,
         help="the probability that a job fits at which it counts as fitting: the largest "
              "micro-batch and fewest GPUs that fit, fmest plan's plans, and --fail-if-no-fit "
              "(exit 3 below P) (default 0.9; 0.5 is the point estimate's own verdict; answers "
              "without an interval: their FITS / DOES NOT FIT; docs/benchmarks.md)"),
)


def format_flag(*formats: str, help: Optional[str] = None) -> Flag:
    """``--format`` with ``formats`` (the first is the default, for people)."""
    machines = ", ".join(formats[1:])
    return Flag(names=("--format",), group=_ANSWER, choices=formats, default=formats[0],
                server_side=True,
                help=help or (f"table for people, {machines} for machines" if len(formats) == 2
                              else f"table for people; {machines} for machines"))


#: ``fmest estimate``: the job, then how the answer is shown
ESTIMATE_FLAGS: tuple[Flag, ...] = JOB_FLAGS + (
    format_flag("table", "json", "csv", "fm-training-estimator"),
    Flag(names=("--plot",), group=OPTIONS, metavar="FILE", server_side=True,
         help="also draw the estimate to FILE (.png, .svg or .pdf): memory components against "
              "the GPU, phase peaks (needs fmest[plot])"),
    Flag(names=("--fail-if-no-fit",), group=OPTIONS, action="store_true", server_side=True,
         help="exit 3 when a job does not fit in GPU memory (for schedulers; default: exit 0)"),
    _bool("--probe", group=_LLMEST, server_side=True,
          help="also run the job for real on --probe-device and print what it measured (needs "
               "fmest-torch-runner); same as fmest probe for one job"),
    Flag(names=("--probe-steps",), group=_LLMEST, parse=parse_positive_int, metavar="N",
         server_side=True, help="with --probe: optimizer steps timed after the warm-up"),
    Flag(names=("--probe-warmup", "--warmup-steps"), group=_LLMEST, parse=parse_count_int,
         metavar="N", server_side=True, help="with --probe: warm-up steps before timing"),
    Flag(names=("--probe-device",), group=_LLMEST, metavar="cuda|cuda:N|cpu|fake",
         server_side=True, help="with --probe: where the steps run (default cuda)"),
    Flag(names=("--probe-device-id",), group=_LLMEST, parse=parse_count_int, metavar="N",
         server_side=True, help="with --probe: the GPU index (cuda:N)"),
    _bool("--estimate-only", group=_LLMEST, server_side=True, help="skip --probe (the estimate alone)"),
    Flag(names=("--compare",), group=OPTIONS, metavar="KEY=V1,V2", action="append",
         server_side=True,
         help="estimate variants of the job side by side: KEY is a flag's JSON name (zero, "
              "technique, gpu, seq_len, ...) and its values are comma-separated; repeatable, "
              "every combination is a variant (at most 64); table or json (command line only)"),
)

#: ``fmest export``: the job, then where its config goes
EXPORT_FORMATS = ("deepspeed", "accelerate", "axolotl", "training-args")
EXPORT_FLAGS: tuple[Flag, ...] = JOB_FLAGS + (
    format_flag("table", "json"),
    Flag(names=("--to",), group=OPTIONS, choices=EXPORT_FORMATS, required=True,
         server_side=True, help="the tool whose config is written"),
    Flag(names=("--output-dir",), group=OPTIONS, metavar="DIR", server_side=True,
         help="write the file(s) here (default: stdout)"),
)


#: ``fmest plan``: the job, then the planning constraints (docs/plan.md)
OBJECTIVES = ("cost", "time", "pareto")
PLAN_FLAGS: tuple[Flag, ...] = JOB_FLAGS + (
    format_flag("table", "json", "csv", help="table for people, json or csv for machines"),
    Flag(names=("--gpus",), group="plan", metavar="A,B,...",
         help="GPU types to consider (default: every registered GPU with a price)"),
    Flag(names=("--max-gpus",), group="plan", parse=parse_positive_int, default=64,
         metavar="N", help="most GPUs a plan may use (default 64)"),
    Flag(names=("--max-nodes",), group="plan", parse=parse_positive_int, metavar="N",
         help="most nodes (instances) a plan may use"),
    Flag(names=("--budget-usd",), group="plan", parse=float, metavar="USD",
         help="most a run may cost"),
    Flag(names=("--deadline-hours",), group="plan", parse=float, metavar="H",
         help="longest a run may take"),
    Flag(names=("--providers",), group="plan", metavar="A,B,...",
         help="cloud providers to price on (default: every provider in the price table)"),
    Flag(names=("--global-batch-tokens",), group="plan", parse=parse_count, metavar="N",
         help="tokens per optimizer step to keep (default: the job's own batch, else 2^20)"),
    Flag(names=("--objective",), group="plan", choices=OBJECTIVES, default="pareto",
         help="rank by cost, by time, or show the cost/time Pareto front (default)"),
    Flag(names=("--top",), group="plan", parse=parse_positive_int, default=10, metavar="N",
         help="plans to show (default 10)"),
    Flag(names=("--refine",), group="plan", parse=int, default=0, metavar="K",
         help="re-estimate the best K with the job's --method (traced/hybrid) instead of the "
              "theory policy"),
    Flag(names=("--export",), group="plan", choices=EXPORT_FORMATS, server_side=True,
         help="write the training config(s) of the best plan the exporter can express, with "
              "the exporter of 'fmest export'"),
    Flag(names=("--export-dir",), group="plan", metavar="DIR", default="fmest-plan",
         server_side=True, help="where --export writes (default ./fmest-plan)"),
    Flag(names=("--plot",), group="plan", metavar="FILE.png|FILE.svg|FILE.pdf",
         server_side=True,
         help="draw cost against time with the Pareto front, one colour per GPU type (needs "
              "matplotlib: pip install 'fmest[plot]')"),
)


# -- readers that combine several flags ---------------------------------------------------------

def _technique_reader(v: Mapping[str, Any], put: Put) -> None:
    if v.get("qlora"):
        put("training.technique", "qlora", "--qlora")
    elif v.get("lora"):
        put("training.technique", "lora", "--lora")


#: ``--grad-checkpoint`` spellings -> ``training.activation_checkpointing``
CHECKPOINTING = {"true": "full", "1": "full", "yes": "full", "false": "none", "0": "none",
                 "no": "none", "none": "none", "full": "full", "selective": "selective"}


def _checkpoint_reader(v: Mapping[str, Any], put: Put) -> None:
    given = v.get("grad_checkpoint")
    if given is None:
        return
    gc = CHECKPOINTING.get(str(given).strip().lower())
    if gc is None:
        raise InputError("--grad-checkpoint", "not an accepted value", value=given,
                         accepted=("none", "full", "selective", "true", "false"))
    put("training.activation_checkpointing", gc, "--grad-checkpoint")


def _flashattn_reader(v: Mapping[str, Any], put: Put) -> None:
    if v.get("flashattn"):
        put("training.attention", "flash", "--flashattn")


def _dtype_reader(v: Mapping[str, Any], put: Put) -> None:
    """``--dtype int8|nf4``: quantized base weights (QLoRA training with bf16 compute, or
    quantized serving); any other dtype is the compute dtype."""
    dtype, mode = v.get("dtype"), v.get("mode")
    if dtype is None:
        return
    if dtype not in ("int8", "nf4"):
        put("training.dtype", dtype, "--dtype")
        return
    put("training.dtype", "bf16", "--dtype")
    if mode == "inference":
        put("inference.quantization", dtype, "--dtype")
    else:
        put("training.technique", "qlora", "--dtype")
        put("training.quantization_bits", 8 if dtype == "int8" else 4, "--dtype")


def _mode_reader(v: Mapping[str, Any], put: Put) -> None:
    if v.get("mode"):
        put("mode", v["mode"], "--mode")


def _dimensions_reader(v: Mapping[str, Any], put: Put) -> None:
    """Raw dimensions (a Llama-style ``model_config``) or ``--params N`` (a weights-only
    model) instead of a named model."""
    from fmest.models.hf import DIMENSION_KEYS, WEIGHTS_ONLY_KEY, config_from_dimensions

    dims = {key: v.get(key) for key in DIMENSION_KEYS}
    params = v.get("params")
    if any(value is not None for value in dims.values()):
        put("model_config", config_from_dimensions(**dims), "--hidden-size ...")
        if not v.get("model"):
            put("model", "custom-dimensions", "--hidden-size ...")
    elif params is not None:
        if not (math.isfinite(params) and params >= 1):  # int(nan) raised
            raise InputError("--params", "expected a finite parameter count >= 1 (7e9, 7B)",
                             value=params)
        put("model_config", {WEIGHTS_ONLY_KEY: int(params)}, "--params")
        if not v.get("model"):
            put("model", f"params-{params:g}", "--params")


#: The LLM/VLM GPU Memory Estimator's activation model and defaults (MiaoDX/
#: llm_vlm_memory_estimator @61cdbab: core/config.py defaults; components/activations.py:
#: attention and MLP activations = B x L x H x factor x layers x bytes each;
#: optimizations/builtin: FlashAttention multiplies the attention term by 0.2, checkpointing
#: both terms by grad_ckpt_reduction). fmest keeps its own activation model and scales it by
#: the ratio the given factors make in that formula (docs/compat.md).
LLMEST_DEFAULTS = {"attn_act_factor_fa": 0.8, "attn_act_factor_no_fa": 4.0,
                   "mlp_act_factor": 6.0, "grad_ckpt_reduction": 0.35}
LLMEST_FLASH_EFFECT = 0.2
_LLMEST_ACT = tuple(LLMEST_DEFAULTS)
Note = Callable[[str, str], None]


def _flag_name(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _llmest_activation_reader(v: Mapping[str, Any], put: Put, note: Note) -> None:
    given = [k for k in _LLMEST_ACT if v.get(k) is not None]
    if not given:
        return
    for k in given:
        bad = v[k] < 0 or (k == "grad_ckpt_reduction" and not 0 < v[k] <= 1)
        if bad or not math.isfinite(v[k]):
            raise InputError(_flag_name(k), "must be in (0, 1]" if k == "grad_ckpt_reduction"
                             else "must be a finite number >= 0", value=v[k])
    flash = bool(v.get("flashattn")) or v.get("attn") == "flash"
    gc = CHECKPOINTING.get(str(v.get("grad_checkpoint") or "none").strip().lower(), "none")
    attn_key = "attn_act_factor_fa" if flash else "attn_act_factor_no_fa"

    def share(values: Mapping[str, Any]) -> float:
        attn = values[attn_key] * (LLMEST_FLASH_EFFECT if flash else 1.0)
        kept = values["grad_ckpt_reduction"] if gc != "none" else 1.0
        return (attn + values["mlp_act_factor"]) * kept

    theirs = {k: (v[k] if v.get(k) is not None else d) for k, d in LLMEST_DEFAULTS.items()}
    base = share(LLMEST_DEFAULTS)
    factor = share(theirs) / base * float(v.get("activation_factor") or 1.0)
    used = [k for k in given if not (k == "grad_ckpt_reduction" and gc == "none")
            and not (k.startswith("attn_act_factor") and k != attn_key)]
    for k in given:
        if k not in used:
            note(_flag_name(k), "has no effect here: " + (
                "no activation checkpointing (--grad-checkpoint)" if k == "grad_ckpt_reduction"
                else f"attention is {'flash' if flash else 'not flash'}"))
    if used:
        origin = " + ".join(_flag_name(k) for k in used)
        if v.get("activation_factor") is not None:
            origin += " x --activation-factor"
        put("calibration.activation_factor", factor, origin)


def _llmest_reader(v: Mapping[str, Any], put: Put, note: Note) -> None:
    """The estimator's other flags: each sets the fmest field of the same meaning, or is named
    in a warning saying what fmest does instead."""
    extra = v.get("deepspeed_overhead_gib")
    if extra is not None:
        if not (math.isfinite(extra) and extra >= 0):
            raise InputError("--deepspeed-overhead-gib", "must be a number of GiB >= 0",
                             value=extra)
        total = extra + float(v.get("misc_overhead_gib") or 0.0)
        origin = "--deepspeed-overhead-gib" + (" + --misc-overhead-gib"
                                               if v.get("misc_overhead_gib") else "")
        put("calibration.misc_overhead_gib", total, origin)
    if v.get("dp_offload_optimizer"):
        put("parallelism.cpu_offload", "optimizer", "--dp-offload-optimizer")
    if v.get("optimizer_bits") == 8:
        opt = str(v.get("optimizer") or "adamw").strip().lower()
        if opt not in ("adamw", "adam", "adamw_torch"):
            raise InputError("--optimizer-bits", "8 bits is 8-bit AdamW; give it with "
                             "--optimizer adamw (or --optimizer NAME for another 8-bit one)",
                             value=8, accepted=("adamw",))
        put("training.optimizer", "adamw_8bit", "--optimizer-bits")
    if v.get("master_weights") is False:
        put("training.precision", "pure", "--master-weights")
    for dest, what in (
            ("kv_cache", "a KV cache during training (use_cache) is not modelled; fmest counts "
                         "the KV cache of serving with --mode inference"),
            ("is_seq2seq", "fmest reads encoder-decoder structure from the model's config "
                           "(model_type), not from this flag"),
            ("use_vision", "fmest counts a VLM's vision tower from the model's config "
                           "(vision_config); a text-only model gets none")):
        if v.get(dest):
            note(_flag_name(dest), what)
    for dest in ("vision_hidden", "vision_layers", "vision_image_size", "vision_patch"):
        if v.get(dest) is not None:
            note(_flag_name(dest), "fmest sizes the vision tower from the model's config "
                 "(vision_config), not from this flag")
    if v.get("lora_params_override") is not None:
        note("--lora-params-override", "fmest counts LoRA parameters from the model's target "
             "modules (--lora-target-modules, --lora-rank); the override is not used")


#: Flags whose meaning depends on other flags, read in this order after the single-field rows
#: (``--dtype int8`` after ``--technique``, so the quantized base wins, as it always did).
PRE_READERS: tuple[Callable[[Mapping[str, Any], Put], None], ...] = (
    _technique_reader, _checkpoint_reader, _flashattn_reader)
COMPOSITE_READERS: tuple[Callable[[Mapping[str, Any], Put], None], ...] = (
    _mode_reader, _dtype_reader, _dimensions_reader)
def _kept_not_modelled_reader(v: Mapping[str, Any], put: Put, note: Note) -> None:
    """Fields the job keeps (for export) that no estimator uses yet: named in a warning."""
    for dest in ("zero3_prefetch_bucket", "zero3_max_live_params"):
        if v.get(dest) is not None:
            note(_flag_name(dest), "kept in the job, not used by the memory model yet: ZeRO-3's "
                 "gathered parameters are estimated as two layers and the root module")


#: Readers that may also name a flag fmest reads but does not use (a warning): other tools'
#: flags, and fields kept in the job that no estimator uses yet.
LLMEST_READERS: tuple[Callable[[Mapping[str, Any], Put, Note], None], ...] = (
    _llmest_activation_reader, _llmest_reader, _kept_not_modelled_reader)


def read_flags(given: Mapping[str, Any] | argparse.Namespace,
               flags: Optional[Sequence[Flag]] = None) -> Any:
    """The job flags actually given (``dest -> value``; ``None`` = not given), as an input
    layer whose origin is the flag. Flags that set one field two ways are refused first
    (:data:`fmest.bounds.FLAG_CONFLICTS`)."""
    from fmest.bounds import check_flags
    from fmest.inputs import Layer

    values = dict(vars(given)) if isinstance(given, argparse.Namespace) else dict(given)
    check_flags(argparse.Namespace(**values))
    rows = JOB_FLAGS if flags is None else flags   # the table as it is now (tests extend it)
    out: dict[str, tuple[Any, str]] = {}

    def put(path: str, value: Any, origin: str) -> None:
        out.pop(path, None)
        out[path] = (value, origin)

    if values.get("model"):
        put("model", values["model"], "--model")
    for reader in PRE_READERS:
        reader(values, put)
    for flag in rows:
        value = values.get(flag.dest)
        if value is None or flag.path is None or flag.path == "model":
            continue
        put(flag.path, flag.to_job(value) if flag.to_job else value, flag.name)
    for reader in COMPOSITE_READERS:
        reader(values, put)
    notes: list = []

    def note(flag: str, reason: str) -> None:
        from fmest.inputs import Ignored

        notes.append(Ignored(source="", key=flag, reason=reason, kind="flag",
                             effect="unmodelled"))

    for noting in LLMEST_READERS:
        noting(values, put, note)
    return Layer(source="flags", values=out, ignored=tuple(notes))


# -- the command line -------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser, flags: Iterable[Flag]) -> None:
    """Add ``flags`` to ``parser`` in argparse groups (by :attr:`Flag.group`, in table order)."""
    groups: dict[str, Any] = {OPTIONS: parser}   # the parser's own group keeps its title
    for flag in flags:
        group = groups.get(flag.group)
        if group is None:
            group = groups[flag.group] = parser.add_argument_group(flag.group)
        group.add_argument(*flag.names, **flag.argparse_kwargs())


def defaults(flags: Iterable[Flag]) -> dict[str, Any]:
    """``dest -> default`` of ``flags`` (what argparse gives when none is given)."""
    return {f.dest: (f.default if f.default is not None
                     else (False if f.action == "store_true" else None)) for f in flags}


# -- the service ------------------------------------------------------------------------------

@functools.lru_cache(maxsize=16)
def json_flags(flags: tuple[Flag, ...]) -> dict[str, Flag]:
    """JSON name -> row for the flags a request body may set (:attr:`Flag.json_names`)."""
    out: dict[str, Flag] = {}
    for flag in flags:
        if flag.server_side:
            continue
        for name in flag.json_names:
            out.setdefault(name, flag)
    return out


def convert(name: str, flag: Flag, value: Any) -> Any:
    """One JSON value through the row's parser and choices (what the CLI does with
    ``--flag VALUE``; a list for flags taking one or more values); errors name the JSON field
    and, where known, the accepted values."""
    if value is None:
        return None
    if flag.action == "store_true":
        return bool(_convert_value(name, Flag(names=flag.names, group=flag.group,
                                              parse=parse_bool, nargs="?"), value))
    if flag.nargs == "+":
        items = value if isinstance(value, list) else [value]
        if not items:
            raise InputError(name, "expected at least one value", value=value)
        return [_convert_value(name, flag, item) for item in items]
    return _convert_value(name, flag, value)


def _convert_value(name: str, flag: Flag, value: Any) -> Any:
    accepted = flag.accepted()
    if isinstance(value, (dict, list)):
        raise InputError(name, "expected a single value", value=value, accepted=accepted)
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    parse = parse_bool if flag.is_bool else flag.parse
    converted: Any = text
    if parse is not None:
        try:
            converted = parse(text)
        except (argparse.ArgumentTypeError, TypeError, ValueError) as exc:
            message = str(exc) if isinstance(exc, argparse.ArgumentTypeError) else (
                f"expected {getattr(parse, '__name__', 'a value')}")
            # the parsers' own messages already quote the value ("got '0'")
            raise InputError(name, message, value=None if "got" in message else value,
                             accepted=accepted) from None
    if flag.choices is not None and converted not in flag.choices:
        raise InputError(name, "not an accepted value", value=value, accepted=flag.choices)
    return converted


def json_schema(flag: Flag) -> dict[str, Any]:
    """The OpenAPI property of a row: JSON type, ``enum``, ``description``, ``x-flag`` (its
    ``--option``) and ``x-group`` (its group: the page builds its form from these)."""
    out: dict[str, Any]
    if flag.is_bool or flag.action == "store_true":
        out = {"type": "boolean"}
    elif flag.parse is parse_positive_int:
        out = {"type": "integer", "minimum": 1}
    elif flag.parse is int:
        out = {"type": "integer"}
    elif flag.parse in (float, parse_count):
        out = {"type": "number"}
    else:
        out = {"type": "string"}
    if flag.choices is not None:
        out["enum"] = list(flag.choices)
    if flag.nargs == "+":
        out = {"type": "array", "items": out, "minItems": 1}
    out["description"] = flag.help.replace("%%", "%")
    out["x-flag"] = flag.name
    out["x-group"] = flag.group
    return out


# -- job keys (plan, probe sweeps) ---------------------------------------------------------------

@functools.lru_cache(maxsize=16)
def _paths(flags: tuple[Flag, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for flag in flags:
        if flag.path is not None and flag.to_job is None:
            for name in flag.json_names:
                out.setdefault(name, flag.path)
    return out


def job_path(key: str, flags: Optional[tuple[Flag, ...]] = None) -> str:
    """The job field a key names: a job field path (``training.seq_len``) as it is, or a flag's
    JSON name (``seq_len``, ``micro_batch``) mapped through the table."""
    if "." in key or key in ("model", "model_config", "mode"):
        return key
    return _paths(JOB_FLAGS if flags is None else flags).get(key, key)
