"""Fuzzing every door (issue 16): flags, ``-f`` job JSON, the Python API, fm-training-estimator
EstimateInputs, every training-tool config format, model configs and hostile files.

Every input is either answered (exit 0; with ``--format json`` every number finite and, but for
the documented signed fields, non-negative) or refused on one line that names the field (exit 2;
:class:`fmest.errors.InputError` in Python). Anything else -- a traceback, another exit code, a
refusal naming no field -- fails the test. Hypothesis runs derandomized (the same inputs on
every run, so CI is reproducible) with example counts that keep the file near ten seconds.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import re
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fmest
import fmest_cost_cloud.plugin as cost_cloud_plugin
import fmest_learned_lgbm.plugin as learned_lgbm_plugin
import fmest_memory_theory.plugin as memory_theory_plugin
import fmest_time_roofline.plugin as time_roofline_plugin
from fmest.cli import build_parser, main
from fmest.convert import SECTIONS
from fmest.errors import FmestError, InputError
from fmest.testing import new_engine

ROOT = Path(__file__).resolve().parent
CONFIGS = ROOT / "data" / "configs"

FUZZ = settings(max_examples=150, derandomize=True, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))

# the estimators (no torch_runner: a trace per input would take seconds)
ENGINE = new_engine((memory_theory_plugin, "memory_theory"), (time_roofline_plugin, "time_roofline"), (cost_cloud_plugin, "cost_cloud"), (learned_lgbm_plugin, "learned_lgbm"))

#: JSON fields that may be negative by meaning: ``headroom_bytes`` is capacity minus the
#: estimate (negative = does not fit by that much).
SIGNED_FIELDS = frozenset({"headroom_bytes", "headroom_p90_bytes"})  # usable less peak (P90)

# -- what a named field looks like -----------------------------------------------------------
_PARSER = build_parser()
_FLAGS = sorted({o for sub in _PARSER._subparsers._group_actions[0].choices.values()
                 for a in sub._actions for o in a.option_strings})
_JOB_NAMES = {a.name for cls in SECTIONS.values() for a in cls.__attrs_attrs__}
_DESTS = {a.dest for a in _PARSER._subparsers._group_actions[0].choices["estimate"]._actions}
_TOKENS = ({*SECTIONS, "model", "model_config", "job_configs", "job", "input", "hardware",
            "estimator_metadata", "estimator", "config", "quantities"} | _JOB_NAMES | _DESTS
           | {f for f in _FLAGS if f.startswith("--")})


def names_a_field(line: str, extra: tuple[str, ...] = ()) -> bool:
    """``line`` (an error message) starts with a field: a job path, a flag, a config key or
    a file the test wrote."""
    text = line.removeprefix("fmest: error: ")
    if text.startswith("argument "):  # argparse: "argument --seq-len: ..."
        return "-" in text.split(":", 1)[0]
    if text.startswith("unrecognized arguments: "):  # argparse names the flag after the colon
        return text.split(": ", 1)[1].startswith("-")
    head = text.split(": ", 1)[0]
    if not head or head == text:
        return False
    # whole identifiers (``tp`` must not match inside ``learned_lgbm``), or a file the test wrote
    words = set(re.findall(r"--[a-z0-9-]+|[A-Za-z_][A-Za-z0-9_]*", head))
    return bool(words & (_TOKENS | set(extra))) or any(
        "/" in e and e in head for e in extra)


def check_error(exc: InputError, extra: tuple[str, ...] = ()) -> None:
    assert exc.field, f"refusal names no field: {exc}"
    assert names_a_field(str(exc), extra), f"refusal does not name a field: {exc}"
    assert "\n" not in str(exc).strip(), f"refusal is not one line: {exc!r}"


def walk_numbers(obj, path="$"):
    """Every number in a JSON document with its path."""
    if isinstance(obj, bool):
        return
    if isinstance(obj, (int, float)):
        yield path, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from walk_numbers(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from walk_numbers(v, f"{path}[{i}]")


def check_answer_json(doc) -> None:
    for path, value in walk_numbers(doc):
        assert math.isfinite(value), f"{path} = {value}"
        leaf = path.rsplit(".", 1)[-1].split("[")[0]
        # the job echoes inputs; answers must not be negative
        if not path.startswith(("$.job.", "$.jobs[")) and leaf not in SIGNED_FIELDS:
            assert value >= 0, f"{path} = {value}"


def run_cli(argv: list[str], extra: tuple[str, ...] = ()) -> tuple[int, str, str]:
    """Run the CLI in-process; a traceback fails the test (pytest shows it)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv, engine=ENGINE)
        except SystemExit as exc:  # argparse
            rc = exc.code
    stderr = err.getvalue().strip()
    assert rc in (0, 2), f"exit {rc} for {argv}: {stderr}"
    if rc == 2:
        lines = stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("fmest: error: "), stderr
        assert names_a_field(lines[0], extra), f"refusal names no field: {lines[0]} ({argv})"
    elif "--format" in argv and argv[argv.index("--format") + 1] == "json" \
            and argv[0] == "estimate":
        try:
            check_answer_json(json.loads(out.getvalue()))
        except AssertionError as exc:
            raise AssertionError(f"{exc} for {argv}") from None
    return rc, out.getvalue(), stderr


def keys_of(obj) -> tuple[str, ...]:
    """Every key a document holds: a refusal may name the user's own (unknown) key."""
    out: list[str] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += [str(k), *keys_of(v)]
    elif isinstance(obj, list):
        for v in obj:
            out += keys_of(v)
    return tuple(k for k in out if k)


def run_api(obj, extra: tuple[str, ...] = ()):
    """The Python API: an answer, or an InputError naming the field."""
    extra = (*extra, *keys_of(obj))
    try:
        report = fmest.estimate(obj, engine=ENGINE)
    except InputError as exc:
        check_error(exc, extra)
        return None
    from fmest.output.report import reports_to_dict

    check_answer_json(json.loads(json.dumps(reports_to_dict(report), default=str)))
    return report


# -- value pools: valid, edge and junk -------------------------------------------------------
INTS = ["1", "2", "4", "8", "3", "0", "-1", "1.5", "nan", "inf", "1e30", "abc", "", "16",
        "1e3", "2048"]
COUNTS = ["1e9", "300M", "20k", "0", "-5", "nan", "inf", "-inf", "1e30", "x", "1.5B"]
FLOATS = ["0.5", "1", "2", "0", "-1", "nan", "inf", "-inf", "1e30", "abc", "1e-30"]
BOOLS = [None, "true", "false", "maybe", "0"]
NAMES = {
    "model": ["llama-2-7b-hf", "gpt2", "mixtral-8x7b-v0.1", "qwen1.5-moe-a2.7b", "no-such-model",
              "x" * 5000, "", "../../etc/passwd", "a/b/c/d"],
    "gpu": ["H100", "A100-SXM-80GB", "V100", "T4", "A10G", "L4", "MI300X", "nope", "x" * 3000],
    "optimizer": ["adamw", "adamw_8bit", "sgd", "lion", "bogus"],
    "method": ["theory", "learned", "bogus", ""],
    "provider": ["aws", "cheapest", "nope"],
    "region": ["us-east-1", "mars"],
    "grad_checkpoint": ["none", "full", "selective", "true", "maybe"],
    "lora_target_modules": [["q_proj", "v_proj"], ["all-linear"], ["nope"], ["q_proj,k_proj"]],
}
#: flags whose values are files or which change what is run (fuzzed in their own tests)
SKIP = {"--input-file", "--config", "--config-format", "--dataset", "--plot", "--learned-model",
        "--format", "--output-dir", "--help", "--to"}


def _values(action):
    if action.choices:
        return [*map(str, action.choices), "bogus"]
    kind = getattr(action.type, "__name__", "")
    if action.nargs == "?":
        return BOOLS
    if action.dest in NAMES:
        return NAMES[action.dest]
    return {"parse_positive_int": INTS, "parse_count": COUNTS, "float": FLOATS,
            "int": INTS}.get(kind, ["x", "1", ""])


def actions_of(command: str) -> list:
    return [a for a in _PARSER._subparsers._group_actions[0].choices[command]._actions
            if a.option_strings and not SKIP & set(a.option_strings)]


@st.composite
def flag_lists(draw, command="estimate"):
    argv = [command, "--format", draw(st.sampled_from(["json", "table"]))] \
        if command == "estimate" else [command]
    actions = draw(st.lists(st.sampled_from(actions_of(command)), max_size=6, unique_by=id))
    has_model = False
    for action in actions:
        flag = action.option_strings[-1]
        value = draw(st.sampled_from(_values(action)))
        has_model |= action.dest == "model"
        if value is None:
            argv.append(flag)
        elif isinstance(value, list):
            argv += [flag, *value]
        else:
            argv.append(f"{flag}={value}")
    if not has_model and draw(st.booleans()):
        argv += ["--model", "llama-2-7b-hf"]
    return argv


@settings(FUZZ, max_examples=300)
@given(flag_lists())
def test_fuzz_flags(argv):
    run_cli(argv)


@settings(FUZZ, max_examples=60)
@given(flag_lists("export"), st.sampled_from(("deepspeed", "accelerate", "axolotl",
                                               "training-args")))
def test_fuzz_export_flags(argv, to):
    """``fmest export``'s flags (it builds the job through the same door)."""
    run_cli([*argv, "--to", to])


# -- job JSON through -f and the API ---------------------------------------------------------
junk = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-10**40, max_value=10**40)
    | st.floats() | st.text(max_size=6) | st.sampled_from(["nan", "inf", "1e30", "-1", "0",
                                                          "true", "maybe", "x" * 300]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=3),
    max_leaves=6)
FIELD_PATHS = [f"{s}.{a.name}" for s, cls in SECTIONS.items() for a in cls.__attrs_attrs__]
BASE_JOB = {"model": "llama-2-7b-hf", "training": {"seq_len": 1024},
            "hardware": {"gpu": "H100"}, "workload": {"dataset_tokens": 1e8}}


@st.composite
def job_dicts(draw):
    job = copy.deepcopy(BASE_JOB)
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        path = draw(st.sampled_from([*FIELD_PATHS, "model", "model_config", "bogus",
                                     "training.bogus", "training"]))
        value = draw(junk)
        if "." in path:
            section, name = path.split(".")
            if isinstance(job.get(section), dict):
                job[section][name] = value
            else:
                job[section] = {name: value}
        else:
            job[path] = value
    return job


@FUZZ
@given(job_dicts())
def test_fuzz_job_dicts_through_the_api(job):
    run_api(job)


@settings(FUZZ, max_examples=40)
@given(job_dicts())
def test_fuzz_job_files_through_dash_f(job):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "job.json"
        path.write_text(json.dumps(job))
        run_cli(["estimate", "-f", str(path), "--format", "json"], extra=(tmp, *keys_of(job)))


# -- EstimateInput ----------------------------------------------------------------------------
BASE_EI = json.loads((CONFIGS / "fm-training-estimator" / "estimate_input.json").read_text())


def _paths(doc, prefix=()):
    """Every key path of a nested document."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield (*prefix, k)
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield (*prefix, i)
            yield from _paths(v, (*prefix, i))


def _set(doc, path, value):
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value


@st.composite
def mutated(draw, base):
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = list(_paths(doc))
        if not paths:
            break
        _set(doc, draw(st.sampled_from(paths)), draw(junk))
    if draw(st.booleans()):
        doc[draw(st.sampled_from(["bogus_top", "estimator", "job_configs"]))] = draw(junk)
    return doc


@FUZZ
@given(mutated(BASE_EI))
def test_fuzz_estimate_input(doc):
    run_api(doc)


# -- every config format ------------------------------------------------------------------------
#: the hand-made examples per format (the real-file corpus has its own test,
#: tests/test_config_corpus.py)
CONFIG_FILES = sorted(p for p in CONFIGS.rglob("*") if p.suffix in (".json", ".yaml", ".yml")
                      and "corpus" not in p.relative_to(CONFIGS).parts)


def _load(path: Path):
    text = path.read_text()
    return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)


@st.composite
def config_cases(draw):
    path = draw(st.sampled_from(CONFIG_FILES))
    return path, draw(mutated(_load(path)))


@pytest.fixture(scope="module")
def config_tree():
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(CONFIGS, Path(tmp) / "configs", ignore=lambda d, names: (
            ["corpus"] if Path(d) == CONFIGS else []))
        yield Path(tmp) / "configs"


@settings(FUZZ, max_examples=200)
@given(case=config_cases())
def test_fuzz_config_files(config_tree, case):
    path, doc = case
    target = config_tree / path.relative_to(CONFIGS)
    original = target.read_text()
    try:
        target.write_text(json.dumps(doc) if path.suffix == ".json"
                          else yaml.safe_dump(doc, sort_keys=False))
        argv = ["estimate", "--config", str(target), "--format", "json"]
        if path.parent.name != "fm-training-estimator":
            argv += ["--model", "llama-2-7b-hf"]
        run_cli(argv, extra=(str(config_tree), target.name, *keys_of(doc)))
    finally:
        target.write_text(original)


# -- model configs ----------------------------------------------------------------------------
LLAMA_CONFIG = json.loads((ROOT.parent / "core" / "fmest" / "models" / "presets" /
                           "llama-2-7b-hf.json").read_text())["config"]
GPT2_CONFIG = json.loads((ROOT.parent / "core" / "fmest" / "models" / "presets" /
                          "gpt2.json").read_text())["config"]
DIMS = ["hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
        "intermediate_size", "vocab_size", "max_position_embeddings", "head_dim",
        "n_embd", "n_layer", "n_head", "n_positions", "model_type", "num_local_experts"]
dim_values = st.sampled_from([0, -1, -4096, 1, 3, 7, 10**12, 2**31, 1.5, "abc", None, [1],
                              {"a": 1}, True, float("nan"), "llama", "gpt2", "bogus"])


@st.composite
def model_configs(draw):
    cfg = copy.deepcopy(draw(st.sampled_from([LLAMA_CONFIG, GPT2_CONFIG])))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        cfg[draw(st.sampled_from(DIMS))] = draw(dim_values)
    return cfg


@FUZZ
@given(model_configs(), st.sampled_from([512, 4096]))
def test_fuzz_model_configs(cfg, seq_len):
    job = {"model": "fuzzed", "model_config": cfg, "training": {"seq_len": seq_len},
           "hardware": {"gpu": "H100"}}
    run_api(job)


@settings(FUZZ, max_examples=30)
@given(model_configs())
def test_fuzz_model_config_files(cfg):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.json"
        path.write_text(json.dumps(cfg))
        run_cli(["estimate", "--model", str(path), "--seq-len", "512", "--format", "json"],
                extra=(tmp,))


# -- hostile files and names ------------------------------------------------------------------
def test_hostile_inputs(tmp_path):
    bad_utf8 = tmp_path / "latin1.json"
    bad_utf8.write_bytes(b'{"model": "caf\xe9"}')
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    deep_obj = tmp_path / "deep_obj.json"
    deep_obj.write_text('{"model": "gpt2", "model_config": ' + '{"a": ' * 50_000 + "1"
                        + "}" * 50_001)
    deep_yaml = tmp_path / "deep.yaml"
    deep_yaml.write_text("a: " + "[" * 20_000 + "]" * 20_000 + "\n")
    bad_yaml = tmp_path / "latin1.yaml"
    bad_yaml.write_bytes(b"base_model: caf\xe9\nsequence_len: 1024\n")
    a_file = tmp_path / "file"
    a_file.write_text("x")
    extra = (str(tmp_path),)
    cases = [
        ["estimate", "-f", str(bad_utf8)],
        ["estimate", "-f", str(deep)],
        ["estimate", "-f", str(deep_obj)],
        ["estimate", "--model", "gpt2", "--config", str(deep_yaml)],
        ["estimate", "--model", "gpt2", "--config", str(bad_yaml)],
        ["estimate", "--model", "gpt2", "--config", str(bad_utf8)],
        ["estimate", "--model", "x" * 100_000],
        ["estimate", "--model", "gpt2", "--seq-len", "512", "--dataset", str(tmp_path)],
        ["export", "--model", "gpt2", "--seq-len", "512", "--to", "deepspeed",
         "--output-dir", str(a_file / "sub")],
        ["estimate", "--model", str(a_file)],
        ["estimate", "--model", str(tmp_path)],
    ]
    for argv in cases:
        rc, _out, _err = run_cli(argv, extra=extra)
        assert rc == 2, argv
    # a latin-1 dataset file is counted (undecodable bytes replaced), not a crash
    run_cli(["estimate", "--model", "gpt2", "--seq-len", "512", "--dataset", str(bad_utf8)],
            extra=extra)
    for obj in ({"model": ["gpt2"]}, {"model": "gpt2", "training": {"dtype": ["bf16"]}},
                {"model": "gpt2", "training": {"attention": {"a": 1}}},
                {"model": "gpt2", "hardware": {"gpu": ["H100"]}},
                {"model": "gpt2", "options": {"method": {"x": 1}}},
                {**BASE_EI, "job_configs": [{**BASE_EI["job_configs"][0],
                                             "infra": {"numPods": 0}}]},  # was silently 1
                {**BASE_EI, "estimator_metadata": [1]}, {**BASE_EI, "job_configs": "abc"},
                "[" * 100_000 + "]" * 100_000, b"\xff\xfe{", 12, None, [1, 2]):
        with pytest.raises(InputError) as info:
            fmest.estimate(obj, engine=ENGINE)
        check_error(info.value, extra)


def test_nan_and_inf_are_refused_at_every_numeric_field():
    """Finiteness is checked once, by the job's validators: every float and int field."""
    for path in FIELD_PATHS:
        section, name = path.split(".")
        for value in ("nan", "inf", float("nan"), float("-inf")):
            job = {**copy.deepcopy(BASE_JOB), section: {name: value}}
            try:
                fmest.to_job(job)
            except InputError as exc:
                check_error(exc)
                continue
            except FmestError:
                raise
            built = fmest.to_job(job)
            got = getattr(getattr(built, section), name)
            assert not (isinstance(got, float) and not math.isfinite(got)), (path, value, got)


# -- booleans are never truthiness; nulls and unknown keys are reported ------------------------
BOOLEAN_KEYS = [
    ("axolotl.yaml", "base_model: llama-2-7b-hf\nadapter: lora\nsequence_len: 512\n",
     "load_in_4bit", ("training", "technique"), "lora"),
    ("axolotl.yaml", "base_model: llama-2-7b-hf\nsequence_len: 512\n",
     "gradient_checkpointing", ("training", "activation_checkpointing"), "none"),
    ("training_args.json", None, "gradient_checkpointing",
     ("training", "activation_checkpointing"), "none"),
    ("torchtune_single_device.yaml", "model:\n  _component_: torchtune.models.llama2.llama2_7b\n"
     "batch_size: 1\n", "enable_activation_checkpointing",
     ("training", "activation_checkpointing"), "none"),
    ("llama_factory.yaml", "model_name_or_path: llama-2-7b-hf\nfinetuning_type: full\n"
     "cutoff_len: 512\n", "pure_bf16", ("training", "precision"), "auto"),
]


@pytest.mark.parametrize("name,base,key,field,false_value", BOOLEAN_KEYS)
def test_string_booleans_are_read_never_coerced(tmp_path, name, base, key, field, false_value):
    def run(value):
        path = tmp_path / name
        if base is None:
            path.write_text(json.dumps({"per_device_train_batch_size": 1, key: value}))
        else:
            path.write_text(base + f"{key}: {json.dumps(value)}\n")
        return run_cli(["estimate", "--model", "llama-2-7b-hf", "--seq-len", "512",
                        "--config", str(path), "--format", "json"], extra=(str(tmp_path),))
    rc, _out, err = run("maybe")
    assert rc == 2 and key in err, err
    for text in ("false", "no", "0"):
        rc, out, err = run(text)
        assert rc == 0, err
        assert json.loads(out)["job"][field[0]][field[1]] == false_value, (text, key)


def test_nulls_and_unknown_keys_are_reported(tmp_path):
    axolotl = tmp_path / "axolotl.yaml"
    axolotl.write_text("base_model: llama-2-7b-hf\nadapter: null\nsequence_len: 512\n")
    rc, out, _err = run_cli(["estimate", "--config", str(axolotl), "--format", "json"])
    doc = json.loads(out)
    assert doc["job"]["training"]["technique"] == "full"
    assert any("adapter: null: no adapter" in w for w in doc["warnings"]), doc["warnings"]
    report = fmest.estimate({**BASE_EI, "bogus_top": 1}, engine=ENGINE)
    assert any("bogus_top: not a key of an EstimateInput" in w for w in report.warnings)


# -- found by the bad-input fuzz (benchmarks/fuzz.py): contradictions inside a config file ------
@pytest.mark.parametrize("name,text,key", [
    ("ta.json", '{"per_device_train_batch_size": 1, "bf16": true, "fp16": true}', "fp16"),
    ("ds.json", '{"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true}, '
                '"fp16": {"enabled": true}}', "fp16"),
    ("axolotl.yaml", "base_model: llama-2-7b-hf\nsequence_len: 512\nbf16: true\nfp16: true\n",
     "fp16"),
    ("axolotl.yaml", "base_model: llama-2-7b-hf\nsequence_len: 512\nadapter: lora\n"
                     "load_in_4bit: true\nload_in_8bit: true\n", "load_in_8bit"),
])
def test_contradictory_config_keys_are_refused(tmp_path, name, text, key):
    """bf16 and fp16 both on (TrainingArguments and DeepSpeed raise), 4- and 8-bit bases both
    on (BitsAndBytesConfig raises): one of the two was silently dropped."""
    path = tmp_path / name
    path.write_text(text)
    rc, _out, err = run_cli(["estimate", "--model", "llama-2-7b-hf", "--seq-len", "512",
                             "--config", str(path), "--format", "json"], extra=(str(tmp_path),))
    assert rc == 2 and key in err, err
    # "auto" in DeepSpeed's HF-integration templates is not a contradiction
    auto = tmp_path / "auto.json"
    auto.write_text('{"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": "auto"}, '
                    '"fp16": {"enabled": "auto"}}')
    assert run_cli(["estimate", "--model", "llama-2-7b-hf", "--seq-len", "512", "--config",
                    str(auto), "--format", "json"], extra=(str(tmp_path),))[0] == 0


def test_estimate_input_gpu_memory_and_max_seq_length():
    """A GPU memory no such GPU has was answered as the default A100; max_seq_length beside
    block_size was dropped without a note."""
    doc = copy.deepcopy(BASE_EI)
    doc["job_configs"][0]["infra"]["gpuMemoryInGb"] = 13
    with pytest.raises(InputError) as info:
        fmest.estimate(doc, engine=ENGINE)
    assert "gpu_memory_in_gb" in info.value.field and info.value.accepted == [40, 80]
    doc = copy.deepcopy(BASE_EI)
    doc["job_configs"][0]["fm"]["max_seq_length"] = 4096
    report = fmest.estimate(doc, engine=ENGINE)
    assert any("max_seq_length" in w for w in report.warnings), report.warnings


def test_an_unread_dataset_file_is_reported():
    report = fmest.estimate({**BASE_JOB, "workload": {"dataset_tokens": 1e8,
                                                       "dataset_path": "/nonexistent.jsonl"}},
                            engine=ENGINE)
    assert any(w.startswith("input field ignored: workload.dataset_path: not read")
               for w in report.warnings), report.warnings
