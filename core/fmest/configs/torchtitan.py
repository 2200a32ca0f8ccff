"""torchtitan TOML job configs (``--job.config_file llama3_8b.toml``) -> stack ``torchtitan``.

Schema: the ``JobConfig`` dataclasses of pytorch/torchtitan ``torchtitan/config/job_config.py``
at commit 238fa9953e4aec2a62582121564273d7cbb1e9f1 (2026-02-23, the last commit with TOML job
configs; the next one, #2386, moved to Python config registries), and the older ``[float8]``
section (job_config.py before 5b5d46856b, 2025-09-26). Defaults that matter here, from that
file: ``training.local_batch_size = 8``, ``global_batch_size = -1`` (no accumulation),
``data_parallel_shard_degree = -1`` (all GPUs left: FSDP2), ``training.dtype = "float32"`` with
``mixed_precision_param = "bfloat16"`` (FSDP2 ``MixedPrecisionPolicy``: fp32 sharded weights,
bf16 compute), ``pipeline_parallel_microbatch_size = 1``, ``activation_checkpoint.mode =
"selective"``.
"""

from __future__ import annotations

import os

import tomllib

from fmest.configs._base import DATA, HYPERPARAM, LOGGING, Sink, join, section
from fmest.errors import InputError

FORMAT = "torchtitan"
WHY = "(torchtitan TOML job config)"

# [model] name -> flavor -> fmest preset (torchtitan/models/<name>/__init__.py flavors; the
# llama3 flavors are Llama 3.1's shapes: rope theta 500000, vocabulary 128256)
FLAVORS = {
    "llama3": {"8b": "meta-llama/Llama-3.1-8B", "70b": "meta-llama/Llama-3.1-70B",
               "405b": "meta-llama/Llama-3.1-405B"},
    "qwen3": {"8b": "Qwen/Qwen3-8B"},
}
FLAVORS["deepseek_v3"] = {
    # torchtitan/models/deepseek_v3/__init__.py "16B": vocab 102400, dim 2048, 27 layers (1
    # dense), 64 routed + 2 shared experts, top-6, moe_inter_dim 1408: DeepSeek-V2-Lite's shapes
    "16b": "deepseek-ai/DeepSeek-V2-Lite", "671b": "deepseek-ai/DeepSeek-V3"}


def _qwen3(dim: int, layers: int, heads: int, kv: int, ffn: int, vocab: int = 151936,
           tied: bool = True) -> dict:
    return {"model_type": "qwen3", "vocab_size": vocab, "hidden_size": dim,
            "intermediate_size": ffn, "num_hidden_layers": layers,
            "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": 128,
            "max_position_embeddings": 4096, "rope_theta": 1000000.0,
            "tie_word_embeddings": tied, "rms_norm_eps": 1e-6}


#: flavors with no fmest preset, as Hugging Face configs built from torchtitan's model args
#: tables at 238fa9953e4aec2a62582121564273d7cbb1e9f1 (torchtitan/models/qwen3/__init__.py
#: ``qwen3_args``; torchtitan/models/llama3/__init__.py ``llama3_args["debugmodel"]``: dim 256,
#: 6 layers, 16 heads, vocab 2048, FFN int(2 x 4 x 256 / 3) = 682 rounded up to multiple_of
#: 256 = 768, model/model.py FeedForward)
FLAVOR_CONFIGS = {
    "qwen3": {"debugmodel": _qwen3(256, 8, 16, 8, 3072, vocab=2048),
              "0.6b": _qwen3(1024, 28, 16, 8, 3072),
              "1.7b": _qwen3(2048, 28, 16, 8, 6144),
              "4b": _qwen3(2560, 36, 32, 8, 9728),
              "32b": _qwen3(5120, 64, 64, 8, 25600, tied=False)},
    "llama3": {"debugmodel": {
        "model_type": "llama", "vocab_size": 2048, "hidden_size": 256,
        "intermediate_size": 768, "num_hidden_layers": 6, "num_attention_heads": 16,
        "num_key_value_heads": 16, "max_position_embeddings": 131072, "rope_theta": 500000.0,
        "tie_word_embeddings": False, "rms_norm_eps": 1e-5}},
}
_NOT_LLM = {"flux": "a diffusion (FLUX) model, not a language model fmest sizes"}
_DTYPES = {"bfloat16": "bf16", "float32": "fp32", "float16": "fp16"}
_SCHEDULES = {"1f1b": "1f1b", "gpipe": "gpipe", "interleaved1f1b": "interleaved",
              "loopedbfs": "interleaved"}
_IMPLS = {"fused": "fused", "foreach": "foreach", "for-loop": "for_loop"}
_OPTIMIZERS = {"adamw": "adamw", "adam": "adamw"}
_FLOAT8 = ("float8", "quantize.linear.float8")

_SECTION_IGNORED = {
    "job": LOGGING, "profiling": LOGGING, "metrics": LOGGING, "checkpoint": LOGGING,
    "validation": LOGGING, "lr_scheduler": HYPERPARAM, "comm": "timeouts and tracing only",
    "memory_estimation": "torchtitan's own memory estimator run", "debug": LOGGING,
    "fault_tolerance": "torchft replica settings; fmest estimates one replica",
    "experimental": "custom import hooks", "dataloader": DATA,
}
_TRAINING_IGNORED = {
    "dataset": DATA, "dataset_path": DATA, "max_norm": HYPERPARAM, "gc_freq": LOGGING,
    "gc_debug": LOGGING, "dataloader": DATA, "seed": LOGGING, "deterministic": LOGGING,
    "mixed_precision_reduce": "gradient reduce dtype; fmest sizes FSDP reductions in the "
                              "gradient dtype",
}


def looks_like_toml(path: str, text: str) -> bool:
    """A ``.toml`` file, or text whose first table header is ``[name]`` on its own line."""
    if os.path.splitext(path)[1].lower() == ".toml":
        return True
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        return line.startswith("[") and line.endswith("]") and " " not in line \
            and "," not in line and line[1:-1].replace(".", "").replace("_", "").isalnum()
    return False


def parse_toml(path: str, text: str) -> dict:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(path, f"malformed TOML: {exc}") from None


def detect(doc: dict) -> bool:
    """torchtitan's own sections: ``[parallelism]`` with a ``*_degree`` key, or ``[model]``
    with a ``flavor`` (torchtitan's name for a model size)."""
    par = doc.get("parallelism")
    if isinstance(par, dict) and any(str(k).endswith("_degree") for k in par):
        return True
    model = doc.get("model")
    return isinstance(model, dict) and "flavor" in model


def _model(block: dict, sink: Sink) -> None:
    name = str(block.get("name", "llama3")).strip().lower()
    flavor = block.get("flavor")
    assets = block.get("hf_assets_path")
    fields = [k for k in ("name", "flavor") if k in block]
    preset = FLAVORS.get(name, {}).get(str(flavor).strip().lower()) if flavor is not None \
        else None
    cfg = FLAVOR_CONFIGS.get(name, {}).get(str(flavor).strip().lower()) \
        if flavor is not None else None
    if name in _NOT_LLM:
        raise sink.error("model.name", _NOT_LLM[name], value=name,
                         accepted=sorted(set(FLAVORS) | set(FLAVOR_CONFIGS)))
    if preset:
        sink.set("model", preset, "model." + "+".join(fields))
    elif cfg is not None:
        where = "model." + "+".join(fields) + " (torchtitan model args table)"
        sink.set("model", f"torchtitan/{name}-{flavor}", where)
        sink.set("model_config", dict(cfg), where)
    elif assets and os.path.isfile(os.path.join(str(assets), "config.json")):
        sink.set("model", str(assets), "model.hf_assets_path")
    else:
        for k in fields:
            sink.ignore(join("model", k), f"no fmest preset for torchtitan {name} flavor "
                        f"{flavor!r} (known: " + ", ".join(
                            f"{n} {f}" for tab in (FLAVORS, FLAVOR_CONFIGS)
                            for n, fl in tab.items() for f in fl) +
                        "); give --model")
    for k, value in block.items():
        key = join("model", k)
        if k in ("name", "flavor"):
            continue
        if k == "converters":
            conv = [str(c).strip().lower() for c in (value if isinstance(value, list)
                                                     else str(value).split(","))]
            if any(c in _FLOAT8 for c in conv):
                sink.set("training.dtype", "fp8", key)
            rest = [c for c in conv if c and c not in _FLOAT8]
            if rest or not conv:
                sink.unmodelled(key, f"converters {rest or conv} are not modelled (float8 "
                                "is); estimated without them")
        elif k == "hf_assets_path" and "model" in sink.values and \
                sink.values["model"][1] == key:
            continue
        elif k in ("hf_assets_path", "tokenizer_path"):
            sink.ignore(key, "tokenizer/checkpoint assets; the model comes from name + flavor")
        else:
            sink.ignore(key, "not used by fmest")


def _training(block: dict, sink: Sink, pp: int) -> None:
    for k, value in block.items():
        key = join("training", k)
        if k == "local_batch_size":
            local = sink.int_(key, value)
            if pp > 1:  # torchtitan splits the local batch into pipeline microbatches
                micro = int(sink.get("training.micro_batch_size", 1))
                if local % micro:
                    raise sink.error(key, f"not divisible by "
                                     f"parallelism.pipeline_parallel_microbatch_size {micro}",
                                     value=local)
                sink.set("training.grad_accum_steps", local // micro,
                         f"{key} / parallelism.pipeline_parallel_microbatch_size")
            else:
                sink.set("training.micro_batch_size", local, key)
        elif k == "global_batch_size":
            total = sink.int_(key, value, minimum=-1)
            if total > 0:
                sink.train_batch.append((total, key))
            else:
                sink.ignore(key, f"{total}: local_batch_size x data-parallel degree, no "
                            "gradient accumulation")
        elif k == "seq_len":
            sink.set("training.seq_len", sink.int_(key, value), key)
        elif k == "steps":
            sink.set("workload.max_steps", sink.int_(key, value), key)
        elif k in ("dtype", "mixed_precision_param"):
            sink.choice(key, value, _DTYPES)   # checked here, applied by _precision
        elif k == "enable_cpu_offload":
            sink.set("parallelism.cpu_offload",
                     "params" if sink.bool_(key, value) else "none", key)
        elif k in _TRAINING_IGNORED:
            sink.ignore(key, _TRAINING_IGNORED[k])
        else:
            sink.ignore(key, "not used by fmest")


def _parallelism(block: dict, sink: Sink) -> None:
    shard = block.get("data_parallel_shard_degree", -1)
    replicate = block.get("data_parallel_replicate_degree", 1)
    for k, value in block.items():
        key = join("parallelism", k)
        if k == "data_parallel_shard_degree":
            shard = sink.int_(key, value, minimum=-1)
            if shard == 0:
                raise sink.error(key, "expected -1 (all GPUs left) or a degree >= 1",
                                 value=value)
        elif k == "data_parallel_replicate_degree":
            replicate = sink.int_(key, value)
        elif k in ("tensor_parallel_degree", "pipeline_parallel_degree",
                   "context_parallel_degree", "expert_parallel_degree"):
            field = {"tensor": "tp", "pipeline": "pp", "context": "cp",
                     "expert": "ep"}[k.split("_")[0]]
            sink.set(f"parallelism.{field}", sink.int_(key, value), key)
        elif k == "enable_async_tensor_parallel":
            sink.set_when_true("parallelism.async_tp", True, key, value)
        elif k == "pipeline_parallel_schedule":
            text = str(value).strip().lower()
            if text in _SCHEDULES:
                sink.set("parallelism.pp_schedule", _SCHEDULES[text], key)
            else:
                sink.unmodelled(key, f"schedule {value!r} is not modelled; estimated as 1f1b "
                                "(fmest models 1F1B, GPipe, Interleaved1F1B)")
        elif k == "pipeline_parallel_microbatch_size":
            sink.set("training.micro_batch_size", sink.int_(key, value), key)
        elif k == "fsdp_reshard_after_forward":
            text = str(value).strip().lower()
            if text == "never":
                sink.set("parallelism.fsdp", "shard_grad_op", key)
            elif text in ("always", "default"):
                sink.ignore(key, f"{text}: parameters resharded after forward (FULL_SHARD)")
            else:
                raise sink.error(key, "not an accepted value", value=value,
                                 accepted=("default", "always", "never"))
        else:
            sink.ignore(key, "layout detail; fmest knows the degrees only")
    if "data_parallel_shard_degree" in block or "data_parallel_replicate_degree" in block:
        where = "parallelism.data_parallel_shard_degree+data_parallel_replicate_degree"
        if shard != 1 and "parallelism.fsdp" not in sink.values:
            sink.set("parallelism.fsdp", "hybrid_shard" if replicate > 1 else "full_shard",
                     where)
        if replicate > 1 and shard > 1:
            sink.set("parallelism.hsdp_shard_size", shard, where)
        if shard > 0:
            sink.set("parallelism.dp", shard * replicate, where)


def _float8(block: dict, sink: Sink, prefix: str) -> None:
    for k in block:
        key = join(prefix, k)
        if k == "recipe_name":
            sink.ignore(key, "torchao scaling recipe; the torchtitan stack prices torchao "
                        "tensorwise casts")
        elif k == "enable_fsdp_float8_all_gather":
            if sink.bool_(key, block[k]):
                sink.unmodelled(key, "fp8 FSDP all-gather (half the gather bytes) is not "
                                "modelled; estimated with bf16 all-gathers")
            else:
                sink.ignore(key, "false: bf16 all-gathers")
        else:
            sink.ignore(key, "float8 detail; fp8 compute comes from model.converters")


def _precision(doc: dict, sink: Sink) -> None:
    """torchtitan's precision policy (job_config.py ``Training.dtype`` and
    ``mixed_precision_param``): a ``dtype`` other than float32 stores and computes everything
    in it with no fp32 copy (``pure``); float32 (the default) keeps fp32 sharded weights and
    computes in ``mixed_precision_param`` (FSDP2 MixedPrecisionPolicy: ``amp``). The float8
    converter computes the linears in fp8 over the same storage."""
    training = section(doc, "training")
    fp8 = sink.get("training.dtype") == "fp8"
    storage = _DTYPES[str(training.get("dtype", "float32")).strip().lower()]
    if storage != "fp32":
        sink.set("training.precision", "pure", "training.dtype")
        if not fp8:
            sink.set("training.dtype", storage, "training.dtype")
        if "mixed_precision_param" in training:
            sink.ignore("training.mixed_precision_param", "training.dtype is not float32: "
                        "weights are stored and computed in it")
        return
    if "dtype" in training:
        sink.ignore("training.dtype", "float32 storage: computes in mixed_precision_param")
    key = "training.mixed_precision_param" if "mixed_precision_param" in training else \
        "(torchtitan default: training.mixed_precision_param = bfloat16)"
    compute = _DTYPES[str(training.get("mixed_precision_param", "bfloat16")).strip().lower()]
    sink.set("training.precision", "amp" if compute != "fp32" else "pure", key)
    if not fp8:
        sink.set("training.dtype", compute, key)


def map_config(doc: dict, sink: Sink) -> None:
    sink.set("training.stack", "torchtitan", WHY)
    par = section(doc, "parallelism")
    pp = par.get("pipeline_parallel_degree", 1)
    pp = pp if isinstance(pp, int) and not isinstance(pp, bool) else 1
    if pp > 1:   # pipeline microbatches: read before [training] splits the local batch
        _parallelism(sink.mapping("parallelism", par), sink)
    for name, value in doc.items():
        if name == "model":
            _model(sink.mapping(name, value), sink)
        elif name == "training":
            _training(sink.mapping(name, value), sink, pp)
        elif name == "parallelism":
            if pp <= 1:
                _parallelism(sink.mapping(name, value), sink)
        elif name == "optimizer":
            for k, v in sink.mapping(name, value).items():
                key = join(name, k)
                if k == "name":
                    sink.set("training.optimizer", sink.choice(key, v, _OPTIMIZERS), key)
                elif k == "implementation":
                    sink.set("training.optimizer_impl", sink.choice(key, v, _IMPLS), key)
                elif k == "early_step_in_backward":
                    sink.set("training.optimizer_in_backward", sink.bool_(key, v), key)
                else:
                    sink.ignore(key, HYPERPARAM)
        elif name == "activation_checkpoint":
            _activation_checkpoint(sink.mapping(name, value), sink)
        elif name == "compile":
            for k, v in sink.mapping(name, value).items():
                key = join(name, k)
                if k == "enable":
                    sink.set("training.compile", sink.bool_(key, v), key)
                else:
                    sink.ignore(key, "fmest models torch.compile as on or off")
        elif name == "float8":   # the section before the quantize refactor (2025-09)
            _float8(sink.mapping(name, value), sink, name)
        elif name == "quantize":
            q = sink.mapping(name, value)
            for k, v in q.items():
                sub = sink.mapping(join(name, k), v)
                for kk, vv in sub.items():
                    key = join(join(name, k), kk)
                    if k == "linear" and kk == "float8":
                        _float8(sink.mapping(key, vv), sink, key)
                    else:
                        sink.unmodelled(key, "MX / grouped-GEMM quantization is not "
                                        "modelled; estimated in the compute dtype")
        elif name in _SECTION_IGNORED:
            sink.ignore(name, _SECTION_IGNORED[name])
        else:
            sink.ignore(name, "not a torchtitan section fmest uses")
    _precision(doc, sink)
    if "activation_checkpoint" not in doc:
        _activation_checkpoint({}, sink)
    defaults = list(_DEFAULTS)
    if pp > 1:   # the default local batch of 8 runs as pipeline microbatches (default size 1)
        micro = int(sink.get("training.micro_batch_size", 1))
        defaults[0] = ("training.micro_batch_size", 1,
                       "parallelism.pipeline_parallel_microbatch_size = 1")
        if 8 % micro == 0:
            defaults.append(("training.grad_accum_steps", 8 // micro,
                             "training.local_batch_size = 8, in pipeline microbatches"))
    for field, value, default in defaults:
        if field not in sink.values:
            sink.set(field, value, f"(torchtitan default: {default})")


#: ``activation_checkpoint.selective_ac_option`` when the file leaves it out (job_config.py at the
#: commit above: ``selective_ac_option: str = "2"``, "'int' (e.g., 2) for every nth layer, or
#: 'op' for op level ac"), and ``mode``'s (``"selective"``)
_AC_DEFAULT_OPTION = "2"
_AC_DEFAULT_MODE = "selective"


def _activation_checkpoint(block: dict, sink: Sink) -> None:
    """``[activation_checkpoint]`` as torchtitan applies it per transformer block
    (torchtitan/distributed/activation_checkpoint.py ``_apply_ac_to_transformer_block`` at the
    commit above): ``mode = "full"`` wraps every block; ``"selective"`` with
    ``selective_ac_option = "op"`` is op-level selective AC (fmest's ``selective``), with a
    number N (``_apply_layer_sac``) it wraps every N-th block in full AC (``_layer_sac_count %
    ac_freq == 0``; N = 0 or 1: every block): full checkpointing of a share 1/N of the blocks
    (``training.checkpoint_fraction``); ``memory_budget`` is not modelled."""
    mode_key = join("activation_checkpoint", "mode") if "mode" in block else \
        f'(torchtitan default: activation_checkpoint.mode = "{_AC_DEFAULT_MODE}")'
    option_key = join("activation_checkpoint", "selective_ac_option") \
        if "selective_ac_option" in block else \
        f'(torchtitan default: selective_ac_option = "{_AC_DEFAULT_OPTION}")'
    for k in block:
        if k not in ("mode", "selective_ac_option"):
            sink.ignore(join("activation_checkpoint", k), "checkpointing detail; same bytes per "
                        "GPU")
    mode = str(block.get("mode", _AC_DEFAULT_MODE)).strip().lower()
    option = str(block.get("selective_ac_option", _AC_DEFAULT_OPTION)).strip().lower()
    if mode == "memory_budget":
        sink.unmodelled(mode_key, "memory_budget (compile's min-cut) is not modelled; "
                        "estimated without checkpointing")
        sink.set("training.activation_checkpointing", "none", mode_key)
    elif mode != "selective":
        sink.set("training.activation_checkpointing", sink.choice(
            mode_key, mode, {"none": "none", "full": "full", "selective": "selective"}),
            mode_key)
    elif option == "op":
        sink.set("training.activation_checkpointing", "selective", f"{mode_key}+{option_key}")
    elif option.isdigit():
        both = f"{mode_key}+{option_key}"
        sink.set("training.activation_checkpointing", "full", both)
        if int(option) > 1:
            sink.set("training.checkpoint_fraction", 1.0 / int(option), both)
        if "selective_ac_option" in block and int(option) <= 1:
            sink.ignore(option_key, f"{option}: every block is checkpointed (full)")
        return
    else:
        raise InputError(option_key, "not an accepted value", value=block.get(
            "selective_ac_option"), accepted=("op", "a whole number N: every N-th block"))
    if "selective_ac_option" in block and mode != "selective":
        sink.ignore(option_key, f"used only with mode \"selective\" (mode is {mode!r})")


#: What torchtitan does when the file leaves a key out (job_config.py at the commit above)
_DEFAULTS = (
    ("training.micro_batch_size", 8, "training.local_batch_size = 8"),
    ("training.seq_len", 2048, "training.seq_len = 2048"),
    ("workload.max_steps", 10000, "training.steps = 10000"),
    ("parallelism.fsdp", "full_shard", "parallelism.data_parallel_shard_degree = -1: FSDP2"),
)


__all__ = ["FLAVORS", "FORMAT", "detect", "looks_like_toml", "map_config", "parse_toml"]
