"""A Llama-shaped checkpoint in three shards under a storage root: the `checkpoint` fixture of
the integrity and digest tests."""
import pytest

from checkpoints import llama_like_tensors, save_sharded


@pytest.fixture
def checkpoint(tmp_path):
    root = tmp_path / "storage"
    tensors = llama_like_tensors()
    ckpt = save_sharded(tensors, root / "llama-tiny", shards=3)
    return {"root": root, "ckpt": ckpt, "tensors": tensors}


def shard_paths(ckpt):
    return sorted(ckpt.glob("*.safetensors"))
