#!/usr/bin/env bash
# Copyright (c) 2025, NVIDIA CORPORATION.  All rights reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

set -xeuo pipefail

# Workspace directory for checkpoints and results
WORKSPACE=${WORKSPACE:-/workspace}

MODEL_NAME=NVIDIA-Nemotron-3-Super-120B-A12B-BF16
HF_MODEL_ID=nvidia/$MODEL_NAME

# Import HF → Megatron
./scripts/conversion/convert.sh import \
    --executor local --device gpu --gpus-per-node 8 \
    --hf-model $HF_MODEL_ID \
    --megatron-path ${WORKSPACE}/models/$MODEL_NAME \
    --tp 1 --ep 8


# Export Megatron → HF
./scripts/conversion/convert.sh export \
    --executor local --device gpu --gpus-per-node 8 \
    --hf-model $HF_MODEL_ID \
    --megatron-path ${WORKSPACE}/models/$MODEL_NAME/iter_0000000 \
    --hf-path ${WORKSPACE}/models/$MODEL_NAME-hf-export \
    --tp 1 --ep 8 


# Round-trip validation
uv run torchrun --nproc_per_node=8 \
    examples/conversion/hf_megatron_roundtrip_multi_gpu.py \
    --hf-model-id $HF_MODEL_ID \
    --megatron-load-path ${WORKSPACE}/models/$MODEL_NAME/iter_0000000 \
    --tp 1 --ep 8
