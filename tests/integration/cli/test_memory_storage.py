"""metactl's offline commands through a second storage back end: the in-memory file system
("mem://", util/fs/memory_file_system.h), registered in a test build of metactl
(tests/faults/metactl_memory_main.cc). The same sharded checkpoint read from a folder and from
memory must give the same inspect, skeleton, plan and check output, byte for byte once the
location is spelled the same: every header, index and config.json goes through the one seam.
"""
import json

from checkpoints import llama_like_config, llama_like_tensors, save_sharded
from conftest import BUILD_DIR, metactl

METACTL_MEMORY = BUILD_DIR / "tests" / "metactl_memory"
LOCATION = "mem://bucket/llama-tiny"


def both(tmp_path, *args):
    """(metactl on the folder, metactl_memory on its copy in memory), each with the location
    replaced by LOCATION, so that the two outputs compare as they are."""
    folder = tmp_path / "llama-tiny"
    on_disk = metactl(*[str(folder) if a == "CKPT" else a for a in args], check=0)
    in_memory = metactl(*[LOCATION if a == "CKPT" else a for a in args], check=0, prefix=(),
                        env={"METALOAD_TEST_MEMORY": f"{folder}={LOCATION}"}, binary=METACTL_MEMORY)
    return on_disk.stdout.replace(str(folder), LOCATION), in_memory.stdout


def make_checkpoint(tmp_path):
    save_sharded(llama_like_tensors(layers=2), tmp_path / "llama-tiny", shards=3,
                 config=llama_like_config(layers=2))


def test_inspect_skeleton_plan_and_check_read_the_same_from_memory(tmp_path):
    make_checkpoint(tmp_path)
    disk, memory = both(tmp_path, "inspect", "CKPT", "--format", "json")
    assert json.loads(memory)["tensors"] and disk == memory

    disk, memory = both(tmp_path, "skeleton", "CKPT")
    skeleton = json.loads(memory)
    assert skeleton["architecture"] == "LlamaForCausalLM", "built from config.json, read from memory"
    assert disk == memory

    disk, memory = both(tmp_path, "plan", "CKPT", "--gpus", "2", "--format", "json")
    assert len(json.loads(memory)["ranks"]) == 2 and disk == memory

    (tmp_path / "model.json").write_text(json.dumps(skeleton))
    disk, memory = both(tmp_path, "check", str(tmp_path / "model.json"), "CKPT")
    assert "OK" in memory and disk == memory


def test_a_missing_shard_in_memory_is_named_by_its_location(tmp_path):
    make_checkpoint(tmp_path)
    (tmp_path / "llama-tiny" / "model-00002-of-00003.safetensors").unlink()
    proc = metactl("inspect", LOCATION, check=2, env={"METALOAD_TEST_MEMORY": f"{tmp_path / 'llama-tiny'}={LOCATION}"},
                   binary=METACTL_MEMORY)
    assert f"but {LOCATION}/model-00002-of-00003.safetensors does not exist" in proc.stderr, proc.stderr


def test_a_scheme_no_back_end_serves_is_refused_naming_what_this_build_reads(tmp_path):
    proc = metactl("inspect", "gs://bucket/llama", check=2)
    assert proc.stderr.strip() == ("metactl inspect: gs://bucket/llama: no storage back end for gs:// locations in "
                                   "this build (POSIX paths, s3://)"), proc.stderr
    proc = metactl("inspect", "gs://bucket/llama", check=2, binary=METACTL_MEMORY)
    assert "(POSIX paths, mem://, s3://)" in proc.stderr, proc.stderr
