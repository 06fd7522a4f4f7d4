"""``topoplace``: the command line. Thin: every command parses its arguments, calls the library and
prints; nothing here decides anything about a placement.

Exit codes: 0 success, 1 a verified "no" (``verify`` found violations), 2 bad input (every problem
printed to stderr with its path), 3 an internal error (a placement the verifier refused, a failed
remote call).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING

from solver.domain.errors import InvalidRequest, Problem, VerificationFailed
from solver.domain.model import JobResult, MemberPlacement, SolveRequest, SolveResult, SolveStatus

if TYPE_CHECKING:
    from solver.service.tls import ClientTlsFiles

EXIT_OK, EXIT_VIOLATIONS, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 3


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except InvalidRequest as err:
        for problem in err.problems:
            print(f"error: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except VerificationFailed as err:
        print(f"internal error: {err}", file=sys.stderr)
        return EXIT_INTERNAL


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="topoplace", description="Topology-aware batch placement of GPU gang jobs."
    )
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    solve = commands.add_parser("solve", help="place a batch: REQUEST.json|yaml → result")
    solve.add_argument("request", type=Path, help="a topoplace.v1.SolveRequest as JSON or YAML")
    solve.add_argument("--server", metavar="HOST:PORT", help="solve on a running topoplace server")
    solve.add_argument("--format", choices=("json", "table"), default="json")
    solve.add_argument("--time-limit", type=float, metavar="S", help="override policy.time_limit_s")
    solve.add_argument("--output", "-o", type=Path, help="also write the JSON result here")
    remote = solve.add_argument_group(
        "TLS to the server (--server), matching `topoplace serve --tls-cert/--tls-key/--tls-client-ca`"
    )
    remote.add_argument(
        "--tls-ca", type=Path, metavar="PEM", help="trust the server's certificate if this CA signed it"
    )
    remote.add_argument(
        "--tls-cert", type=Path, metavar="PEM", help="client certificate chain, for an mTLS server"
    )
    remote.add_argument("--tls-key", type=Path, metavar="PEM", help="the client certificate's private key")
    solve.set_defaults(run=run_solve)

    verify = commands.add_parser("verify", help="check a result against its request")
    verify.add_argument("request", type=Path)
    verify.add_argument("result", type=Path)
    verify.set_defaults(run=run_verify)

    serve = commands.add_parser("serve", help="run the gRPC placement service")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=50051)
    add_serve_options(serve)
    serve.set_defaults(run=run_serve)

    ingest = commands.add_parser("ingest", help="turn inventory a site already has into topoplace JSON")
    sources = ingest.add_subparsers(required=True, metavar="SOURCE")
    smi = sources.add_parser(
        "nvidia-smi",
        help="one node from `nvidia-smi topo -m` output",
        description="One node's inventory JSON from what `nvidia-smi topo -m` printed (a pasted terminal "
        "copy is fine). Values not given here come from a '# topoplace: gpu_model=... cpu_milli=...' "
        "comment in the capture, else from the matrix. Example: docs/ingest.md.",
    )
    smi.add_argument("topo", type=Path, help="the text nvidia-smi topo -m printed")
    smi.add_argument("--node", required=True, help="the node's name")
    smi.add_argument("--gpu-model", default="", help="e.g. H100-SXM5-80GB")
    smi.add_argument("--gpu-memory-mib", type=int, default=0)
    smi.add_argument("--leaf", default="", help="the node's leaf switch")
    smi.add_argument("--cpu-milli", type=int, default=0, help="the node's CPUs in milli (224 CPUs: 224000)")
    smi.add_argument("--memory-mib", type=int, default=0, help="the node's memory in MiB")
    smi.add_argument("--label", action="append", default=[], metavar="KEY=VALUE", help="a node label")
    smi.set_defaults(run=run_ingest_nvidia_smi)
    assemble = sources.add_parser(
        "assemble",
        help="a cluster inventory from captures and a node list",
        description="A cluster inventory JSON from a node list (YAML or JSON: names, capture, leaf, "
        "spine, CPUs, memory, labels per node type) and its nvidia-smi captures. Format and example: "
        "docs/ingest.md.",
    )
    assemble.add_argument("nodes", type=Path, help="the node list, e.g. nodes.yaml")
    assemble.add_argument("--output", "-o", type=Path, help="write the inventory here (default: stdout)")
    assemble.set_defaults(run=run_ingest_assemble)
    cluster = sources.add_parser(
        "cluster",
        help="a cluster inventory from the topology the cluster already publishes",
        description="A cluster inventory JSON from any mix of published sources: the Kubernetes node list "
        "(GPU Feature Discovery and topograph labels), nvidia-smi topo -m captures, nvidia-smi -q output, "
        "DRA ResourceSlices, a Kueue/KAI Topology, Slurm's topology.yaml. Per-node device captures take "
        "precedence over fabric sources; what each source gave and where they disagree goes to stderr. "
        "Format and example: docs/ingest.md.",
    )
    cluster.add_argument("sources", type=Path, help="the file naming the sources, e.g. cluster.yaml")
    cluster.add_argument("--output", "-o", type=Path, help="write the inventory here (default: stdout)")
    cluster.set_defaults(run=run_ingest_cluster)

    add_plugin_commands(commands)
    return parser


def add_serve_options(serve: argparse.ArgumentParser) -> None:
    """Admission caps, TLS and metrics of ``topoplace serve`` (see docs/service.md)."""
    from solver.service.admission import ServiceLimits

    d = ServiceLimits()
    caps = serve.add_argument_group("admission (calls beyond these are refused, never queued unboundedly)")
    caps.add_argument("--max-message-bytes", type=int, default=d.max_message_bytes, metavar="N")
    caps.add_argument("--max-nodes", type=int, default=d.max_nodes, metavar="N", help="per Solve request")
    caps.add_argument("--max-jobs", type=int, default=d.max_jobs, metavar="N", help="per Solve request")
    caps.add_argument(
        "--max-concurrent-solves",
        type=int,
        default=d.max_concurrent_solves,
        metavar="N",
        help="large solves (and what-if runs) working at once",
    )
    caps.add_argument(
        "--max-queued",
        type=int,
        default=d.max_queued,
        metavar="N",
        help="calls waiting per method; beyond: RESOURCE_EXHAUSTED",
    )
    caps.add_argument("--small-nodes", type=int, default=d.small_nodes, metavar="N")
    caps.add_argument(
        "--small-jobs",
        type=int,
        default=d.small_jobs,
        metavar="N",
        help="a Solve within --small-nodes and --small-jobs runs in its own lane, never behind large ones",
    )
    caps.add_argument("--small-concurrent", type=int, default=d.small_concurrent, metavar="N")
    caps.add_argument("--small-queued", type=int, default=d.small_queued, metavar="N")
    caps.add_argument(
        "--search-workers",
        type=int,
        default=d.search_workers,
        metavar="N",
        help="most CP-SAT workers per solve (0: the request's policy decides)",
    )
    caps.add_argument(
        "--light-workers",
        type=int,
        default=d.light_workers,
        metavar="N",
        help="threads kept for health and reflection",
    )
    caps.add_argument(
        "--node-cache-mib",
        type=int,
        default=d.node_cache_bytes // 2**20,
        metavar="MIB",
        help="what the caches of nodes (per-node values, converted wire nodes) hold together, by node "
        "size; least recently used dropped first",
    )
    caps.add_argument(
        "--grace-s", type=float, default=d.grace_s, metavar="S", help="SIGTERM to stopped, always within"
    )
    caps.add_argument(
        "--drain-s",
        type=float,
        default=d.drain_s,
        metavar="S",
        help="of the grace: health says NOT_SERVING while the port stays open",
    )
    tls = serve.add_argument_group("TLS (files re-read when they change)")
    tls.add_argument("--tls-cert", type=Path, metavar="PEM", help="server certificate chain")
    tls.add_argument("--tls-key", type=Path, metavar="PEM", help="server private key")
    tls.add_argument("--tls-client-ca", type=Path, metavar="PEM", help="require client certificates (mTLS)")
    metrics = serve.add_argument_group("metrics")
    metrics.add_argument("--metrics-port", type=int, metavar="PORT", help="serve Prometheus /metrics here")
    metrics.add_argument("--metrics-host", default="127.0.0.1")


def add_plugin_commands(commands: argparse._SubParsersAction) -> None:
    """Subcommands contributed by adapters (``topoplace slurm``, ``topoplace volcano`` ...).

    They register under the entry-point group ``topoplace.commands`` so that the core never
    imports an adapter by name: the dependency points from the adapters to the core only.
    """
    for entry in sorted(entry_points(group="topoplace.commands"), key=lambda e: e.name):
        entry.load()(commands)


# --------------------------------------------------------------------------- commands


def run_solve(args: argparse.Namespace) -> int:
    from solver.ingest.files import dump_result_json, load_request

    tls = _client_tls(args)
    request = load_request(args.request)
    if args.time_limit is not None:
        policy = request.policy.model_copy(update={"time_limit_s": args.time_limit})
        request = request.model_copy(update={"policy": policy})
    if args.server:
        from solver.service.client import RemoteError, solve_remote

        try:
            result = solve_remote(args.server, request, credentials=tls.credentials() if tls else None)
        except RemoteError as err:
            print(f"error: {err}", file=sys.stderr)
            if err.code.name == "UNAVAILABLE":
                # gRPC says only "socket closed" when a TLS handshake fails: name the likely causes.
                print(
                    f"hint: is a topoplace server listening on {args.server}, and does this client's TLS "
                    "match it (--tls-ca for a TLS server; --tls-cert/--tls-key too for an mTLS one)?",
                    file=sys.stderr,
                )
            return EXIT_INTERNAL
    else:
        from solver.solve import solve

        result = solve(request)
    text = dump_result_json(result)
    if args.output:
        args.output.write_text(text + "\n")
    print(render_table(request, result) if args.format == "table" else text)
    return EXIT_OK


def _client_tls(args: argparse.Namespace) -> ClientTlsFiles | None:
    """The TLS files of ``solve --server``, checked before any work (None: a plaintext channel)."""
    from solver.service.tls import ClientTlsFiles

    flags = {"--tls-ca": args.tls_ca, "--tls-cert": args.tls_cert, "--tls-key": args.tls_key}
    given = [flag for flag, path in flags.items() if path is not None]
    if not given:
        return None
    if not args.server:
        raise InvalidRequest(
            [
                Problem(path=flag, message="TLS is for a remote solve: give --server HOST:PORT")
                for flag in given
            ]
        )
    tls = ClientTlsFiles(ca=args.tls_ca, cert=args.tls_cert, key=args.tls_key)
    problems = _flag_problems(tls.problems())
    if problems:
        raise InvalidRequest(problems)
    return tls


def run_verify(args: argparse.Namespace) -> int:
    from solver.answer.verify import verify
    from solver.ingest.files import load_request, load_result

    violations = verify(load_request(args.request), load_result(args.result))
    for violation in violations:
        print(f"violation: {violation}", file=sys.stderr)
    if violations:
        return EXIT_VIOLATIONS
    print("ok: the result is a valid placement for the request")
    return EXIT_OK


def run_serve(args: argparse.Namespace) -> int:
    from solver.service.admission import ServiceLimits
    from solver.service.server import run_forever
    from solver.service.tls import TlsFiles

    limits = ServiceLimits(
        max_message_bytes=args.max_message_bytes,
        max_nodes=args.max_nodes,
        max_jobs=args.max_jobs,
        max_concurrent_solves=args.max_concurrent_solves,
        max_queued=args.max_queued,
        small_nodes=args.small_nodes,
        small_jobs=args.small_jobs,
        small_concurrent=args.small_concurrent,
        small_queued=args.small_queued,
        search_workers=args.search_workers,
        light_workers=args.light_workers,
        node_cache_bytes=args.node_cache_mib * 2**20,
        grace_s=args.grace_s,
        drain_s=args.drain_s,
    )
    problems = _flag_problems(limits.problems())
    tls = None
    if args.tls_cert or args.tls_key or args.tls_client_ca:
        if not (args.tls_cert and args.tls_key):
            problems.append(
                Problem(path="--tls-cert/--tls-key", message="TLS needs both a certificate and its key")
            )
        else:
            tls = TlsFiles(cert=args.tls_cert, key=args.tls_key, client_ca=args.tls_client_ca)
            problems += _flag_problems(tls.problems())
    if problems:
        raise InvalidRequest(problems)
    try:
        run_forever(
            args.host,
            args.port,
            limits=limits,
            tls=tls,
            metrics_port=args.metrics_port,
            metrics_host=args.metrics_host,
        )
    except OSError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return EXIT_OK


def _flag_problems(lines: list[str]) -> list[Problem]:
    """``--flag: reason`` lines as problems whose path is the flag."""
    return [Problem(path=flag, message=reason.strip()) for flag, reason in (x.split(":", 1) for x in lines)]


def run_ingest_nvidia_smi(args: argparse.Namespace) -> int:
    from solver.ingest.nvidia_smi import capture_metadata, parse_topology
    from solver.service.wire import node_to_readable_json

    try:
        text = args.topo.read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        problem = Problem(path=str(args.topo), message=f"cannot read the file: {err.strerror}")
        raise InvalidRequest([problem]) from err
    meta = capture_metadata(text)
    labels = {}
    for item in args.label:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidRequest([Problem(path="--label", message=f"expected KEY=VALUE, got {item!r}")])
        labels[key] = value
    node = parse_topology(
        text,
        node=args.node,
        gpu_model=args.gpu_model or meta.get("gpu_model", ""),
        gpu_memory_mib=args.gpu_memory_mib or _meta_int(meta, "gpu_memory_mib", args.topo),
        source=str(args.topo),
    )
    node = node.model_copy(
        update={
            "leaf": args.leaf,
            "labels": labels,
            "cpu_milli": args.cpu_milli or _meta_int(meta, "cpu_milli", args.topo) or node.cpu_milli,
            "memory_mib": args.memory_mib or _meta_int(meta, "memory_mib", args.topo),
        }
    )
    print(node_to_readable_json(node), end="")
    return EXIT_OK


def _meta_int(meta: dict[str, str], key: str, path: Path) -> int:
    value = meta.get(key, "")
    if value and not value.isdigit():
        problem = Problem(path=str(path), message=f"# topoplace: {key}={value}: expected a whole number")
        raise InvalidRequest([problem])
    return int(value or 0)


def run_ingest_assemble(args: argparse.Namespace) -> int:
    from solver.ingest.assemble import assemble
    from solver.service.wire import inventory_to_readable_json

    text = inventory_to_readable_json(assemble(args.nodes))
    if args.output:
        args.output.write_text(text)
    else:
        print(text, end="")
    return EXIT_OK


def run_ingest_cluster(args: argparse.Namespace) -> int:
    from solver.ingest.cluster import assemble_cluster
    from solver.service.wire import inventory_to_readable_json

    inventory, report = assemble_cluster(args.sources)
    print(report.render(), file=sys.stderr)
    text = inventory_to_readable_json(inventory)
    if args.output:
        args.output.write_text(text)
    else:
        print(text, end="")
    return EXIT_OK


# --------------------------------------------------------------------------- the table


def render_table(request: SolveRequest, result: SolveResult) -> str:
    """A person's view of a result: one row per member, unplaced jobs with their reason."""
    rows = [("JOB", "MEMBER", "NODE", "GPUS", "NICS", "NUMA", "ALIGNED")]
    for job in result.jobs:
        rows.extend(_job_rows(job))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    placed = sum(j.placed for j in result.jobs)
    m = result.metrics
    lines.append("")
    lines.append(
        f"{placed}/{len(result.jobs)} jobs placed · status {SolveStatus(result.status).name} · "
        f"gap {result.gap:.2%} · GPUs used {m.gpus_used_before} → {m.gpus_used_after} of {m.gpus_total} · "
        f"whole free nodes {m.nodes_fully_free_before} → {m.nodes_fully_free_after}"
    )
    # A tier the time never reached says so: its bound is then only what the tier could take.
    tiers = (
        f"{v.name or v.tier.name} {v.value:g} (bound {v.bound:g}"
        + ("" if v.optimal or v.ms else ", not searched")
        + ")"
        for v in result.objectives
    )
    lines.append("objective: " + ", ".join(tiers))
    if result.plan_source.startswith("floor:"):
        # Said plainly: no search bettered a greedy placer's plan; bounds say how far it could be.
        placer = result.plan_source.removeprefix("floor:")
        lines.append(f"plan: the floor's {placer} placer (no search found better in the time limit)")
    elif result.plan_source.startswith("unsearched:"):
        # Said plainly: the time could not pay for building the model (solver.fallback).
        placer = result.plan_source.removeprefix("unsearched:")
        lines.append(
            f"plan: the {placer} greedy alone; nothing was searched (the time limit was too short "
            "to build the model; see each unplaced job)"
        )
    lines.append("ms: " + ", ".join(f"{t.stage} {t.ms:.1f}" for t in result.timings))
    for job in result.jobs:
        if not job.placed and job.reason is not None:
            lines.append(f"{job.job_id}: not placed ({job.reason.code.name}): {job.reason.message}")
            if job.reason.relaxation:
                lines.append(f"    would place it: {job.reason.relaxation}")
    return "\n".join(lines)


def _job_rows(job: JobResult) -> list[tuple[str, ...]]:
    if not job.placed:
        return [(job.job_id, "-", "(not placed)", "", "", "", "")]
    return [
        (
            job.job_id,
            f"{m.role}/{m.index}",
            m.node,
            ",".join(m.gpus) or "-",
            _nics_cell(m),
            "-" if m.numa is None else str(m.numa),
            "yes" if m.aligned else "no",
        )
        for m in job.members
    ]


def _nics_cell(m: MemberPlacement) -> str:
    """The NICs in pair order: with one NIC per GPU, the k-th NIC serves the k-th GPU of the GPUS
    cell; NICs shared by a member's GPUs say which GPU each sits nearest (``mlx5_4@GPU4``)."""
    if not m.pairs:
        return ",".join(m.nics) or "-"
    nic_of = {p.gpu: p.nic for p in m.pairs}
    if len(m.pairs) == len(m.gpus) == len(set(nic_of.values())) and set(nic_of) == set(m.gpus):
        return ",".join(nic_of[g] for g in m.gpus)
    return ",".join(f"{p.nic}@{p.gpu}" for p in m.pairs)


if __name__ == "__main__":
    raise SystemExit(main())
