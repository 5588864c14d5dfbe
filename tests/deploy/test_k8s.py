"""deploy/k8s: `kubectl kustomize` renders the base, every object passes the
Kubernetes schema (kubernetes-validate, strict), the objects are wired to each
other and to the image, and the ConfigMap's disque.conf, the StatefulSet's
environment and its probe and hook commands run for real on a node."""

from __future__ import annotations

import re

import pytest
import yaml

from tests.deploy.deploy_kit import (
    K8S, EntrypointNode, conf_directives, ctl, ctl_variables, entrypoint_variables, image_env,
    run, tool,
)
from tests.deploy.test_docker import instructions, values

VERSIONS = ["1.27.0", "1.37.0"]  # oldest and newest schemas kubernetes-validate has here


@pytest.fixture(scope="module")
def objects() -> dict[str, dict]:
    res = run([tool("kubectl", "run `make deps` (Debian's kubernetes-client)"), "kustomize", str(K8S)])
    assert res.returncode == 0, res.stderr
    docs = [d for d in yaml.safe_load_all(res.stdout) if d]
    by_kind: dict[str, dict] = {}
    for d in docs:
        key = d["kind"] if d["kind"] != "Service" else (
            "HeadlessService" if d["spec"].get("clusterIP") == "None" else "Service")
        assert key not in by_kind, f"two {key} objects"
        by_kind[key] = d
    assert set(by_kind) == {"StatefulSet", "HeadlessService", "Service", "PodDisruptionBudget",
                            "ConfigMap"}
    return by_kind


@pytest.mark.parametrize("version", VERSIONS)
def test_every_object_passes_the_kubernetes_schema(objects, version):
    import kubernetes_validate

    for obj in objects.values():
        kubernetes_validate.validate(obj, version, strict=True)


def container(objects) -> dict:
    (c,) = objects["StatefulSet"]["spec"]["template"]["spec"]["containers"]
    return c


def env_of(objects) -> dict[str, dict]:
    return {e["name"]: e for e in container(objects)["env"]}


def test_services_budget_and_statefulset_select_the_same_pods(objects):
    sts = objects["StatefulSet"]["spec"]
    labels = sts["template"]["metadata"]["labels"]
    assert sts["selector"]["matchLabels"].items() <= labels.items()
    for kind in ("Service", "HeadlessService"):
        assert objects[kind]["spec"]["selector"].items() <= labels.items()
    assert objects["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert objects["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1

    headless = objects["HeadlessService"]
    assert sts["serviceName"] == headless["metadata"]["name"]
    # Peers loading their AOF (not ready) must still be found by name.
    assert headless["spec"]["publishNotReadyAddresses"] is True
    port = int(env_of(objects)["DISQUETTE_PORT"]["value"])
    ports = {p["name"]: p["containerPort"] for p in container(objects)["ports"]}
    assert ports == {"client": port, "bus": port + 10000}
    for kind in ("Service", "HeadlessService"):
        for p in objects[kind]["spec"]["ports"]:
            assert ports[p["targetPort"]] == p["port"]


def test_config_volume_and_environment_reach_the_entrypoint(objects):
    c = container(objects)
    pod = objects["StatefulSet"]["spec"]["template"]["spec"]
    env = env_of(objects)
    assert set(env) <= set(entrypoint_variables()), "variables the entrypoint ignores"
    assert env["DISQUETTE_ANNOUNCE_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    # The password (optional Secret) reaches the server and the probes alike.
    assert "DISQUETTE_REQUIREPASS" in ctl_variables()
    assert env["DISQUETTE_REQUIREPASS"]["valueFrom"]["secretKeyRef"]["optional"] is True

    mounts = {m["name"]: m for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    config = objects["ConfigMap"]
    assert volumes["config"]["configMap"]["name"] == config["metadata"]["name"]  # hashed name
    assert "disque.conf" in config["data"]
    assert env["DISQUETTE_CONFIG"]["value"] == mounts["config"]["mountPath"] + "/disque.conf"
    # The AOF and nodes.conf go to the pod's own volume.
    (claim,) = objects["StatefulSet"]["spec"]["volumeClaimTemplates"]
    assert mounts[claim["metadata"]["name"]]["mountPath"] == env["DISQUETTE_DIR"]["value"]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    # The same data dir and uid as the image.
    assert env["DISQUETTE_DIR"]["value"] == image_env()["DISQUETTE_DIR"]
    uid, gid = values(instructions(), "USER")[-1].split(":")
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["fsGroup"]) == (int(uid), int(gid))


def test_security_context(objects):
    pod = objects["StatefulSet"]["spec"]["template"]["spec"]
    sc = container(objects)["securityContext"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert pod["automountServiceAccountToken"] is False


def test_probes_and_hooks(objects):
    c = container(objects)
    pod = objects["StatefulSet"]["spec"]["template"]["spec"]
    assert c["readinessProbe"]["exec"]["command"] == ["disquette-ctl", "ready"]
    assert c["livenessProbe"]["exec"]["command"] == ["disquette-ctl", "alive"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["timeoutSeconds"] > 5, "disquette-ctl waits up to 5 s for an answer"
    assert c["lifecycle"]["postStart"]["exec"]["command"][:2] == ["disquette-ctl", "rejoin"]
    drain = c["lifecycle"]["preStop"]["exec"]["command"]
    assert drain[:2] == ["disquette-ctl", "drain"]
    # The pod lives long enough for the drain, then for SIGTERM to flush the AOF.
    assert int(drain[2]) + 30 <= pod["terminationGracePeriodSeconds"]


def test_seeds_name_the_pods_through_the_headless_service(objects):
    conf = conf_directives(objects["ConfigMap"]["data"]["disque.conf"])
    (seeds,) = [args for name, *args in conf if name == "cluster-seeds"]
    sts = objects["StatefulSet"]
    name, service = sts["metadata"]["name"], sts["spec"]["serviceName"]
    port = env_of(objects)["DISQUETTE_PORT"]["value"]
    entries = seeds[0].split(",")
    assert entries
    for entry in entries:
        m = re.fullmatch(rf"{name}-(\d+)\.{service}:(\d+)", entry)
        assert m, f"{entry!r} is not <pod>.<headless service>:<port>"
        assert int(m.group(1)) < sts["spec"]["replicas"] and m.group(2) == port


def test_the_pods_config_probes_and_hooks_run_on_a_real_node(objects, tmp_path):
    """The ConfigMap's disque.conf and the StatefulSet's environment, through
    the image's entrypoint, give a node that the manifest's own probe and hook
    commands find ready, drain and rejoin."""
    conf = tmp_path / "disque.conf"
    # Its seeds name pods that do not resolve here: the node runs alone.
    conf.write_text(objects["ConfigMap"]["data"]["disque.conf"])
    env = {e["name"]: e["value"] for e in container(objects)["env"] if "value" in e}
    # This machine's stand-ins for the pod's file, address, port and volume.
    env["DISQUETTE_CONFIG"] = str(conf)
    env["DISQUETTE_ANNOUNCE_IP"] = "127.0.0.1"
    del env["DISQUETTE_PORT"], env["DISQUETTE_DIR"]  # EntrypointNode sets free ones
    n = EntrypointNode(tmp_path / "pod", env=env)
    with n:
        config = n.client().config_get("*")
        assert config["appendonly"] == "yes"
        assert config["cluster-announce-ip"] == "127.0.0.1"
        assert config["dir"] == str(n.dir)
        c = container(objects)
        for hook in (c["readinessProbe"], c["livenessProbe"], c["lifecycle"]["postStart"],
                     c["lifecycle"]["preStop"]):
            argv = hook["exec"]["command"]
            res = ctl(*argv[1:], port=n.port)
            assert res.returncode == 0, (argv, res.stdout, res.stderr)
        # preStop left it leaving and drained (no jobs); postStart undoes it.
        assert n.client().execute_command("CLUSTER", "LEAVING") == b"yes"
        res = ctl(*c["lifecycle"]["postStart"]["exec"]["command"][1:], port=n.port)
        assert res.returncode == 0
        assert n.client().execute_command("CLUSTER", "LEAVING") == b"no"
