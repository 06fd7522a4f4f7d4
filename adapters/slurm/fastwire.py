"""The solve call of the agent, with the inventory put on the wire without the generic converter.

``solver.service.wire.request_to_proto`` walks every value through JSON: for 64 eight-GPU nodes that is
~0.4 s per submit, four times the hook's whole budget. Nodes of one type share their devices, PCIe
tree and NVLinks, so each node type is converted once (through the public ``node_to_json``) and
every submit only copies that template and sets what differs per node: name, labels, CPU, memory,
leaf, allocations, schedulable. Jobs and policy are small and go through the generic converter.
The answer and the errors are the same as :func:`solver.service.client.solve_remote`'s.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc
from google.protobuf import json_format

from solver.domain.errors import InvalidRequest, Problem
from solver.domain.model import Inventory, Node, SolveRequest, SolveResult
from solver.service import wire
from solver.service.channel import CHANNEL_OPTIONS
from solver.service.client import RemoteError, problems_from_call
from topoplace.v1 import placement_pb2, placement_pb2_grpc

_templates: dict[tuple[str, str], placement_pb2.Node] = {}
_channels: dict[str, tuple[grpc.Channel, placement_pb2_grpc.PlacementStub]] = {}


def _template(node: Node, key: str) -> placement_pb2.Node:
    """The node's devices and PCIe tree as a message, converted once per node type."""
    cache_key = (key, node.gpus[0].model if node.gpus else "")
    cached = _templates.get(cache_key)
    if cached is None:
        bare = node.model_copy(
            update={"name": "template", "labels": {}, "allocations": (), "leaf": "", "numa_nodes": ()}
        )
        cached = json_format.Parse(wire.node_to_json(bare), placement_pb2.Node())
        _templates[cache_key] = cached
    return cached


def _fill_node(msg: placement_pb2.Node, node: Node, template: placement_pb2.Node) -> None:
    msg.CopyFrom(template)
    msg.name = node.name
    msg.labels.update(node.labels)
    msg.cpu_milli = node.cpu_milli
    msg.memory_mib = node.memory_mib
    msg.leaf = node.leaf
    msg.nvlink_domain = node.nvlink_domain
    msg.schedulable = node.schedulable
    for allocation in node.allocations:
        out = msg.allocations.add()
        out.owner = allocation.owner
        out.gpus.extend(allocation.gpus)
        out.nics.extend(allocation.nics)
        out.cpu_milli = allocation.cpu_milli
        out.memory_mib = allocation.memory_mib
        out.mutex = allocation.mutex
        out.labels.update(allocation.labels)


def request_message(request: SolveRequest, type_keys: dict[str, str]) -> placement_pb2.SolveRequest:
    """``type_keys`` names each node's type (e.g. its capture file): nodes of one key share devices."""
    message = wire.request_to_proto(request.model_copy(update={"inventory": Inventory()}))
    for node in request.inventory.nodes:
        key = type_keys.get(node.name)
        if key is None:  # a node of no known type: the generic converter
            message.inventory.nodes.append(wire.request_to_proto(_single(node)).inventory.nodes[0])
            continue
        _fill_node(message.inventory.nodes.add(), node, _template(node, key))
    for switch in request.inventory.switches:
        message.inventory.switches.add(id=switch.id, tier=switch.tier, parent=switch.parent)
    return message


def _single(node: Node) -> SolveRequest:
    return SolveRequest(inventory=Inventory(nodes=(node,)))


def _stub(target: str) -> placement_pb2_grpc.PlacementStub:
    """One channel per service address for the agent's lifetime (a new one per submit costs ~5 ms)."""
    if target not in _channels:
        channel = grpc.insecure_channel(target, options=CHANNEL_OPTIONS)
        _channels[target] = (channel, placement_pb2_grpc.PlacementStub(channel))
    return _channels[target][1]


def channel_for(target: str) -> grpc.Channel:
    """The agent's channel to ``target`` (made now if it has none yet), e.g. to connect it early."""
    _stub(target)
    return _channels[target][0]


def _raised(exc: grpc.RpcError) -> Exception:
    code: grpc.StatusCode = exc.code()  # type: ignore[attr-defined]
    details: str = exc.details() or ""  # type: ignore[attr-defined]
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return InvalidRequest(problems_from_call(exc) or [Problem(path="request", message=details)])
    return RemoteError(code, details)


def solve_message(target: str, message: placement_pb2.SolveRequest, timeout_s: float) -> SolveResult:
    try:
        response = _stub(target).Solve(message, timeout=timeout_s)
    except grpc.RpcError as exc:
        raise _raised(exc) from None
    return wire.result_from_proto(response)


class SolveCall:
    """A solve call in flight (``Solve.future``): waited for with a timeout, cancelled when its answer
    is no longer wanted (the service stops the search: ``solver.domain.cancel``), and decoded only
    when read. The subset of ``concurrent.futures.Future`` the agent uses."""

    def __init__(self, target: str, message: placement_pb2.SolveRequest, timeout_s: float) -> None:
        self._call = _stub(target).Solve.future(message, timeout=timeout_s)
        self._result: SolveResult | None = None

    def done(self) -> bool:
        return self._call.done()

    def cancel(self) -> bool:
        return self._call.cancel()

    def result(self, timeout: float | None = None) -> SolveResult:
        """The answer; ``concurrent.futures.TimeoutError`` if not there within ``timeout``."""
        if self._result is None:
            try:
                response = self._call.result(timeout=timeout)
            except grpc.FutureTimeoutError:
                raise TimeoutError(f"no answer within {timeout} s") from None
            except grpc.FutureCancelledError:
                raise RemoteError(grpc.StatusCode.CANCELLED, "cancelled by the agent") from None
            except grpc.RpcError as exc:
                raise _raised(exc) from None
            self._result = wire.result_from_proto(response)
        return self._result

    def exception(self) -> BaseException | None:
        try:
            self.result()
        except Exception as err:
            return err
        return None

    def add_done_callback(self, fn: Callable[[SolveCall], None]) -> None:
        self._call.add_done_callback(lambda _call: fn(self))
