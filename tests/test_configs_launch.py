"""Launch scripts, ms-swift and OpenRLHF command lines (issue 23): the shell reader, the GPU
layout of each launcher, each program's arguments on corpus files, refusals, and a run over
every corpus shell script."""

from __future__ import annotations

import glob
import os
import textwrap

import pytest

from fmest.configs import load_configs, parse_text
from fmest.configs.launch import read_script
from fmest.errors import InputError, NotTrainingError

CORPUS = os.path.join(os.path.dirname(__file__), "data", "configs", "corpus")


def corpus(path: str) -> str:
    full = os.path.join(CORPUS, path)
    assert os.path.isfile(full), full
    return full


def script(tmp_path, text: str, name: str = "run.sh") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return str(path)


def words(path: str) -> list[list[str]]:
    with open(path) as fh:
        return [[f.text for f in c.words] for c in read_script(path, fh.read()).commands]


def origin(merge, field: str) -> str:
    return merge.origins[field].split(": ", 1)[1]


def value(merge, field: str):
    if "." not in field:
        return merge.data.get(field)
    section, name = field.split(".", 1)
    return merge.data.get(section, {}).get(name)


# -- the shell reader ----------------------------------------------------------------------
def test_variables_defaults_arrays_continuations(tmp_path):
    path = script(tmp_path, """
        #!/bin/bash
        GPUS=4   # four GPUs
        export SEQ=${SEQ_LEN:-4096}
        NAME="${MODEL:=llama}"
        MODEL_ARGS=(
            --num-layers 32   # a comment inside the array
            --hidden-size $((1024 * 4))
        )
        OUT=$1
        if [ "$OUT" == "" ]; then
            OUT=./out
        fi
        torchrun --nproc_per_node $GPUS \\
            train.py ${MODEL_ARGS[@]} --seq $SEQ --name $NAME --out $OUT --n ${#MODEL_ARGS[@]}
    """)
    assert words(path) == [["torchrun", "--nproc_per_node", "4", "train.py", "--num-layers",
                            "32", "--hidden-size", "4096", "--seq", "4096", "--name", "llama",
                            "--out", "./out", "--n", "4"]]


def test_placeholders_heredoc_loops_and_herestrings(tmp_path):
    path = script(tmp_path, """
        read -r -d '' CMD <<EOF
        openrlhf.cli.train_sft \\
           --data.max_len 1024
        EOF
        for cfg in "2,1" "4,2"; do
            IFS=',' read -r TP PP <<< "$cfg"
            deepspeed --module $CMD --ds.tensor_parallel_size $TP --save $2 --host $(hostname)
        done
    """)
    with open(path) as fh:
        got = read_script(path, fh.read())
    assert [f.text for f in got.commands[0].words] == [
        "deepspeed", "--module", "openrlhf.cli.train_sft", "--data.max_len", "1024",
        "--ds.tensor_parallel_size", "2", "--save", "$2", "--host", "$(hostname)"]
    assert {u for u, _line in got.unresolved} == {"$2", "$(hostname)"}
    assert got.loops and "first item (cfg=2,1)" in got.loops[0]


def test_unresolved_values_are_named_in_a_warning(tmp_path):
    path = script(tmp_path, """
        deepspeed main.py --model_name_or_path facebook/opt-1.3b --zero_stage $ZERO \\
            --per_device_train_batch_size 4 --max_seq_len 512
    """)
    merge = load_configs([path])
    assert value(merge, "parallelism.zero_stage") == 0   # DeepSpeed-Chat's default
    assert any("$ZERO" in n and "--zero_stage" in n for n in merge.not_modelled)


def test_shell_files_reach_the_launch_reader(tmp_path):
    assert "(shell script)" in parse_text("x.sh", "--num-layers 2\n")
    assert "(shell script)" in parse_text("job", "#!/usr/bin/env bash\ntorchrun x.py\n")
    assert "(shell script)" not in parse_text("args.txt", "--num-layers 2\n")


# -- layouts -------------------------------------------------------------------------------
HF = "--model_name_or_path meta-llama/Llama-2-7b-hf --per_device_train_batch_size 2"


@pytest.mark.parametrize("line, gpus, nodes, where", [
    (f"torchrun --nproc-per-node=4 --nnodes 2 train.py {HF}", 4, 2, "torchrun --nproc-per-node"),
    (f"python -m torch.distributed.run --nproc_per_node 2 train.py {HF}", 2, None,
     "python -m torch.distributed.run --nproc_per_node"),
    (f"torchrun train.py {HF}", 1, None, "(torchrun without --nproc_per_node"),
    (f"deepspeed --num_gpus 8 --num_nodes 2 train.py {HF}", 8, 2, "deepspeed --num_gpus"),
    (f"deepspeed --include localhost:0,1,2 train.py {HF}", 3, None, "deepspeed --include"),
    (f"CUDA_VISIBLE_DEVICES=0,1 deepspeed train.py {HF}", 2, None, "CUDA_VISIBLE_DEVICES=0,1"),
    (f"accelerate launch --num_processes 16 --num_machines 2 train.py {HF}", 8, 2,
     "accelerate launch --num_processes"),
    (f"srun -N 2 --ntasks-per-node 8 python train.py {HF}", 8, 2, "srun --ntasks-per-node"),
    (f"mpirun -np 4 --allow-run-as-root python train.py {HF}", 4, None, "mpirun -np"),
    ("NPROC_PER_NODE=2 NNODES=3 swift sft --model Qwen/Qwen2.5-7B --tuner_type full", 2, 3,
     "NPROC_PER_NODE=2"),
    ("GPUS_PER_NODE=4\npython train.py " + HF, 4, None, "GPUS_PER_NODE=4"),
])
def test_layout_of_each_launcher(tmp_path, line, gpus, nodes, where):
    merge = load_configs([script(tmp_path, line + "\n")])
    assert value(merge, "hardware.gpus_per_node") == gpus
    assert origin(merge, "hardware.gpus_per_node").startswith(where)
    assert value(merge, "hardware.nodes") == nodes


def test_sbatch_nodes_and_srun_bash_c(tmp_path):
    path = script(tmp_path, """
        #!/bin/bash
        #SBATCH --nodes=4
        GPUS_PER_NODE=8
        srun bash -c "cd /x; torchrun --nproc_per_node $GPUS_PER_NODE -m openrlhf.cli.train_sft \\
            --model.model_name_or_path meta-llama/Meta-Llama-3-8B --data.max_len 4096"
    """)
    merge = load_configs([path])
    assert value(merge, "hardware.nodes") == 4
    assert origin(merge, "hardware.nodes") == "#SBATCH --nodes 4"
    assert value(merge, "hardware.gpus_per_node") == 8
    assert value(merge, "training.seq_len") == 4096


# -- each format on corpus files ----------------------------------------------------------
def test_megatron_lm_script():
    merge = load_configs([corpus("megatron-lm/examples/llama/train_llama3_8b_h100_fp8.sh")])
    assert value(merge, "model") == "custom-dimensions"
    assert value(merge, "training.seq_len") == 8192
    assert value(merge, "training.dtype") == "fp8"
    assert value(merge, "hardware.gpus_per_node") == 8
    assert origin(merge, "hardware.gpus_per_node").startswith("torchrun --nproc_per_node")
    assert value(merge, "training.stack") == "megatron-core"


def test_megatron_bridge_recipe_overrides():
    merge = load_configs([corpus("megatron-bridge/examples/models/qwen/qwen3_vl/"
                                 "peft_unpacked.sh")])
    assert value(merge, "training.technique") == "lora"
    assert value(merge, "training.lora_rank") == 32
    assert value(merge, "training.seq_len") == 4096
    assert value(merge, "parallelism.tp") == 4      # the loop's first configuration
    assert value(merge, "hardware.gpus_per_node") == 8
    assert any("only the first item" in n for n in merge.not_modelled)
    assert any("several training commands" in n for n in merge.not_modelled)


def test_ms_swift_lora_sft():
    merge = load_configs([corpus("ms-swift/examples/train/lora_sft.sh")])
    assert value(merge, "model") == "Qwen/Qwen2.5-7B-Instruct"
    assert value(merge, "training.technique") == "lora"
    assert value(merge, "training.lora_rank") == 8
    assert value(merge, "training.seq_len") == 2048
    assert value(merge, "training.grad_accum_steps") == 16
    assert value(merge, "hardware.gpus_per_node") == 1
    assert origin(merge, "hardware.gpus_per_node").startswith("CUDA_VISIBLE_DEVICES=0")


def test_ms_swift_yaml_named_by_the_script_and_deepspeed_preset():
    merge = load_configs([corpus("ms-swift/examples/yaml/deepspeed/sft.sh")])
    assert value(merge, "hardware.gpus_per_node") == 2
    assert value(merge, "parallelism.zero_stage") == 2
    assert value(merge, "training.precision") == "master"
    assert origin(merge, "training.seq_len") == "examples/yaml/deepspeed/sft.yaml: max_length"
    direct = load_configs([corpus("ms-swift/examples/yaml/deepspeed/sft.yaml")])
    assert direct.files[0][1] == "ms-swift"
    assert value(direct, "parallelism.zero_stage") == 2


def test_ms_swift_megatron_and_rlhf():
    mega = load_configs([corpus("ms-swift/examples/yaml/megatron/sft.sh")])
    assert value(mega, "training.stack") == "megatron-core"
    assert value(mega, "parallelism.ep") == 4
    assert value(mega, "hardware.gpus_per_node") == 4
    grpo = [f for f in glob.glob(os.path.join(CORPUS, "ms-swift/examples/train/grpo/**/*.sh"),
                                 recursive=True)
            if "--rlhf_type grpo" in open(f).read() and "swift rlhf" in open(f).read()]
    merge = load_configs([sorted(grpo)[0]])
    assert any("grpo" in n and "not counted" in n for n in merge.not_modelled)


def test_openrlhf_sft_and_ppo():
    sft = load_configs([corpus("openrlhf/examples/scripts/train_sft.sh")])
    assert value(sft, "model") == "meta-llama/Meta-Llama-3-8B"
    assert value(sft, "training.seq_len") == 2048
    assert value(sft, "training.technique") == "full"
    assert value(sft, "parallelism.zero_stage") == 2
    assert value(sft, "training.micro_batch_size") == 2
    ppo = load_configs([corpus("openrlhf/examples/scripts/train_ppo_ray_hybrid_engine.sh")])
    assert value(ppo, "model") == "OpenRLHF/Llama-3-8b-sft-mixture"
    assert value(ppo, "hardware.gpus_per_node") == 8
    assert any("reward" in n and "not counted" in n for n in ppo.not_modelled)


def test_openrlhf_legacy_flags(tmp_path):
    merge = load_configs([script(tmp_path, """
        deepspeed --module openrlhf.cli.train_sft --pretrain meta-llama/Meta-Llama-3-8B \\
            --max_len 4096 --micro_train_batch_size 4 --zero_stage 3 --bf16 --flash_attn \\
            --gradient_checkpointing --lora_rank 16 --load_in_4bit --adam_offload
    """)])
    assert value(merge, "training.technique") == "qlora"
    assert value(merge, "training.lora_rank") == 16
    assert value(merge, "training.seq_len") == 4096
    assert value(merge, "parallelism.cpu_offload") == "optimizer"
    assert value(merge, "training.attention") == "flash"


def test_deepspeed_chat_script():
    merge = load_configs([corpus("deepspeed-examples/applications/DeepSpeed-Chat/training/"
                                 "step2_dpo_finetuning/training_scripts/llama2/"
                                 "run_llama2_7b_lora.sh")])
    assert value(merge, "model") == "meta-llama/Llama-2-7b-hf"
    assert value(merge, "training.seq_len") == 512
    assert value(merge, "parallelism.zero_stage") == 3        # $2 unset: the script's fallback
    assert value(merge, "parallelism.cpu_offload") == "params"
    assert value(merge, "training.technique") == "full"       # no --only_optimize_lora
    assert any("--lora_dim" in n for n in merge.not_modelled)


# -- refusals and inference ----------------------------------------------------------------
def test_not_training_and_inference():
    export = sorted(glob.glob(os.path.join(CORPUS, "ms-swift/examples/export/quantize/**/*.sh"),
                              recursive=True))[0]
    with pytest.raises(NotTrainingError, match="quantization recipe"):
        load_configs([export])
    infer = [f for f in glob.glob(os.path.join(CORPUS, "ms-swift/examples/infer/**/*.sh"),
                                  recursive=True) if "swift infer" in open(f).read()]
    merge = load_configs([sorted(infer)[0]])
    assert value(merge, "mode") == "inference"


def test_unrecognised_script_lists_launchers(tmp_path):
    with pytest.raises(InputError, match="launchers recognised: torchrun") as exc:
        load_configs([script(tmp_path, "echo hello\n./my_binary --flag\n")])
    assert "accepted:" in str(exc.value) or exc.value.accepted


def test_ms_swift_unknown_tuner_is_refused(tmp_path):
    with pytest.raises(InputError, match="--tuner_type.*vera.*accepted"):
        load_configs([script(tmp_path, "swift sft --model Qwen/Qwen2.5-7B --tuner_type vera\n")])


def _corpus_scripts() -> list[str]:
    return sorted(glob.glob(os.path.join(CORPUS, "**", "*.sh"), recursive=True))


def test_every_corpus_script_answers_or_refuses_cleanly():
    files = _corpus_scripts()
    assert len(files) > 700
    answered = 0
    for path in files:
        try:
            load_configs([path])
            answered += 1
        except InputError:
            pass
    assert answered > len(files) // 2


def test_ms_swift_entry_point_scripts_are_ms_swift():
    """``accelerate launch swift/cli/sft.py --model M ... --model_name NAME``: the script is what
    ``swift sft`` runs, so its --model is the model (--model_name is the run's self-cognition
    name, not a model)."""
    path = os.path.join(CORPUS, "ms-swift", "examples", "train", "multi-gpu", "fsdp2_lora",
                        "train.sh")
    merge = load_configs([path])
    assert merge.data["model"] == "Qwen/Qwen2.5-7B-Instruct"
    assert merge.data["training"]["technique"] == "lora"
    assert merge.origins["model"].endswith(": --model")
