"""Accelerate's init_empty_weights, then metaload instead of load_checkpoint_and_dispatch.

    python examples/accelerate_init_empty_weights.py /models/llama-8b [cuda:0]

init_empty_weights() builds the parameters on meta (buffers stay real, as Accelerate keeps
them); materialize fills every parameter on the device and says where each tensor came from.
For a model spread over several GPUs, dispatch it after (accelerate.dispatch_model) with a
device map `metactl plan --format hf-device-map` writes.
"""
import sys

from accelerate import init_empty_weights
from transformers import AutoConfig, AutoModelForCausalLM

import metaload


def main(checkpoint, device="cpu"):
    config = AutoConfig.from_pretrained(checkpoint)
    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(config, dtype=config.dtype)
    report = metaload.materialize(model, checkpoint=checkpoint, device=device)
    print(f"read {report.bytes_read} bytes onto {device}; {report.verified_tensors} tensors verified")
    return model


if __name__ == "__main__":
    main(*sys.argv[1:3])
