"""The config-corpus benchmark (issue 23): how fmest answers 1,643 real config files.

    python benchmarks/configs_corpus.py                   # aligned table (progress on stderr)
    python benchmarks/configs_corpus.py --format json     # one JSON object
    python benchmarks/configs_corpus.py --project torchtune
    python benchmarks/configs_corpus.py --show refused    # files of a category, with the reason
    python benchmarks/configs_corpus.py --corpus DIR      # another checkout's corpus folder

Every file of ``tests/data/configs/corpus/MANIFEST.tsv`` goes through the same path as
``fmest estimate --config FILE --format json`` (:func:`fmest.cli.build_parser`, then
:func:`fmest.api.estimate_output` on one engine built once), in this process.

Categories (``--show`` takes these names, or ``silent-drop``, ``decisive-drop``,
``layout-guessed``, ``mismatch``, ``bad-refusal``):

* ``answered`` -- answered as it is (training mode).
* ``answered-with-model`` -- refused only for its model (missing, or not a preset and the Hub
  is not reachable: an error on field ``model``/``--model``), then answered with ``--model``
  set by :func:`model_for` (the preset whose short name or alias is the file's model's short
  name, case-insensitive; else :data:`DEFAULT_MODEL`).
* ``inference`` -- answered with ``job.mode == "inference"`` (as is or with ``--model``).
* ``not-training`` -- refused with :class:`fmest.errors.NotTrainingError`.
* ``refused`` -- any other :class:`fmest.errors.FmestError`; recorded: whether the message is
  one line and whether its field names the file and a key (``"FILE: key"``).
* ``crash`` -- any other exception (what the CLI would print as a traceback): its type and the
  traceback's last frame.

The label of a file (:func:`label`) is independent of fmest's answer: ``fragment``,
``not-training``, ``inference`` or ``training`` by the rule in its docstring (tool schema keys
of DeepSpeed and accelerate files, and words of the path). A training-labelled file answered
as not-training/inference, an inference-labelled file not answered as inference, or a
not-training-labelled file answered as training counts as a ``mismatch``.

Silent drops: for an answered file every leaf key (:func:`leaf_keys`: nested keys joined with
".", list items ``[i]``; for shell scripts every ``--flag`` of the launch lines) must be named
by the answer's config origins, ignored list or not_modelled list (or unresolved); a key
named nowhere is a silent drop. A dropped key in :data:`DECISIVE` is a decisive drop. An
answered training-mode file with no ``hardware.gpus_per_node`` origin and no warning naming
the assumed GPU count is a silently guessed layout.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import statistics
import sys
import time
import traceback
from typing import Any, Iterable, Optional

# offline, as on a machine without the Hub: a model is "available" when fmest ships it
os.environ.setdefault("FMEST_OFFLINE", "1")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CORPUS = os.path.join(ROOT, "tests", "data", "configs", "corpus")
#: --model for a file whose model is missing or unknown and whose short name matches no preset
#: (a shipped preset: core/fmest/models, listed by ``fmest models``)
DEFAULT_MODEL = "meta-llama/Llama-3.1-8B"
#: the stand-in for a file that names an unavailable mixture-of-experts model (its expert
#: parallelism needs experts): the dense stand-in is refused with "needs a mixture-of-experts
#: model", then this one is tried
MOE_MODEL = "Qwen/Qwen3-30B-A3B"

CATEGORIES = ("answered", "answered-with-model", "inference", "not-training", "refused",
              "stand-in", "crash")
EXTRA_SHOWS = ("silent-drop", "decisive-drop", "layout-guessed", "mismatch", "bad-refusal")
LABELS = ("training", "inference", "not-training", "fragment")

# -- decisive keys (issue 23): a drop of one of these changes the answer -------------------
DECISIVE = frozenset("""
model_name_or_path base_model model checkpoint_dir pretrained_model_name_or_path
max_seq_length max_length max_seq_len cutoff_len sequence_len seq_length encoder_seq_length
seq_len lora_r lora_rank r adapter peft use_peft finetuning_type tuner_type train_type
attn_implementation flash_attn flash_attention use_liger use_liger_kernel enable_liger_kernel
num_processes num_machines nproc_per_node nnodes devices num_nodes
tensor_model_parallel_size pipeline_model_parallel_size tensor_parallel_size
pipeline_parallel_size tensor_parallel_degree pipeline_parallel_degree
optim optimizer megatron_amp_o2 bf16 fp16 precision
gradient_checkpointing activation_checkpointing
overlap_comm reduce_bucket_size allgather_bucket_size stage
""".split())
DECISIVE_PREFIXES = ("liger_", "recompute")

# -- the label rule (independent of fmest's answer) ---------------------------------------
#: path words of recipes that are not training (evaluation, quantization, merge, export,
#: checkpoint conversion, pruning, data preparation, installation)
NOT_TRAIN_WORDS = frozenset("""
eval evaluation evaluate evaluator mmlu validate validation quantize quantization quant ptq
quantized merge export convert conversion ckpt checkpoints prune pruning preprocess
data_processing prep prepare pack_data download downloader install docker env_setup
import annotations feature extract setup
""".split())
NOT_TRAIN_STEMS = ("quantiz", "evaluat", "convert", "conversion", "export", "merge",
                   "preprocess", "download", "install")
#: of those, the quantization words: a training word in the same path part wins over them
#: (quantization-aware training, QLoRA on GPTQ/AWQ weights)
QUANT_WORDS = frozenset("quantize quantization quant ptq quantized".split())
#: path words of generation / serving recipes (answered with --mode inference); they win over
#: training words in the same part (``llama3_lora_predict``: LLaMA-Factory ``do_predict``)
INFER_WORDS = frozenset("""
infer inference generation generate gen serve server serving deploy predict
""".split())
#: stems of generation words; a training word in the same part wins (``train_generative_...``)
INFER_STEMS = ("generat", "infer", "deploy")
#: engine words: inference only when no part of the path has a training word (ms-swift GRPO
#: scripts name their vLLM rollout engine)
ENGINE_WORDS = frozenset("vllm sglang lmdeploy sampler".split())
#: whole folder names of chat UIs and apps
INFER_PARTS = frozenset(("chat", "app"))
#: path words of training recipes
TRAIN_WORDS = frozenset("""
train training finetune finetuning fine_tune sft pretrain pretraining dpo orpo kto ppo grpo rlhf
rm lora qlora full peft distill distillation reward qat
""".split())
#: files that cannot be a run on their own: launcher/engine configs, model-only or dataset
#: snippets (path parts, lower case)
FRAGMENT_DIRS = ("deepspeed_configs", "dsconfigs", "accelerate_configs", "tp_overlap",
                 "environment_configs", "model_configs")
FRAGMENT_NAMES = re.compile(
    r"(^|/)(ds_config[^/]*|zero[0-3][^/]*|fsdp[0-9]?\.json|[^/]*_dataset\.ya?ml|[^/]*blend"
    r"\.ya?ml|config\.sh|arguments\.sh|common\.sh|megatron_model_base_config\.yaml|"
    r"megatron_hiddens_base_config\.yaml)$")
#: megatron-lm modelopt conf/: one model's arguments, sourced by the launch scripts
FRAGMENT_PARTS = re.compile(r"post_training/modelopt/conf/")
#: DeepSpeed's own top-level keys (deepspeed/runtime/config.py) and the keys that name a model
DS_SCHEMA = {"zero_optimization", "train_micro_batch_size_per_gpu", "train_batch_size"}
MODEL_KEYS = {"model", "model_name_or_path", "base_model", "pretrained_model_name_or_path"}
ACCEL_SCHEMA = {"compute_environment", "distributed_type"}


def _words(part: str) -> list[str]:
    return [w for w in re.split(r"[^a-z0-9]+", part.lower()) if w]


def _kind_of(part: str, path_trains: bool) -> Optional[str]:
    words = _words(part)
    joined = "_".join(words)
    trains = any(w in TRAIN_WORDS for w in words)
    not_train = [w for w in words if w in NOT_TRAIN_WORDS] + \
        [s for s in NOT_TRAIN_STEMS if s in joined]
    if not_train and not (trains and all(w in QUANT_WORDS or w.startswith("quantiz")
                                         for w in not_train)):
        return "not-training"
    if any(w in INFER_WORDS for w in words) or part in INFER_PARTS or (
            not trains and any(s in joined for s in INFER_STEMS)) or (
            not path_trains and any(w in ENGINE_WORDS for w in words)):
        return "inference"
    if trains:
        return "training"
    return None


def label(path: str, doc: Any = None) -> tuple[str, str]:
    """``(label, why)`` of a corpus file from its repository path (and, for two schemas, its
    top-level keys), never from fmest's answer:

    1. ``fragment``: a DeepSpeed JSON (a top-level key of :data:`DS_SCHEMA` and none of
       :data:`MODEL_KEYS`), an accelerate config (``compute_environment`` /
       ``distributed_type``), or a path in :data:`FRAGMENT_DIRS` / :data:`FRAGMENT_NAMES` /
       :data:`FRAGMENT_PARTS` (DeepSpeed/accelerate/FSDP snippets, dataset blends, sourced
       model-argument scripts).
    2. the words of the file name (split at non-alphanumerics): a word of
       :data:`NOT_TRAIN_WORDS` (or a stem of :data:`NOT_TRAIN_STEMS`) -> ``not-training``
       (unless they are all :data:`QUANT_WORDS` and a :data:`TRAIN_WORDS` word is there too);
       else a word of :data:`INFER_WORDS`, a folder of :data:`INFER_PARTS`, a stem of
       :data:`INFER_STEMS` without a training word beside it, or a word of
       :data:`ENGINE_WORDS` in a path with no training word -> ``inference``; else a word of
       :data:`TRAIN_WORDS` -> ``training``.
       The file name is read first, then the folders deepest first; a not-training or
       inference word anywhere beats a training word (``merge_lora/qwen3_lora_sft.yaml`` is
       a merge recipe).
    3. else ``training`` (by a training word, or by default: the corpus is the example
       folders of training tools).
    """
    low = path.lower().replace("\\", "/")
    if isinstance(doc, dict) and doc:
        keys = set(doc)
        if low.endswith(".json") and keys & DS_SCHEMA and not keys & MODEL_KEYS:
            return "fragment", "DeepSpeed config (top-level keys are DeepSpeed's)"
        if keys & ACCEL_SCHEMA:
            return "fragment", "accelerate config (compute_environment/distributed_type)"
    parts = low.split("/")
    if any(p in FRAGMENT_DIRS for p in parts[:-1]) or FRAGMENT_NAMES.search(low) or \
            FRAGMENT_PARTS.search(low):
        return "fragment", "path of a launcher/engine/model/dataset snippet"
    stem = os.path.splitext(parts[-1])[0]
    path_trains = any(w in TRAIN_WORDS for p in [*parts[:-1], stem] for w in _words(p))
    named = [(stem, f"file name {parts[-1]!r}")] + \
        [(part, f"folder {part!r}") for part in reversed(parts[:-1])]
    for part, where in named:   # not-training / inference words first, file name first
        kind = _kind_of(part, path_trains)
        if kind in ("not-training", "inference"):
            return kind, where
    for part, where in named:
        if _kind_of(part, path_trains) == "training":
            return "training", where
    return "training", "no path word; the corpus is training-tool examples"


# -- reading a file independently of fmest --------------------------------------------------
_NOT_LAUNCH = re.compile(r"^\s*(pip3?|mkdir|wget|curl|git|echo|cd|rm|cp|mv|ls|cat|apt(-get)?|"
                         r"conda|sed|tar|unzip|chmod|source|\.|export|printf|sleep|kill|ray "
                         r"stop|nvidia-smi|docker)\b")


def shell_flags(text: str) -> list[str]:
    """``--flag`` names of the commands a shell script launches: line continuations joined,
    comments dropped, lines of housekeeping commands (:data:`_NOT_LAUNCH`: pip, mkdir, wget,
    git, echo, cd, export, ...) skipped; every other ``--name`` token counts (arrays and
    variables holding arguments included)."""
    joined = re.sub(r"\\\r?\n", " ", text)
    out: list[str] = []
    for line in joined.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line)
        if not line.strip() or _NOT_LAUNCH.match(line) or line.lstrip().startswith("#!"):
            continue
        for m in re.finditer(r"(?<![\w$-])--([A-Za-z][\w.-]*)", line):
            if m.group(1) not in out:
                out.append(m.group(1))
    return out


def read_doc(path: str) -> tuple[Any, str]:
    """``(document, kind)``: the parsed mapping of a JSON/YAML/TOML file (kind ``"tree"``), the
    ``--flag`` names of a shell script (kind ``"flags"``), or ``(None, reason)``."""
    ext = os.path.splitext(path)[1].lower()
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"unreadable: {exc}"
    try:
        if ext == ".json":
            return json.loads(text), "tree"
        if ext == ".toml":
            import tomllib

            return tomllib.loads(text), "tree"
        if ext in (".yaml", ".yml"):
            import yaml

            docs = [d for d in yaml.safe_load_all(text) if d is not None]
            return (docs[0] if docs else {}), "tree"
    except Exception as exc:  # noqa: BLE001 - a file its tool cannot parse either
        return None, f"unparsable: {type(exc).__name__}"
    return shell_flags(text), "flags"


def leaf_items(doc: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """``(key path, value)`` of every leaf of a parsed file: nested keys joined with ".", list
    items ``[i]``; an empty mapping or list is a leaf itself."""
    out: list[tuple[str, Any]] = []
    if isinstance(doc, dict) and doc:
        for k, v in doc.items():
            out += leaf_items(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(doc, list) and doc and prefix:
        for i, v in enumerate(doc):
            out += leaf_items(v, f"{prefix}[{i}]")
    elif prefix:
        out.append((prefix, doc))
    return out


def leaf_keys(doc: Any) -> list[str]:
    """The key paths of :func:`leaf_items`."""
    return [k for k, _v in leaf_items(doc)]


def _norm(key: str) -> str:
    return key.strip().lstrip("-").replace("-", "_").lower()


def reported_keys(name: str, config: dict) -> set[str]:
    """The keys of file ``name`` the answer names: config origins (``"FILE: a.b+c (...)"``),
    ignored and not_modelled entries (``"FILE: key: reason"``) and unresolved entries,
    normalised (no leading dashes, ``-`` as ``_``, lower case)."""
    prefix = f"{name}: "
    out: set[str] = set()

    def add(keypart: str) -> None:
        pieces = [p.strip() for p in re.split(r"\+| x |, ", keypart)]
        # "model.name+flavor": a later piece without a dot may be a sibling of the first
        section = pieces[0].rsplit(".", 1)[0] if pieces and "." in pieces[0] else ""
        for piece in pieces:
            if piece and not piece.startswith("("):
                out.add(_norm(piece))
                if section and "." not in piece and not piece.startswith("-"):
                    out.add(_norm(f"{section}.{piece}"))
                for token in piece.split():   # "torchrun --nproc_per_node" style
                    out.add(_norm(token))

    def entries() -> Iterable[str]:
        yield from (str(v) for v in (config.get("origins") or {}).values())
        yield from (str(v) for v in config.get("ignored") or [])
        yield from (str(v) for v in config.get("not_modelled") or [])
        unresolved = config.get("unresolved") or {}
        yield from (str(v) for v in (unresolved.values() if isinstance(unresolved, dict)
                                     else unresolved))

    for entry in entries():
        start = entry.find(prefix)
        while start != -1:   # an origin may name several keys of the file
            rest = entry[start + len(prefix):]
            add(re.split(r": | \(", rest, maxsplit=1)[0])
            start = entry.find(prefix, start + len(prefix))
    return out


def covered(key: str, reported: set[str]) -> bool:
    """A leaf key is covered when the answer names it or a key above it (``datasets`` covers
    ``datasets[0].path``)."""
    k = _norm(key)
    if k in reported:
        return True
    for i, ch in enumerate(k):
        if ch in ".[" and k[:i] in reported:
            return True
    return False


def silent_drops(items: list[tuple[str, Any]], kind: str, reported: set[str],
                 model_value: Any = None, model_key: Optional[str] = None) -> list[str]:
    """The leaf keys (``(key, value)`` of :func:`leaf_items`, or ``(flag, None)`` of a shell
    script) the answer names nowhere. ``model_value``: the model name a first refusal named
    (the run was repeated with ``--model``): the key holding it was read."""
    out = []
    for key, value in items:
        if model_key is not None and _norm(key) == _norm(model_key):
            continue   # the key a model refusal named: read, the run repeated with a stand-in
        if kind == "flags":
            if _norm(key) not in reported:
                out.append(key)
        elif not covered(key, reported) and not (
                model_value is not None and value is not None and str(value) == str(model_value)):
            out.append(key)
    return out


def is_decisive(key: str) -> bool:
    """The key's own name (its last component; a torchtune ``x._component_`` is ``x``) is in
    :data:`DECISIVE` or starts with one of :data:`DECISIVE_PREFIXES`."""
    parts = [p for p in re.split(r"[.]", re.sub(r"\[\d+\]", "", _norm(key))) if p]
    if not parts:
        return False
    name = parts[-2] if parts[-1] == "_component_" and len(parts) > 1 else parts[-1]
    return name in DECISIVE or name.startswith(DECISIVE_PREFIXES)


_GPU_WARNING = re.compile(r"(gpus?[_ -]per[_ -]node|gpu count|number of gpus|\d+ gpus?\b)",
                          re.I)


def layout_guessed(out: dict) -> bool:
    """A training answer whose GPU count came from no file key and no warning says which GPU
    count was assumed."""
    origins = (out.get("config") or {}).get("origins") or {}
    if "hardware.gpus_per_node" in origins or "parallelism.dp" in origins:
        return False   # from a file key, or derived from one (DeepSpeed train_batch_size)
    for w in out.get("warnings") or []:
        text = str(w)
        if text.startswith("config key ignored: "):
            continue
        if _GPU_WARNING.search(text) and re.search(r"assum|default|guess", text, re.I):
            return False
    return True


# -- running fmest in this process ---------------------------------------------------------
class Runner:
    """``fmest estimate --config FILE --format json`` in this process, one engine for all."""

    def __init__(self) -> None:
        from fmest import api
        from fmest.cli import build_parser
        from fmest.engine import Engine
        from fmest.plugins import new_plugin_manager

        self.api = api
        self.parser = build_parser(only="estimate")
        self.engine = Engine(new_plugin_manager())
        rows = api.models_rows(self.engine.registries)
        self.presets: dict[str, str] = {}
        for row in rows:
            for n in [row["name"], *(row.get("aliases") or [])]:
                self.presets.setdefault(str(n).rsplit("/", 1)[-1].lower(), row["name"])

    def estimate(self, path: str, model: Optional[str] = None) -> dict:
        argv = ["estimate", "--config", path, "--format", "json"]
        if model:
            argv += ["--model", model]
        args = self.parser.parse_args(argv)
        return self.api.estimate_output(args, self.engine)

    def model_for(self, named: Any) -> str:
        """The preset whose short name (or alias) is the file's model's short name; else
        :data:`DEFAULT_MODEL`."""
        if isinstance(named, str) and named.strip():
            short = named.strip().rstrip("/").rsplit("/", 1)[-1].lower()
            if short in self.presets:
                return self.presets[short]
        return DEFAULT_MODEL


def _model_failure(exc: BaseException) -> bool:
    """The error is only about the model: missing (``--model: required``) or a name no preset
    and no reachable Hub resolves (field ``model``/``--model`` or ``FILE: <model key>``)."""
    from fmest.errors import InputError, UnknownNameError

    if not isinstance(exc, InputError):
        return False
    field = str(exc.field)
    if field.endswith("(-> model)"):   # a file key the model came from (fmest.api names it)
        field = "model"
    key = field.rsplit(": ", 1)[-1] if ": " in field else field
    if _norm(key) not in ("model", "base_model", "model_name_or_path", "model_name",
                          "pretrained_model_name_or_path", "checkpoint_dir", "load", "hf_model"):
        return False
    text = str(exc)
    return isinstance(exc, UnknownNameError) or "required" in text or "not a preset" in text \
        or "Hugging Face" in text


def _not_training(exc: BaseException) -> bool:
    from fmest import errors

    cls = getattr(errors, "NotTrainingError", None)
    return cls is not None and isinstance(exc, cls)


def classify(runner: Runner, path: str, name: Optional[str] = None) -> dict:
    """One file's record: ``category``, ``reason`` (one line), and for answers the drop and
    layout checks. ``name`` is the display path (the corpus-relative one in reports)."""
    from fmest.errors import FmestError, InputError

    rec: dict[str, Any] = {"file": name or path, "model": None}
    t0 = time.perf_counter()
    out = None
    try:
        try:
            out = runner.estimate(path)
        except InputError as exc:
            if not _model_failure(exc):
                raise
            rec["model"] = runner.model_for(exc.value)
            rec["model_value"] = exc.value
            # the file key the refusal named (``FILE: --model (-> model)``): it was read
            named = str(exc.field).split(": ", 1)[-1].split(" (-> ", 1)[0]
            rec["model_key"] = named if ": " in str(exc.field) else None
            rec["model_error"] = str(exc).splitlines()[0][:200]
            try:
                out = runner.estimate(path, rec["model"])
            except InputError as again:
                if "mixture-of-experts model" not in str(again) or rec["model"] == MOE_MODEL:
                    raise
                rec["model"] = MOE_MODEL
                out = runner.estimate(path, rec["model"])
    except FmestError as exc:
        text = str(exc)
        field = getattr(exc, "field", None)
        if _not_training(exc):
            rec["category"] = "not-training"
        elif rec["model"] and rec["model"] != rec.get("model_value") and rec["model"] in text:
            # the file names a model fmest does not ship, and the stand-in cannot hold the
            # file's own settings (its module names, its experts): not a reading failure
            rec["category"] = "stand-in"
        else:
            rec["category"] = "refused"
        rec["one_line"] = "\n" not in text.strip()
        # the file and a key: this file's, or a file it includes (a DeepSpeed JSON a script
        # names), ``"FILE: key"``
        head, sep, tail = field.partition(": ") if isinstance(field, str) else ("", "", "")
        rec["names_key"] = bool(sep and tail.strip()) and (
            head == path or os.path.isfile(head) or os.path.isfile(os.path.join(ROOT, head)))
        rec["field"] = field
        rec["reason"] = text.replace(path, "FILE").splitlines()[0][:300] if text else ""
    except SystemExit as exc:   # argparse refused the arguments
        rec.update(category="refused", one_line=True, names_key=False, field=None,
                   reason=f"argparse exit {exc.code}")
    except Exception as exc:  # noqa: BLE001 - a crash is what this benchmark counts
        last = traceback.extract_tb(exc.__traceback__)[-1]
        rec["category"] = "crash"
        rec["reason"] = (f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
                         f" at {os.path.relpath(last.filename, ROOT)}:{last.lineno} ({last.name})")
    rec["seconds"] = time.perf_counter() - t0
    doc, kind = read_doc(path)
    rec["label"], rec["label_why"] = label(name or path, doc if kind == "tree" else None)
    if out is not None:
        mode = (out.get("job") or {}).get("mode", "training")
        if mode == "inference":
            rec["category"] = "inference"
        else:
            rec["category"] = "answered-with-model" if rec["model"] else "answered"
        rec["reason"] = f"with --model {rec['model']}" if rec["model"] else "answered"
        config = out.get("config") or {}
        reported = reported_keys(path, config)
        items = leaf_items(doc) if kind == "tree" else \
            ([(k, None) for k in doc] if kind == "flags" else [])
        rec["keys"] = len(items)
        dropped = silent_drops(items, kind, reported, rec.get("model_value"),
                               rec.get("model_key"))
        rec["dropped"] = dropped
        rec["decisive_dropped"] = [k for k in dropped if is_decisive(k)]
        rec["layout_guessed"] = mode != "inference" and layout_guessed(out)
    rec["mismatch"] = _mismatch(rec["label"], rec["category"])
    return rec


def _mismatch(lab: str, category: str) -> bool:
    answered = category in ("answered", "answered-with-model")
    if lab == "training":
        return category in ("inference", "not-training")
    if lab == "inference":
        return category != "inference"
    if lab == "not-training":
        return answered or category == "inference"
    return False


# -- the corpus and the table --------------------------------------------------------------
def manifest(corpus: str) -> list[tuple[str, str, str]]:
    """``(project, repository path, file on disk)`` of every MANIFEST.tsv row."""
    with open(os.path.join(corpus, "MANIFEST.tsv"), encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    return [(r["project"], r["path"], os.path.join(corpus, r["project"], r["path"]))
            for r in rows]


COLUMNS = (("files", "files"), ("train", "label=training"), ("answered", "answered as-is"),
           ("+model", "answered with --model"), ("infer", "inference"),
           ("not-train", "not training"), ("refused", "refused"),
           ("bad-ref", "refused: not one line or no file key"), ("crash", "crashes"),
           ("drops", "files with silent drops"), ("decisive", "files with decisive drops"),
           ("layout", "layout guessed silently"), ("mismatch", "label vs answer mismatch"),
           ("stand-in", "model not shipped and the stand-in refused (out of the target)"),
           ("target", "training answered (with model)"))


def _counts(recs: list[dict]) -> dict[str, int]:
    c = {k: 0 for k, _ in COLUMNS}
    c["available"] = 0   # label=training files whose model (or a stand-in) is available
    for r in recs:
        c["files"] += 1
        cat = r["category"]
        c["train"] += r["label"] == "training"
        c["answered"] += cat == "answered"
        c["+model"] += cat == "answered-with-model"
        c["infer"] += cat == "inference"
        c["not-train"] += cat == "not-training"
        c["refused"] += cat == "refused"
        c["bad-ref"] += cat in ("refused", "not-training") and not (
            r.get("one_line") and r.get("names_key"))
        c["crash"] += cat == "crash"
        c["drops"] += bool(r.get("dropped"))
        c["decisive"] += bool(r.get("decisive_dropped"))
        c["layout"] += bool(r.get("layout_guessed"))
        c["mismatch"] += bool(r["mismatch"])
        c["target"] += r["label"] == "training" and cat in ("answered", "answered-with-model")
        c["stand-in"] += cat == "stand-in"
        c["available"] += r["label"] == "training" and cat != "stand-in"
    return c


def summary(recs: list[dict]) -> dict:
    projects = sorted({r["file"].split("/", 1)[0] for r in recs})
    per = {p: _counts([r for r in recs if r["file"].split("/", 1)[0] == p]) for p in projects}
    total = _counts(recs)
    times = [r["seconds"] for r in recs]
    return {"projects": per, "total": total,
            "target": {"answered": total["target"], "training": total["available"],
                       "training_labelled": total["train"],
                       "percent": round(100.0 * total["target"] / total["available"], 1)
                       if total["available"] else 0.0, "goal_percent": 90},
            "median_seconds": round(statistics.median(times), 4) if times else 0.0}


def table(summ: dict, wall: float) -> str:
    head = ["project"] + [k for k, _ in COLUMNS]
    rows = [[p] + [str(c[k]) for k, _ in COLUMNS] for p, c in summ["projects"].items()]
    rows.append(["total"] + [str(summ["total"][k]) for k, _ in COLUMNS])
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    fmt = lambda r: "  ".join(  # noqa: E731
        (v.ljust(w) if i == 0 else v.rjust(w)) for i, (v, w) in enumerate(zip(r, widths, strict=True)))
    lines = [fmt(head), "  ".join("-" * w for w in widths)]
    lines += [fmt(r) for r in rows[:-1]] + ["  ".join("-" * w for w in widths), fmt(rows[-1])]
    t = summ["target"]
    lines += ["", "columns: " + "; ".join(f"{k} = {v}" for k, v in COLUMNS),
              f"training configs answered when the model is available: {t['answered']} of "
              f"{t['training']} ({t['percent']:.1f} %), target >= 90 % (of "
              f"{t['training_labelled']} training-labelled files, "
              f"{t['training_labelled'] - t['training']} name a model fmest does not ship whose "
              "stand-in cannot hold the file's settings: column stand-in)",
              f"wall time {wall:.1f} s, median {summ['median_seconds'] * 1000:.0f} ms per file"]
    return "\n".join(lines)


def select(recs: list[dict], what: str) -> list[tuple[str, str]]:
    """``(file, one-line reason)`` of the files of category or check ``what``."""
    out = []
    for r in recs:
        if what in CATEGORIES and r["category"] == what:
            out.append((r["file"], r.get("reason", "")))
        elif what == "silent-drop" and r.get("dropped"):
            out.append((r["file"], "not named: " + ", ".join(r["dropped"][:12]) +
                        (f", ... ({len(r['dropped'])} keys)" if len(r["dropped"]) > 12 else "")))
        elif what == "decisive-drop" and r.get("decisive_dropped"):
            out.append((r["file"], "not named: " + ", ".join(r["decisive_dropped"])))
        elif what == "layout-guessed" and r.get("layout_guessed"):
            out.append((r["file"], "no hardware.gpus_per_node origin and no warning of the "
                        "assumed GPU count"))
        elif what == "mismatch" and r["mismatch"]:
            out.append((r["file"], f"label {r['label']} ({r['label_why']}) but {r['category']}:"
                        f" {r.get('reason', '')}"))
        elif what == "bad-refusal" and r["category"] in ("refused", "not-training") and not (
                r.get("one_line") and r.get("names_key")):
            out.append((r["file"], f"field {r.get('field')!r}: {r.get('reason', '')}"))
    return out


def run(corpus: str = CORPUS, project: Optional[str] = None, progress: bool = True,
        runner: Optional[Runner] = None) -> tuple[list[dict], float]:
    """Every manifest file (of ``project``) classified; ``(records, wall seconds)``."""
    rows = [r for r in manifest(corpus) if project is None or r[0] == project]
    if not rows:
        raise SystemExit(f"no corpus files for project {project!r}")
    t0 = time.perf_counter()
    runner = runner or Runner()
    recs = []
    cwd = os.getcwd()
    os.chdir(corpus)   # display names relative to the corpus: "PROJECT/path"
    try:
        for i, (proj, rel, _disk) in enumerate(rows, 1):
            name = f"{proj}/{rel}"
            recs.append(classify(runner, name, name))
            if progress and (i % 25 == 0 or i == len(rows)):
                print(f"\r{i}/{len(rows)} files ({time.perf_counter() - t0:.0f} s)",
                      end="", file=sys.stderr, flush=True)
    finally:
        os.chdir(cwd)
    if progress:
        print(file=sys.stderr)
    return recs, time.perf_counter() - t0


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("--project", help="only this project's files (a corpus folder name)")
    p.add_argument("--show", choices=CATEGORIES + EXTRA_SHOWS,
                   help="list the files of one category or check with their one-line reason")
    p.add_argument("--corpus", default=CORPUS, help="the corpus folder (holds MANIFEST.tsv)")
    args = p.parse_args(argv)
    import logging
    import warnings

    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    recs, wall = run(os.path.abspath(args.corpus), args.project)
    summ = summary(recs)
    if args.format == "json":
        shown = select(recs, args.show) if args.show else None
        print(json.dumps({**summ, "wall_seconds": round(wall, 1),
                          "show": shown and [{"file": f, "reason": r} for f, r in shown],
                          "files": recs if args.show is None else None}, indent=2,
                         default=str))
        return 0
    if args.show:
        for f, reason in select(recs, args.show):
            print(f"{f}  {reason}")
        return 0
    print(table(summ, wall))
    return 0


if __name__ == "__main__":
    sys.exit(main())
