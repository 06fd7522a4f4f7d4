"""The extender secure by default (issue 23 item 5): loopback, bounded reads, bodies and connections,
a real backlog, 400 for malformed bodies, and no patch on a request's word alone.

The HTTP tests run the real server on 127.0.0.1 with raw sockets (what a slow or hostile client
does). The patch tests use stand-ins for the Kubernetes API (no API server runs here) that answer
with the ``kubernetes`` client's real models.
"""

from __future__ import annotations

import copy
import random
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiException, V1ObjectMeta, V1Pod, V1PodSpec, V1PodStatus

from adapters.volcano import annotations as ann
from adapters.volcano import cli, wire
from adapters.volcano.extender import Config, Extender
from adapters.volcano.hypernodes import HyperNode
from adapters.volcano.patcher import KubernetesPatcher, NamespacePolicy, PatchError, RecordingPatcher
from adapters.volcano.server import LOOPBACK, Limits, RunningServer, serve

from .conftest import CapturingSolve, Client


def _extender(**kw: Any) -> Extender:
    return Extender(solve=CapturingSolve(), patcher=kw.pop("patcher", None) or _NoPatch(), **kw)


class _NoPatch:
    def patch_pod(self, *a: Any) -> None:
        raise AssertionError("no patch expected")

    patch_podgroup = patch_pod


@pytest.fixture
def small() -> Iterator[RunningServer]:
    """A server with small limits, so each bound is reached in milliseconds."""
    extender = _extender()
    running = serve(
        extender,
        port=0,
        limits=Limits(
            max_body_bytes=10_000, large_body_bytes=1_000, read_timeout_s=0.6, max_connections=4, backlog=256
        ),
    )
    try:
        yield running
    finally:
        running.stop()
        extender.close()


def _connect(running: RunningServer) -> socket.socket:
    return socket.create_connection((LOOPBACK, running.port), timeout=5)


def _closed_within(sock: socket.socket, seconds: float) -> float:
    """Seconds until the server closes ``sock`` (reads until EOF); fails past ``seconds``."""
    started = time.monotonic()
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass
    return time.monotonic() - started


def test_loopback_is_the_default() -> None:
    extender = _extender()
    running = serve(extender, port=0)
    try:
        assert running.server.server_address[0] == "127.0.0.1"
    finally:
        running.stop()
        extender.close()
    parser = cli.argparse.ArgumentParser()
    cli.add_commands(parser.add_subparsers())
    args = parser.parse_args(["volcano", "serve"])
    assert args.host == "127.0.0.1" and args.read_timeout == 10.0 and args.max_connections == 64


def test_a_slow_client_is_cut_off_at_the_read_deadline(small: RunningServer) -> None:
    """Slowloris: a byte every 0.2 s never trips a socket idle timeout; the read deadline (0.6 s)
    closes the connection anyway, and the server keeps answering others."""
    slow = _connect(small)
    slow.sendall(b"POST /predicate HTTP/1.1\r\nHost: x\r\n")
    closed = threading.Event()

    def trickle() -> None:
        try:
            for _ in range(40):
                slow.sendall(b"X")
                time.sleep(0.2)
        except OSError:
            closed.set()

    writer = threading.Thread(target=trickle, daemon=True)
    writer.start()
    assert closed.wait(3), "the slow client was not cut off"
    slow.close()
    assert Client(small.url).get("healthz") == {"ok": True, "solverReady": True}


def test_a_stalled_body_is_cut_off(small: RunningServer) -> None:
    sock = _connect(small)
    sock.sendall(b'POST /predicate HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{"task":')
    assert _closed_within(sock, 3) < 2.5
    sock.close()


def test_bodies_over_the_cap_are_refused_unread(small: RunningServer) -> None:
    code, reply = Client(small.url).post("onSessionOpen", None, raw=b"x" * 10_001)
    assert code == 413 and "10000-byte cap" in reply["error"]


def test_a_client_that_resets_its_connection_is_one_quiet_line(
    small: RunningServer, capfd: pytest.CaptureFixture[str]
) -> None:
    """A client gone mid-request (a scheduler restarted) is routine: no raw traceback on the
    extender's stderr (socketserver printed 15 lines per reset), and the next call is answered."""
    for _ in range(3):
        gone = _connect(small)
        time.sleep(0.05)  # the server's thread is reading the request line
        # Closed with a zero linger: the kernel sends RST, so the server's read fails with a reset.
        gone.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        gone.close()
    time.sleep(0.3)  # the server's threads meet the resets
    code, reply = Client(small.url).post("onSessionOpen", None, raw=b"{")
    assert code == 400 and reply["error"]
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception occurred" not in err


def test_one_large_body_at_a_time(small: RunningServer) -> None:
    """Volcano sends one snapshot per session; a second large body while one is being read is refused."""
    first = _connect(small)
    first.sendall(b"POST /onSessionOpen HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n{")
    deadline = time.monotonic() + 5
    while not small.server.large.locked() and time.monotonic() < deadline:
        time.sleep(0.01)  # until the server is reading the first body
    assert small.server.large.locked()
    code, reply = Client(small.url).post("onSessionOpen", None, raw=b"{" + b" " * 2000 + b"}")
    assert code == 503 and "large request" in reply["error"]
    first.close()


def test_connections_over_the_cap_get_503_not_a_hang(small: RunningServer) -> None:
    held = [_connect(small) for _ in range(4)]
    for sock in held:  # each is being served (waiting for its request line)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b"200 OK" in sock.recv(4096)
    extra = _connect(small)
    extra.settimeout(5)
    assert extra.recv(4096).startswith(b"HTTP/1.1 503")
    for sock in (*held, extra):
        sock.close()


def test_a_burst_of_clients_is_answered_not_reset() -> None:
    """200 clients connect at once: the listen backlog holds them; each gets 200 or 503, none a reset."""
    extender = _extender()
    running = serve(extender, port=0, limits=Limits(max_connections=16))
    outcomes: list[str] = []
    lock = threading.Lock()

    def one() -> None:
        try:
            with socket.create_connection((LOOPBACK, running.port), timeout=10) as sock:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                status = sock.recv(64).split(b" ")[1].decode()
        except OSError as err:
            status = type(err).__name__
        with lock:
            outcomes.append(status)

    try:
        threads = [threading.Thread(target=one) for _ in range(200)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    finally:
        running.stop()
        extender.close()
    assert len(outcomes) == 200 and set(outcomes) <= {"200", "503"}, sorted(set(outcomes))


@pytest.mark.parametrize(
    "raw",
    [b"[" * 200_000 + b"]" * 200_000, b'{"task": ' * 50_000, b"\xff\xfe", b"", b'{"task": 3}', b"[]"],
    ids=["nested-array", "nested-object", "not-utf8", "empty", "task-not-object", "not-an-object"],
)
def test_malformed_bodies_are_400(raw: bytes) -> None:
    extender = _extender()
    running = serve(extender, port=0)  # the default 256 MiB cap: the nesting is what is refused
    try:
        code, reply = Client(running.url).post("predicate", None, raw=raw)
    finally:
        running.stop()
        extender.close()
    assert code == 400 and reply["error"]


# --------------------------------------------------------------------------- patches


class FakeCore:
    """CoreV1Api stand-in: one pod per (namespace, name), as the client's own model objects."""

    def __init__(self, pods: dict[tuple[str, str], V1Pod], conflicts: int = 0) -> None:
        self.pods, self.patches, self.conflicts = pods, [], conflicts

    def read_namespaced_pod(self, name: str, namespace: str, **kw: Any) -> V1Pod:
        if (namespace, name) not in self.pods:
            raise ApiException(status=404, reason="Not Found")
        return self.pods[(namespace, name)]

    def patch_namespaced_pod(self, name: str, namespace: str, body: Any, **kw: Any) -> None:
        if self.conflicts:
            self.conflicts -= 1
            raise ApiException(status=409, reason="Conflict")
        self.patches.append((namespace, name, body))


def _pod(ns: str, name: str, *, scheduler: str = "volcano", phase: str = "Pending", node: str = "") -> V1Pod:
    return V1Pod(
        metadata=V1ObjectMeta(name=name, namespace=ns, uid=f"uid-{name}", resource_version="1"),
        spec=V1PodSpec(containers=[], scheduler_name=scheduler, node_name=node or None),
        status=V1PodStatus(phase=phase),
    )


def _devices(node: str) -> dict[str, str | None]:
    return {ann.DEVICES: ann.DeviceAnnotation(node=node, job="j", role="r", member=0).value()}


@pytest.mark.parametrize(
    ("pod", "notes", "reason"),
    [
        (_pod("kube-system", "coredns"), _devices("n1"), "namespace 'kube-system'"),
        (
            _pod("team", "p", scheduler="default-scheduler"),
            _devices("n1"),
            "scheduled by 'default-scheduler'",
        ),
        (_pod("team", "p", phase="Running", node="n1"), _devices("n1"), "Running, not Pending"),
        (_pod("team", "p", node="n2"), _devices("n1"), "bound to n2, the plan names n1"),
        (_pod("team", "p", node="n1"), ann.removal(), "already bound to n1"),
    ],
    ids=["system-namespace", "other-scheduler", "running", "bound-elsewhere", "removal-when-bound"],
)
def test_patches_a_request_alone_cannot_justify_are_refused(
    pod: V1Pod, notes: dict[str, str | None], reason: str
) -> None:
    core = FakeCore({(pod.metadata.namespace, pod.metadata.name): pod})
    patcher = KubernetesPatcher(core=core, custom=object())
    with pytest.raises(PatchError, match=reason):
        patcher.patch_pod(pod.metadata.namespace, pod.metadata.name, notes)
    assert core.patches == []


def test_patch_preconditions_and_conflict_retry() -> None:
    pod = _pod("team", "p", node="n1")
    core = FakeCore({("team", "p"): pod}, conflicts=1)
    KubernetesPatcher(core=core, custom=object()).patch_pod("team", "p", _devices("n1"))
    ((ns, name, body),) = core.patches
    assert (ns, name) == ("team", "p")
    assert body["metadata"]["uid"] == "uid-p" and body["metadata"]["resourceVersion"] == "1"
    with pytest.raises(PatchError, match="404"):
        KubernetesPatcher(core=core, custom=object()).patch_pod("team", "gone", _devices("n1"))
    fresh = _pod("team", "new")
    fresh.status = V1PodStatus()  # a pod the kubelet has not reported on yet: no phase, still Pending
    core.pods[("team", "new")] = fresh
    KubernetesPatcher(core=core, custom=object()).patch_pod("team", "new", _devices("n1"))
    assert core.patches[-1][1] == "new"
    only = KubernetesPatcher(core=core, custom=object(), namespaces=NamespacePolicy.parse("ml"))
    with pytest.raises(PatchError, match="namespace 'team'"):
        only.patch_pod("team", "p", _devices("n1"))


def test_a_forged_session_cannot_patch_a_system_pod(
    body: dict[str, Any], hypernodes: tuple[HyperNode, ...]
) -> None:
    """The probe of issue 23: a forged onSessionOpen puts a kube-system pod in a job, a forged
    allocateFunc asks for its devices; the API is never asked to patch it. allocateFunc answers no
    error (Volcano would roll the task back): the refusal is recorded in ``/status``."""
    forged = copy.deepcopy(body)
    job = forged["Jobs"]["team-b/notebook"]
    task = next(iter(job["Tasks"].values()))
    task["Namespace"] = task["Pod"]["metadata"]["namespace"] = "kube-system"
    core = FakeCore({("kube-system", task["Name"]): _pod("kube-system", task["Name"])})
    extender = Extender(
        solve=CapturingSolve(),
        patcher=KubernetesPatcher(core=core, custom=object()),
        hypernodes=lambda: hypernodes,
        config=Config(http_timeout_s=20.0, margin_s=0.5),
    )
    running = serve(extender, port=0)
    try:
        client = Client(running.url)
        client.ok("onSessionOpen", forged)
        node = extender.plan.assignments[task["UID"]].node
        reply = client.ok("allocateFunc", {"task": {**task, "NodeName": node, "Status": wire.ALLOCATED}})
        failures = extender.status_view()["patchFailures"]
    finally:
        running.stop()
        extender.close()
    assert not reply.get("errorMessage") and core.patches == []
    assert any("namespace 'kube-system'" in f for f in failures)


def test_deployment_is_least_privilege_and_loopback() -> None:
    """What the operator applies keeps the promises: sidecar on loopback and Volcano pointed at it,
    RBAC no wider than get/patch on pods and PodGroups, a NetworkPolicy for the separate layout."""
    import yaml

    deploy = Path(__file__).resolve().parents[2] / "deploy" / "volcano"
    sidecar = yaml.safe_load((deploy / "extender-sidecar.yaml").read_text())
    (container,) = sidecar["spec"]["template"]["spec"]["containers"]
    assert "--host=127.0.0.1" in container["args"]
    assert "extender.urlPrefix: http://127.0.0.1:8888" in (deploy / "volcano-scheduler.conf").read_text()
    rules = [
        rule
        for f in ("extender-rbac.yaml", "extender.yaml")
        for doc in yaml.safe_load_all((deploy / f).read_text())
        if doc and doc["kind"] == "ClusterRole"
        for rule in doc["rules"]
    ]
    assert rules and all(set(r["verbs"]) <= {"get", "patch"} for r in rules)
    assert {res for r in rules for res in r["resources"]} == {"pods", "podgroups"}
    separate = list(yaml.safe_load_all((deploy / "extender.yaml").read_text()))
    (policy,) = [d for d in separate if d["kind"] == "NetworkPolicy"]
    assert policy["spec"]["ingress"][0]["from"] == [
        {"podSelector": {"matchLabels": {"app": "volcano-scheduler"}}}
    ]


def _paths(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        yield from _paths(item, (*path, key))


def test_mutated_bodies_are_answered_200_or_400_never_500(
    body: dict[str, Any], hypernodes: tuple[HyperNode, ...]
) -> None:
    """300 seeded mutations of real per-task bodies (one value replaced by another JSON type): every
    answer is 200 or 400. A fuzz run found a 500 that also held the server for seconds — a container's
    ``resources`` not an object, and the traceback rendered with its frames' locals (the whole
    snapshot) — kept below as its own case."""
    extender = Extender(
        solve=CapturingSolve(), patcher=RecordingPatcher(), hypernodes=lambda: hypernodes,
        config=Config(http_timeout_s=20.0, margin_s=0.5),
    )  # fmt: skip
    running = serve(extender, port=0)
    client = Client(running.url)
    try:
        client.ok("onSessionOpen", body)
        job = body["Jobs"]["team-b/notebook"]
        task = next(iter(job["Tasks"].values()))
        planned = extender.plan.assignments[task["UID"]].node
        node = body["Nodes"][planned]
        allocated = {**task, "NodeName": planned, "Status": wire.ALLOCATED}
        bodies = [
            ("predicate", {"task": task, "node": node}),
            ("prioritize", {"task": task, "nodes": [node]}),
            ("allocateFunc", {"task": allocated}),
            ("deallocateFunc", {"task": allocated}),
            ("jobReady", {"job": job}),
        ]
        values: list[Any] = [
            None,
            1,
            -1,
            1.5,
            "x",
            "",
            True,
            [],
            {},
            [1],
            {"a": 1},
            10**30,
            "GPU-a,NVIDIA,1,1:",
        ]
        rng = random.Random(7)
        answers: dict[int, list[str]] = {}
        for _ in range(300):
            verb, original = rng.choice(bodies)
            mutated = copy.deepcopy(original)
            path = rng.choice(list(_paths(mutated))[1:])
            parent = mutated
            for key in path[:-1]:
                parent = parent[key]
            parent[path[-1]] = rng.choice(values)
            code, _ = client.post(verb, mutated)
            answers.setdefault(code, []).append(f"{verb} {'.'.join(map(str, path))}")
        assert set(answers) <= {200, 400}, {c: v[:5] for c, v in answers.items() if c not in (200, 400)}
        found = copy.deepcopy(allocated)
        found["Pod"]["spec"]["containers"][0]["resources"]["requests"] = "x"
        started = time.monotonic()
        code, reply = client.post("allocateFunc", {"task": found})
        assert code == 400 and "resources.requests" in reply["error"] and time.monotonic() - started < 2
    finally:
        running.stop()
        extender.close()
