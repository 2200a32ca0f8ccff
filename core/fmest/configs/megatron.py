"""Megatron-LM arguments and Megatron-Bridge / NeMo recipe YAML -> stack ``megatron-core``.

Three spellings of one set of settings, read by one table keyed by Megatron's argparse ``dest``
names (which Megatron-Core's ``TransformerConfig`` and Megatron-Bridge's ``ConfigContainer``
reuse):

* **Megatron-LM arguments**: a text file of ``pretrain_gpt.py`` flags (``--tensor-model-parallel-
  size 8 --bf16 ...``; ``#`` comments, backslash continuations, ``--flag=value``) or a JSON/YAML
  list of them. Names, defaults and choices: NVIDIA/Megatron-LM
  ``megatron/training/arguments.py`` at commit 7c1baead7cd60b97ca53234fd75b91905fe7b7d2
  (2025-05-29). Flags a file leaves out take Megatron-LM's default: fp32 (no ``--bf16`` /
  ``--fp16``), no ``--tp-comm-overlap``, tied embeddings, ``--ffn-hidden-size`` 4h (SwiGLU:
  ``int(4h x 2/3 / 64) x 64``), vocabulary padded to a multiple of
  ``--make-vocab-size-divisible-by`` (128) x tp.
* **Megatron-Bridge** ``ConfigContainer`` YAML (NVIDIA-NeMo/Megatron-Bridge
  ``tutorials/recipes/llama/conf/llama32_1b_pretrain.yaml``): sections ``model`` (the
  ``GPTModelProvider``/``TransformerConfig`` fields), ``train``, ``optimizer``, ``ddp``,
  ``comm_overlap``, ``mixed_precision``, ``dataset``, ...
* **NeMo Megatron** YAML (NeMo ``examples/nlp/language_modeling/conf/megatron_gpt_config.yaml``):
  ``trainer`` (devices, num_nodes, precision, max_steps) and ``model`` with NeMo's spellings
  (``encoder_seq_length``, ``activations_checkpoint_granularity``, ``ub_tp_comm_overlap``,
  ``optim.name: distributed_fused_adam``).

Raw dimensions (``--num-layers``, ``--hidden-size``, ...) become the job's ``model_config``
(a Llama-style config with ``--swiglu``, else a GPT-2-style one) and define the model (a
``--model`` flag only renames it). ``--global-batch-size`` = micro-batch x accumulation x data-parallel GPUs
(data-parallel = GPUs / (tp x pp x cp), Megatron-LM ``num_microbatches_calculator``) is checked
or solved like DeepSpeed's ``train_batch_size`` (:func:`fmest.configs.solve_train_batch`): with
the file's GPU count (torchrun ``--nproc_per_node`` / ``--nnodes``, NeMo ``trainer.devices`` /
``num_nodes``) when loaded, again with the flags' (``--gpus-per-node`` / ``--nodes``) when the
job is built; a value that does not divide is refused naming the key, and with no GPU count the
key is reported unresolved. The accumulation it derives is also the number of micro-batches the
first pipeline stage holds in flight (1F1B: ``min(pp, accumulation)``).
"""

from __future__ import annotations

import shlex
from typing import Any

from fmest.configs._base import DATA, HYPERPARAM, LOGGING, Sink, join, section

FORMAT = "megatron"
ARGS_WHY = "(Megatron-LM arguments)"

#: NeMo (1.x) and launcher spellings -> Megatron argparse dest names
ALIASES = {"encoder_seq_length": "seq_length", "fp8_format": "fp8",
           "activations_checkpoint_granularity": "recompute_granularity",
           "activations_checkpoint_method": "recompute_method",
           "activations_checkpoint_num_layers": "recompute_num_layers",
           "ub_tp_comm_overlap": "tp_comm_overlap", "use_flash_attention": "use_flash_attn",
           "max_steps": "train_iters", "devices": "nproc_per_node", "num_nodes": "nnodes",
           "num_virtual_stages_per_pipeline_rank": "virtual_pipeline_model_parallel_size",
           "grad_reduce_in_fp32": "grad_reduce_in_fp32"}

_INT_FIELDS = {"tensor_model_parallel_size": "parallelism.tp",
               "pipeline_model_parallel_size": "parallelism.pp",
               "context_parallel_size": "parallelism.cp",
               "expert_model_parallel_size": "parallelism.ep",
               "expert_tensor_parallel_size": "parallelism.expert_tp",
               "micro_batch_size": "training.micro_batch_size",
               "seq_length": "training.seq_len", "train_iters": "workload.max_steps",
               "nproc_per_node": "hardware.gpus_per_node", "nnodes": "hardware.nodes"}
_DIMS = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads",
         "num_query_groups", "vocab_size", "swiglu", "untie_embeddings_and_output_weights",
         "make_vocab_size_divisible_by", "group_query_attention", "max_position_embeddings")
_RECOMPUTE = {"full": "full", "selective": "selective"}
# --attention-backend (megatron/core/transformer/enums.py AttnBackend); auto lets Transformer
# Engine pick its flash or cuDNN fused kernel, both without the s^2 score matrix
_ATTENTION = {"flash": "flash", "fused": "flash", "auto": "flash", "unfused": "eager",
              "local": "eager"}
_FP8_FORMATS = ("e4m3", "hybrid")
# Megatron-Bridge mixed_precision recipe names (megatron/bridge/training/mixed_precision.py)
_BRIDGE_PRECISION = {"bf16_mixed": "bf16", "fp16_mixed": "fp16", "fp32": "fp32"}

_LOGGING_PREFIXES = ("log_", "save", "load", "eval_", "tensorboard", "wandb", "exit_",
                     "profile", "timing_", "ckpt_", "distributed_timeout", "use_checkpoint", "finetune", "pretrained_",
                     "barrier_with_l1_time", "logging_", "check_for_nan")
_DATA_PREFIXES = ("data_", "split", "tokenizer", "vocab_file", "merge_file", "mock_data",
                  "num_workers", "tiktoken", "no_create_attention_mask", "no_mmap",
                  "dataloader", "reset_", "eod_mask")
_HYPER_PREFIXES = ("lr", "min_lr", "decoupled_", "weight_decay", "clip_grad", "adam_",
                   "sgd_", "init_method", "attention_dropout", "hidden_dropout", "seed",
                   "loss_scale", "initial_loss_scale", "min_loss_scale", "hysteresis",
                   "rampup_batch_size", "calculate_per_token_loss", "start_weight_decay",
                   "end_weight_decay", "weight_decay_incr_style")
_ARCH_PREFIXES = ("rotary_", "norm_epsilon", "apply_layernorm_1p", "kv_channels",
                  "position_embedding_type", "normalization", "disable_bias_linear",
                  "add_qkv_bias", "add_bias_linear", "qk_layernorm", "apply_query_key_layer")
_HOUSEKEEPING = ("manual_gc", "empty_unused_memory_level", "use_mcore_models",
                 "use_legacy_models", "distributed_backend", "deterministic_mode",
                 "use_cpu_initialization", "perform_initialization")
_LAUNCHER = ("node_rank", "master_addr", "master_port", "rdzv_", "standalone")


# -- reading -------------------------------------------------------------------------------
def parse_args(tokens: list[str]) -> dict:
    """``--flag value`` tokens as ``{"--flag": value}``: a flag with no value is ``True``,
    with several values a list; a later repeat wins (argparse's rule). Tokens before the
    first flag (a launcher, a script) are kept under ``"(positional)"``."""
    out: dict[str, Any] = {}
    current = None
    for token in tokens:
        if token.startswith("--") and token[2:3].isalpha():
            name, eq, value = token.partition("=")
            out.pop(name, None)
            out[name] = value if eq else True
            current = None if eq else name
        elif current is None:
            out.setdefault("(positional)", []).append(token)
        elif out[current] is True:
            out[current] = token
        else:
            prev = out[current]
            out[current] = [*prev, token] if isinstance(prev, list) else [prev, token]
    return out


def _tokens(text: str) -> list[str] | None:
    try:
        return shlex.split(text.replace("\\\n", " "), comments=True)
    except ValueError:
        return None


def looks_like_args(text: str) -> bool:
    """Command-line flags: the first token is a ``--flag``."""
    tokens = _tokens(text)
    if not tokens:
        return False
    # a letter after "--": YAML's "---" document marker is not a flag
    return tokens[0].startswith("--") and tokens[0][2:3].isalpha()


def parse_args_text(text: str) -> dict:
    return parse_args(_tokens(text) or [])


def args_from_list(doc: Any) -> dict | None:
    """A JSON/YAML list of argument strings (``["--tp", "8"]`` or ``["--tp 8"]``) as flags."""
    if not isinstance(doc, list) or not doc or not all(isinstance(t, (str, int, float))
                                                       for t in doc):
        return None
    tokens = [p for t in doc for p in (_tokens(str(t)) or [str(t)])]
    return parse_args(tokens) if tokens and tokens[0].startswith("--") else None


def detect(doc: dict) -> bool:
    """Flags (every key a ``--flag``), or a ``model`` section holding Megatron's parallel
    sizes (Megatron-Bridge ConfigContainer, NeMo Megatron YAML)."""
    keys = [k for k in doc if k != "(positional)"]
    if keys and all(isinstance(k, str) and k.startswith("--") for k in keys):
        return True
    model = doc.get("model")
    return isinstance(model, dict) and any(
        k in model for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                             "context_parallel_size")) and bool(
        set(doc) & {"train", "trainer", "ddp", "optimizer", "mixed_precision", "dataset",
                    "checkpoint", "logger", "comm_overlap", "scheduler", "rng"})


# -- one setting ---------------------------------------------------------------------------
class _State:
    def __init__(self) -> None:
        self.dims: dict[str, tuple[Any, str]] = {}
        self.dtype_key: str | None = None
        self.fp8_key: str | None = None
        self.vp_layers: tuple[int, str] | None = None
        self.amp_o2: tuple[bool, str] | None = None
        #: --moe-token-dispatcher-type flex (its key) and the flex backend (value, key)
        self.moe_flex: str | None = None
        self.moe_backend: tuple[str, str] | None = None
        #: --recompute-method / --recompute-num-layers: (value, key) by name
        self.recompute: dict[str, tuple[Any, str]] = {}
        #: --recompute-modules (names, key) and --moe-layer-recompute's key
        self.modules: tuple[tuple[str, ...], str] | None = None
        self.moe_layer_recompute: str | None = None
        #: CUDA graphs: --cuda-graph-impl (or the deprecated switches) and the scope list
        self.cg_impl: tuple[str, str] | None = None
        self.cg_scope: tuple[tuple[str, ...], str] | None = None


def _reason(name: str) -> str:
    if name.startswith(_LOGGING_PREFIXES):
        return LOGGING
    if name.startswith(_DATA_PREFIXES):
        return DATA
    if name.startswith(_HYPER_PREFIXES):
        return HYPERPARAM
    if name.startswith(_ARCH_PREFIXES):
        return ("architecture detail (norm, rotary, biases, head size); same parameter count "
                "within 0.1 % in fmest's model")
    if name.startswith(_HOUSEKEEPING):
        return "implementation or housekeeping switch; same bytes and FLOPs per GPU"
    if name.startswith(_LAUNCHER):
        return "launcher setting; does not change memory, time or cost"
    if name.startswith("no_") or name.endswith("_fusion"):
        return "a kernel-fusion switch; the megatron-core stack prices Transformer Engine's " \
               "fused kernels"
    return "not used by fmest"


def _apply(name: str, value: Any, key: str, sink: Sink, state: _State) -> None:
    name = ALIASES.get(name, name)
    if isinstance(value, str) and "$" in value:
        sink.ignore(key, f"{value!r} is a shell variable; give its value")
        return
    if name in ("nproc_per_node", "nnodes") and not (
            isinstance(value, int) and not isinstance(value, bool) and value >= 1
            or isinstance(value, str) and value.strip().isdigit() and int(value) >= 1):
        sink.ignore(key, f"{value!r}: the launcher decides (-1/auto/gpu); give --gpus-per-node "
                    "/ --nodes")
    elif name == "train_iters" and (value is None or value == -1):
        sink.ignore(key, f"{value}: unset (the run is bounded by epochs or data)")
    elif name in _INT_FIELDS and value is None:
        sink.ignore(key, "null: not set (the tool's default)")
    elif name == "num_query_groups" and value is None:
        sink.ignore(key, "null: multi-head attention (one group per head)")
    elif name == "activation":
        text = str(value).strip().lower()
        gated = text.replace("fast-", "") in ("swiglu", "geglu", "reglu")
        state.dims["swiglu"] = (gated, key)
        if text.replace("fast-", "") not in ("swiglu", "gelu"):
            sink.unmodelled(key, f"{value}: counted as "
                            f"{'SwiGLU' if gated else 'GELU'} (same parameters and FLOPs)")
    elif name == "share_embeddings_and_output_weights":
        state.dims["untie_embeddings_and_output_weights"] = (not sink.bool_(key, value), key)
    elif name == "megatron_amp_O2":
        state.amp_o2 = (sink.bool_(key, value), key)
    elif name in _INT_FIELDS:
        sink.set(_INT_FIELDS[name], sink.int_(key, value), key)
    elif name == "train_samples":
        sink.set("workload.num_samples", sink.int_(key, value), key)
    elif name == "global_batch_size":
        sink.train_batch.append((sink.int_(key, value), key))
    elif name in _DIMS:
        state.dims[name] = (value, key)
    elif name == "virtual_pipeline_model_parallel_size":
        if value is None:
            sink.ignore(key, "null: no interleaving")
            return
        stages = sink.int_(key, value)
        sink.set("parallelism.pp_virtual_stages", stages, key)
        if stages > 1:
            sink.set("parallelism.pp_schedule", "interleaved", key)
    elif name == "num_layers_per_virtual_pipeline_stage":
        state.vp_layers = (sink.int_(key, value), key)
    elif name == "sequence_parallel":
        sink.set("parallelism.sequence_parallel", sink.bool_(key, value), key)
    elif name == "use_distributed_optimizer":
        sink.set("parallelism.distributed_optimizer", sink.bool_(key, value), key)
    elif name == "tp_comm_overlap":
        sink.set("parallelism.tp_comm_overlap", sink.bool_(key, value), key)
    elif name in ("overlap_grad_reduce", "overlap_param_gather"):
        sink.ignore(key, "the megatron-core stack overlaps gradient reduce (and, with the "
                    "distributed optimizer, parameter gather) with compute (stacks.toml)")
    elif name == "gradient_accumulation_fusion":
        sink.set("training.grad_accumulation_fusion", sink.bool_(key, value), key)
    elif name == "no_gradient_accumulation_fusion":
        if sink.bool_(key, value):
            sink.set("training.grad_accumulation_fusion", False, key)
        else:
            sink.ignore(key, "false")
    elif name == "cross_entropy_loss_fusion":
        if sink.bool_(key, value):
            sink.set("training.loss", "fused", key)
        else:
            sink.ignore(key, "false")
    elif name == "use_flash_attn":
        sink.set_when_true("training.attention", "flash", key, value)
    elif name == "attention_backend":
        text = str(value).strip().lower().split(".")[-1]
        sink.set("training.attention", sink.choice(key, text, _ATTENTION), key)
    elif name == "recompute_granularity":
        if value is None:
            sink.ignore(key, "null: no recomputation")
        else:
            sink.set("training.activation_checkpointing",
                     sink.choice(key, value, _RECOMPUTE), key)
    elif name in ("recompute_method", "recompute_num_layers") and value is not None:
        state.recompute[name] = (value, key)
    elif name == "recompute_modules" and value is not None:
        # a list, or a string: "a b", "a,b" or a Hydra-style override "[a,b]" (Megatron-Bridge)
        items = value if isinstance(value, (list, tuple)) else \
            str(value).strip().strip("[]").replace(",", " ").split()
        names = (str(v).strip().strip("'\"") for v in items)
        state.modules = (tuple(n for n in names if n), key)
    elif name == "moe_layer_recompute":
        if sink.bool_(key, value):
            state.moe_layer_recompute = key
        else:
            sink.ignore(key, "false")
    elif name == "cuda_graph_impl" and value is not None:
        state.cg_impl = (str(value).strip().lower(), key)
    elif name in ("enable_cuda_graph", "external_cuda_graph"):
        # deprecated: megatron/training/arguments.py maps them to --cuda-graph-impl local /
        # transformer_engine
        if sink.bool_(key, value):
            state.cg_impl = ("local" if name == "enable_cuda_graph" else "transformer_engine",
                             key)
        else:
            sink.ignore(key, "false")
    elif name in ("cuda_graph_scope", "cuda_graph_modules") and value is not None:
        items = value if isinstance(value, (list, tuple)) else \
            str(value).strip().strip("[]").replace(",", " ").split()
        names = (str(v).strip().strip("'\"").split(".")[-1] for v in items)
        state.cg_scope = (tuple(n for n in names if n), key)
    elif name == "moe_expert_capacity_factor":
        cap_text = "" if value is None else str(value).strip().lower()
        if cap_text in ("", "none", "null") or cap_text.startswith("-"):
            # transformer_config.py __post_init__: a negative factor is None (dropless)
            sink.ignore(key, f"{value!r}: dropless")
        else:
            sink.set("training.moe_expert_capacity_factor", sink.num(key, value), key)
    elif name == "moe_pad_expert_input_to_capacity":
        sink.set("training.moe_pad_to_capacity", sink.bool_(key, value), key)
    elif name == "moe_token_drop_policy":
        sink.ignore(key, f"{value!r}: which tokens drop, not how many (same shapes)")
    elif name in ("moe_permute_fusion", "moe_router_fusion"):
        sink.set(f"training.{name}", sink.bool_(key, value), key)
    elif name == "moe_grouped_gemm":
        if sink.bool_(key, value):
            sink.ignore(key, "true: the routed experts' GEMMs are priced per expert at their "
                        "rows (the grouped GEMM's FLOPs and bytes)")
        else:
            sink.unmodelled(key, "false: the sequential per-expert GEMM loop's launches are not "
                            "priced (same FLOPs and bytes)")
    elif name in ("recompute_method", "recompute_num_layers", "recompute_modules"):
        if value is None:
            sink.ignore(key, "null: not set")
        else:
            sink.unmodelled(key, f"{value!r}: which layers/modules are recomputed; fmest "
                            "recomputes every layer (full) or the attention core (selective)")
    elif name in ("bf16", "fp16"):
        if sink.bool_(key, value):
            state.dtype_key = key
            sink.set("training.dtype", name, key)
        else:
            sink.ignore(key, f"false: {name} off")
    elif name == "fp8":
        on = value if isinstance(value, bool) else (
            value is not None and str(value).strip().lower() not in ("none", "false", ""))
        if on and not isinstance(value, bool):
            sink.choice(key, value, {f: f for f in _FP8_FORMATS})
        if on:
            state.fp8_key = key
        else:
            sink.ignore(key, "no fp8")
    elif name in ("fp8_recipe", "fp8_hybrid", "fp8_amax_history_len", "fp8_amax_compute_algo",
                  "fp8_param_gather", "fp8_margin", "fp8_interval", "fp8_wgrad",
                  "first_last_layers_bf16", "num_layers_at_start_in_bf16",
                  "num_layers_at_end_in_bf16", "fp8_param"):
        sink.ignore(key, "fp8 recipe detail; the megatron-core stack prices Transformer "
                    "Engine's fp8 (casts fused into the GEMM producers)")
    elif name == "optimizer":
        text = str(value).strip().lower()
        sink.set("training.optimizer", sink.choice(key, text, {"adam": "adamw",
                                                               "adamw": "adamw",
                                                               "sgd": "sgd_momentum"}), key)
    elif name in ("transformer_impl",):
        if str(value).strip().lower() != "transformer_engine":
            sink.ignore(key, "the local (non-Transformer Engine) implementation is estimated as "
                        "the megatron-core stack; give --stack pytorch for eager kernels")
        else:
            sink.ignore(key, "transformer_engine: the megatron-core stack's kernels")
    elif name in ("grad_reduce_in_fp32", "grad_reduce_in_bf16",
                  "accumulate_allreduce_grads_in_fp32"):
        # --grad-reduce-in-bf16 turns accumulate_allreduce_grads_in_fp32 off: the main_grad
        # buffer is bf16 (megatron/training/arguments.py; param_and_grad_buffer.py grad_dtype)
        if sink.bool_(key, value):
            sink.set("training.main_grads_dtype",
                     "compute" if name == "grad_reduce_in_bf16" else "fp32", key)
        else:
            sink.ignore(key, "false: the megatron-core stack's rule (stacks.toml fp32_grads)")
    elif name == "moe_token_dispatcher_type":
        text = str(value).strip().lower()
        if text == "alltoall":
            sink.set("parallelism.moe_dispatcher", "alltoall", key)
        elif text == "flex":
            state.moe_flex = key
        else:
            sink.unmodelled(key, f"{value!r}: priced as the alltoall dispatcher")
    elif name in ("moe_flex_dispatcher_backend", "moe_enable_deepep"):
        if name == "moe_enable_deepep":
            backend = "deepep" if sink.bool_(key, value) else None
        else:
            backend = str(value).strip().lower()
        if backend in ("deepep", "hybridep"):
            state.moe_backend = (backend, key)
        elif backend is None:
            sink.ignore(key, "false: DeepEP off")
        else:
            sink.unmodelled(key, f"{value!r}: the flex backend is priced as DeepEP's")
            state.moe_backend = ("deepep", key)
    elif name == "overlap_moe_expert_parallel_comm":
        sink.set("parallelism.moe_a2a_overlap", sink.bool_(key, value), key)
    elif name in ("num_experts", "moe_router_topk", "moe_ffn_hidden_size"):
        sink.ignore(key, "MoE layers are not built from raw dimensions; give --model with a "
                    "MoE preset")
    else:
        sink.ignore(key, _reason(name))


# -- the whole file ------------------------------------------------------------------------
def _section(block: Any, prefix: str, sink: Sink, state: _State) -> None:
    block = sink.mapping(prefix, block)
    for name, value in block.items():
        key = join(prefix, name)
        if name in ("_target_", "_partial_"):
            sink.ignore(key, "the recipe's Python target; its fields are read")
        elif prefix == "model.optim" and name == "name":
            text = str(value).strip().lower()
            if text == "distributed_fused_adam":   # NeMo's Megatron distributed optimizer
                sink.set("parallelism.distributed_optimizer", True, key)
            sink.set("training.optimizer", "sgd_momentum" if "sgd" in text else "adamw", key)
        elif prefix == "trainer" and name == "precision":
            _precision(value, key, sink, state)
        elif prefix == "model" and name == "tokenizer" and isinstance(value, dict):
            _tokenizer(value, key, sink, state)
        elif isinstance(value, dict) and prefix in ("model", "trainer") and name in (
                "optim",):
            _section(value, key, sink, state)
        elif isinstance(value, dict):
            sink.ignore(key, "nested settings fmest does not read (e.g. a teacher model, "
                        "tokenizer or data blend)")
        else:
            _apply(str(name), value, key, sink, state)


def _tokenizer(block: dict, key: str, sink: Sink, state: _State) -> None:
    """NeMo ``model.tokenizer``: the vocabulary size comes from the tokenizer
    (megatron_base_model.py ``_vocab_size_with_padding(self.tokenizer.vocab_size, ...)``); a
    Hugging Face tokenizer (``library: huggingface``, ``type: <Hub id>``) of a model fmest
    knows gives its ``vocab_size``, Megatron's GPT-2 BPE 50257."""
    library = str(block.get("library") or "").strip().lower()
    kind = block.get("type")
    vocab = None
    if library == "huggingface" and isinstance(kind, str):
        from fmest.models.presets import find_preset, preset_data

        canon = find_preset(kind)
        if canon is not None:
            vocab = preset_data(canon).get("config", {}).get("vocab_size")
    elif library == "megatron" and str(kind) in ("GPT2BPETokenizer", "gpt2"):
        vocab = 50257
    if vocab and "vocab_size" not in state.dims:
        state.dims["vocab_size"] = (int(vocab), join(key, "type"))
        sink.ignore(key, f"read: vocabulary {vocab} of the {library} tokenizer {kind}")
    else:
        sink.ignore(key, "the tokenizer's files; its vocabulary size is known only for "
                    "library huggingface with a type fmest knows (fmest models)")


def _precision(value: Any, key: str, sink: Sink, state: _State) -> None:
    """Megatron-Bridge ``mixed_precision`` (a recipe name or its fields) or NeMo's
    ``trainer.precision`` (``bf16-mixed``, ``16-mixed``, ``32``)."""
    if isinstance(value, dict):
        for name, item in value.items():
            _apply(name, item, join(key, name), sink, state)
        return
    text = str(value).strip().lower().replace("-", "_")
    if "fp8" in text:
        state.fp8_key = key
        text = "bf16_mixed" if text.startswith("bf16") else text
    dtype = _BRIDGE_PRECISION.get(text) or {"bf16_mixed": "bf16", "bf16": "bf16",
                                            "16_mixed": "fp16", "16": "fp16", "32": "fp32",
                                            "32_true": "fp32"}.get(text)
    if dtype is None and state.fp8_key != key:
        raise sink.error(key, "not an accepted precision", value=value,
                         accepted=[*_BRIDGE_PRECISION, "bf16_with_fp8_delayed_scaling_mixed",
                                   "bf16-mixed", "16-mixed", "32"])
    state.dtype_key = key
    sink.set("training.dtype", dtype or "bf16", key)


def _nemo_kind(doc: dict, sink: Sink) -> None:
    """NeMo 1 example configs that are not training runs: export (``export_options``,
    ``megatron_gpt_export.yaml``), post-training quantization (``quantization``,
    ``megatron_gpt_ptq.yaml``), pruning (``prune``), validation / evaluation
    (``*_validate_config.yaml``, ``*_eval*.yaml``) are refused; generation
    (``megatron_gpt_inference.yaml``: a top-level ``inference`` section) is answered as
    inference (``mode: inference``)."""
    import os

    base = os.path.basename(sink.name).lower()
    if "export_options" in doc or "onnx_model_file" in doc:
        raise sink.not_training("export_options", "export", "NeMo export to ONNX/TensorRT")
    training = isinstance(section(doc, "model").get("optim"), dict)
    if isinstance(doc.get("quantization"), dict) and not training:
        raise sink.not_training("quantization", "quantization",
                                "NeMo post-training quantization")
    if isinstance(doc.get("prune"), dict):
        raise sink.not_training("prune", "conversion", "NeMo pruning of a trained model")
    if "validate" in base or "_eval" in base or str(doc.get("name", "")).endswith("_eval"):
        raise sink.not_training("name" if "name" in doc else "(file name)", "evaluation",
                                "NeMo validation / evaluation of a trained model")
    if isinstance(doc.get("inference"), dict) and not training:
        sink.set("mode", "inference", "inference")


#: Megatron-Bridge LoRA target_modules (megatron/bridge/peft/lora.py; default: all four)
#: -> the Hugging Face Llama-style names fmest counts
_BRIDGE_TARGETS = {"linear_qkv": ("q_proj", "k_proj", "v_proj"), "linear_proj": ("o_proj",),
                   "linear_fc1": ("gate_proj", "up_proj"), "linear_fc2": ("down_proj",)}


def _peft(value: Any, sink: Sink) -> None:
    """Megatron-Bridge ``peft``: ``lora`` / ``dora`` or the LoRA config's fields (``dim``,
    ``alpha``, ``target_modules``; megatron/bridge/peft/lora.py defaults dim 32, alpha 32,
    all four linear layers)."""
    if value is None or str(value).strip().lower() in ("none", "null", "false"):
        sink.ignore("peft", "no PEFT: full training")
        return
    block = value if isinstance(value, dict) else {"_target_": str(value)}
    kind = str(block.get("_target_", "lora")).lower()
    sink.set("training.technique", "lora", "peft")
    if "dora" in kind:
        sink.unmodelled("peft", "DoRA's magnitude vectors are not modelled; estimated as LoRA")
    elif "lora" not in kind:
        raise sink.error("peft", "fmest models LoRA (and DoRA as LoRA)", value=value,
                         accepted=("lora", "dora"))
    sink.set("training.lora_rank", 32, "peft.dim (unset: Megatron-Bridge default 32)")
    sink.set("training.lora_alpha", 32.0, "peft.alpha (unset: Megatron-Bridge default 32)")
    sink.set("training.lora_target_modules", ["all-linear"],
             "peft.target_modules (unset: all four linear layers)")
    if not isinstance(value, dict):
        return
    for name, item in value.items():
        key = join("peft", name)
        if name == "dim":
            sink.set("training.lora_rank", sink.int_(key, item), key)
        elif name == "alpha":
            sink.set("training.lora_alpha", sink.num(key, item), key)
        elif name == "target_modules":
            names = [t for t in (item or [])]
            out: list[str] = []
            for t in names:
                out.extend(sink.choice(key, t, _BRIDGE_TARGETS))
            sink.set("training.lora_target_modules", out, key)
        elif name == "_target_":
            continue
        else:
            sink.ignore(key, "a LoRA detail (dropout, init); same adapter size")


def _inference(block: dict, sink: Sink) -> None:
    for name, value in block.items():
        key = join("inference", name)
        if name == "tokens_to_generate" and value is not None:
            sink.set("inference.output_tokens", sink.int_(key, value), key)
        elif name == "batch_size" and value is not None:
            sink.set("inference.batch", sink.int_(key, value), key)
        else:
            sink.ignore(key, "a sampling or output setting; same serving memory")


def _model_config(sink: Sink, state: _State) -> None:
    """The raw dimensions as a model config (Megatron-LM's defaults for what is left out)."""
    from fmest.models.hf import config_from_dimensions

    dims = {name: v for name, (v, _k) in state.dims.items()}
    keys = {name: k for name, (_v, k) in state.dims.items()}
    need = ("num_layers", "hidden_size", "num_attention_heads")
    if not all(n in dims for n in need):
        for key in keys.values():
            sink.ignore(key, "raw model dimensions need num_layers, hidden_size and "
                        "num_attention_heads; give --model")
        return
    ints = {n: sink.int_(keys[n], dims[n]) for n in need}
    hidden = ints["hidden_size"]
    swiglu = sink.bool_(keys["swiglu"], dims["swiglu"]) if "swiglu" in dims else False
    if "ffn_hidden_size" in dims:
        ffn = sink.int_(keys["ffn_hidden_size"], dims["ffn_hidden_size"])
    else:   # arguments.py: SwiGLU keeps the parameter count of a 4h MLP
        ffn = int((4 * hidden * 2 / 3) / 64) * 64 if swiglu else 4 * hidden
    tp = int(sink.get("parallelism.tp", 1))
    divisible = sink.int_(keys["make_vocab_size_divisible_by"],
                          dims["make_vocab_size_divisible_by"]) \
        if "make_vocab_size_divisible_by" in dims else 128
    if "vocab_size" in dims:
        vocab = sink.int_(keys["vocab_size"], dims["vocab_size"])
    else:
        vocab = 50257   # the GPT-2 BPE of Megatron-LM's GPT examples (--vocab-file gpt2-vocab)
        sink.unmodelled("(vocab size)", "no --vocab-size and no tokenizer fmest can size "
                        "(NeMo: model.tokenizer library huggingface with a known type): the "
                        "GPT-2 BPE's 50257 is used")
    # megatron/training/tokenizer/tokenizer.py _vocab_size_with_padding
    multiple = divisible * tp
    vocab = -(-vocab // multiple) * multiple
    untie = "untie_embeddings_and_output_weights" in dims and sink.bool_(
        keys["untie_embeddings_and_output_weights"], dims["untie_embeddings_and_output_weights"])
    heads = ints["num_attention_heads"]
    groups = sink.int_(keys["num_query_groups"], dims["num_query_groups"]) \
        if "num_query_groups" in dims else heads
    if swiglu:
        config = config_from_dimensions(hidden_size=hidden, num_layers=ints["num_layers"],
                                        num_heads=heads, num_kv_heads=groups,
                                        intermediate_size=ffn, vocab_size=vocab)
    else:   # GELU MLP of two matrices, learned positions, biases: GPT-2's layout
        if groups != heads:
            sink.ignore(keys["num_query_groups"], "grouped-query attention without --swiglu is "
                        "estimated with full multi-head attention")
        positions = dims.get("max_position_embeddings", sink.get("training.seq_len", 2048))
        config = {"model_type": "gpt2", "n_embd": hidden, "n_layer": ints["num_layers"],
                  "n_head": heads, "n_inner": ffn, "vocab_size": vocab,
                  "n_positions": int(positions), "_fmest_source": "Megatron-LM arguments"}
    config["tie_word_embeddings"] = not untie
    sink.set("model_config", config, "+".join(keys[n] for n in state.dims if n in keys))
    sink.set("model", "custom-dimensions", "+".join(keys[n] for n in need))


def map_config(doc: dict, sink: Sink) -> None:
    state = _State()
    flags = [k for k in doc if isinstance(k, str) and k.startswith("--")]
    if flags:
        sink.set("training.stack", "megatron-core", ARGS_WHY)
        for name, value in doc.items():
            if name == "(positional)":
                sink.ignore(f"{' '.join(map(str, value))}", "not a --flag (a launcher or "
                            "script name)")
                continue
            _apply(name[2:].replace("-", "_"), value, name, sink, state)
        if state.dtype_key is None:
            sink.set("training.dtype", "fp32", "(Megatron-LM default: no --bf16 or --fp16)")
        if "parallelism.tp_comm_overlap" not in sink.values:
            sink.set("parallelism.tp_comm_overlap", False,
                     "(Megatron-LM default: no --tp-comm-overlap)")
    else:
        nemo = "trainer" in doc
        _nemo_kind(doc, sink)
        if nemo and state.amp_o2 is None and not isinstance(section(doc, "model").get(
                "megatron_amp_O2"), bool):
            state.amp_o2 = (False, "model.megatron_amp_O2 (unset: NeMo default false)")
        sink.set("training.stack", "megatron-core",
                 "(NeMo Megatron YAML)" if nemo else "(Megatron-Bridge recipe YAML)")
        for name, value in doc.items():
            if name in ("model", "train", "optimizer", "ddp", "comm_overlap", "trainer",
                        "dataset"):
                if name == "dataset" and isinstance(value, dict):
                    for k, v in value.items():
                        model = section(doc, "model")
                        if k == "seq_length" and "seq_length" in model:
                            sink.ignore(join(name, k), "model.seq_length is used (Bridge "
                                        "requires the two to match)")
                        elif k == "seq_length":
                            _apply(k, v, join(name, k), sink, state)
                        else:
                            sink.ignore(join(name, k), DATA)
                else:
                    _section(value, name, sink, state)
            elif name == "mixed_precision":
                _precision(value, name, sink, state)
            elif name in ("checkpoint", "logger", "rng", "scheduler", "tokenizer", "profiling",
                          "ft", "straggler", "nvrx_straggler", "rerun_state_machine", "exp_manager",
                          "name", "restore_from_path"):
                sink.ignore(name, LOGGING if name not in ("scheduler",) else HYPERPARAM)
            elif name == "peft":
                _peft(value, sink)
            elif name == "inference" and sink.get("mode") == "inference":
                _inference(value, sink)
            elif name == "dist":
                sink.ignore(name, "process-group settings; Megatron FSDP / torch FSDP2 "
                            "switches are not read (give --fsdp)")
            else:
                sink.ignore(name, "not a Megatron-Bridge / NeMo section fmest uses")
    if sink.get("parallelism.sequence_parallel") and int(sink.get("parallelism.tp", 1)) == 1:
        # arguments.py validate_args: "Disabling sequence parallelism because tensor model
        # parallelism is disabled"
        key = sink.values.pop("parallelism.sequence_parallel")[1]
        sink.ignore(key, "tp is 1: Megatron-LM disables sequence parallelism")
    if state.fp8_key is not None:   # fp8 GEMMs; --bf16/--fp16 names the other kernels' dtype
        both = state.fp8_key if state.dtype_key in (None, state.fp8_key) else \
            f"{state.fp8_key}+{state.dtype_key}"
        sink.set("training.dtype", "fp8", both)
    if "training.dtype" in sink.values and sink.get("training.dtype") != "fp32" and \
            state.amp_o2 is not None and not state.amp_o2[0]:
        # NeMo 1 without megatron_amp_O2: PyTorch Lightning native AMP, fp32 parameters and
        # autocast (NeMo megatron_base_model.py: O2 keeps half params + fp32 main params)
        sink.set("training.precision", "amp",
                 f"{sink.values['training.dtype'][1]}+{state.amp_o2[1]}")
    elif "training.dtype" in sink.values and sink.get("training.dtype") != "fp32":
        # bf16/fp16/fp8 weights with fp32 main params and grads (Megatron's mixed precision;
        # NeMo's megatron_amp_O2: half params, fp32 main params in the optimizer)
        where = sink.values["training.dtype"][1]
        if state.amp_o2 is not None:
            where += f"+{state.amp_o2[1]}"
        sink.set("training.precision", "master", where)
    elif "training.dtype" in sink.values:
        sink.set("training.precision", "pure", sink.values["training.dtype"][1])
    if state.amp_o2 is not None and "(unset" not in state.amp_o2[1] and not any(
            state.amp_o2[1] in v[1].split("+") for v in sink.values.values()):
        sink.ignore(state.amp_o2[1], "no effect: no half-precision training dtype in the file "
                    "(O2 keeps half-precision parameters with fp32 main parameters)")
    _moe_dispatcher(sink, state)
    _vp_and_recompute(sink, state)
    if state.dims:
        _model_config(sink, state)


def _vp_and_recompute(sink: Sink, state: _State) -> None:
    """Virtual pipeline stages from ``--num-layers-per-virtual-pipeline-stage``, then the
    recomputed share of the blocks (:func:`_recompute_share`)."""
    if state.vp_layers is not None:
        per, key = state.vp_layers
        layers = state.dims.get("num_layers")
        pp = int(sink.get("parallelism.pp", 1))
        total = sink.int_(layers[1], layers[0]) if layers else None
        if total and total % (pp * per) == 0 and total // (pp * per) > 1:
            sink.set("parallelism.pp_virtual_stages", total // (pp * per), key)
            sink.set("parallelism.pp_schedule", "interleaved", key)
        else:
            sink.ignore(key, "needs num_layers divisible by pp x this; give --pp-virtual-stages")
    _recompute_share(sink, state)
    _recompute_modules(sink, state)
    _cuda_graphs(sink, state)


def _cuda_graphs(sink: Sink, state: _State) -> None:
    """``--cuda-graph-impl`` with ``--cuda-graph-scope`` / ``--cuda-graph-modules``
    (``training.cuda_graph_scope``), as NVIDIA/Megatron-LM @
    d98e8a64ddf34856e74b24714e3bedb2f5a39553 megatron/training/arguments.py reads them: the
    scope has no effect with ``none`` (the default), an empty list (or ``full``) captures the
    whole layer, ``full_iteration`` is the whole step."""
    from fmest.job import CUDA_GRAPH_SCOPES

    impl, impl_key = state.cg_impl if state.cg_impl is not None else ("none", "")
    scope, key = state.cg_scope if state.cg_scope is not None else ((), "")
    if impl == "none":
        if state.cg_scope is not None:
            sink.ignore(key, "no effect with --cuda-graph-impl none")
        return
    if impl == "full_iteration":
        sink.set("training.cuda_graph_scope", ("full_iteration",), impl_key)
        return
    known = tuple(m for m in scope if m in CUDA_GRAPH_SCOPES)
    for m in scope:
        if m not in CUDA_GRAPH_SCOPES:
            sink.unmodelled(key, f"{m!r}: not a CUDA-graph scope fmest knows")
    sink.set("training.cuda_graph_scope", known or ("full",), key or impl_key)


def _recompute_modules(sink: Sink, state: _State) -> None:
    """``--recompute-modules`` (and the deprecated ``--moe-layer-recompute``, which turns
    selective granularity on and adds ``moe``), read as NVIDIA/Megatron-LM @
    d98e8a64ddf34856e74b24714e3bedb2f5a39553 megatron/core/transformer/transformer_config.py
    ``__post_init__`` does: the list only under ``--recompute-granularity selective``
    (``training.recompute_modules``; default ``["core_attn"]``)."""
    from fmest.job import RECOMPUTE_MODULES

    modules, key = state.modules if state.modules is not None else (None, "")
    if state.moe_layer_recompute is not None:
        if sink.get("training.activation_checkpointing") == "full":
            sink.ignore(state.moe_layer_recompute, "Megatron refuses it with full granularity")
        else:
            sink.set("training.activation_checkpointing", "selective",
                     state.moe_layer_recompute)
            modules = tuple(modules or ("core_attn",)) + ("moe",) \
                if not modules or "moe" not in modules else modules
            key = f"{key}+{state.moe_layer_recompute}" if key else state.moe_layer_recompute
    if modules is None:
        return
    if sink.get("training.activation_checkpointing") != "selective":
        sink.ignore(key, f"{list(modules)!r}: read only with --recompute-granularity selective")
        return
    known = tuple(m for m in modules if m in RECOMPUTE_MODULES)
    for m in modules:
        if m not in RECOMPUTE_MODULES:
            sink.unmodelled(key, f"{m!r}: not a module fmest prices (gated-delta-net / mHC "
                            "variants); not recomputed")
    sink.set("training.recompute_modules", known, key)


def _recompute_share(sink: Sink, state: _State) -> None:
    """``--recompute-method`` with ``--recompute-num-layers N`` under ``--recompute-granularity
    full``, as NVIDIA/Megatron-LM @ d98e8a64ddf34856e74b24714e3bedb2f5a39553
    megatron/core/recompute.py (``_checkpointed_forward``, formerly in
    megatron/core/transformer/transformer_block.py) runs a TransformerBlock of
    ``num_layers_per_pipeline_rank = len(self.layers)`` layers (a virtual pipeline chunk's under
    interleaving): ``block`` checkpoints the first N layers one by one and runs the others
    without checkpointing, so a share min(1, N / layers per chunk) of the blocks is recomputed
    (``training.checkpoint_fraction``); ``uniform`` recomputes every layer, checkpointing the
    input of each group of N: fmest's ``full`` (one input kept per layer, one layer's recompute
    working set), exact for N = 1. Megatron refuses a method with selective granularity
    (megatron/training/arguments.py)."""
    method, num = state.recompute.get("recompute_method"), \
        state.recompute.get("recompute_num_layers")
    if method is None and num is None:
        return
    given = [entry for entry in (method, num) if entry is not None]
    if sink.get("training.activation_checkpointing") != "full":
        for value, key in given:
            sink.ignore(key, f"{value!r}: read only with --recompute-granularity full")
        return
    text = str(method[0]).strip().lower() if method is not None else None
    if text == "uniform":
        for value, key in given:
            sink.ignore(key, f"{value!r}: uniform recomputes every layer (full); the input of "
                        "each group of --recompute-num-layers layers is counted per layer")
        return
    if text != "block" or method is None or num is None:
        for value, key in given:
            sink.unmodelled(key, f"{value!r}: needs --recompute-method block with "
                            "--recompute-num-layers; every layer is recomputed (full)")
        return
    layers = state.dims.get("num_layers")
    if layers is None:
        sink.unmodelled(f"{method[1]}+{num[1]}", "block: no --num-layers in the file to size "
                        "the recomputed share; every layer is recomputed (full); give "
                        "--checkpoint-fraction N / layers per stage")
        return
    chunks = int(sink.get("parallelism.pp", 1)) * int(sink.get("parallelism.pp_virtual_stages", 1))
    per_chunk = sink.int_(layers[1], layers[0]) / max(chunks, 1)
    share = min(1.0, sink.int_(num[1], num[0]) / per_chunk) if per_chunk > 0 else 1.0
    if share < 1.0:
        sink.set("training.checkpoint_fraction", share, f"{method[1]}+{num[1]}+{layers[1]}")
    else:
        sink.ignore(f"{method[1]}+{num[1]}", "block over every layer of the stage: full")


def _moe_dispatcher(sink: Sink, state: _State) -> None:
    """``--moe-token-dispatcher-type flex`` with its backend (``--moe-flex-dispatcher-backend``,
    default ``deepep``; ``--moe-enable-deepep``): ``parallelism.moe_dispatcher`` (NVIDIA/
    Megatron-LM @ d98e8a64ddf34856e74b24714e3bedb2f5a39553 transformer_config.py: DeepEP only
    with the flex dispatcher)."""
    if state.moe_flex is not None:
        backend, where = state.moe_backend or ("deepep", "")
        key = f"{state.moe_flex}+{where}" if where else state.moe_flex
        sink.set("parallelism.moe_dispatcher", backend, key)
    elif state.moe_backend is not None:
        sink.ignore(state.moe_backend[1], "the flex backend needs --moe-token-dispatcher-type "
                    "flex")


__all__ = ["ALIASES", "FORMAT", "args_from_list", "detect", "looks_like_args", "map_config",
           "parse_args", "parse_args_text"]
