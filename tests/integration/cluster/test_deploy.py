"""deploy/: what can be checked without Docker or a Kubernetes cluster.

The Kubernetes manifest defines the coordinator Service it names, the Service selects the
coordinator's pods and no others, and its two config templates, rendered, are configs on which
real metad processes start and join each other. The Dockerfile builds with scripts/setup.sh and
its runtime stage ships every library that `ldd` says the built metad and metactl load.
"""
import os
import pathlib
import re
import subprocess
import sys

import pytest
import yaml

from checkpoints import llama_like_tensors, save_sharded
from conftest import BUILD_DIR, METACTL, METAD, SOURCE_DIR, free_port, metactl, processes_running, wait_for
from etcd_server import etcd  # noqa: F401 (a fixture: a real etcd on loopback)

DEPLOY = SOURCE_DIR / "deploy"
HEALTH_PROBE = BUILD_DIR / "tests" / "health_probe"


@pytest.fixture(scope="module")
def manifest():
    docs = [d for d in yaml.safe_load_all((DEPLOY / "metad-daemonset.yaml").read_text()) if d]
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], {})[d["metadata"]["name"]] = d
    return by_kind


def labels_match(selector, labels):
    return all(labels.get(key) == value for key, value in selector.items())


def container_template(daemonset):
    """The ConfigMap key a DaemonSet's container renders into its node.yaml."""
    args = " ".join(daemonset["spec"]["template"]["spec"]["containers"][0]["args"])
    match = re.search(r"envsubst < /etc/metaload/(\S+) > /tmp/node.yaml && exec metad --node-config /tmp/node.yaml",
                      args)
    assert match, args
    return match.group(1)


def test_the_coordinator_service_it_names_is_defined_and_selects_only_the_coordinator(manifest):
    config = manifest["ConfigMap"]["metad-config"]["data"]
    named = {m.group(1) for text in config.values() for m in re.finditer(r"coordinator: ([\w.-]+):7070", text)}
    assert named == {"metaload-coordinator"}
    service = manifest["Service"]["metaload-coordinator"]
    assert [p["port"] for p in service["spec"]["ports"]] == [7070]
    daemonsets = manifest["DaemonSet"]
    selected = [name for name, ds in daemonsets.items()
                if labels_match(service["spec"]["selector"], ds["spec"]["template"]["metadata"]["labels"])]
    assert selected == ["metad-coordinator"]
    coordinator = daemonsets["metad-coordinator"]["spec"]["template"]["spec"]
    assert coordinator["nodeSelector"] == {"metaload.io/coordinator": "true"}
    # Its config has no coordinator key: it is the coordinator. The others' names the Service.
    assert "coordinator:" not in config[container_template(daemonsets["metad-coordinator"])]
    assert "coordinator: metaload-coordinator:7070" in config[container_template(daemonsets["metad"])]
    # The other daemons never land on the coordinator's node (both bind the host's port 7070).
    [term] = daemonsets["metad"]["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": "metaload.io/coordinator", "operator": "NotIn", "values": ["true"]}]
    for name, ds in daemonsets.items():
        assert ds["spec"]["selector"]["matchLabels"] == ds["spec"]["template"]["metadata"]["labels"], name
        pod = ds["spec"]["template"]["spec"]
        # A host-network pod resolves Service names only with this policy.
        assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet", name


def render(template, node, port, coordinator_port, root):
    """The template as envsubst fills it in a pod, moved to loopback ports and a local root."""
    text = template.replace("${NODE_NAME}", node).replace("${POD_IP}", "127.0.0.1")
    text = text.replace("listen: 0.0.0.0:7070", f"listen: 127.0.0.1:{port}")
    text = text.replace("advertise: 127.0.0.1:7070", f"advertise: 127.0.0.1:{port}")
    text = text.replace("coordinator: metaload-coordinator:7070", f"coordinator: 127.0.0.1:{coordinator_port}")
    text = text.replace("state_dir: /var/lib/metaload", f"state_dir: {root}/state-{node}")
    text = text.replace("metrics_listen: 0.0.0.0:9464", "metrics_listen: 127.0.0.1:0")
    assert "7070" not in text and "${" not in text and "/var/lib" not in text, text
    return text.replace("roots: [/models]", f"roots: [{root}]")


def test_the_config_templates_start_daemons_that_join_the_coordinator(manifest, tmp_path):
    config = manifest["ConfigMap"]["metad-config"]["data"]
    daemonsets = manifest["DaemonSet"]
    coordinator_port, node_port = free_port(), free_port()
    files = {}
    for node, ds, port in (("gpu-node-01", "metad-coordinator", coordinator_port),
                           ("gpu-node-02", "metad", node_port)):
        files[node] = tmp_path / f"{node}.yaml"
        files[node].write_text(render(config[container_template(daemonsets[ds])], node, port, coordinator_port,
                                      tmp_path))
    procs = []
    try:
        for node in files:
            procs.append(subprocess.Popen([str(METAD), "--node-config", str(files[node])], stdout=subprocess.PIPE,
                                          stderr=subprocess.DEVNULL, text=True))
            assert "listening on" in procs[-1].stdout.readline()
        address = f"127.0.0.1:{coordinator_port}"
        wait_for(lambda: "gpu-node-02 " in metactl("status", "--daemon", address).stdout, what="the node to join")
        status = metactl("status", "--daemon", address, check=0).stdout
        assert f"node gpu-node-01 at {address}: coordinator" in status
        # What the readiness probes ask (grpc: {port: 7070}): both say SERVING.
        for port in (coordinator_port, node_port):
            wait_for(lambda: subprocess.run([str(HEALTH_PROBE), f"127.0.0.1:{port}"], capture_output=True,
                                            text=True).stdout == "status: SERVING\n", what="SERVING")
    finally:
        for proc in procs:
            proc.terminate()
            assert proc.wait(timeout=10) == 0
            proc.stdout.close()


def dockerfile_stages():
    """[(base image, [instruction lines])] of deploy/Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", (DEPLOY / "Dockerfile").read_text())
    stages = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("FROM "):
            stages.append((line.split()[1], []))
        else:
            stages[-1][1].append(line)
    return stages


def test_the_dockerfile_builds_with_setup_sh_on_debian_12():
    (build_base, build), (run_base, _) = dockerfile_stages()
    assert build_base == "debian:12" and run_base == "debian:12-slim"
    assert "RUN rm -rf build .venv && scripts/setup.sh build" in build
    assert "WORKDIR /opt/metaload" in build
    for ignored in (".venv", "build*"):
        assert ignored in (SOURCE_DIR / ".dockerignore").read_text().split()


def loaded_libraries():
    """Every library the built metad, metactl and metactl-load (its `load`) load: path as ldd resolves it."""
    paths = set()
    for binary in (METAD, METACTL, METACTL.parent / "metactl-load"):
        out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=True).stdout
        assert "not found" not in out, out
        paths.update(m.group(1) for m in re.finditer(r"=> (/\S+)", out))
    return paths


def test_the_runtime_image_ships_every_library_the_binaries_load():
    (_, build), (_, runtime) = dockerfile_stages()
    apt = next(line for line in runtime if "apt-get install" in line)
    listed = apt.split("--no-install-recommends", 1)[1].split("&&")[0].split()
    # What `apt-get install --no-install-recommends` puts in the image: the listed packages and,
    # recursively, what they depend on (libcurl4 brings its TLS, Kerberos and LDAP libraries).
    out = subprocess.run(["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
                          "--no-breaks", "--no-replaces", "--no-enhances", *listed],
                         capture_output=True, text=True, check=True).stdout
    packages = {line.split(":", 1)[0] for line in out.splitlines() if line and not line.startswith((" ", "<"))}
    assert set(listed) <= packages, (listed, packages)
    site = next(line.split("=", 1)[1] for line in runtime if line.startswith("ARG SITE="))
    copied = [line.split()[2].replace("${SITE}", site)
              for line in runtime if line.startswith("COPY --from=build ${SITE}")]
    for path in loaded_libraries():
        resolved = pathlib.Path(path).resolve()
        if "/site-packages/" in path:
            # The RUNPATH names lib/python3.X/site-packages: the image's must be the same folder.
            assert re.search(r"/lib/(python3\.\d+)/site-packages/", path).group(1) == \
                re.search(r"/lib/(python3\.\d+)/site-packages", site).group(1), (path, site)
            inside = site + "/" + str(resolved).split("/site-packages/", 1)[1]
            assert any(inside.startswith(prefix + "/") for prefix in copied), (path, copied)
            continue
        owner = subprocess.run(["dpkg", "-S", str(resolved)], capture_output=True, text=True)
        if owner.returncode != 0:
            owner = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True)
        package = owner.stdout.split(":", 1)[0].split(",")[0].strip()
        if package in ("libc6", "libgcc-s1", "libstdc++6"):
            continue  # in every Debian image
        assert package in packages, f"{path} comes from {package}, which deploy/Dockerfile does not install"


def grace_seconds(template):
    match = re.search(r"^shutdown_grace: (\d+)s$", template, re.M)
    return int(match.group(1)) if match else 30  # metad's default


def test_pods_and_the_unit_wait_longer_than_shutdown_grace_and_the_registry_is_on_a_host_volume(manifest):
    config = manifest["ConfigMap"]["metad-config"]["data"]
    for name, ds in manifest["DaemonSet"].items():
        spec = ds["spec"]["template"]["spec"]
        template = config[container_template(ds)]
        # Kubernetes kills the pod after terminationGracePeriodSeconds: it must leave metad time
        # to finish its streams and exit 0.
        assert spec["terminationGracePeriodSeconds"] > grace_seconds(template), name
    coordinator = manifest["DaemonSet"]["metad-coordinator"]["spec"]["template"]["spec"]
    state_dir = re.search(r"^state_dir: (\S+)$", config[container_template(manifest["DaemonSet"]["metad-coordinator"])],
                          re.M).group(1)
    [mount] = [m for m in coordinator["containers"][0]["volumeMounts"] if m["mountPath"] == state_dir]
    [volume] = [v for v in coordinator["volumes"] if v["name"] == mount["name"]]
    assert volume["hostPath"]["path"] == state_dir, "the registry must outlive the pod"
    assert not mount.get("readOnly")
    assert manifest["Service"]["metaload-coordinator"]["spec"]["clusterIP"] == "None"
    for name, ds in manifest["DaemonSet"].items():
        container = ds["spec"]["template"]["spec"]["containers"][0]
        assert container["readinessProbe"]["grpc"] == {"port": 7070}, name
    unit = (DEPLOY / "metad.service").read_text()
    assert int(re.search(r"^TimeoutStopSec=(\d+)$", unit, re.M).group(1)) > 30


SRUN_STUB = r"""#!/usr/bin/env bash
# srun on one machine: options are dropped; a step of one task per node runs the command once
# (exec: signals reach it), any other step runs SLURM_NTASKS tasks and waits for them all.
args=()
per_node=
for a in "$@"; do
  case "$a" in --ntasks-per-node=1) per_node=1 ;; --*) ;; *) args+=("$a") ;; esac
done
export SLURMD_NODENAME=localhost
if [ -n "$per_node" ]; then exec "${args[@]}"; fi
pids=()
for ((i = 0; i < SLURM_NTASKS; i++)); do SLURM_PROCID=$i SLURM_LOCALID=$i "${args[@]}" & pids+=($!); done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
exit $rc
"""


def test_the_slurm_example_starts_metad_on_each_node_loads_and_stops_it(tmp_path):
    """deploy/slurm-example.sbatch run as Slurm would on a one-node job of two CPU ranks, with
    srun and scontrol stubs: it starts metad, registers, loads and verifies, and leaves no
    daemon running."""

    ckpt = save_sharded(llama_like_tensors(layers=2), tmp_path / "models" / "tiny", shards=2)
    stubs = tmp_path / "bin"
    stubs.mkdir()
    (stubs / "srun").write_text(SRUN_STUB)
    (stubs / "scontrol").write_text("#!/bin/sh\necho localhost\n")
    for tool in ("srun", "scontrol"):
        (stubs / tool).chmod(0o755)
    state = tmp_path / "job-state"
    env = dict(os.environ, PATH=f"{stubs}:{METAD.parent}:{METACTL.parent}:{os.environ['PATH']}",
               SLURM_JOB_ID="42", SLURM_JOB_NODELIST="localhost", SLURM_JOB_NUM_NODES="1", SLURM_NTASKS="2",
               SLURM_GPUS_ON_NODE="2", MODEL="tiny", CHECKPOINT=str(ckpt), DEVICE="cpu", STATE_DIR=str(state),
               METAD_PORT=str(free_port()), MASTER_PORT=str(free_port()))
    proc = subprocess.run(["bash", str(DEPLOY / "slurm-example.sbatch")], capture_output=True, text=True, env=env,
                          timeout=180)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert out.count("verified (gloo): 0 tensors on meta or unfilled across 2 ranks") == 2, out
    assert "registered tiny" in out, out
    assert (state / "registry" / "models" / "tiny.pb").is_file(), "the head node's registry is in STATE_DIR"
    # The scan below must see a live process to mean anything when it sees none.
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", f"marker {state}"]) as marker:
        try:
            wait_for(lambda: processes_running(f"marker {state}"), what="the /proc scan to see a live process")
        finally:
            marker.kill()
    left = processes_running(f"metad --node-config {state}")
    assert left == [], f"metad still running after the job: {left}"
    assert "stopped after" in out, "metad must stop on the job's SIGTERM, cleanly"


@pytest.fixture(scope="module")
def etcd_manifest():
    docs = [d for d in yaml.safe_load_all((DEPLOY / "metad-etcd.yaml").read_text()) if d]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def test_the_etcd_manifest_names_the_etcd_members_it_defines(etcd_manifest):
    template = etcd_manifest[("ConfigMap", "metad-peer-config")]["data"]["peer.yaml.tmpl"]
    endpoints = re.search(r"^registry: etcd://(\S+)$", template, re.M).group(1).split(",")
    etcd_set = etcd_manifest[("StatefulSet", "etcd")]
    service = etcd_manifest[("Service", "etcd")]
    assert etcd_set["spec"]["serviceName"] == "etcd" and service["spec"]["clusterIP"] == "None"
    assert labels_match(service["spec"]["selector"], etcd_set["spec"]["template"]["metadata"]["labels"])
    assert endpoints == [f"etcd-{i}.etcd:2379" for i in range(etcd_set["spec"]["replicas"])]
    assert "coordinator:" not in template and "state_dir:" not in template, "peers have neither"
    peer = etcd_manifest[("DaemonSet", "metad-peer")]["spec"]["template"]["spec"]
    assert peer["terminationGracePeriodSeconds"] > grace_seconds(template)
    assert peer["hostNetwork"] and peer["dnsPolicy"] == "ClusterFirstWithHostNet"


def test_the_etcd_peer_template_starts_peers_that_see_each_other(etcd_manifest, etcd, tmp_path):
    template = etcd_manifest[("ConfigMap", "metad-peer-config")]["data"]["peer.yaml.tmpl"]
    template = re.sub(r"^registry: .*$", f"registry: etcd://{etcd.endpoint}", template, flags=re.M)
    procs, addresses = [], []
    try:
        for node in ("gpu-node-01", "gpu-node-02"):
            port = free_port()
            config = tmp_path / f"{node}.yaml"
            config.write_text(render(template, node, port, port, tmp_path))
            procs.append(subprocess.Popen([str(METAD), "--node-config", str(config)], stdout=subprocess.PIPE,
                                          stderr=subprocess.DEVNULL, text=True))
            assert "listening on" in procs[-1].stdout.readline()
            addresses.append(f"127.0.0.1:{port}")
        for address in addresses:
            wait_for(lambda: "members (2 up of 2)" in metactl("status", "--daemon", address).stdout,
                     what=f"both peers seen from {address}")
            assert f"registry etcd://{etcd.endpoint}: every daemon is a peer" in metactl(
                "status", "--daemon", address, check=0).stdout
    finally:
        for proc in procs:
            proc.terminate()
            assert proc.wait(timeout=10) == 0
            proc.stdout.close()
