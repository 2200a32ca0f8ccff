swift sample examples/sampler/sample/sampling.yaml
