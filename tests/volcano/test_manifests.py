"""Every manifest and scheduler configuration shipped in deploy/volcano/, checked against the code.

No Kubernetes cluster is available where these tests run, so nothing here is applied to one: the
manifests are parsed, the args of every topoplace container are parsed by topoplace's own command
line parser, and the extender verbs each scheduler configuration names are posted to a running
`topoplace volcano serve` (a real server on loopback), which must serve every one of them. Volcano's
own loader reads the configurations in tests/volcano/gosched (TestShippedConfLoads and others).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from adapters.volcano.server import VERBS
from solver.cli import build_parser

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "volcano"
LARGE = DEPLOY / "vc-scheduler-large.yaml"
TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
PATCHES = {"extender-sidecar.yaml"}  # applied with `kubectl patch`: a Deployment's fields, no kind


def _documents(path: Path) -> list[dict[str, Any]]:
    try:
        return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except yaml.YAMLError as err:
        pytest.fail(f"{path.name}: not YAML: {err}")


def _manifests() -> list[Path]:
    return sorted(DEPLOY.glob("*.yaml"))


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc.get("spec", {}).get("template", {}).get("spec", {})
    return list(spec.get("containers", [])) + list(spec.get("initContainers", []))


def _topoplace_args(doc: dict[str, Any]) -> list[list[str]]:
    """The argument lists topoplace runs with in the containers of its image: the args (the image's
    entrypoint is ``topoplace``), or each ``topoplace ...`` line of a shell script."""
    found = []
    for c in _containers(doc):
        if not str(c.get("image", "")).startswith("topoplace"):
            continue
        if not c.get("command"):
            found.append([str(a) for a in c.get("args", [])])
            continue
        for line in "\n".join(c.get("args", [])).splitlines():
            words = shlex.split(line.replace("&&", ""))
            if words[:1] == ["topoplace"]:
                found.append(words[1:])
    return found


def _extender_args(conf_text: str, where: str) -> dict[str, Any]:
    conf = yaml.safe_load(conf_text)
    for tier in conf.get("tiers", []):
        for plugin in tier.get("plugins", []):
            if plugin.get("name") == "extender":
                return dict(plugin.get("arguments", {}))
    pytest.fail(f"{where}: no extender plugin")


def _confs() -> list[tuple[str, str]]:
    """(where, text) of every scheduler configuration shipped: the files and the ConfigMaps' copies."""
    found = [(p.name, p.read_text()) for p in sorted(DEPLOY.glob("*.conf"))]
    for path in _manifests():
        for doc in _documents(path):
            if doc.get("kind") == "ConfigMap":
                for key, text in (doc.get("data") or {}).items():
                    if key.endswith(".conf"):
                        found.append((f"{path.name} ConfigMap {doc['metadata']['name']} {key}", text))
    return found


def _serve_args(args: list[str]) -> Any:
    try:
        return build_parser().parse_args(args)
    except SystemExit:
        pytest.fail(f"topoplace refuses the shipped args {shlex.join(args)}")


@pytest.mark.parametrize("path", _manifests(), ids=lambda p: p.name)
def test_every_manifest_parses_and_its_topoplace_args_are_accepted(path: Path) -> None:
    docs = _documents(path)
    assert docs, f"{path.name}: no document"
    runs = 0
    for doc in docs:
        if path.name not in PATCHES:
            assert doc.get("apiVersion") and doc.get("kind"), (
                f"{path.name}: a document without apiVersion/kind"
            )
            assert doc.get("metadata", {}).get("name"), f"{path.name}: a {doc['kind']} without a name"
        for args in _topoplace_args(doc):
            _serve_args(args)
            runs += 1
    images = path.read_text().count("image: topoplace")
    assert runs >= images, f"{path.name}: {images} topoplace containers, {runs} command lines checked"


@pytest.mark.parametrize(("where", "text"), _confs(), ids=lambda v: v if len(v) < 80 else "")
def test_every_configured_verb_is_one_topoplace_serves(where: str, text: str) -> None:
    args = _extender_args(text, where)
    verbs = {k: v for k, v in args.items() if k.endswith("Verb")}
    assert verbs, f"{where}: the extender plugin names no verb"
    unknown = {k: v for k, v in verbs.items() if v not in VERBS}
    assert not unknown, f"{where}: verbs topoplace does not serve (without --verb): {unknown}"
    url = urlsplit(str(args.get("extender.urlPrefix", "")))
    assert url.scheme == "http" and url.port, f"{where}: extender.urlPrefix {url.geturl()!r}"
    assert args.get("extender.ignorable") is False, f"{where}: extender.ignorable must be false"


def test_the_embedded_large_conf_is_volcano_scheduler_large_conf() -> None:
    shipped = yaml.safe_load((DEPLOY / "volcano-scheduler-large.conf").read_text())
    configmaps = [d for d in _documents(LARGE) if d["kind"] == "ConfigMap"]
    assert [yaml.safe_load(c["data"]["volcano-scheduler.conf"]) for c in configmaps] == [shipped]


def test_the_large_deployment_runs_standby_on_loopback_with_its_own_least_privilege_token() -> None:
    docs = {(d["kind"], d["metadata"]["name"]): d for d in _documents(LARGE)}
    deployment = docs[("Deployment", "volcano-scheduler")]
    containers = {c["name"]: c for c in _containers(deployment)}
    scheduler, topoplace = containers["volcano-scheduler"], containers["topoplace"]
    assert "--percentage-nodes-to-find=100" in scheduler["args"]  # the planned node is always scored
    serve = _serve_args(topoplace["args"])
    assert serve.standby and serve.decline_without_plan and serve.host == "127.0.0.1"
    assert serve.all_nodes_scored  # true only with --percentage-nodes-to-find=100
    conf = _extender_args(
        docs[("ConfigMap", "volcano-scheduler-configmap")]["data"]["volcano-scheduler.conf"], ""
    )
    url = urlsplit(conf["extender.urlPrefix"])
    assert (url.hostname, url.port) == ("127.0.0.1", serve.port), (
        "the scheduler must call the sidecar on loopback"
    )
    assert (
        conf["extender.httpTimeout"] == "3s" and serve.http_timeout == 3.0
    )  # the front's budget is Volcano's
    assert conf.get("extender.jobReadyVerb") == "jobReady" and "extender.predicateVerb" not in conf
    mounted = {m["mountPath"]: m["name"] for m in topoplace["volumeMounts"]}
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    secret = docs[("Secret", "topoplace-volcano-token")]
    assert volumes[mounted[TOKEN_PATH]]["secret"]["secretName"] == "topoplace-volcano-token"
    assert secret["type"] == "kubernetes.io/service-account-token"
    account = secret["metadata"]["annotations"]["kubernetes.io/service-account.name"]
    binding = docs[("ClusterRoleBinding", "topoplace-volcano")]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": "volcano-system"}]
    role = docs[("ClusterRole", binding["roleRef"]["name"])]
    rbac = {(d["kind"], d["metadata"]["name"]): d for d in _documents(DEPLOY / "extender-rbac.yaml")}
    assert role["rules"] == rbac[("ClusterRole", "topoplace-volcano")]["rules"]
    granted = {
        (g, r, v)
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    assert granted == {
        ("", "pods", "get"),
        ("", "pods", "patch"),
        ("scheduling.volcano.sh", "podgroups", "get"),
        ("scheduling.volcano.sh", "podgroups", "patch"),
    }


def test_a_running_server_serves_every_configured_verb(service: Any) -> None:
    """Posted with an empty object: any answer but 404 means the verb is routed (an empty object is
    bad input, answered neutrally)."""
    for where, text in _confs():
        for key, verb in _extender_args(text, where).items():
            if key.endswith("Verb"):
                code, reply = service.client.post(verb, {})
                assert code != 404, f"{where}: {key}: {verb} answered 404 {reply}"


def _volcano_version_tested() -> str:
    """The Volcano release the Go harness runs (tests/volcano/gosched/go.mod)."""
    gomod = Path(__file__).resolve().parent / "gosched" / "go.mod"
    for line in gomod.read_text().splitlines():
        parts = line.split()
        if parts[:1] == ["volcano.sh/volcano"]:
            return parts[1]
    pytest.fail("tests/volcano/gosched/go.mod names no volcano.sh/volcano version")


def _release(tag: str) -> tuple[int, ...]:
    return tuple(int(p) for p in tag.lstrip("v").split("."))


@pytest.mark.parametrize("path", _manifests(), ids=lambda p: p.name)
def test_a_shipped_scheduler_image_is_the_release_the_tests_run(path: Path) -> None:
    """The vc-scheduler image a manifest deploys is the Volcano release the Go harness runs, and new
    enough for the verbs its configuration names: the large manifest deployed v1.10.0, which has no
    allocateFunc verb, so its device choice never reached a container."""
    tested = _volcano_version_tested()
    for doc in _documents(path):
        for container in _containers(doc):
            image = str(container.get("image", ""))
            if not image.startswith("volcanosh/vc-scheduler:"):
                continue
            tag = image.rsplit(":", 1)[1]
            assert tag == tested, f"{path.name}: deploys {image}, the tests run Volcano {tested}"
            conf = str(doc) + path.read_text()
            if "allocateFuncVerb" in conf:
                assert _release(tag) >= (1, 13, 3), (
                    f"{path.name}: allocateFunc needs Volcano v1.13.3 or newer"
                )
