"""``topoplace slurm …``: the Slurm adapter's commands, registered through the ``topoplace.commands``
entry point (the core CLI never imports adapters by name).

* ``inventory``  scontrol + gres.conf + topology.conf/yaml + nvidia-smi captures → inventory JSON
* ``gres-conf``  nvidia-smi captures → gres.conf lines and slurm.conf ``Gres=`` typed by switch group
* ``agent``      the warm placement agent ``job_submit.lua``'s client talks to
* ``place``      job description JSON on stdin → the lines the hook applies (same as the fast client)
* ``files``      where the installed job_submit.lua, TaskProlog and client are, for copying into place

Bad files exit 2 with ``FILE:LINE: reason`` per problem, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from solver.domain.errors import InvalidRequest, Problem

EXIT_OK, EXIT_BAD_INPUT = 0, 2
HERE = Path(__file__).resolve().parent


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add ``slurm`` and its subcommands to the ``topoplace`` parser."""
    slurm = subparsers.add_parser("slurm", help="Slurm adapter: inventory, gres.conf, submit hook")
    commands = slurm.add_subparsers(required=True, metavar="COMMAND")

    inventory = commands.add_parser("inventory", help="print the cluster's inventory as topoplace JSON")
    inventory.add_argument(
        "--scontrol", type=Path, required=True, help="`scontrol -o show node -d` or --json output"
    )
    inventory.add_argument(
        "--topo-dir", type=Path, required=True, help="nvidia-smi topo -m captures (see docs/slurm.md)"
    )
    inventory.add_argument("--gres-conf", type=Path, help="gres.conf (device order behind IDX)")
    inventory.add_argument("--topology", type=Path, help="topology.conf or topology.yaml")
    inventory.set_defaults(run=run_inventory)

    gres = commands.add_parser("gres-conf", help="gres.conf + Gres= typed by PCIe switch group")
    gres.add_argument("--topo-dir", type=Path, required=True)
    names = gres.add_mutually_exclusive_group(required=True)
    names.add_argument("--nodes", help="hostlist of the nodes, e.g. gpu[001-064]")
    names.add_argument("--scontrol", type=Path, help="take node names from `scontrol -o show node` output")
    gres.add_argument("--gpu-file", default="/dev/nvidia{index}", help="device path pattern ({index})")
    gres.add_argument("--nic-file", default="/dev/infiniband/uverbs{index}", help="NIC device path pattern")
    gres.add_argument("--sockets", type=int, help="sockets per node, for Cores=")
    gres.add_argument("--cores-per-socket", type=int, help="cores per socket, for Cores=")
    gres.add_argument(
        "--slurm-conf", action="store_true", help="print the slurm.conf Gres= per node set instead"
    )
    gres.set_defaults(run=run_gres_conf)

    agent = commands.add_parser("agent", help="serve placements to job_submit.lua")
    agent.add_argument(
        "--listen", default="127.0.0.1:6820", help="HOST:PORT, or unix:/path (recommended: see docs/slurm.md)"
    )
    agent.add_argument(
        "--socket-mode", default="600", help="octal mode of the unix socket (660: also the socket's group)"
    )
    agent.add_argument(
        "--allow-uid", type=int, action="append", default=[], help="another uid that may call (the SlurmUser)"
    )
    agent.add_argument("--solver", default="127.0.0.1:50051", help="topoplace gRPC service HOST:PORT")
    agent.add_argument("--topo-dir", type=Path, required=True)
    agent.add_argument("--gres-conf", type=Path)
    agent.add_argument("--topology", type=Path)
    agent.add_argument("--time-limit", type=float, default=1.0, help="solver seconds per submit")
    agent.add_argument("--alignment", choices=("preferred", "required", "none"), default="preferred")
    agent.add_argument(
        "--release-after",
        type=float,
        default=30.0,
        help="seconds: a planned job Slurm expects to start later than this is released to Slurm's "
        "choice of nodes (0: never)",
    )
    agent.add_argument(
        "--unpin-window",
        type=float,
        default=0.0,
        help="seconds: while an earlier job submitted this recently has no backfill reservation, "
        "a one-node job keeps its switch-typed GRES but Slurm chooses its node (0: never; docs/slurm.md)",
    )
    agent.add_argument(
        "--later-types",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="type a one-node job with a NIC per GPU and no room now per switch group, for a later "
        "start on a node Slurm chooses: GPU/NIC pairs stay aligned, a few jobs wait longer "
        "(default: on; --no-later-types sends such a job to Slurm's queue untyped; docs/slurm.md)",
    )
    agent.add_argument(
        "--later-gangs",
        action="store_true",
        help="with --later-types, type a gang with no room now too (its members on distinct nodes): "
        "no GPU/NIC pair off its switch, about one job fewer started in a 7-minute window "
        "(bench/RESULTS-slurm.md, session 29)",
    )
    agent.add_argument(
        "--answer-budget",
        type=float,
        default=30.0,
        help="ms: a solve not done by then is answered with the fast placer's plan, which the solver's "
        "replaces while the job waits (0: always wait for the solver, up to --time-limit)",
    )
    agent.set_defaults(run=run_agent)

    place = commands.add_parser("place", help="job description JSON on stdin → hook instructions")
    place.add_argument("--agent", default="127.0.0.1:6820")
    place.add_argument("--timeout", type=float, default=5.0)
    place.set_defaults(run=run_place)

    files = commands.add_parser("files", help="print the paths of job_submit.lua, the TaskProlog and client")
    files.set_defaults(run=run_files)


# --------------------------------------------------------------------------- helpers


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as err:
        raise InvalidRequest([Problem(path=str(path), message=f"cannot read: {err.strerror}")]) from err


def load_slurm_nodes(path: Path) -> list:
    from adapters.slurm.scontrol import parse_nodes_json, parse_show_node

    text = _read(path)
    if text.lstrip().startswith("{"):
        return parse_nodes_json(text, str(path))
    return parse_show_node(text, str(path))


def load_fabric(path: Path | None):
    from adapters.slurm.topology_conf import parse_topology_conf, parse_topology_yaml

    if path is None:
        return None
    if path.suffix in (".yaml", ".yml"):
        return parse_topology_yaml(_read(path), str(path))
    return parse_topology_conf(_read(path), str(path))


# --------------------------------------------------------------------------- commands


def run_inventory(args: argparse.Namespace) -> int:
    from adapters.slurm.gres import parse_gres_conf
    from adapters.slurm.inventory import build_inventory
    from adapters.slurm.nodetypes import TopoDir
    from solver.domain.model import SolveRequest
    from solver.service import wire

    nodes = load_slurm_nodes(args.scontrol)
    gres_conf = parse_gres_conf(_read(args.gres_conf), str(args.gres_conf)) if args.gres_conf else None
    built = build_inventory(
        nodes,
        topo_dir=TopoDir(args.topo_dir),
        gres_conf=gres_conf,
        fabric=load_fabric(args.topology),
        source=str(args.scontrol),
    )
    message = wire.request_to_proto(SolveRequest(inventory=built.inventory))
    print(wire.json_text(message.inventory))
    return EXIT_OK


def run_gres_conf(args: argparse.Namespace) -> int:
    from adapters.slurm.gresconf import Sockets, gres_conf_lines, gres_string
    from adapters.slurm.hostlist import HostlistError, compress, expand
    from adapters.slurm.nodetypes import TopoDir

    if args.nodes:
        try:
            names = expand(args.nodes)
        except HostlistError as err:
            raise InvalidRequest([Problem(path="--nodes", message=str(err))]) from err
    else:
        names = [n.name for n in load_slurm_nodes(args.scontrol)]
    topo_dir = TopoDir(args.topo_dir)
    by_type: dict[Path, list[str]] = {}
    missing = []
    for name in names:
        path = topo_dir.path_for(name)
        if path is None:
            missing.append(
                Problem(path=name, message=f"no nvidia-smi capture for this node in {args.topo_dir}")
            )
        else:
            by_type.setdefault(path, []).append(name)
    if missing:
        raise InvalidRequest(missing)
    sockets = Sockets(args.sockets, args.cores_per_socket) if args.sockets and args.cores_per_socket else None
    out = [] if args.slurm_conf else ["AutoDetect=off"]
    for path, nodes in by_type.items():
        node_type = topo_dir.node_type(nodes[0])
        assert node_type is not None
        if args.slurm_conf:
            if problem := node_type.typed_layout_problem():
                raise InvalidRequest([Problem(path=str(path), message=problem)])
            out.append(f"NodeName={compress(nodes, sort=True)} Gres={gres_string(node_type)}")
        else:
            try:
                out += gres_conf_lines(
                    node_type, nodes, gpu_file=args.gpu_file, nic_file=args.nic_file, sockets=sockets
                )
            except ValueError as err:
                raise InvalidRequest([Problem(path=str(path), message=str(err))]) from err
    print("\n".join(out))
    return EXIT_OK


def run_agent(args: argparse.Namespace) -> int:
    from adapters.slurm.agent import Agent, AgentConfig, serve_agent
    from solver.domain.model import Requirement
    from solver.service.logging import configure_logging

    configure_logging()
    from adapters.slurm.agent import SocketRefused, parse_listen

    try:
        unix, host, port = parse_listen(args.listen)
        mode = int(args.socket_mode, 8)
    except ValueError as err:
        raise InvalidRequest([Problem(path="--listen/--socket-mode", message=str(err))]) from err
    config = AgentConfig(
        solver=args.solver,
        topo_dir=args.topo_dir,
        gres_conf=args.gres_conf,
        topology=args.topology,
        time_limit_s=args.time_limit,
        alignment=Requirement[args.alignment.upper()],
        release_after_s=args.release_after,
        unpin_window_s=max(0.0, args.unpin_window),
        answer_budget_s=max(0.0, args.answer_budget) / 1000,
        later_types=args.later_types,
        later_gangs=args.later_gangs,
    )
    try:
        running = serve_agent(
            Agent(config), host, port, unix=unix, socket_mode=mode, allow_uids=tuple(args.allow_uid)
        )
    except (SocketRefused, OSError) as err:
        raise InvalidRequest([Problem(path=args.listen, message=str(err))]) from err
    print(f"topoplace slurm agent on {running.address}, solver {args.solver}", file=sys.stderr)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        running.stop()
    return EXIT_OK


def run_place(args: argparse.Namespace) -> int:
    from adapters.slurm import place_client

    return place_client.main(["--agent", args.agent, "--timeout", str(args.timeout)])


def run_files(args: argparse.Namespace) -> int:
    del args
    for name in ("job_submit.lua", "taskprolog.sh", "job_devices.py", "place_client.py"):
        print(HERE / name)
    return EXIT_OK


# --------------------------------------------------------------------------- standalone


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m adapters.slurm.cli slurm …`` (the same commands without the core CLI)."""
    parser = argparse.ArgumentParser(prog="topoplace")
    add_commands(parser.add_subparsers(required=True, metavar="COMMAND"))
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except InvalidRequest as err:
        for problem in err.problems:
            print(f"error: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
