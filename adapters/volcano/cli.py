"""``topoplace volcano serve`` and ``topoplace node-report``, registered through the
``topoplace.commands`` entry point (the core CLI never imports adapters by name).

Exit codes follow the core CLI: 0 ok, 2 bad input (each problem on stderr), 3 an API call failed.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from solver.domain.errors import InvalidRequest, Problem

EXIT_OK, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 2, 3


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add ``volcano serve`` to the ``topoplace`` parser."""
    volcano = subparsers.add_parser("volcano", help="Volcano adapter: the scheduler extender service")
    commands = volcano.add_subparsers(required=True, metavar="COMMAND")
    serve = commands.add_parser("serve", help="serve Volcano's extender plugin over HTTP")
    serve.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default loopback: run it as a sidecar of volcano-scheduler; Volcano's "
        "client cannot authenticate itself, so any other address needs a NetworkPolicy)",
    )
    serve.add_argument("--port", type=int, default=8888)
    serve.add_argument(
        "--max-body-mib",
        type=_positive,
        default=256,
        metavar="MIB",
        help="largest request body (default 256)",
    )
    serve.add_argument(
        "--read-timeout",
        type=_duration,
        default=10.0,
        metavar="DURATION",
        help="time a client has to send a whole request, and the idle time of a kept-alive connection "
        "(default 10s)",
    )
    serve.add_argument(
        "--max-connections",
        type=_positive,
        default=64,
        metavar="N",
        help="connections served at once; more are answered 503 (default 64)",
    )
    serve.add_argument(
        "--scheduler-name",
        action="append",
        default=[],
        metavar="NAME",
        help="a schedulerName whose pods may be patched (repeatable; default volcano)",
    )
    serve.add_argument(
        "--namespaces",
        default="",
        metavar="NS,NS",
        help="the only namespaces whose pods and PodGroups may be patched (default: all but "
        "kube-system, kube-public, kube-node-lease)",
    )
    serve.add_argument(
        "--solver", metavar="HOST:PORT", help="a topoplace gRPC server (default: solve in process)"
    )
    serve.add_argument(
        "--hypernodes", type=Path, help="HyperNode YAML/JSON file or directory (reloaded on change)"
    )
    serve.add_argument(
        "--http-timeout",
        type=_duration,
        default=1.0,
        metavar="DURATION",
        help="Volcano's extender.httpTimeout, e.g. 1s or 500ms (default 1s)",
    )
    serve.add_argument(
        "--planned-score",
        type=float,
        default=None,
        help="prioritize score of the planned node (default 1e6: above the sum of the other plugins')",
    )
    serve.add_argument(
        "--decline-without-plan",
        action="store_true",
        help="answer onSessionOpen 503 when the session has no plan, so that Volcano's extender plugin "
        "(ignorable: false) registers no verb and schedules alone without a call per task "
        "(recommended with deploy/volcano/volcano-scheduler-large.conf)",
    )
    # A newly submitted PodGroup is Pending when the session opens; the enqueue action admits it and
    # allocate places it in that same session, so leaving Pending out would let Volcano place every
    # new job on its own first.
    serve.add_argument(
        "--plan-pending",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="plan PodGroups still in phase Pending (default; --no-plan-pending: only Inqueue/Running)",
    )
    serve.add_argument(
        "--all-nodes-scored",
        action="store_true",
        help="vc-scheduler runs with --percentage-nodes-to-find=100, so each prioritize call lists every "
        "node Volcano's predicates pass: a planned node missing from it was refused by a rule topoplace "
        "does not model; its job is held that session and re-planned without the node",
    )
    serve.add_argument("--packing", choices=("binpack", "spread"), default="binpack")
    serve.add_argument(
        "--batch-order",
        choices=("joint", "largest-first", "best-of-orders"),
        default="joint",
        help="a session's PodGroups solved as one model, one at a time largest first, or one at a time "
        "in several orders keeping the best plan",
    )
    serve.add_argument(
        "--order-shuffles",
        type=_shuffles,
        default=3,
        metavar="N",
        help="best-of-orders: seeded shuffles of the session's PodGroups tried besides the given order, "
        "largest first and left-out first (0-64; default 3)",
    )
    serve.add_argument("--dry-run", action="store_true", help="log patches instead of writing them")
    serve.add_argument(
        "--standby",
        action="store_true",
        help="bind the port in a small front process that runs the server on a private port, relays each "
        "call to it within --http-timeout and answers neutrally itself when the server is down, "
        "restarting, killed mid-call or hung (then killed and restarted): Volcano schedules alone and "
        "v1.10's allocate action never sees a failed prioritize",
    )
    serve.add_argument("--listen-fd", type=int, default=None, help=argparse.SUPPRESS)  # from --standby
    serve.add_argument(
        "--verb",
        action="append",
        default=[],
        metavar="NAME=VERB",
        help="a verb name configured differently in Volcano, e.g. allocate=allocateFunc",
    )
    serve.set_defaults(run=run_serve)


def add_node_report(subparsers: argparse._SubParsersAction) -> None:
    """Add ``node-report`` to the ``topoplace`` parser."""
    report = subparsers.add_parser("node-report", help="a node's topology annotation from nvidia-smi output")
    report.add_argument("--topo", type=Path, required=True, help="`nvidia-smi topo -m` output ('-' = stdin)")
    report.add_argument(
        "--gpus",
        type=Path,
        help="`nvidia-smi --query-gpu=index,uuid,name,memory.total --format=csv,noheader,nounits`",
    )
    report.add_argument("--node", required=True, help="the Kubernetes node name (in a pod: spec.nodeName)")
    report.add_argument("--nic-gbps", type=int, default=0, help="RDMA NIC bandwidth to record")
    report.add_argument(
        "--patch", action="store_true", help="write it on the Node object instead of printing"
    )
    report.set_defaults(run=run_node_report)


def add_rdma_plugin(subparsers: argparse._SubParsersAction) -> None:
    """Add ``rdma-device-plugin`` to the ``topoplace`` parser."""
    plugin = subparsers.add_parser(
        "rdma-device-plugin",
        help="kubelet device plugin handing each pod the RDMA NICs its plan named (run as a DaemonSet)",
    )
    plugin.add_argument("--node", required=True, help="this node's name (in a pod: spec.nodeName)")
    plugin.add_argument("--resource", default="topoplace.io/rdma", help="the resource pods ask for")
    plugin.add_argument("--plugin-dir", type=Path, default=Path("/var/lib/kubelet/device-plugins"))
    plugin.add_argument("--sysfs", type=Path, default=Path("/sys"), help="where class/infiniband is")
    plugin.add_argument("--dev-dir", type=Path, default=Path("/dev/infiniband"))
    plugin.set_defaults(run=run_rdma_plugin)


def run_rdma_plugin(args: argparse.Namespace) -> int:
    from adapters.volcano import rdma_plugin

    if not args.plugin_dir.is_dir():
        raise InvalidRequest(
            [Problem(path="--plugin-dir", message=f"{args.plugin_dir} is not a directory (the kubelet's)")]
        )
    try:
        pods = rdma_plugin.KubernetesPods()
    except Exception as err:  # ImportError, no in-cluster or kube config
        print(f"error: cannot reach the Kubernetes API: {err}", file=sys.stderr)
        return EXIT_INTERNAL
    plugin = rdma_plugin.RdmaDevicePlugin(node=args.node, pods=pods, sysfs=args.sysfs, dev_dir=args.dev_dir)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    rdma_plugin.run(plugin, args.plugin_dir, resource=args.resource, stop=stop)
    return EXIT_OK


def _duration(text: str) -> float:
    """A Go duration as Volcano writes it: ``500ms``, ``1s``, ``1.5s``, ``2m``."""
    units = {"ms": 0.001, "s": 1.0, "m": 60.0}
    for unit in ("ms", "s", "m"):
        if text.endswith(unit):
            try:
                return float(text[: -len(unit)]) * units[unit]
            except ValueError:
                break
    raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 500ms or 1s")


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return int(text)


def _shuffles(text: str) -> int:
    """A count of shuffles, 0-64 (the solver's bound on ``Policy.order_shuffles``)."""
    if not text.isdigit() or int(text) > 64:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 0 to 64")
    return int(text)


def run_serve(args: argparse.Namespace) -> int:
    if args.standby:
        from adapters.volcano import standby
        from solver.service.logging import configure_logging

        configure_logging()
        aliases = dict(v.split("=", 1) for v in args.verb if "=" in v)
        child_argv = [a for a in sys.argv[1:] if a != "--standby"]
        return standby.run(
            child_argv,
            args.host,
            args.port,
            aliases,
            http_timeout_s=args.http_timeout,
            max_body_bytes=args.max_body_mib * 1024 * 1024,
            read_timeout_s=args.read_timeout,
        )
    from adapters.volcano.extender import Config, Extender, local_solve, remote_solve
    from adapters.volcano.hypernodes import HyperNodeFiles
    from adapters.volcano.patcher import KubernetesPatcher, NamespacePolicy, PodPatcher, RecordingPatcher
    from adapters.volcano.server import VERBS, Limits, serve
    from solver.service.logging import configure_logging

    configure_logging()  # JSON lines; an exception logs its plain traceback, not its frames' locals
    from solver.domain.model import BatchOrder, Packing

    aliases = dict(v.split("=", 1) for v in args.verb if "=" in v)
    unknown = [v for v in aliases.values() if v not in VERBS]
    if unknown:
        raise InvalidRequest(
            [Problem(path="--verb", message=f"{v!r} is not one of {', '.join(VERBS)}") for v in unknown]
        )
    hypernodes = HyperNodeFiles(args.hypernodes).hypernodes if args.hypernodes else tuple
    namespaces = NamespacePolicy.parse(args.namespaces)
    schedulers = frozenset(args.scheduler_name or ["volcano"])
    patcher: PodPatcher = (
        RecordingPatcher()
        if args.dry_run
        else KubernetesPatcher(namespaces=namespaces, scheduler_names=schedulers)
    )
    extender = Extender(
        solve=remote_solve(args.solver) if args.solver else local_solve,
        patcher=patcher,
        hypernodes=hypernodes,
        solver_process=not args.solver,
        config=Config(
            http_timeout_s=args.http_timeout,
            **({} if args.planned_score is None else {"planned_score": args.planned_score}),
            plan_pending=args.plan_pending,
            decline_without_plan=args.decline_without_plan,
            all_nodes_scored=args.all_nodes_scored,
            packing=Packing[args.packing.upper()],
            batch_order=BatchOrder[args.batch_order.upper().replace("-", "_")],
            order_shuffles=args.order_shuffles,
        ),
    )
    if not args.solver:
        import solver.solve  # noqa: F401  (OR-Tools loads now, not in the first session)
    limits = Limits(
        max_body_bytes=args.max_body_mib * 1024 * 1024,
        read_timeout_s=args.read_timeout,
        max_connections=args.max_connections,
    )
    running = serve(extender, args.host, args.port, aliases, limits, listen_fd=args.listen_fd)
    if args.listen_fd is not None:
        from adapters.volcano.standby import signal_ready

        signal_ready()
    print(f"topoplace volcano extender on {running.url}", file=sys.stderr, flush=True)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    stop.wait()
    running.stop()
    extender.close()
    return EXIT_OK


def run_node_report(args: argparse.Namespace) -> int:
    from adapters.volcano import annotations as ann
    from adapters.volcano.node_report import annotation_patch, report

    try:
        topo = sys.stdin.read() if str(args.topo) == "-" else args.topo.read_text()
        gpus = args.gpus.read_text() if args.gpus else ""
    except OSError as err:
        raise InvalidRequest(
            [Problem(path=str(err.filename), message=f"cannot read: {err.strerror}")]
        ) from err
    try:
        node = report(topo, args.node, gpu_csv=gpus, source=str(args.topo), nic_gbps=args.nic_gbps)
    except ann.AnnotationError as err:
        raise InvalidRequest([Problem(path=str(args.gpus), message=str(err))]) from err
    if not args.patch:
        print(ann.topology_value(node))
        return EXIT_OK
    try:
        from kubernetes import client, config

        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
        client.CoreV1Api().patch_node(args.node, annotation_patch(node))
    except Exception as err:  # ImportError, ApiException, connection errors
        print(f"error: patching node {args.node}: {err}", file=sys.stderr)
        return EXIT_INTERNAL
    print(json.dumps({"patched": args.node, "gpus": len(node.gpus), "nics": len(node.nics)}))
    return EXIT_OK
