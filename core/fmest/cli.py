"""The ``fmest`` command line.

Every flag named in the issues is a contract: keep its name and meaning, add new ones beside.
Flags override values from ``-f/--input-file`` (a job JSON or fm-training-estimator
``EstimateInput``) and ``--config`` files; flags not given leave those values alone.
"""

from __future__ import annotations

import argparse
import contextvars
import json
import math
import re
import sys
from typing import Any, Callable, Sequence

from fmest.errors import FmestError, InputError, error_body, error_object

#: Exit code of ``--fail-if-no-fit`` when the job does not fit (2 is a usage or input error).
EXIT_NO_FIT = 3
#: Set by :func:`main` when the command line asks for ``--format json``: errors are then also
#: a JSON object on stdout (:func:`fmest.errors.error_object`, the service's shape).
_JSON_ERRORS: contextvars.ContextVar[bool] = contextvars.ContextVar("fmest_json_errors",
                                                                     default=False)


def wants_json(argv: Sequence[str]) -> bool:
    """True when ``argv`` asks for ``--format json`` (read before parsing, so that a flag
    argparse refuses is answered in JSON too)."""
    for i, arg in enumerate(argv):
        if arg == "--format" and i + 1 < len(argv) and argv[i + 1] == "json":
            return True
        if arg == "--format=json":
            return True
    return False


def argparse_error_object(message: str) -> dict:
    """An argparse refusal (``argument --seq-len/--x: ...``, ``invalid choice: 'x' (choose
    from 'a', 'b')``, ``the following arguments are required: --to``) as the JSON error."""
    from fmest.errors import json_field

    field = None
    match = re.match(r"argument (\S+?)(?:/\S+)?: (.*)$", message, re.S)
    if match:
        field, message = match.group(1), match.group(2)
    else:
        flags = re.findall(r"(?<![\w-])--?[A-Za-z][\w-]*", message)
        field = flags[0] if flags else None
    accepted = []
    choices = re.search(r"\(choose from (.*)\)", message)
    if choices:
        accepted = re.findall(r"'([^']*)'", choices.group(1)) or \
            [int(c) if c.strip().isdigit() else c.strip() for c in choices.group(1).split(",")]
    return error_body(json_field(field) if field else None, message, accepted)


def print_json_error(obj: dict) -> None:
    print(json.dumps(obj, indent=2, default=str))


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors and exit code 2 (no usage dump, no traceback); with
    ``--format json`` the error is also a JSON object on stdout."""

    def error(self, message: str):  # type: ignore[override]
        if _JSON_ERRORS.get():
            print_json_error(argparse_error_object(message))
        self.exit(2, f"fmest: error: {message} (see 'fmest {self.prog.split()[-1]} --help')\n"
                  if " " in self.prog else f"fmest: error: {message}\n")


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
        raise argparse.ArgumentTypeError(f"expected a number such as 2e10 or 300M, got {text!r}")


def parse_positive_int(text: str) -> int:
    try:
        v = float(parse_count(text))
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if v < 1 or not v.is_integer():
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(v)


def _bool_flag(p, *names, help):
    p.add_argument(*names, nargs="?", const=True, default=None, type=parse_bool,
                   metavar="true|false", help=help)


# (flag dest, job section, job field, transform)
_FLAG_MAP: list[tuple[str, str, str, Callable[[Any], Any] | None]] = [
    ("dtype", "training", "dtype", None),
    ("precision", "training", "precision", None),
    ("seq_len", "training", "seq_len", None),
    ("per_device_batch", "training", "micro_batch_size", None),
    ("grad_accum", "training", "grad_accum_steps", None),
    ("technique", "training", "technique", None),
    ("lora_rank", "training", "lora_rank", None),
    ("lora_alpha", "training", "lora_alpha", None),
    ("lora_target_modules", "training", "lora_target_modules", None),
    ("quant_bits", "training", "quantization_bits", None),
    ("optimizer", "training", "optimizer", None),
    ("optimizer_impl", "training", "optimizer_impl", None),
    ("optimizer_in_backward", "training", "optimizer_in_backward", None),
    ("attn", "training", "attention", None),
    ("fused_loss", "training", "loss", lambda v: "fused" if v else "standard"),
    ("loss", "training", "loss", None),
    ("activation_offload", "training", "activation_offload", None),
    ("compile", "training", "compile", None),
    ("stack", "training", "stack", None),
    ("liger", "training", "liger", None),
    ("tp_comm_overlap", "parallelism", "tp_comm_overlap", None),
    ("async_tp", "parallelism", "async_tp", None),
    ("distributed_optimizer", "parallelism", "distributed_optimizer", None),
    ("dp", "parallelism", "dp", None),
    ("tp", "parallelism", "tp", None),
    ("pp", "parallelism", "pp", None),
    ("cp", "parallelism", "cp", None),
    ("ep", "parallelism", "ep", None),
    ("sequence_parallel", "parallelism", "sequence_parallel", None),
    ("pp_schedule", "parallelism", "pp_schedule", None),
    ("pp_virtual_stages", "parallelism", "pp_virtual_stages", None),
    ("zero", "parallelism", "zero_stage", None),
    ("fsdp", "parallelism", "fsdp", None),
    ("hsdp_shard_size", "parallelism", "hsdp_shard_size", None),
    ("cpu_offload", "parallelism", "cpu_offload", None),
    ("fsdp_backward_prefetch", "parallelism", "fsdp_backward_prefetch", None),
    ("sharding", "parallelism", "sharding", None),
    ("gpu", "hardware", "gpu", None),
    ("gpus_per_node", "hardware", "gpus_per_node", None),
    ("nodes", "hardware", "nodes", None),
    ("dataset_tokens", "workload", "dataset_tokens", None),
    ("num_samples", "workload", "num_samples", None),  # the converter makes it whole
    ("avg_seq_len", "workload", "avg_seq_len", None),
    ("epochs", "workload", "epochs", None),
    ("max_steps", "workload", "max_steps", None),
    ("dataset", "workload", "dataset_path", None),
    ("provider", "pricing", "provider", None),
    ("region", "pricing", "region", None),
    ("price_type", "pricing", "price_type", None),
    ("price_per_gpu_hour", "pricing", "price_per_gpu_hour", None),
    ("batch", "inference", "batch", None),
    ("context", "inference", "context", None),
    ("output_tokens", "inference", "output_tokens", None),
    ("kv_dtype", "inference", "kv_dtype", None),
    ("kv_block_size", "inference", "kv_block_size", None),
    ("quantization", "inference", "quantization", None),
    ("group_size", "inference", "group_size", None),
    ("runtime", "inference", "runtime", None),
    ("gpu_memory_utilization", "inference", "gpu_memory_utilization", None),
    ("max_num_batched_tokens", "inference", "max_num_batched_tokens", None),
    ("image_size", "training", "image_size", None),
    ("images_per_sample", "training", "images_per_sample", None),
    ("train_vision_tower", "training", "train_vision_tower", None),
    ("source_len", "training", "source_len", None),
    ("target_len", "training", "target_len", None),
    ("activation_factor", "calibration", "activation_factor", None),
    ("fragmentation_gib", "calibration", "fragmentation_gib", None),
    ("misc_overhead_gib", "calibration", "misc_overhead_gib", None),
    ("safety_margin", "calibration", "safety_margin", None),
    ("method", "options", "method", None),
    ("mfu", "options", "mfu", None),
    ("explain", "options", "explain", None),
    ("learned_model", "options", "learned_model", None),
]


def add_estimate_arguments(p: argparse.ArgumentParser) -> None:
    """The ``fmest estimate`` flags (seed-compatible names; see docs/cli.md)."""
    g = p.add_argument_group("input")
    g.add_argument("--model", help="preset name (fmest models), local config.json or folder, "
                   "or Hugging Face Hub id")
    g.add_argument("-f", "--input-file", metavar="FILE", help="job JSON (fmest layout or "
                   "fm-training-estimator EstimateInput); flags override it; - reads stdin")
    g.add_argument("--config", action="append", metavar="FILE", help="a training tool's config "
                   "(TrainingArguments, DeepSpeed, accelerate, axolotl, torchtune, LLaMA-Factory, "
                   "EstimateInput, torchtitan TOML, Megatron-LM arguments / Megatron-Bridge / "
                   "NeMo YAML); repeatable, later files win, flags win over files")
    g.add_argument("--config-format", metavar="NAME", help="skip detection: training-args, "
                   "deepspeed, accelerate, axolotl, torchtune, llama-factory, "
                   "fm-training-estimator, torchtitan, megatron")
    g = p.add_argument_group("training")
    g.add_argument("--dtype", choices=("fp32", "bf16", "fp16", "fp8", "int8", "nf4"),
                   help="compute dtype; int8/nf4 = quantized base weights (QLoRA training with "
                        "bf16 compute, or quantized serving with --mode inference)")
    g.add_argument("--precision", choices=("auto", "pure", "amp", "master"),
                   help="precision policy for stored weights/grads/states (default auto)")
    g.add_argument("--seq-len", type=parse_positive_int, help="tokens per sample")
    g.add_argument("--per-device-batch", "--micro-batch", type=parse_positive_int,
                   dest="per_device_batch", help="micro-batch size per GPU (per data-parallel rank)")
    g.add_argument("--grad-accum", type=parse_positive_int, help="gradient accumulation steps")
    g.add_argument("--technique", choices=("full", "lora", "qlora"), help="what is trained")
    _bool_flag(g, "--lora", help="same as --technique lora")
    _bool_flag(g, "--qlora", help="same as --technique qlora")
    g.add_argument("--lora-rank", type=parse_positive_int, help="LoRA rank r")
    g.add_argument("--lora-alpha", type=float, help="LoRA alpha (no effect on memory or time)")
    g.add_argument("--lora-target-modules", nargs="+", metavar="NAME",
                   help="module names (q_proj v_proj ...) or all-linear; commas also accepted")
    g.add_argument("--quant-bits", type=int, choices=(4, 8), help="QLoRA base weight bits")
    g.add_argument("--optimizer", metavar="NAME", help="adamw, adamw_8bit, paged_adamw_8bit, adafactor, sgd, sgd_momentum, lion, ... (HF optim names accepted)")
    g.add_argument("--optimizer-impl", choices=("auto", "foreach", "fused", "for_loop"), help="optimizer implementation (foreach adds one parameter-sized temporary)")
    _bool_flag(g, "--optimizer-in-backward", help="fuse the optimizer step into backward")
    g.add_argument("--grad-checkpoint", metavar="none|full|selective|true|false",
                   help="activation checkpointing (true = full)")
    _bool_flag(g, "--flashattn", help="same as --attn flash")
    g.add_argument("--attn", choices=("eager", "sdpa", "flash"), help="attention implementation (eager keeps the s^2 scores)")
    _bool_flag(g, "--fused-loss", help="fused/chunked cross-entropy (no full fp32 logits)")
    g.add_argument("--loss", choices=("standard", "fused", "chunked"), help="cross-entropy implementation")
    _bool_flag(g, "--activation-offload", help="offload saved activations to CPU")
    _bool_flag(g, "--compile", help="torch.compile the model")
    g.add_argument("--stack", metavar="NAME", help="training stack (fmest stacks): pytorch, "
                   "hf-trainer, deepspeed, megatron-core, megatron-deepspeed, torchtitan, "
                   "torchtune, llm-foundry, unsloth; aliases such as nemo, megatron; any case")
    _bool_flag(g, "--liger", help="Liger kernels: fused RMSNorm, SwiGLU, RoPE, linear "
               "cross-entropy")
    g = p.add_argument_group("parallelism")
    for name in ("dp", "tp", "pp", "cp", "ep"):
        g.add_argument(f"--{name}", type=parse_positive_int, help={
            "dp": "data-parallel degree (default: the GPUs left by tp*pp*cp)",
            "tp": "tensor-parallel degree", "pp": "pipeline-parallel stages",
            "cp": "context-parallel degree", "ep": "expert-parallel degree (MoE)"}[name])
    _bool_flag(g, "--sequence-parallel", help="Megatron sequence parallelism with tp")
    g.add_argument("--pp-schedule", choices=("1f1b", "gpipe", "interleaved"), help="pipeline schedule")
    g.add_argument("--pp-virtual-stages", type=parse_positive_int, help="model chunks per stage (interleaved)")
    g.add_argument("--zero", type=int, choices=(0, 1, 2, 3), help="DeepSpeed ZeRO stage")
    g.add_argument("--fsdp", choices=("full_shard", "shard_grad_op", "hybrid_shard", "no_shard"), help="PyTorch FSDP sharding strategy")
    g.add_argument("--fsdp-backward-prefetch", choices=("pre", "post", "none"),
                   help="FSDP backward_prefetch: pre (BACKWARD_PRE, default), post (Composer's "
                   "default), none")
    g.add_argument("--sharding", metavar="NAME", help="a registered sharding strategy by name "
                   "(zero0..zero3, fsdp_full_shard, ..., or a plugin's); zero/fsdp may only "
                   "repeat it")
    _bool_flag(g, "--tp-comm-overlap", help="overlap tensor-parallel communication with "
               "GEMMs (Megatron --tp-comm-overlap; default: the stack's)")
    _bool_flag(g, "--async-tp", help="torchtitan async tensor parallelism")
    _bool_flag(g, "--distributed-optimizer", help="Megatron distributed optimizer (optimizer "
               "states sharded over DP, overlapped grad reduce-scatter / param all-gather)")
    g.add_argument("--hsdp-shard-size", type=parse_positive_int, help="shard group size for hybrid_shard (default: GPUs per node)")
    g.add_argument("--cpu-offload", choices=("none", "optimizer", "params"), help="offload optimizer states (and master weights) or also parameters to CPU")
    g = p.add_argument_group("hardware")
    g.add_argument("--gpu", metavar="NAME", help="GPU name or alias (fmest gpus)")
    g.add_argument("--gpus-per-node", type=parse_positive_int, help="GPUs per node (default: what the parallelism needs, up to 8)")
    g.add_argument("--nodes", type=parse_positive_int, help="number of nodes")
    g = p.add_argument_group("workload")
    g.add_argument("--dataset-tokens", type=parse_count, metavar="N", help="tokens in the dataset, e.g. 2e10")
    g.add_argument("--num-samples", type=parse_count, metavar="N", help="samples in the dataset")
    g.add_argument("--avg-seq-len", type=parse_count, metavar="N", help="average tokens per sample (default: --seq-len)")
    g.add_argument("--epochs", type=float, help="passes over the dataset (default 1)")
    g.add_argument("--max-steps", type=parse_positive_int, help="fixed number of optimizer steps instead of a dataset")
    g.add_argument("--dataset", metavar="FILE", help="JSONL/CSV/Parquet/text file to count")
    g = p.add_argument_group("pricing")
    g.add_argument("--provider", metavar="NAME|cheapest", help="cloud provider to price on (fmest prices)")
    g.add_argument("--region", metavar="R", help="provider region")
    g.add_argument("--price-type", choices=("on_demand", "spot", "reserved_1y", "reserved_3y"), help="price type (default on_demand)")
    g.add_argument("--price-per-gpu-hour", type=float, metavar="USD", help="flat price that overrides the price table")
    g = p.add_argument_group("inference (--mode inference; docs/inference.md)")
    g.add_argument("--mode", choices=("training", "inference"), help="estimate a training step "
                   "(default) or serving")
    g.add_argument("--batch", type=parse_positive_int, help="concurrent sequences served")
    g.add_argument("--context", type=parse_positive_int, help="tokens per sequence (prompt + "
                   "output; default 4096)")
    g.add_argument("--output-tokens", type=parse_positive_int, help="generated tokens per "
                   "sequence (default 256)")
    g.add_argument("--kv-dtype", choices=("auto", "bf16", "fp16", "fp8", "int8"),
                   help="KV cache dtype (auto: the compute dtype)")
    g.add_argument("--kv-block-size", type=parse_positive_int, help="paged KV block in tokens "
                   "(default 16, vLLM's)")
    g.add_argument("--quantization", choices=("none", "gptq", "awq", "int4", "int8", "nf4",
                                              "fp8"), help="weight storage format of the "
                   "served model (default: --dtype)")
    g.add_argument("--group-size", type=parse_positive_int, help="GPTQ/AWQ group size (128)")
    g.add_argument("--runtime", choices=("vllm", "transformers"), help="serving runtime "
                   "(default vllm)")
    g.add_argument("--gpu-memory-utilization", type=float, help="share of GPU memory the "
                   "runtime may use (default 0.9)")
    g.add_argument("--max-num-batched-tokens", type=parse_positive_int, help="largest prefill "
                   "chunk (default 8192)")
    g = p.add_argument_group("vision-language and encoder-decoder models (docs/models.md)")
    g.add_argument("--image-size", type=parse_positive_int, help="image side in pixels "
                   "(default: the model's)")
    g.add_argument("--images-per-sample", type=parse_positive_int, help="images per sample "
                   "(default 1)")
    _bool_flag(g, "--train-vision-tower", help="train the vision tower too (default frozen)")
    g.add_argument("--source-len", type=parse_positive_int, help="encoder tokens (default "
                   "--seq-len)")
    g.add_argument("--target-len", type=parse_positive_int, help="decoder tokens (default "
                   "--seq-len)")
    g = p.add_argument_group("raw model dimensions (instead of --model; docs/models.md)")
    g.add_argument("--hidden-size", type=parse_positive_int, help="hidden size")
    g.add_argument("--num-layers", type=parse_positive_int, help="transformer layers")
    g.add_argument("--num-heads", type=parse_positive_int, help="attention heads")
    g.add_argument("--num-kv-heads", type=parse_positive_int, help="key/value heads (GQA)")
    g.add_argument("--intermediate-size", type=parse_positive_int, help="MLP width")
    g.add_argument("--vocab-size", type=parse_positive_int, help="vocabulary size")
    g.add_argument("--params", type=parse_count, metavar="N", help="parameter count for a "
                   "weights-only answer (e.g. 7e9)")
    g = p.add_argument_group("calibration knobs (docs/inference.md)")
    g.add_argument("--activation-factor", type=float, help="multiply activations (default 1)")
    g.add_argument("--fragmentation-gib", type=float, help="add GiB for allocator fragmentation")
    g.add_argument("--misc-overhead-gib", type=float, help="add GiB of other memory")
    g.add_argument("--safety-margin", type=float, help="share of GPU memory the fits verdict "
                   "keeps free (0-1)")
    g = p.add_argument_group("answer")
    g.add_argument("--method", metavar="theory|traced|learned|hybrid",
                   help="policy that chooses among plugin answers")
    g.add_argument("--mfu", type=float, help="override the model FLOPs utilisation (0-1)")
    _bool_flag(g, "--explain", help="print every candidate answer and the rule that chose")
    g.add_argument("--learned-model", metavar="NAME|PATH", help="learned-model bundle for "
                   "--method learned/hybrid: an installed name (fmest learned-models) or a "
                   "bundle directory (default: the shipped default bundle)")
    g.add_argument("--format", choices=("table", "json"), default="table", help="table for people, json for machines")


def read_flags(args: argparse.Namespace) -> Any:
    """The flags actually given, as an input layer (origin: the flag)."""
    from fmest.bounds import check_flags
    from fmest.inputs import Layer

    check_flags(args)  # flags that set one field two ways (--lora --qlora)
    values: dict = {}

    def put(path: str, value: Any, flag: str) -> None:
        values.pop(path, None)
        values[path] = (value, flag)

    if args.model:
        put("model", args.model, "--model")
    if args.qlora:
        put("training.technique", "qlora", "--qlora")
    elif args.lora:
        put("training.technique", "lora", "--lora")
    if args.grad_checkpoint is not None:
        gc = args.grad_checkpoint.strip().lower()
        gc = {"true": "full", "1": "full", "yes": "full", "false": "none", "0": "none",
              "no": "none"}.get(gc, gc)
        if gc not in ("none", "full", "selective"):
            raise InputError("--grad-checkpoint", "not an accepted value", value=args.grad_checkpoint,
                             accepted=("none", "full", "selective", "true", "false"))
        put("training.activation_checkpointing", gc, "--grad-checkpoint")
    if args.flashattn:
        put("training.attention", "flash", "--flashattn")
    for dest, section, key, fn in _FLAG_MAP:
        value = getattr(args, dest, None)
        if value is None:
            continue
        if dest == "lora_target_modules":
            value = [v for item in value for v in item.split(",") if v]
        put(f"{section}.{key}", fn(value) if fn else value, "--" + dest.replace("_", "-"))
    _model_flags(args, put)
    return Layer(source="flags", values=values)


def _model_flags(args: argparse.Namespace, put) -> None:
    """Issue 14's flags: ``--mode``, ``--dtype int8|nf4`` (quantized base weights: QLoRA
    training with bf16 compute, or quantized serving), raw dimensions (a Llama-style
    ``model_config``) and ``--params N`` (a weights-only model)."""
    from fmest.models.hf import DIMENSION_KEYS, WEIGHTS_ONLY_KEY, config_from_dimensions

    mode = getattr(args, "mode", None)
    if mode:
        put("mode", mode, "--mode")
    if getattr(args, "dtype", None) in ("int8", "nf4"):
        put("training.dtype", "bf16", "--dtype")
        if mode == "inference":
            put("inference.quantization", args.dtype, "--dtype")
        else:
            put("training.technique", "qlora", "--dtype")
            put("training.quantization_bits", 8 if args.dtype == "int8" else 4, "--dtype")
    dims = {flag: getattr(args, flag, None) for flag in DIMENSION_KEYS}
    if any(v is not None for v in dims.values()):
        put("model_config", config_from_dimensions(**dims), "--hidden-size ...")
        if not args.model:
            put("model", "custom-dimensions", "--hidden-size ...")
    elif getattr(args, "params", None) is not None:
        if not (math.isfinite(args.params) and args.params >= 1):  # int(nan) raised
            raise InputError("--params", "expected a finite parameter count >= 1 (7e9, 7B)",
                             value=args.params)
        put("model_config", {WEIGHTS_ONLY_KEY: int(args.params)}, "--params")
        if not args.model:
            put("model", f"params-{args.params:g}", "--params")


def jobs_from_args(args: argparse.Namespace, *, job_layers=None):
    """Every job the command line describes, each with its :class:`fmest.inputs.InputReport`:
    the job input (``-f``, or an EstimateInput given with ``--config``), then the other
    ``--config`` files, then the flags (flags win). ``job_layers`` (from
    :func:`fmest.inputs.read_document`) replaces reading ``args.input_file`` (the service
    passes a request body this way)."""
    from fmest.inputs import build_jobs, read_configs, read_file

    if job_layers is None:
        job_layers = read_file(args.input_file) if args.input_file else []
    job_layers = list(job_layers)
    config_layers = []
    if getattr(args, "config", None):
        more, config_layers = read_configs(args.config, getattr(args, "config_format", None))
        if more and job_layers:
            raise InputError("--config", "an fm-training-estimator EstimateInput is a job "
                             "input; give it with -f or --config, not both")
        job_layers = job_layers or more
    missing = InputError("--model", "required (a preset name, local config.json or Hub id; "
                         "see 'fmest models')")
    return build_jobs(job_layers, [*config_layers, read_flags(args)], require_model=missing)


def job_dict_from_args(args: argparse.Namespace) -> dict:
    """The first job the command line describes, as a dict in fmest's layout (for commands
    that take one job; :func:`jobs_from_args` gives every job and its input report)."""
    from fmest.convert import job_to_dict

    return job_to_dict(jobs_from_args(args)[0][0])


def _summarised(report, args) -> Any:
    """People get a summary of many ignored config keys; --explain and --format json list each
    key with its reason."""
    import attrs

    config_lines = [w for w in report.warnings if w.startswith("config key ignored: ")]
    if args.format == "json" or report.job.options.explain or len(config_lines) <= 3:
        return report
    rest = tuple(w for w in report.warnings if not w.startswith("config key ignored: "))
    note = (f"{len(config_lines)} config keys ignored (they do not change memory, time or "
            "cost; --explain lists each with its reason)",)
    return attrs.evolve(report, warnings=rest + note)


def report_output(report) -> dict:
    """The object ``fmest estimate --format json`` prints for a report
    (:func:`fmest.report.reports_to_dict`)."""
    from fmest.report import reports_to_dict

    return reports_to_dict(report)


def estimate_output(args: argparse.Namespace, engine, *, job_layers=None) -> dict:
    """The object ``fmest estimate --format json`` prints (see :func:`jobs_from_args` for
    ``job_layers``)."""
    import fmest

    return report_output(fmest.estimate_jobs(jobs_from_args(args, job_layers=job_layers),
                                             engine=engine))


def cmd_estimate(args: argparse.Namespace, engine_factory) -> int:
    import fmest
    from fmest.plot import plot_format, write_plot

    if args.plot:
        plot_format(args.plot)  # a bad file name fails before any work
    if args.format == "fm-training-estimator":
        from fmest.compat.fm_training_estimator_api import adr_output

        print(json.dumps(adr_output(jobs_from_args(args)[0][0], engine_factory()), indent=2))
        return 0
    if args.format in ("json", "csv"):
        out = estimate_output(args, engine_factory())
        if args.format == "json":
            print(json.dumps(out, indent=2, default=str))
        else:
            from fmest.report import estimate_csv

            sys.stdout.write(estimate_csv(out))
        if args.plot:
            write_plot(out, args.plot)
        jobs = out["jobs"] if "jobs" in out else [out]
        return _fit_exit(args, [(j.get("memory") or {}).get("fits") for j in jobs])
    report = fmest.estimate_jobs(jobs_from_args(args), engine=engine_factory())
    if args.plot:
        write_plot(report, args.plot)
    reports = report.all_reports
    from fmest.render import render_table as table
    from fmest.report import render_table

    for r in reports:
        if len(reports) > 1:
            print(f"{'' if r is report else chr(10)}== job {r.input.job_index + 1} of "
                  f"{len(reports)}: {r.job.model} ==")
        print(render_table(_summarised(r, args), explain=bool(r.job.options.explain)))
        if r.input is not None and r.input.files and r.job.options.explain:
            print("\nWhere each setting came from (flags override these):")
            print(table(["field", "origin"], r.input.origins.items(), indent="  "))
    return _fit_exit(args, [r.fits for r in reports])


def _fit_exit(args: argparse.Namespace, fits: list) -> int:
    """``--fail-if-no-fit``: exit 3 when a job does not fit (for schedulers); else 0."""
    if getattr(args, "fail_if_no_fit", False) and any(f is False for f in fits):
        print("fmest: the job does not fit (--fail-if-no-fit)", file=sys.stderr)
        return EXIT_NO_FIT
    return 0


def cmd_export(args: argparse.Namespace, engine_factory) -> int:
    """``fmest export --to FORMAT``: the job (flags, -f, --config) as a tool's config file(s)."""
    import os

    from fmest.configs.export import export_job

    pairs = jobs_from_args(args)
    if len(pairs) > 1:
        raise InputError("--to", f"the input holds {len(pairs)} jobs; export writes one job's "
                         "config (split the EstimateInput)")
    files = export_job(pairs[0][0], args.to, registries=engine_factory().registries)
    if args.output_dir:
        for name, text in files.items():
            path = os.path.join(args.output_dir, name)
            try:  # a path under a file, no permission, a full disk: the flag's problem
                os.makedirs(args.output_dir, exist_ok=True)
                with open(path, "w", encoding="utf-8") as fh:
                    fh.write(text)
            except OSError as exc:
                raise InputError("--output-dir", f"cannot write {path}: {exc.strerror}",
                                 value=args.output_dir) from None
            print(f"wrote {path}")
    elif len(files) == 1:
        sys.stdout.write(next(iter(files.values())))
    else:
        for name, text in files.items():
            sys.stdout.write(f"# ==> {name} <==\n{text}")
    return 0


def models_rows(registries) -> list[dict]:
    """The model registry as ``fmest models --format json`` prints it: every plugin's presets
    (not a built-in table), sorted by name."""
    def model_type(name: str) -> str:
        known = registries.model_info.get(name, {}).get("model_type")
        return known if known is not None else registries.models.find(name)().model_type

    return [{"name": name, "model_type": model_type(name),
             "aliases": _display_aliases(registries, name),
             "source": registries.model_sources.get(name, ""),
             "retrieved": registries.model_info.get(name, {}).get("retrieved", ""),
             "plugin": registries.models.source_of(name)}
            for name in sorted(registries.models.names(), key=str.lower)]


def gpus_rows(registries) -> list[dict]:
    """The GPU registry as ``fmest gpus --format json`` prints it."""
    from fmest.convert import unstructure

    return [unstructure(g) for g in registries.gpus.values()]


def cmd_models(args, engine_factory) -> int:
    """The model registry: every plugin's presets (not a built-in table)."""
    from fmest.render import csv_text, render_table

    rows = models_rows(engine_factory().registries)
    if args.format == "json":
        print(json.dumps(rows, indent=2))
        return 0
    if args.format == "csv":
        sys.stdout.write(csv_text(MODELS_CSV_FIELDS, rows))
        return 0
    if not rows:
        print("no model presets registered; a local config.json or model folder works.")
        return 0
    print(render_table(["name", "type", "aliases"],
                       [(r["name"], r["model_type"], ", ".join(r["aliases"][:3])) for r in rows]))
    print(f"\n{len(rows)} presets; a local config.json or model folder also works.")
    return 0


#: ``fmest models --format csv`` columns (the JSON rows' keys; aliases joined with ``;``).
MODELS_CSV_FIELDS = ("name", "model_type", "aliases", "source", "retrieved", "plugin")


def _display_aliases(reg, name: str) -> list[str]:
    """The aliases a plugin registered for ``name``, in its order (the registry keeps keys
    lower-cased; the registering plugin's spelling is in ``model_info``)."""
    given = reg.model_info.get(name, {}).get("aliases")
    return list(given) if given is not None else reg.models.aliases_of(name)


def cmd_gpus(args, engine_factory) -> int:
    from fmest.render import Column, csv_text, render_table

    engine = engine_factory()
    gpus = engine.registries.gpus.values()
    if args.format == "json":
        print(json.dumps(gpus_rows(engine.registries), indent=2))
        return 0
    if args.format == "csv":
        rows = gpus_rows(engine.registries)
        fields = list(dict.fromkeys(k for r in rows for k in r))  # the JSON keys, in order
        sys.stdout.write(csv_text(fields, rows))
        return 0

    def tf(x):
        return f"{x / 1e12:.1f}" if x else "-"

    print(render_table(
        [Column(name="name"), Column(name="mem GiB", align="right"),
         Column(name="HBM TB/s", align="right"), Column(name="bf16 TF", align="right"),
         Column(name="fp8 TF", align="right"), Column(name="aliases")],
        [(g.name, f"{g.memory_bytes / 1024**3:.0f}",
          f"{g.hbm_bytes_per_s / 1e12:.2f}" if g.hbm_bytes_per_s else "-",
          tf(g.bf16_flops_per_s), tf(g.fp8_flops_per_s), ", ".join(g.aliases[:4]))
         for g in gpus]))
    return 0


def cmd_plugins(args, engine_factory) -> int:
    from fmest.plugins import plugin_hooks

    from importlib.metadata import entry_points

    engine = engine_factory()
    hooks = plugin_hooks(engine.pm)
    # learned-model bundles are packages of their own (entry-point group fmest.learned_models);
    # listed by name without importing them
    bundles = {ep.name: ep.value for ep in entry_points(group="fmest.learned_models")}
    if args.format == "json":
        print(json.dumps({"plugins": hooks, "learned_models": bundles,
                          "load_errors": [str(e) for e in engine.load_errors]}, indent=2))
        return 0
    from fmest.render import render_table

    print(render_table(["plugin", "hooks"],
                       [(name, ", ".join(h.removeprefix("fmest_") for h in hs))
                        for name, hs in sorted(hooks.items())]))
    if bundles:
        print("\nlearned-model bundles (--learned-model NAME; details: fmest learned-models)")
        print(render_table(["bundle", "entry point"], sorted(bundles.items())))
    for err in engine.load_errors:
        print(f"error: {err}")
    return 0


def build_parser(commands: dict | None = None) -> argparse.ArgumentParser:
    parser = _Parser(prog="fmest", description="Estimate per-GPU memory, step and total time, "
                     "tokens/s and dollar cost of LLM training runs before running them.")
    from fmest import __version__

    parser.add_argument("--version", action="version", version=f"fmest {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    p = sub.add_parser("estimate", help="estimate memory, time, throughput and cost of a job")
    add_estimate_arguments(p)
    p.add_argument("--plot", metavar="FILE", help="also draw the estimate to FILE (.png, .svg or "
                   ".pdf): memory components against the GPU, phase peaks (needs fmest[plot])")
    p.add_argument("--fail-if-no-fit", action="store_true", help=f"exit {EXIT_NO_FIT} when a "
                   "job does not fit in GPU memory (for schedulers; default: exit 0)")
    _add_format_choice(p, "csv")
    _add_format_choice(p, "fm-training-estimator")   # the ADR's Estimate (issue 17)
    p = sub.add_parser("export", help="write the job as a DeepSpeed, accelerate, axolotl or "
                       "TrainingArguments config")
    add_estimate_arguments(p)
    p.add_argument("--to", required=True, choices=("deepspeed", "accelerate", "axolotl",
                                                   "training-args"))
    p.add_argument("--output-dir", metavar="DIR", help="write the file(s) here (default: stdout)")
    for name, help_ in (("models", "list the shipped model presets"),
                        ("gpus", "list the known accelerators"),
                        ("plugins", "list the plugins and the hooks they implement")):
        q = sub.add_parser(name, help=help_)
        q.add_argument("--format", choices=("table", "json", "csv") if name != "plugins"
                       else ("table", "json"), default="table")
    for name, (help_, add_args, _run) in (commands or {}).items():
        q = sub.add_parser(name, help=help_)
        add_args(q)
    return parser


def _add_format_choice(p: argparse.ArgumentParser, fmt: str) -> None:
    """Let ``--format`` of a command built by :func:`add_estimate_arguments` take ``fmt``."""
    action = p._option_string_actions["--format"]
    if fmt not in action.choices:
        action.choices = (*action.choices, fmt)
        action.help = f"table for people; {', '.join(action.choices[1:])} for machines"


def _plugin_commands(engine) -> dict:
    """CLI commands the plugins register (through the engine's calling layer: a plugin whose
    registration fails is named among the load errors, the others' commands still work)."""
    return engine.commands()


def main(argv: Sequence[str] | None = None, *, engine=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    token = _JSON_ERRORS.set(wants_json(argv))
    try:
        return _main(argv, engine)
    finally:
        _JSON_ERRORS.reset(token)


def _main(argv: list[str], engine) -> int:
    engine_box: dict = {"engine": engine}

    def engine_factory():
        if engine_box["engine"] is None:
            from fmest.engine import Engine

            engine_box["engine"] = Engine()
        return engine_box["engine"]

    try:
        builtin = {"estimate": cmd_estimate, "models": cmd_models, "gpus": cmd_gpus,
                   "plugins": cmd_plugins, "export": cmd_export}
        first = next((a for a in argv if not a.startswith("-")), None)
        commands = {} if first in builtin else _plugin_commands(engine_factory())
        parser = build_parser(commands)
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return 2
        if args.command in builtin:
            return builtin[args.command](args, engine_factory)
        return commands[args.command][2](args, engine_factory())
    except FmestError as exc:
        if _JSON_ERRORS.get():  # machines read the object; people still see the line
            print_json_error(error_object(exc))
        print(f"fmest: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


def entry() -> None:  # console script
    sys.exit(main())
