"""``make deploy-check``: the Kubernetes manifests, checked offline and run for real.

1. ``kubectl kustomize`` renders each overlay (plain, secure) and ``kubernetes-validate
   --strict`` checks every resource against Kubernetes 1.30's schemas.
2. The plain StatefulSet's pod template is rendered into the Pods a StatefulSet
   controller would make for ordinals 0-2 (the ``apps.kubernetes.io/pod-index`` label the
   downward API reads, the pod name), with what a cluster provides and podman does not
   put in by hand: the kubelet's ``$(VAR)`` expansion of the arguments, each pod's own
   address (host network on loopback, one port per ordinal, where Kubernetes has the
   headless Service's DNS name), and the ReadWriteMany claim as one shared host directory.
3. ``podman kube play`` starts them; a produce/consume round trip; then a pod kill
   (SIGKILL: no supervisor, no notice, so the others wait out the lease) with the producer
   going on, the pod started again, and a graceful pod stop (SIGTERM: its own death
   notice); every acknowledged record is read back.
4. The ``secure`` overlay's pods the same way, their Secrets and ConfigMap as host
   directories (a dev CA from ``kaas certs init``, generated passwords): broker 0's init
   container writes the SCRAM users, the TLS probes pass, and a SASL_SSL round trip as the
   admin.

Run with CONTAINERS_CONF set as the Makefile sets it; exit 0 when everything held.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from kaas.testing import free_ports, wait_for  # noqa: E402

HERE = Path(__file__).resolve().parent
OVERLAYS = ("plain", "secure")
K8S_VERSION = "1.30.0"
ORDINALS = 3
SESSION_MS = 3000  # the brokers' default session timeout (the lease a SIGKILLed pod's keys wait out)
PARTITIONS = 6


def sh(*cmd: str, timeout: float = 120) -> str:
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stdout}{res.stderr}")
    return res.stdout


def render_and_validate(out: Path) -> dict[str, list[dict]]:
    docs = {}
    for overlay in OVERLAYS:
        text = sh("kubectl", "kustomize", str(HERE / "overlays" / overlay))
        path = out / f"{overlay}.yaml"
        path.write_text(text)
        report = sh(sys.executable, "-m", "kubernetes_validate", "--strict", "-k", K8S_VERSION, str(path))
        passed = report.count(" passed ")
        docs[overlay] = [d for d in yaml.safe_load_all(text) if d]
        assert passed == len(docs[overlay]), report
        print(f"{overlay}: {passed} resources rendered and valid against Kubernetes {K8S_VERSION} (--strict)")
    return docs


def expand(value: str, env: dict[str, str]) -> str:
    """The kubelet's ``$(VAR)`` expansion (an unknown reference stays as written)."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), value)


def pod_for(sts: dict, ordinal: int, shared: Path, base_port: int, image: str) -> tuple[dict, int]:
    """The Pod the StatefulSet controller makes for ``ordinal``, adapted to podman as the
    module's docstring says. Returns (pod, its Kafka port)."""
    name = f"{sts['metadata']['name']}-{ordinal}"
    tmpl = copy.deepcopy(sts["spec"]["template"])
    meta = tmpl["metadata"]
    meta["name"] = name
    meta.setdefault("labels", {}).update({"apps.kubernetes.io/pod-index": str(ordinal),
                                          "statefulset.kubernetes.io/pod-name": name})
    spec = tmpl["spec"]
    spec["hostNetwork"] = True
    spec["restartPolicy"] = "Never"  # the check restarts a killed pod itself
    port, metrics = base_port + ordinal, base_port + 100 + ordinal
    (c,) = spec["containers"]
    env = {"POD_INDEX": str(ordinal), "POD_NAME": name, "POD_NAMESPACE": "default"}
    for e in c["env"]:
        if "value" in e:
            env[e["name"]] = e["value"]
    # podman resolves fieldRef for labels and the name, not the namespace
    c["env"] = [e for e in c["env"] if e["name"] != "POD_NAMESPACE"] + [
        {"name": "POD_NAMESPACE", "value": "default"},
        {"name": "KAAS_HEALTH_BOOTSTRAP", "value": f"127.0.0.1:{port}"}]  # the probes' target
    args = [expand(a, env) for a in c["args"]]
    own = {"--listen": f"127.0.0.1:{port}", "--advertise": f"127.0.0.1:{port}", "--metrics-port": str(metrics)}
    for opt in ("--listeners", "--advertised-listeners"):  # NAME://host:port -> this pod's own port
        for a in args:
            if a.startswith(opt + "="):
                own[opt] = re.sub(r"//[^,]*:\d+", f"//127.0.0.1:{port}", a.split("=", 1)[1])
    c["args"] = [f"{a.split('=')[0]}={own[a.split('=')[0]]}" if a.split("=")[0] in own else a for a in args]
    c["image"] = image
    for init in spec.get("initContainers", []):
        init["image"] = image
    c.pop("ports", None)  # host network: nothing to publish
    for v in spec["volumes"]:
        if "persistentVolumeClaim" in v:
            v.pop("persistentVolumeClaim")
            v["hostPath"] = {"path": str(shared), "type": "Directory"}
        for kind in ("secret", "configMap"):  # a host directory holding its keys as files
            if kind in v:
                v.pop(kind)
                v["hostPath"] = {"path": str(shared.parent / f"{kind}-{v['name']}"), "type": "Directory"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}, port


def heartbeat(shared: Path, broker_id: int) -> dict | None:
    try:
        return json.loads((shared / "__cluster" / "brokers" / f"kaas-{broker_id}.json").read_text())
    except (OSError, ValueError):
        return None


def leaders(admin: AdminClient, topic: str) -> dict[int, int]:
    md = admin.list_topics(topic, timeout=5).topics[topic]
    return {p: md.partitions[p].leader for p in md.partitions}


def run_pods(docs: list[dict], image: str, out: Path) -> None:
    (sts,) = [d for d in docs if d["kind"] == "StatefulSet"]
    shared = Path(tempfile.mkdtemp(prefix="kaas-kube-play-"))
    os.chown(shared, 10001, 10001)  # the pod's fsGroup/runAsUser own the shared directory
    base = free_ports(101 + ORDINALS)
    pods, ports = [], []
    for i in range(ORDINALS):
        pod, port = pod_for(sts, i, shared, base, image)
        path = out / f"pod-{i}.yaml"
        path.write_text(yaml.safe_dump(pod, sort_keys=False))
        pods.append(path)
        ports.append(port)
    bootstrap = ",".join(f"127.0.0.1:{p}" for p in ports)
    t0 = time.monotonic()
    try:
        for path in pods:
            sh("podman", "kube", "play", str(path))
        for i, port in enumerate(ports):
            wait_for(lambda port=port: subprocess.run([sys.executable, "-m", "kaas.cli", "health", "-q",
                                                       "--bootstrap", f"127.0.0.1:{port}"]).returncode == 0,
                     60, f"pod kaas-{i} healthy", interval=0.5)
            beat = wait_for(lambda i=i: heartbeat(shared, i), 10, f"broker {i}'s heartbeat")
            assert beat["broker_id"] == i and beat["pid"] == 1, beat  # the ordinal, as PID 1
        print(f"{ORDINALS} pods up and healthy in {time.monotonic() - t0:.1f} s; broker id = pod ordinal, PID 1")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("kube-play", PARTITIONS, 1)], operation_timeout=15)["kube-play"].result()
        wait_for(lambda: set(leaders(admin, "kube-play").values()) == set(range(ORDINALS)), 20,
                 "every broker leads partitions")
        acked: list[int] = []
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                      "message.timeout.ms": 60000})

        def send(start: int, n: int) -> None:
            for k in range(start, start + n):
                p.produce("kube-play", str(k).encode(), partition=k % PARTITIONS,
                          on_delivery=lambda err, m: None if err else acked.append(int(m.value())))
            assert p.flush(60) == 0

        send(0, 300)
        print(f"round trip: {len(acked)} records acknowledged")
        # a pod kill: SIGKILL, nothing tells the others; they take over when its lease runs out
        victim = 1
        t1 = time.monotonic()
        sh("podman", "pod", "kill", f"kaas-{victim}")
        wait_for(lambda: victim not in leaders(admin, "kube-play").values()
                 and -1 not in leaders(admin, "kube-play").values(), 30, "the killed pod's partitions moved")
        moved = time.monotonic() - t1
        send(300, 300)
        print(f"pod kaas-{victim} killed: its partitions led elsewhere after {moved:.2f} s "
              f"(session timeout {SESSION_MS / 1000:.0f} s); 300 more records acknowledged")
        sh("podman", "pod", "rm", "-f", f"kaas-{victim}")
        sh("podman", "kube", "play", str(pods[victim]))  # the StatefulSet controller's replacement
        wait_for(lambda: victim in leaders(admin, "kube-play").values(), 40, "the replacement leads again")
        send(600, 300)
        # a graceful stop (a pod deletion): SIGTERM, the broker hands over and leaves its notice
        t2 = time.monotonic()
        sh("podman", "pod", "stop", "-t", "30", "kaas-2")
        stopped = time.monotonic() - t2
        notice = json.loads((shared / "__cluster" / "deaths" / "kaas-2.json").read_text())
        assert notice["graceful"] is True, notice
        send(900, 300)
        print(f"pod kaas-2 stopped gracefully in {stopped:.2f} s with its own death notice; 300 more acknowledged")
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "kube-play-check", "auto.offset.reset": "earliest",
                      "enable.auto.commit": False})
        c.assign([TopicPartition("kube-play", q, 0) for q in range(PARTITIONS)])
        got: set[int] = set()
        try:
            wait_for(lambda: got.update(int(m.value()) for m in c.consume(500, 0.5) if m.error() is None)
                     or set(acked) <= got, 60, "every acknowledged record read back")
        finally:
            c.close()
        assert len(acked) == 1200, len(acked)
        print(f"read back all {len(acked)} acknowledged records")
    finally:
        for i in range(ORDINALS):
            subprocess.run(["podman", "pod", "rm", "-f", "-t", "5", f"kaas-{i}"], capture_output=True)
        subprocess.run(["rm", "-rf", str(shared)], check=False)


def secure_material(docs: list[dict], shared: Path) -> dict[str, str]:
    """The secure overlay's Secrets and ConfigMap as host directories beside ``shared``
    (``pod_for`` mounts them): a dev CA and a broker certificate for 127.0.0.1, generated
    passwords, the rendered probe.properties. Returns the admin's client settings."""
    import secrets

    tls, sasl, probe = (shared.parent / f"{k}" for k in ("secret-tls", "secret-sasl", "configMap-probe"))
    for d in (tls, sasl, probe):
        d.mkdir()
    certs = shared.parent / "certs"
    sh(sys.executable, "-m", "kaas.cli", "certs", "init", str(certs), "--san", "127.0.0.1")
    for src, dst in (("broker.pem", "tls.crt"), ("broker.key", "tls.key"), ("ca.pem", "ca.crt")):
        (tls / dst).write_bytes((certs / src).read_bytes())
    admin = secrets.token_urlsafe(16)
    (sasl / "broker-password").write_text(secrets.token_urlsafe(16))
    (sasl / "admin-password").write_text(admin)
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    for key, text in cm["data"].items():
        (probe / key).write_text(text)
    for d in (tls, sasl, probe):
        os.chown(d, 10001, 10001)
        for f in d.iterdir():
            os.chown(f, 10001, 10001)
            f.chmod(0o440)
    return {"security.protocol": "SASL_SSL", "ssl.ca.location": str(certs / "ca.pem"),
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "admin", "sasl.password": admin}


def run_secure_pods(docs: list[dict], image: str, out: Path) -> None:
    (sts,) = [d for d in docs if d["kind"] == "StatefulSet"]
    root = Path(tempfile.mkdtemp(prefix="kaas-kube-play-secure-"))
    shared = root / "data"
    shared.mkdir()
    os.chown(shared, 10001, 10001)
    conf = secure_material(docs, shared)
    base = free_ports(101 + ORDINALS)
    ports = []
    try:
        t0 = time.monotonic()
        for i in range(ORDINALS):
            pod, port = pod_for(sts, i, shared, base, image)
            path = out / f"secure-pod-{i}.yaml"
            path.write_text(yaml.safe_dump(pod, sort_keys=False))
            sh("podman", "kube", "play", str(path))
            ports.append(port)
        probe = root / "configMap-probe" / "probe.properties"
        host_probe = root / "probe.properties"  # the probe's settings with the CA's host path
        host_probe.write_text(probe.read_text().replace("/etc/kaas/tls/ca.crt", str(root / "secret-tls" / "ca.crt")))
        for i, port in enumerate(ports):
            wait_for(lambda port=port: subprocess.run(
                [sys.executable, "-m", "kaas.cli", "health", "-q", "--bootstrap", f"127.0.0.1:{port}",
                 "--command-config", str(host_probe)]).returncode == 0, 60, f"secure pod kaas-{i} healthy (TLS)",
                interval=0.5)
        assert (shared / "__cluster" / "security" / "scram-credentials.json").exists(), "no SCRAM users"
        print(f"secure: {ORDINALS} pods healthy over TLS in {time.monotonic() - t0:.1f} s; "
              "the init container wrote the SCRAM users")
        conf["bootstrap.servers"] = ",".join(f"127.0.0.1:{p}" for p in ports)
        admin = AdminClient(conf)
        admin.create_topics([NewTopic("kube-play-secure", 3, 1)], operation_timeout=15)["kube-play-secure"].result()
        p = Producer({**conf, "acks": "all"})
        for k in range(60):
            p.produce("kube-play-secure", str(k).encode(), partition=k % 3)
        assert p.flush(60) == 0
        c = Consumer({**conf, "group.id": "kube-play-secure", "auto.offset.reset": "earliest"})
        c.assign([TopicPartition("kube-play-secure", q, 0) for q in range(3)])
        got: set[int] = set()
        try:
            wait_for(lambda: got.update(int(m.value()) for m in c.consume(100, 0.5) if m.error() is None)
                     or len(got) >= 60, 60, "the secure round trip")
        finally:
            c.close()
        print("secure: SASL_SSL round trip as the admin (SCRAM-SHA-512): 60 records")
    finally:
        for i in range(ORDINALS):
            subprocess.run(["podman", "pod", "rm", "-f", "-t", "5", f"kaas-{i}"], capture_output=True)
        subprocess.run(["rm", "-rf", str(root)], check=False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--image", default="localhost/kaas:latest")
    ap.add_argument("--no-pods", action="store_true", help="Render and validate only.")
    ap.add_argument("--overlay", choices=OVERLAYS, default=None, help="Run only this overlay's pods.")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kaas-deploy-check-") as tmp:
        docs = render_and_validate(Path(tmp))
        if not args.no_pods:
            if args.overlay in (None, "plain"):
                run_pods(docs["plain"], args.image, Path(tmp))
            if args.overlay in (None, "secure"):
                run_secure_pods(docs["secure"], args.image, Path(tmp))
    print("deploy-check: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
