"""The torchtitan and Megatron importers (issue 12): detection by content, each mapping on the
real example files in tests/data/configs/{torchtitan,megatron}/ (their README cites the commit
each comes from), raw dimensions against published parameter counts, nothing dropped silently,
errors naming file and key, and the CLI door (``--config``, ``--explain``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fmest.cli import main
from fmest.configs import detect_format, load_configs, parse_text
from fmest.convert import job_from_dict
from fmest.errors import InputError
from fmest.testing import new_engine

DATA = Path(__file__).parent / "data" / "configs"
TITAN = sorted((DATA / "torchtitan").glob("*.toml"))
MEGATRON = sorted(p for p in (DATA / "megatron").glob("*") if p.suffix in (".txt", ".yaml"))


def _load(path) -> dict:
    return load_configs([str(path)]).data


def _cli(argv, capsys, fmt="json", plugins=False):
    rc = main(["estimate", "--format", fmt, *argv], engine=new_engine(entrypoints=plugins))
    out = capsys.readouterr().out
    assert rc == 0, out
    return json.loads(out) if fmt == "json" else out


# -- detection -------------------------------------------------------------------------------
@pytest.mark.parametrize("path", TITAN + MEGATRON, ids=lambda p: p.name)
def test_detected_by_content_not_name(path, tmp_path):
    expect = path.parent.name
    assert detect_format(str(path), path.read_text()) == expect
    anon = tmp_path / ("x" + (path.suffix if path.suffix != ".toml" else ".cfg"))
    anon.write_text(path.read_text())
    assert detect_format(str(anon), anon.read_text()) == expect


def test_argument_spellings(tmp_path):
    f = tmp_path / "args"
    f.write_text("--tensor-model-parallel-size 2 \\\n  --bf16 # comment\n"
                 "--micro-batch-size=4 --pipeline-model-parallel-size 2 "
                 "--pipeline-model-parallel-size 4\n")
    data = _load(f)
    assert data["parallelism"]["tp"] == 2 and data["parallelism"]["pp"] == 4  # last wins
    assert data["training"]["micro_batch_size"] == 4 and data["training"]["dtype"] == "bf16"
    lst = tmp_path / "args.json"
    lst.write_text(json.dumps(["--tensor-model-parallel-size", "8", "--fp16"]))
    data = _load(lst)
    assert data["parallelism"]["tp"] == 8 and data["training"]["dtype"] == "fp16"
    assert data["training"]["stack"] == "megatron-core"
    yaml_doc = tmp_path / "cfg"   # a YAML document marker is not a flag
    yaml_doc.write_text("---\nmodel:\n  tensor_model_parallel_size: 2\ntrain:\n"
                        "  micro_batch_size: 3\n")
    assert _load(yaml_doc)["parallelism"]["tp"] == 2


# -- torchtitan ------------------------------------------------------------------------------
def test_torchtitan_llama3_8b():
    d = _load(DATA / "torchtitan" / "llama3_8b.toml")
    assert d["model"] == "meta-llama/Llama-3.1-8B"
    assert d["training"] == {"stack": "torchtitan", "optimizer": "adamw",
                             "micro_batch_size": 1, "seq_len": 8192, "compile": False,
                             "activation_checkpointing": "selective", "precision": "amp",
                             "dtype": "bf16"}
    assert d["parallelism"] == {"tp": 1, "pp": 1, "cp": 1, "fsdp": "full_shard"}
    assert d["workload"] == {"max_steps": 1000}


def test_torchtitan_llama3_405b_async_tp_float8_compile():
    m = load_configs([str(DATA / "torchtitan" / "llama3_405b.toml")])
    d = m.data
    assert d["model"] == "meta-llama/Llama-3.1-405B"
    assert d["training"]["dtype"] == "fp8" and d["training"]["compile"] is True
    assert d["training"]["activation_checkpointing"] == "full"
    assert d["parallelism"]["tp"] == 8 and d["parallelism"]["async_tp"] is True
    assert m.origins["training.dtype"].endswith("model.converters")
    assert m.origins["training.stack"].endswith("(torchtitan TOML job config)")


def test_torchtitan_layouts_and_precision(tmp_path):
    f = tmp_path / "t.toml"
    f.write_text('[model]\nname = "llama3"\nflavor = "debugmodel"\n'
                 '[training]\nlocal_batch_size = 8\ndtype = "bfloat16"\nglobal_batch_size = 64\n'
                 '[parallelism]\ndata_parallel_replicate_degree = 2\n'
                 'data_parallel_shard_degree = 4\npipeline_parallel_degree = 2\n'
                 'pipeline_parallel_microbatch_size = 2\n'
                 'pipeline_parallel_schedule = "Interleaved1F1B"\n'
                 'fsdp_reshard_after_forward = "never"\n')
    m = load_configs([str(f)])
    p, t = m.data["parallelism"], m.data["training"]
    assert p["fsdp"] == "shard_grad_op" and p["hsdp_shard_size"] == 4 and p["dp"] == 8
    assert p["pp"] == 2 and p["pp_schedule"] == "interleaved"
    # the local batch of 8 runs as 4 pipeline microbatches of 2; 2 x 4 x dp 8 = 64 checks out
    assert t["micro_batch_size"] == 2 and t["grad_accum_steps"] == 4
    assert t["dtype"] == "bf16" and t["precision"] == "pure"   # no fp32 copy
    # debugmodel has no preset: its shapes come from torchtitan's model args table
    assert m.data["model"] == "torchtitan/llama3-debugmodel"
    assert m.data["model_config"]["intermediate_size"] == 768


def test_torchtitan_defaults_fill_what_the_file_leaves_out(tmp_path):
    """job_config.py defaults: local_batch_size 8, seq_len 2048, steps 10000, selective AC
    with selective_ac_option "2" (layer-level: every second block),
    data_parallel_shard_degree -1 (FSDP2), bf16 compute over fp32 weights; with a pipeline the
    local batch runs as microbatches of pipeline_parallel_microbatch_size (1)."""
    f = tmp_path / "t.toml"
    f.write_text('[model]\nname = "llama3"\nflavor = "8B"\n')
    m = load_configs([str(f)])
    t = m.data["training"]
    # selective_ac_option defaults to "2": every second block under full checkpointing
    assert (t["micro_batch_size"], t["seq_len"], t["activation_checkpointing"], t["dtype"],
            t["precision"], t["checkpoint_fraction"]) == (8, 2048, "full", "bf16", "amp", 0.5)
    assert m.data["workload"]["max_steps"] == 10000
    assert m.data["parallelism"]["fsdp"] == "full_shard"
    assert "torchtitan default" in m.origins["training.micro_batch_size"]
    f.write_text('[parallelism]\npipeline_parallel_degree = 4\n')
    t = load_configs([str(f)]).data["training"]
    assert (t["micro_batch_size"], t["grad_accum_steps"]) == (1, 8)


def test_torchtitan_bad_value_names_file_and_key(tmp_path):
    f = tmp_path / "t.toml"
    f.write_text('[activation_checkpoint]\nmode = "sometimes"\n[parallelism]\n'
                 'tensor_parallel_degree = 2\n')
    with pytest.raises(InputError, match=r"t\.toml: activation_checkpoint\.mode.*selective"):
        load_configs([str(f)])
    f.write_text('[parallelism]\ntensor_parallel_degree = "eight"\n')
    with pytest.raises(InputError, match=r"parallelism\.tensor_parallel_degree"):
        load_configs([str(f)])
    f.write_text("[parallelism\ntensor_parallel_degree = 2\n")
    with pytest.raises(InputError, match="malformed TOML"):
        load_configs([str(f)])


# -- Megatron --------------------------------------------------------------------------------
def test_megatron_llama3_8b_fp8_arguments():
    m = load_configs([str(DATA / "megatron" / "llama3_8b_h100_fp8_args.txt")])
    d = m.data
    assert d["training"]["stack"] == "megatron-core"
    assert d["training"]["dtype"] == "fp8" and d["training"]["precision"] == "master"
    assert d["training"]["loss"] == "fused" and d["training"]["attention"] == "flash"
    # 128 = micro 1 x accumulation x dp 8 (8 GPUs per node, 1 node, tp = cp = 1)
    assert d["training"]["grad_accum_steps"] == 16
    assert d["hardware"] == {"gpus_per_node": 8, "nodes": 1}
    par = d["parallelism"]
    assert par["distributed_optimizer"] is True and par["tp_comm_overlap"] is False
    assert "sequence_parallel" not in par   # Megatron-LM turns it off at tp 1
    assert d["workload"]["num_samples"] == 1953125000
    cfg = d["model_config"]
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_key_value_heads"],
            cfg["intermediate_size"], cfg["vocab_size"]) == (4096, 32, 8, 14336, 128256)
    assert cfg["tie_word_embeddings"] is False
    spec = new_engine().resolve_model(job_from_dict({"model": d["model"],
                                                     "model_config": cfg}))
    # Llama 3 8B: 8.03 B parameters (meta-llama/Meta-Llama-3-8B model card)
    assert spec.param_counts().total == pytest.approx(8.03e9, rel=0.005)


def test_megatron_gpt3_175b_dimensions():
    """GPT-3 175B (Brown et al. 2020, Table 2.1: 96 layers, d_model 12288, 96 heads): the raw
    dimensions build a GPT-2-layout model of 175 B parameters; the GPT-2 BPE (50257) is padded
    to a multiple of 128 x tp 8 = 51200 (Megatron-LM _vocab_size_with_padding)."""
    m = load_configs([str(DATA / "megatron" / "gpt3_175b_args.txt")])
    d = m.data
    assert d["parallelism"] == {"tp": 8, "pp": 16, "tp_comm_overlap": False}
    assert d["training"]["dtype"] == "fp16" and d["training"]["precision"] == "master"
    assert d["model_config"]["model_type"] == "gpt2" and d["model_config"]["vocab_size"] == 51200
    spec = new_engine().resolve_model(job_from_dict({"model": d["model"],
                                                     "model_config": d["model_config"]}))
    assert spec.param_counts().total == pytest.approx(175e9, rel=0.01)
    assert any("$DATA_PATH" in i and "shell variable" in i for i in m.ignored)
    # no GPU count in the file: the global batch cannot be split yet, and says so
    key = f"{DATA / 'megatron' / 'gpt3_175b_args.txt'}: --global-batch-size"
    assert "no file or flag gives the GPU count" in m.unresolved[key]
    assert (key, ) == tuple(w for _t, w in m.batch_rules)


def test_megatron_bridge_and_nemo_yaml(tmp_path):
    d = _load(DATA / "megatron" / "llama32_1b_pretrain.yaml")
    assert d["training"] == {"stack": "megatron-core", "micro_batch_size": 1, "seq_len": 4096}
    assert d["parallelism"] == {"tp": 1, "pp": 1, "cp": 1}
    bridge = tmp_path / "b.yaml"
    bridge.write_text("model:\n  tensor_model_parallel_size: 4\n  sequence_parallel: true\n"
                      "  num_layers: 32\n  virtual_pipeline_model_parallel_size: 2\n"
                      "  pipeline_model_parallel_size: 2\n  recompute_granularity: selective\n"
                      "train:\n  micro_batch_size: 2\n"
                      "ddp:\n  use_distributed_optimizer: true\n"
                      "comm_overlap:\n  tp_comm_overlap: true\n"
                      "mixed_precision: bf16_with_fp8_delayed_scaling_mixed\n")
    d = _load(bridge)
    assert d["parallelism"] == {"tp": 4, "sequence_parallel": True, "pp_virtual_stages": 2,
                                "pp_schedule": "interleaved", "pp": 2,
                                "distributed_optimizer": True, "tp_comm_overlap": True}
    assert d["training"]["dtype"] == "fp8" and d["training"]["precision"] == "master"
    assert d["training"]["activation_checkpointing"] == "selective"
    nemo = tmp_path / "megatron_gpt_config.yaml"
    nemo.write_text("trainer:\n  devices: 8\n  num_nodes: 2\n  precision: bf16-mixed\n"
                    "  max_steps: 100\n"
                    "model:\n  micro_batch_size: 1\n  global_batch_size: 64\n"
                    "  tensor_model_parallel_size: 2\n  encoder_seq_length: 4096\n"
                    "  activations_checkpoint_granularity: full\n  ub_tp_comm_overlap: false\n"
                    "  optim:\n    name: distributed_fused_adam\n    lr: 1.0e-4\n")
    m = load_configs([str(nemo)])
    d = m.data
    assert m.origins["training.stack"].endswith("(NeMo Megatron YAML)")
    assert d["hardware"] == {"gpus_per_node": 8, "nodes": 2}
    # 64 = micro 1 x accumulation 8 x dp (16 GPUs / tp 2)
    assert d["training"]["grad_accum_steps"] == 8 and d["training"]["seq_len"] == 4096
    assert d["training"]["dtype"] == "bf16" and d["training"]["activation_checkpointing"] == "full"
    assert d["parallelism"]["distributed_optimizer"] is True
    assert d["parallelism"]["tp_comm_overlap"] is False
    assert any("model.optim.lr" in i for i in m.ignored)
    nemo.write_text("trainer:\n  devices: -1\n  num_nodes: 1\nmodel:\n"
                    "  tensor_model_parallel_size: 2\n")
    m = load_configs([str(nemo)])
    assert "gpus_per_node" not in m.data.get("hardware", {})
    assert any("trainer.devices: -1: the launcher decides" in i for i in m.ignored)


def test_megatron_errors_name_file_and_flag(tmp_path):
    f = tmp_path / "args.txt"
    f.write_text("--tensor-model-parallel-size eight\n")
    with pytest.raises(InputError, match=r"args\.txt: --tensor-model-parallel-size"):
        load_configs([str(f)])
    f.write_text("--fp8-format e5m2 --bf16\n")
    with pytest.raises(InputError, match=r"--fp8-format.*e4m3"):
        load_configs([str(f)])
    f.write_text("--recompute-granularity some\n")
    with pytest.raises(InputError, match=r"--recompute-granularity.*selective"):
        load_configs([str(f)])


# -- nothing dropped silently ----------------------------------------------------------------
def _leaves(doc: dict, prefix: str = "") -> list[str]:
    out = []
    for key, value in doc.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        out += _leaves(value, path) if isinstance(value, dict) and value else [path]
    return out


@pytest.mark.parametrize("path", TITAN + MEGATRON, ids=lambda p: p.name)
def test_every_key_is_mapped_or_reported(path):
    merge = load_configs([str(path)])
    text = "\n".join([*merge.origins.values(), *merge.ignored, *merge.not_modelled,
                      *merge.unresolved.values()])
    said = []
    for hit in re.finditer(re.escape(str(path)) + r": ([^:()\n]+)", text):
        said += [k.strip().split(" ")[0] for part in hit.group(1).split(", ")
                 for k in part.split("+")]
    for key in _leaves(parse_text(str(path), path.read_text())):
        top = key.split(".")[0]
        section, _, leaf = key.partition(".")
        assert any(s in (key, top) or key.startswith(s + ".") or
                   (leaf and s == leaf and section in key) for s in said), \
            f"{path.name}: {key} dropped silently"


# -- the CLI door ----------------------------------------------------------------------------
def test_cli_estimates_a_torchtitan_toml_and_explains_the_stack(capsys):
    toml = str(DATA / "torchtitan" / "llama3_70b.toml")
    out = _cli(["--config", toml, "--gpus-per-node", "8", "--nodes", "8"], capsys)
    assert out["job"]["training"]["stack"] == "torchtitan"
    assert out["job"]["model"] == "meta-llama/Llama-3.1-70B"
    assert out["config"]["origins"]["training.stack"] == f"{toml}: (torchtitan TOML job config)"
    text = _cli(["--config", toml, "--gpus-per-node", "8", "--nodes", "8", "--explain"],
                capsys, fmt="table")
    assert "Training stack: stack torchtitan" in text
    assert "(torchtitan TOML job config)" in text


def test_cli_estimates_megatron_arguments_and_flags_win(capsys):
    args = str(DATA / "megatron" / "llama3_8b_h100_fp8_args.txt")
    out = _cli(["--config", args, "--dtype", "bf16"], capsys)
    assert out["job"]["training"]["stack"] == "megatron-core"
    assert out["job"]["training"]["dtype"] == "bf16"   # the flag over the file
    assert out["job"]["parallelism"]["distributed_optimizer"] is True
    assert out["config"]["origins"]["training.grad_accum_steps"].startswith(args)


# -- the global batch ------------------------------------------------------------------------
GPT3 = str(DATA / "megatron" / "gpt3_175b_args.txt")
GPT3_KEY = f"{GPT3}: --global-batch-size"


def test_gpt3_175b_global_batch_split_by_the_gpu_count_the_flags_give(capsys):
    """Narayanan et al. 2021 (arXiv:2104.04473), Table 1: GPT-3 175B on 1024 GPUs with tp 8,
    pp 16, batch size 1536; dp = 1024 / (8 x 16) = 8, so each pipeline runs 1536 / (1 x 8) =
    192 micro-batches per step. The file gives micro 1 and the global batch, the flags the
    GPUs (the script's launcher line is not in the file)."""
    out = _cli(["--config", GPT3, "--gpus-per-node", "8", "--nodes", "128"], capsys)
    assert out["job"]["training"]["grad_accum_steps"] == 192
    assert out["config"]["origins"]["training.grad_accum_steps"] == \
        f"{GPT3_KEY} / (micro x dp)"
    assert out["config"]["unresolved"] == []
    # the first pipeline stage holds min(pp, accumulation) = 16 micro-batches in flight
    # (1F1B), not the 1 of an accumulation left at the default
    flags = ["--config", GPT3, "--gpus-per-node", "8", "--nodes", "128"]
    derived = _cli(flags, capsys, plugins=True)["memory"]["components"]
    assert _cli([*flags, "--grad-accum", "192"], capsys, plugins=True)["memory"][
        "components"] == derived
    one = _cli(["--config", GPT3, "--gpus-per-node", "8", "--nodes", "128", "--per-device-batch",
                "2"], capsys)   # a flag changes micro: the accumulation follows
    assert one["job"]["training"]["grad_accum_steps"] == 96
    default = _cli(["--config", GPT3], capsys, plugins=True)   # no GPU count: accumulation 1
    # 16 stage-sized micro-batches against 1 (the largest stage is not exactly the first, whose
    # embedding output and last-stage logits differ, one layer's recompute working set does not
    # grow with them, and Megatron frees the sent stage outputs: not exactly 16 x)
    assert 12 < derived["activations"] / default["memory"]["components"]["activations"] <= 16


def test_global_batch_not_divisible_names_the_key(capsys, tmp_path):
    # 80 nodes x 8 = 640 GPUs / (tp 8 x pp 16) = dp 5; 1536 is not a multiple of 5
    rc = main(["estimate", "--format", "json", "--config", GPT3, "--gpus-per-node", "8",
               "--nodes", "80"], engine=new_engine())
    err = json.loads(capsys.readouterr().out)
    assert rc == 2 and GPT3_KEY in json.dumps(err) and "not divisible" in json.dumps(err)
    # the GPU count in the file itself (torchrun flags, NeMo trainer.devices / num_nodes)
    args = tmp_path / "args.txt"
    args.write_text("--nproc_per_node 8 --nnodes 1\n--tensor-model-parallel-size 2\n"
                    "--micro-batch-size 3 --global-batch-size 64\n")
    with pytest.raises(InputError, match=r"args\.txt: --global-batch-size: 64 is not divisible"):
        load_configs([str(args)])
    nemo = tmp_path / "megatron_gpt_config.yaml"
    nemo.write_text("trainer:\n  devices: 8\n  num_nodes: 2\nmodel:\n"
                    "  tensor_model_parallel_size: 2\n  micro_batch_size: 2\n"
                    "  global_batch_size: 48\n")   # 48 = 2 x 3 x dp 8
    assert load_configs([str(nemo)]).data["training"]["grad_accum_steps"] == 3
    nemo.write_text(nemo.read_text().replace("48", "36"))
    with pytest.raises(InputError, match=r"model\.global_batch_size: 36 is not divisible"):
        load_configs([str(nemo)])


def test_global_batch_without_a_gpu_count_is_reported_unresolved(capsys):
    out = _cli(["--config", GPT3], capsys)
    assert out["job"]["training"]["grad_accum_steps"] == 1   # fmest's default, and said so
    assert any(m.startswith(GPT3_KEY) and "GPU count" in m for m in out["config"]["unresolved"])
    text = _cli(["--config", GPT3, "--explain"], capsys, fmt="table")
    assert f"config value unresolved: {GPT3_KEY}" in text


def test_file_gpu_count_overridden_by_flags_resplits_the_batch(capsys, tmp_path):
    """The script's own launcher line (8 GPUs, 1 node) cannot hold tp 8 x pp 16; the flags'
    GPU count wins and the accumulation is derived from it, not from the file's."""
    args = tmp_path / "args.txt"
    args.write_text("--nproc_per_node 8 --nnodes 16\n" + open(GPT3).read())
    m = load_configs([str(args)])
    assert m.data["training"]["grad_accum_steps"] == 1536   # dp 1 from the file's 128 GPUs
    out = _cli(["--config", str(args), "--nodes", "128"], capsys)
    assert out["job"]["training"]["grad_accum_steps"] == 192


def test_deepspeed_train_batch_split_by_flag_gpus(capsys, tmp_path):
    """DeepSpeed's train_batch_size = micro x accumulation x world / (tp x pp): a GPU count
    given only by flags derives the accumulation; none leaves it unresolved."""
    ds = tmp_path / "ds_config.json"
    ds.write_text(json.dumps({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4}))
    base = ["--config", str(ds), "--model", "gpt2"]
    out = _cli([*base, "--gpus-per-node", "4", "--nodes", "2"], capsys)
    assert out["job"]["training"]["grad_accum_steps"] == 2 and out["config"]["unresolved"] == []
    out = _cli(base, capsys)
    assert any(m.startswith(f"{ds}: train_batch_size") for m in out["config"]["unresolved"])
    rc = main(["estimate", "--format", "json", *base, "--gpus-per-node", "3"],
              engine=new_engine())
    assert rc == 2 and f"{ds}: train_batch_size" in capsys.readouterr().out
