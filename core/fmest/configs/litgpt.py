"""LitGPT finetune / pretrain YAML (``litgpt finetune_lora --config lora.yaml``,
``litgpt pretrain --config tinyllama.yaml``) -> stack ``litgpt`` (stacks.toml [litgpt]: eager
PyTorch on Lightning Fabric; the 2023 Lit-GPT scripts are profile ``lit-gpt``).

LitGPT runs its own model code (``litgpt/model.py``), not transformers': where the Hub
config's ``hidden_act`` names an activation LitGPT computes as one fused op, the job carries
the preset's config with that activation (``ACTIVATIONS``: transformers' phi ``gelu_new`` is
several eager ops, LitGPT's ``GptNeoxMLP`` calls ``F.gelu(x, approximate="tanh")`` with the
phi configs' ``gelu_approximate="tanh"``, litgpt/model.py and litgpt/config.py at 26857050).

The keys are the ``setup()`` arguments of the scripts and ``litgpt.args.TrainArgs``
(Lightning-AI/litgpt at commit 26857050fe3ff627cd714fe92f5838f51a3d5efa:
``litgpt/finetune/{lora,full,adapter}.py``, ``litgpt/pretrain.py``, ``litgpt/args.py``):

* the model: ``checkpoint_dir`` (``checkpoints/<org>/<name>``, the Hub id after
  ``checkpoints/``, ``litgpt.utils.extend_checkpoint_dir``), or for pretraining ``model_name``
  or an inline ``model_config`` (``n_layer``, ``n_embd``, ``n_head``, ``n_query_groups``,
  ``intermediate_size``, ``padded_vocab_size`` of a ``LLaMAMLP``/``GemmaMLP`` block);
* the technique: ``lora_r`` present -> LoRA (``finetune/lora.py``), with ``quantize: bnb.nf4*``
  / ``bnb.fp4*`` -> QLoRA 4-bit, ``bnb.int8-training`` -> 8-bit; no LoRA keys -> full
  fine-tuning (``finetune/full.py``) or pretraining (``model_name``); ``adapter*.yaml``
  (LLaMA-Adapter, ``finetune/adapter.py``) is refused: fmest has no adapter technique;
* ``precision``: ``bf16-true`` = pure bf16 (weights, grads and states in bf16),
  ``bf16-mixed`` = autocast over fp32 weights (amp), ``32-true``, ``16-true``, ``16-mixed``;
  unset = ``get_default_supported_precision(training=True)``, ``bf16-mixed`` on a bf16 GPU;
* ``devices`` x ``num_nodes`` GPUs; more than one GPU shards the model: ``full.py`` and
  ``adapter.py`` use ``FSDPStrategy`` (FULL_SHARD) with activation checkpointing of every
  ``Block``, ``lora.py`` FSDP2 ``fully_shard`` with ``checkpoint_wrapper`` on every block,
  ``pretrain.py`` ``FSDPStrategy(sharding_strategy="HYBRID_SHARD")`` without checkpointing;
* ``train.micro_batch_size``, ``train.global_batch_size`` (accumulation =
  ``global // (devices x num_nodes) // micro``, ``TrainArgs.gradient_accumulation_iters``),
  ``train.max_seq_length``, ``train.max_steps``, ``train.epochs``, ``train.max_tokens``;
* ``optimizer``: a name or ``{class_path, init_args}``.
"""

from __future__ import annotations

import os
from typing import Any

from fmest.configs._base import DATA, HYPERPARAM, LOGGING, Sink, join, section

FORMAT = "litgpt"

#: keys only LitGPT files have (detection)
KEYS = frozenset({"checkpoint_dir", "lora_query", "lora_projection", "lora_head", "quantize",
                  "logger_name", "initial_checkpoint_dir", "tokenizer_dir"})

_PRECISION = {"bf16-true": ("bf16", "pure"), "bf16-mixed": ("bf16", "amp"),
              "32-true": ("fp32", "pure"), "32": ("fp32", "pure"),
              "16-true": ("fp16", "pure"), "16-mixed": ("fp16", "amp"),
              "transformer-engine": ("fp8", "amp"),
              "transformer-engine-float16": ("fp8", "amp")}
_QUANTIZE = {"bnb.nf4": 4, "bnb.nf4-dq": 4, "bnb.fp4": 4, "bnb.fp4-dq": 4,
             "bnb.int8-training": 8}
#: torch / bitsandbytes optimizer class names -> fmest's optimizer registry
_OPTIMIZERS = {"adamw": "adamw", "adam": "adamw", "sgd": "sgd", "adafactor": "adafactor",
               "pagedadamw": "paged_adamw", "pagedadamw8bit": "paged_adamw_8bit",
               "adamw8bit": "adamw_8bit", "lion": "lion", "lion8bit": "lion_8bit"}
#: LitGPT's role switches -> the Hugging Face module names that play the role (LitGPT's
#: ``lora.py`` LoRAQKVLinear / LoRALinear on attn.qkv, attn.proj, mlp.*, lm_head)
_ROLES = {"lora_query": ("q_proj", "query_key_value", "qkv_proj", "c_attn", "Wqkv"),
          "lora_key": ("k_proj", "query_key_value", "qkv_proj", "c_attn", "Wqkv"),
          "lora_value": ("v_proj", "query_key_value", "qkv_proj", "c_attn", "Wqkv"),
          "lora_projection": ("o_proj", "dense", "out_proj"),
          "lora_mlp": ("gate_proj", "up_proj", "down_proj", "gate_up_proj", "fc1", "fc2",
                       "dense_h_to_4h", "dense_4h_to_h", "w1", "w2", "w3", "c_fc"),
          "lora_head": ("lm_head",)}
#: LitGPT setup() defaults of the LoRA switches (finetune/lora.py)
_ROLE_DEFAULTS = {"lora_query": True, "lora_key": False, "lora_value": True,
                  "lora_projection": False, "lora_mlp": False, "lora_head": False}
_GATED_MLP = ("LLaMAMLP", "GemmaMLP")
#: Hub ``hidden_act`` -> the activation LitGPT's model code runs (module doc)
ACTIVATIONS = {"gelu_new": "gelu_pytorch_tanh"}


def _litgpt_activation(model: str | None, sink: Sink, key: str) -> None:
    """The preset's config with LitGPT's activation (``ACTIVATIONS``), when it differs."""
    if not model:
        return
    try:
        from fmest.models.presets import find_preset, preset_data

        canon = find_preset(model)
        cfg = dict(preset_data(canon).get("config", {})) if canon else {}
    except Exception:   # noqa: BLE001 - a preset that does not load: nothing to restate
        return
    act = cfg.get("hidden_act")
    if act in ACTIVATIONS:
        cfg["hidden_act"] = ACTIVATIONS[act]
        sink.set("model_config", cfg, f"{key} (LitGPT's model code runs {act} as one fused "
                 f"op, {ACTIVATIONS[act]})")


def detect(doc: dict) -> bool:
    keys = set(doc)
    if "trainer" in keys:   # NeMo's Lightning trainer section (NeMo configs have checkpoint_dir)
        return False
    if keys & KEYS:
        return True
    # pretrain.py: model_name + a train section of TrainArgs
    train = doc.get("train")
    return "model_name" in keys and isinstance(train, dict) and bool(
        set(train) & {"max_tokens", "global_batch_size", "lr_warmup_steps"})


def _hub_id(value: Any) -> str:
    """``checkpoints/meta-llama/Llama-2-7b-hf`` -> ``meta-llama/Llama-2-7b-hf``."""
    text = str(value).strip().rstrip("/")
    parts = [p for p in text.split("/") if p and p != "."]
    if "checkpoints" in parts:
        parts = parts[len(parts) - parts[::-1].index("checkpoints"):]
    return "/".join(parts[-2:]) if len(parts) >= 2 else (parts[0] if parts else text)


def _linear_names(model: str | None) -> tuple[list[str], str]:
    """The preset's linear module names (last component) and where they came from."""
    if not model:
        return [], ""
    try:
        from fmest.models.presets import find_preset, load_preset

        canon = find_preset(model)
        if canon is None:
            return [], ""
        names = sorted({n.split(".")[-1] for n in load_preset(canon).linear_names()})
        return names, canon
    except Exception:   # noqa: BLE001 - a preset that does not load: fall back to Llama names
        return [], ""


def _targets(doc: dict, model: str | None, sink: Sink) -> None:
    names, canon = _linear_names(model)
    chosen: list[str] = []
    keys: list[str] = []
    for role, candidates in _ROLES.items():
        on = doc.get(role, _ROLE_DEFAULTS[role])
        on = _ROLE_DEFAULTS[role] if on is None else sink.bool_(role, on)
        if role in doc:
            keys.append(role)
        if not on:
            if role in doc:
                sink.ignore(role, "false: no LoRA on this projection")
            continue
        if names:
            hit = [c for c in candidates if c in names]
            if not hit:
                sink.ignore(role, f"{canon} has no such linear module (tied or absent); "
                            "nothing to adapt")
                continue
        else:   # the model is not a preset: the Llama names (an unmatched one is refused)
            hit = [candidates[0]] if role != "lora_mlp" else list(candidates[:3])
        for h in hit:
            if h not in chosen:
                chosen.append(h)
    if chosen:
        where = "+".join(keys) if keys else "lora_query+lora_value (unset: LitGPT defaults)"
        sink.set("training.lora_target_modules", chosen, where)
    if any(doc.get(r) for r in ("lora_query", "lora_key", "lora_value")) and any(
            c in names for c in ("q_proj",)):
        sink.unmodelled("lora_query/lora_key/lora_value", "LitGPT adapts its fused qkv "
                        "linear (one A matrix for q, k and v); estimated as separate LoRA "
                        "adapters on q_proj/k_proj/v_proj, r x hidden more parameters per "
                        "extra projection")


def _model_config(value: Any, key: str, sink: Sink, tie: Any) -> None:
    from fmest.models.hf import config_from_dimensions

    cfg = sink.mapping(key, value)
    need = ("n_layer", "n_embd", "n_head")
    for n in need:
        if n not in cfg:
            raise sink.error(join(key, n), "an inline model_config needs n_layer, n_embd and "
                             "n_head", accepted=need)
    mlp = str(cfg.get("mlp_class_name", "GptNeoxMLP"))
    if mlp not in _GATED_MLP:
        raise sink.error(join(key, "mlp_class_name"), "fmest builds inline LitGPT models with "
                         "a gated MLP only; give --model for other blocks", value=mlp,
                         accepted=_GATED_MLP)
    heads = sink.int_(join(key, "n_head"), cfg["n_head"])
    vocab = cfg.get("padded_vocab_size") or cfg.get("vocab_size")
    config = config_from_dimensions(
        hidden_size=sink.int_(join(key, "n_embd"), cfg["n_embd"]),
        num_layers=sink.int_(join(key, "n_layer"), cfg["n_layer"]), num_heads=heads,
        num_kv_heads=sink.int_(join(key, "n_query_groups"), cfg["n_query_groups"])
        if cfg.get("n_query_groups") is not None else heads,
        intermediate_size=sink.int_(join(key, "intermediate_size"), cfg["intermediate_size"])
        if cfg.get("intermediate_size") is not None else None,
        vocab_size=sink.int_(join(key, "padded_vocab_size"), vocab) if vocab else None)
    # pretrain.py's TrainArgs default tie_embeddings=False (None leaves the Config's False)
    config["tie_word_embeddings"] = bool(tie)
    config["_fmest_source"] = "LitGPT model_config"
    used = {"n_layer", "n_embd", "n_head", "n_query_groups", "intermediate_size",
            "padded_vocab_size", "vocab_size", "mlp_class_name"}
    for name in cfg:
        if name == "name":
            sink.ignore(join(key, name), "the model's display name")
        elif name == "block_size":
            sink.ignore(join(key, name), "the longest context the model supports; "
                        "train.max_seq_length sets the trained length")
        elif name not in used:
            sink.ignore(join(key, name), "architecture detail (norm, rotary, bias, head "
                        "size); fmest counts a Llama-style block")
    sink.set("model_config", config, key)
    sink.set("model", str(cfg.get("name") or "custom-dimensions"), key)


def _train(block: Any, sink: Sink, layout: tuple[Any, Any]) -> None:
    block = sink.mapping("train", block)
    for name, value in block.items():
        key = join("train", name)
        if name in ("save_interval", "log_interval"):
            sink.ignore(key, LOGGING)
        elif name in ("lr_warmup_steps", "lr_warmup_fraction", "min_lr", "max_norm"):
            sink.ignore(key, HYPERPARAM)
        elif value is None:
            if name == "max_seq_length":
                sink.unmodelled(key, "null: LitGPT trains on the longest sample (finetune) or "
                                "the model's block_size (pretrain); fmest uses --seq-len or "
                                "its default")
            else:
                sink.ignore(key, "null: not set (LitGPT's default)")
        elif name == "micro_batch_size":
            sink.set("training.micro_batch_size", sink.int_(key, value), key)
        elif name == "max_seq_length":
            sink.set("training.seq_len", sink.int_(key, value), key)
        elif name == "max_steps":
            sink.set("workload.max_steps", sink.int_(key, value), key)
        elif name == "epochs":
            sink.set("workload.epochs", sink.num(key, value), key)
        elif name == "max_tokens":
            sink.set("workload.dataset_tokens", sink.num(key, value), key)
        elif name == "max_time":
            sink.unmodelled(key, "a wall-clock limit that may stop the run early; fmest "
                            "estimates the whole run")
        elif name == "tie_embeddings":
            sink.ignore(key, "read with model_config (a named model keeps its own tying)")
        elif name == "global_batch_size":
            total = sink.int_(key, value)
            devices, nodes = layout
            micro = block.get("micro_batch_size")
            if isinstance(devices, int) and micro is not None:
                world = devices * (nodes if isinstance(nodes, int) else 1)
                per_rank = total // world   # TrainArgs.batch_size (floor)
                accum = per_rank // sink.int_("train.micro_batch_size", micro)
                if accum < 1:
                    raise sink.error(key, f"global_batch_size // GPUs ({per_rank}) is smaller "
                                     "than train.micro_batch_size: LitGPT asserts "
                                     "accumulation > 0", value=total)
                sink.set("training.grad_accum_steps", accum,
                         f"{key} // (devices x num_nodes) // train.micro_batch_size")
            else:
                sink.train_batch.append((total, key))
        else:
            sink.ignore(key, "not a TrainArgs field fmest uses")


def _optimizer(value: Any, sink: Sink) -> None:
    if isinstance(value, dict):
        cls = value.get("class_path")
        for name, item in value.items():
            key = join("optimizer", name)
            if name == "init_args":
                args = sink.mapping(key, item) if item is not None else {}
                for arg, v in args.items():
                    akey = join(key, arg)
                    if arg in ("fused", "foreach") and v is not None:
                        if sink.bool_(akey, v):
                            sink.set("training.optimizer_impl", arg, akey)
                        else:
                            sink.ignore(akey, "false")
                    elif arg == "momentum" and str(cls).lower().endswith("sgd"):
                        if v:
                            sink.set("training.optimizer", "sgd_momentum", akey)
                        else:
                            sink.ignore(akey, "0: plain SGD")
                    else:
                        sink.ignore(akey, HYPERPARAM)
            elif name != "class_path":
                sink.ignore(key, "not an optimizer setting fmest uses")
        if cls is None:
            raise sink.error("optimizer.class_path", "an optimizer mapping needs class_path")
        name, key = cls, "optimizer.class_path"
    else:
        name, key = value, "optimizer"
    short = str(name).strip().split(".")[-1].lower().replace("_", "")
    if "training.optimizer" in sink.values and sink.get("training.optimizer") == "sgd_momentum":
        return
    sink.set("training.optimizer", sink.choice(key, short, _OPTIMIZERS), key)


def map_config(doc: dict, sink: Sink) -> None:
    sink.set("training.stack", "litgpt", "(LitGPT config)")
    base = os.path.basename(sink.name).lower()
    lora = "lora_r" in doc or any(k in doc for k in ("lora_alpha", "lora_query"))
    pretrain = "model_name" in doc or "model_config" in doc
    if base.startswith("adapter"):
        raise sink.error("(file name)", "LLaMA-Adapter (litgpt finetune_adapter) is not "
                         "modelled; fmest estimates full, LoRA and QLoRA fine-tuning",
                         value=os.path.basename(sink.name), accepted=("full", "lora", "qlora"))
    quant = doc.get("quantize")
    bits = None
    if quant is not None:
        bits = sink.choice("quantize", quant, _QUANTIZE)
        if not lora:
            raise sink.error("quantize", "LitGPT quantizes the frozen base of LoRA/adapter "
                             "finetuning only (finetune/lora.py); this file has no lora_* keys",
                             value=quant, accepted=("a lora_r key",))
    technique = "qlora" if bits else ("lora" if lora else "full")
    tech_key = "quantize" if bits else ("lora_r" if "lora_r" in doc else
                                        ("lora_* keys" if lora else
                                         ("model_name (pretrain.py)" if pretrain
                                          else "(no lora_* keys: finetune/full.py)")))
    sink.set("training.technique", technique, tech_key)
    if bits:
        sink.set("training.quantization_bits", bits, "quantize")
        sink.set("training.double_quantization", str(quant).endswith("-dq"), "quantize")
    script = "pretrain" if pretrain else technique
    devices, nodes = doc.get("devices", 1), doc.get("num_nodes", 1)
    devices = devices if isinstance(devices, int) and not isinstance(devices, bool) else (
        int(devices) if isinstance(devices, str) and devices.strip().isdigit() else devices)
    model = None
    if doc.get("checkpoint_dir") is not None:
        model = _hub_id(doc["checkpoint_dir"])
    elif isinstance(doc.get("model_name"), str):
        model = doc["model_name"].strip()

    for name, value in doc.items():
        key = name
        if name == "checkpoint_dir":
            if value is None:
                sink.ignore(key, "null: no checkpoint named; give --model")
            else:
                sink.set("model", model, key)
                _litgpt_activation(model, sink, key)
        elif name == "model_name":
            if value is None or "model_config" in doc and doc["model_config"] is not None:
                sink.ignore(key, "model_config defines the model")
            else:
                sink.set("model", str(value).strip(), key)
        elif name == "model_config":
            if value is None:
                sink.ignore(key, "null: model_name names the model")
            else:
                tie = section(doc, "train").get("tie_embeddings")
                _model_config(value, key, sink, tie)
        elif name == "precision":
            if value is None:
                sink.set("training.dtype", "bf16", "precision (unset: LitGPT's bf16-mixed on "
                         "a bf16 GPU)")
                sink.set("training.precision", "amp", "precision (unset: bf16-mixed)")
            else:
                dtype, policy = sink.choice(key, str(value).strip(), _PRECISION)
                if bits and policy == "amp":
                    raise sink.error(key, "LitGPT refuses quantization with mixed precision "
                                     "(finetune/lora.py)", value=value,
                                     accepted=("bf16-true", "16-true", "32-true"))
                sink.set("training.dtype", dtype, key)
                sink.set("training.precision", policy, key)
        elif name == "quantize":
            if value is None:
                sink.ignore(key, "null: no quantization")
        elif name == "devices":
            if isinstance(devices, int) and devices >= 1:
                sink.set("hardware.gpus_per_node", devices, key)
            else:
                sink.unmodelled(key, f"{value!r}: every visible GPU, sharded with FSDP when "
                                "more than one; fmest uses --gpus-per-node (default: what "
                                "the parallelism needs) and --fsdp")
        elif name == "num_nodes":
            sink.set("hardware.nodes", sink.int_(key, value), key)
        elif name == "lora_r":
            sink.set("training.lora_rank", sink.int_(key, value), key)
        elif name == "lora_alpha":
            sink.set("training.lora_alpha", sink.num(key, value), key)
        elif name == "lora_dropout":
            sink.set("training.lora_dropout",
                     0.0 if value in (0, "0", "0.0") else sink.num(key, value), key)
        elif name in _ROLES:
            continue   # read together below
        elif name == "train":
            _train(value, sink, (devices, nodes))
        elif name == "optimizer":
            _optimizer(value, sink)
        elif name in ("data",):
            # LitGPT's SFT data modules batch through get_sft_collate_fn, which pads each batch
            # to its longest sample (litgpt/data/base.py, Lightning-AI/litgpt
            # 26857050fe3ff627cd714fe92f5838f51a3d5efa); the pretraining modules stream
            # fixed max_seq_length blocks (TinyLlama, OpenWebText, TextFiles, LitData)
            cls = value.get("class_path", "") if isinstance(value, dict) else value
            cls = str(cls or "").rsplit(".", 1)[-1]
            if not cls:
                sink.ignore(key, DATA)
            elif cls in ("TinyLlama", "OpenWebText", "TextFiles", "LitData", "MicroLlama",
                         "TinyStories"):
                sink.set("training.padding", "max_length", key)
            else:
                sink.set("training.padding", "longest", key)
        elif name in ("eval", "log", "logger_name", "out_dir", "seed"):
            sink.ignore(key, LOGGING)
        elif name in ("resume", "initial_checkpoint_dir", "tokenizer_dir", "access_token"):
            sink.ignore(key, "loading only (weights, tokenizer or a resumed run)")
        else:
            sink.ignore(key, "not a LitGPT setup() argument fmest uses")
    if lora:
        if "lora_r" not in doc:
            sink.set("training.lora_rank", 8, "lora_r (unset: LitGPT default 8)")
        if "lora_alpha" not in doc:
            sink.set("training.lora_alpha", 16.0, "lora_alpha (unset: LitGPT default 16)")
        _targets(doc, model, sink)
    world = (devices if isinstance(devices, int) else 0) * (nodes if isinstance(nodes, int)
                                                             else 1)
    if world > 1:
        why = f"devices x num_nodes > 1 ({script}.py)"
        if script == "pretrain":
            sink.set("parallelism.fsdp", "hybrid_shard", f"{why}: FSDPStrategy HYBRID_SHARD")
        else:
            sink.set("parallelism.fsdp", "full_shard", f"{why}: FSDP full shard")
            sink.set("training.activation_checkpointing", "full",
                     f"{why}: activation checkpointing of every Block")


__all__ = ["FORMAT", "detect", "map_config"]
