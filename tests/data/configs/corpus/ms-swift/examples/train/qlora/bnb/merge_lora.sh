# This will store the full, unquantized weights.
swift export \
    --adapters output/vx-xxx/checkpoint-xxx \
    --merge_lora true
