"""One rank of test_wheel.py's two-rank materialize, run by the wheel's environment under torchrun
where the checkout's build folder and source package cannot be seen.

    python -m torch.distributed.run --nproc-per-node 2 wheel_rank.py CHECKPOINT DAEMON VENV

Builds the saved transformers model on meta, shards it with FSDP2 and fills it with
metaload.materialize twice: from the folder (direct reads), then from the daemon with
source="stream". Each time every tensor, gathered whole, must equal the saved one bit for bit.
Prints "rank R: N tensors equal (direct|stream)" for the pytest side.
"""
import pathlib
import sys

import torch
import torch.distributed as dist
from safetensors.torch import load_file
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from transformers import AutoConfig, AutoModelForCausalLM

import metaload
from gloo_exit import leave  # copied beside this script by test_wheel.py

checkpoint, daemon, venv = sys.argv[1:4]
package = pathlib.Path(metaload.__file__).resolve().parent
assert package.is_relative_to(pathlib.Path(venv).resolve()), f"imported {package}, not the wheel's package"

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
mesh = init_device_mesh("cpu", (world,))
saved = load_file(f"{checkpoint}/model.safetensors")
config = AutoConfig.from_pretrained(checkpoint)

for how, where in (("direct", {"checkpoint": checkpoint}), ("stream", {"daemon": daemon, "source": "stream"})):
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    report = metaload.materialize(model, "tiny", **where)
    state = model.state_dict()
    assert set(saved) <= set(state), sorted(set(saved) - set(state))
    for name, want in saved.items():
        held = state[name]
        assert isinstance(held, DTensor), f"{name} is not sharded: {type(held)}"
        got = held.full_tensor()
        assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want), f"{how}: {name}"
    if how == "stream":
        read = {name: source for name, source in report.sources.items() if name in saved}
        assert read and all(source.startswith("stream:") for source in read.values()), read
    print(f"rank {rank}: {len(saved)} tensors equal ({how})", flush=True)

leave()
