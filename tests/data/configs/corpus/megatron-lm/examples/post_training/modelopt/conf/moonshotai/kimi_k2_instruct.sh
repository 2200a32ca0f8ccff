#!/bin/bash

HF_MODEL_CKPT=/workspace/scratch/moonshotai/Kimi-K2-Instruct
TP=8
ETP=1
EP=64

