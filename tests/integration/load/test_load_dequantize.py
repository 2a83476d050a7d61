"""`metactl load --dequantize` (issue 36): a Llama stored as DeepSeek's FP8 release stores weights
(F8_E4M3 codes, an F32 scale per 128x128 block, partial last blocks) registered with digests by a
real metad; ranks on two nodes (node b's cannot see the folder: they stream) fill the BF16 module,
each tensor bit for bit the format's own definition (quant_checkpoints.fp8_blocks_value), the
report saying dequantized and verification proving the codes and the scales against their
digests; each rank reads only its codes, and every holder the whole (small) scales. Without
--dequantize the load is refused, naming the quantization.
"""
import json
import pathlib
import sys

import pytest
import torch
from safetensors.torch import load_file

from checkpoints import tensor_sha256
from conftest import metactl, wait_for
from ranks import run_ranks

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "python"))
import quant_checkpoints  # noqa: E402


@pytest.fixture
def cluster(tmp_path, daemons):
    root_a, root_b = tmp_path / "storage-a", tmp_path / "storage-b"
    root_b.mkdir()
    quantized = quant_checkpoints.llama_fp8(root_a / "fp8")
    a = daemons("a", [root_a])
    b = daemons("b", [root_b], coordinator=a.address)
    metactl("register", "fp8", "--checkpoint", root_a / "fp8", "--daemon", a.address, check=0)  # with digests
    wait_for(lambda: "b " in metactl("status", "--daemon", a.address).stdout, what="node b to join")
    return {"a": a, "b": b, "root_a": root_a, "quantized": set(quantized),
            "stored": load_file(root_a / "fp8" / "model.safetensors"),
            "reference": load_file(root_a / "fp8-reference" / "model.safetensors")}


def held_part(tensor, entry):
    s = entry.get("slice")
    return tensor if s is None else tensor.narrow(s["dim"], s["start"], s["length"])


def nbytes(t):
    return t.numel() * t.element_size()


def check_dequantized(results, cluster):
    reference, stored, quantized = cluster["reference"], cluster["stored"], cluster["quantized"]
    seen = set()
    for rank, (rc, out, err, report) in enumerate(results):
        assert rc == 0, f"rank {rank} exited {rc}\n{out}\n{err}"
        assert f"rank {rank} verified (gloo)" in out, out
        # Every rank holds a part of every value here (fsdp, or tp with one stage).
        assert (f"rank {rank}: {len(quantized)} tensors dequantized on load (first model.layers.0.self_attn.q_proj."
                f"weight: dequantized:") in out, out
        # Every stored tensor, codes and scales included, checked against its registered digest.
        assert f"content proven: {len(stored)} stored tensors checked against their registered fast digests" in out
        expected_read = 0
        for t in report["tensors"]:
            if t["name"] not in reference:
                continue  # a computed buffer (rotary inv_freq)
            seen.add(t["name"])
            part = held_part(reference[t["name"]], t).contiguous()
            assert t["dtype"] == "BF16" and t["shape"] == list(part.shape), t
            assert t["sha256"] == tensor_sha256(part), f"{t['name']} on rank {rank} differs from the reference"
            if t["name"] in quantized:
                assert t["source"].startswith("dequantized:") and "fp8-block 128x128" in t["source"], t
                assert t["proof"]["digest"] == "fast", t
                # Its part of the codes (1 byte a value), and the whole scale tensor.
                codes = held_part(stored[t["name"]], t)
                expected_read += nbytes(codes) + nbytes(stored[t["name"] + "_scale_inv"])
            else:
                expected_read += nbytes(held_part(stored[t["name"]], t))
        assert report["bytes_read"] + report["fanout_received_bytes"] == expected_read, (rank, report["bytes_read"])
    assert seen == set(reference), set(reference) - seen
    return results


def test_fsdp_ranks_on_two_nodes_dequantize_bit_for_bit_and_prove_codes_and_scales(tmp_path, cluster):
    a, b = cluster["a"], cluster["b"]
    hidden = cluster["root_a"]
    results = run_ranks(tmp_path, "fp8", [a, a, b, b], extra=("--dequantize", "--strategy", "fsdp"),
                        blind={2: hidden, 3: hidden})
    check_dequantized(results, cluster)
    for rank, (_, _, _, report) in enumerate(results):
        sources = {t["source"].split(">")[0] for t in report["tensors"] if t["name"] in cluster["quantized"]}
        assert sources == ({"dequantized:direct"} if rank < 2 else {"dequantized:stream:a"}), (rank, sources)
    # What a rank reads of a quantized value: a quarter of its codes, about half the bytes of its
    # BF16 quarter, plus every scale (4 floats a 192-wide value here).
    codes = sum(nbytes(cluster["stored"][n]) for n in cluster["quantized"])
    scales = sum(nbytes(cluster["stored"][n + "_scale_inv"]) for n in cluster["quantized"])
    print(f"codes {codes} B, scales {scales} B; read per rank:", [r[3]["bytes_read"] for r in results])


def test_replicas_read_their_own_codes_and_scales_instead_of_fanning_them_out(tmp_path, cluster):
    # tp 2 x 2 replicas over two nodes: fan-out sends the plain tensors between the replicas, never a
    # dequantized value, so each replica reads and proves its own codes and scales (the digest sum
    # then counts two whole copies of each, as it does for any replicated tensor).
    a, b = cluster["a"], cluster["b"]
    results = run_ranks(tmp_path, "fp8", [a, a, b, b],
                        extra=("--dequantize", "--strategy", "tp", "--tp", "2", "--pp", "1"))
    check_dequantized(results, cluster)
    for rank, (_, _, _, report) in enumerate(results):
        for t in report["tensors"]:
            if t["name"] in cluster["quantized"]:
                assert not t["source"].startswith("fanout"), (rank, t)
    assert sum(r[3]["fanout_received_bytes"] for r in results) > 0  # the plain tensors were fanned out


def test_without_dequantize_the_load_is_refused_naming_the_quantization(tmp_path, cluster):
    a, b = cluster["a"], cluster["b"]
    for rc, out, err, _ in run_ranks(tmp_path, "fp8", [a, b]):
        assert rc == 2, (rc, out, err)  # refused before anything is read: bad input, not a failed verification
        assert "model fp8 is stored quantized (fp8: FP8 codes, one scale per 128x128 block)" in err, err
        assert "load with --dequantize" in err, err


def test_the_coordinators_dequantizing_plan_names_codes_and_scales(cluster):
    plan = json.loads(metactl("plan", "fp8", "--daemon", cluster["b"].address, "--gpus", "2", "--dequantize",
                              "--format", "json", check=0).stdout)
    items = {i["tensor"]: i for r in plan["ranks"] for i in r["items"]}
    q = items["model.layers.0.self_attn.q_proj.weight"]
    assert q["dtype"] == "BF16" and "file" not in q, q
    assert q["dequantize"]["scales"]["tensor"] == "model.layers.0.self_attn.q_proj.weight_scale_inv"
    assert all(("dequantize" in items[n]) for n in cluster["quantized"])
    # A model whose config declares no quantization refuses the flag (exit 2), naming why.
    a = cluster["a"]
    metactl("register", "plain", "--checkpoint", cluster["root_a"] / "fp8-reference", "--daemon", a.address, check=0)
    refused = metactl("plan", "plain", "--daemon", a.address, "--gpus", "2", "--dequantize", check=2)
    assert "declares no quantization metaload reads" in refused.stderr, refused.stderr


def test_python_load_dequantizes_as_metactl_load(tmp_path, cluster):
    """metaload.load(dequantize=True), the same plan-driven rank in the caller's process: one rank
    holds every value, each bit for bit the reference; without the flag, the refusal."""
    from pyproc import python

    out = python(f"""
        import torch, metaload
        from safetensors.torch import load_file
        reference = load_file("{cluster['root_a']}/fp8-reference/model.safetensors")
        loaded = metaload.load("fp8", daemon="{cluster['a'].address}", rank=0, world_size=1, device="cpu",
                               dequantize=True)
        same = [n for n, t in reference.items() if torch.equal(loaded[n].view(torch.int16), t.view(torch.int16))]
        print("equal", len(same), "of", len(reference), loaded.report.proven)
        try:
            metaload.load("fp8", daemon="{cluster['a'].address}", rank=0, world_size=1, device="cpu")
        except metaload.Error as e:
            print("refused:", str(e)[:400])
    """, timeout=300)
    assert out.returncode == 0, out.stderr[-4000:]
    reference = cluster["reference"]
    assert f"equal {len(reference)} of {len(reference)} True" in out.stdout, out.stdout + out.stderr[-3000:]
    assert "refused:" in out.stdout and "stored quantized (fp8" in out.stdout, out.stdout
