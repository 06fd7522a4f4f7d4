"""A cold call whose nodes cannot all be read in its time is answered from the nodes that could be
(issue 23 item 2: the whole call is bounded, cold too).

Converting a node the server has never seen costs about half a millisecond (pydantic's validation
of it), validating it and normalising it another third: 1,024 new nodes are about 1 s before any
estimate of the model can be made, so a cold call with a 0.5 s deadline used to be stopped by its
deadline with nothing answered. The server reads the nodes in wire order for as long as the
deadline leaves room for the answer (``solver.service.wire.Reading``); when it had to stop early,
this module answers from the nodes read:

- the request with the nodes read (the policy's ``node_order`` kept to them) is validated like any
  other, so a problem in what was read is an INVALID_ARGUMENT naming the wire's path;
- the batch is placed by the fallback's greedy (``solver.fallback.unsearched``) on those nodes and
  verified against that request: every rule the verifier checks is about the nodes a member is on
  (capacity, devices, separation at node, switch or GPU scope) or about the fabric's switches, which
  are all read, so a plan valid on the nodes read is valid on the whole inventory;
- ``plan_source`` reads ``unsearched:first-fit:read-<k>-of-<n>-nodes``, the cluster measures are
  those of the nodes read, and every unplaced job says the inventory was read only in part.

What is not checked is the nodes left unread: a request whose unread nodes are malformed gets a
plan on the read ones, not INVALID_ARGUMENT; the next call with time to read them all says so.
"""

from __future__ import annotations

import time

from solver.compile.cost import PACE
from solver.domain.errors import InvalidRequest
from solver.domain.model import SolveRequest, SolveResult
from solver.domain.validate import validate
from solver.fallback import ANSWER_COLD_S_PER_NODE
from solver.reduce.policy import apply_policy_chains
from solver.solve import Stopwatch, unsearched_with_orders


def answer_from_nodes_read(
    request: SolveRequest, nodes_sent: int, deadline: float, misses: int | None = None
) -> SolveResult:
    """``request`` (the nodes read of ``nodes_sent``) answered by the greedy before ``deadline``
    (``time.perf_counter()``), verified; see the module docstring. ``misses``: how many of the nodes
    read were never seen before (all, unless said)."""
    clock = Stopwatch()
    with clock.stage("validate"):
        problems = validate(request)
    if problems:
        raise InvalidRequest(problems)
    read = len(request.inventory.nodes)
    why = (
        f"only {read:,} of the {nodes_sent:,} nodes sent could be read in the time left "
        f"({max(0.0, deadline - time.perf_counter()):.2f} s after reading them)"
    )
    # The answer on nodes never seen costs more than the placer's answer estimate says (cold
    # verify): the placer stops that much earlier. Only for those: charged for every node read, a
    # warm 16,384-node call with a 2 s deadline left its placer no time (session 12). Their cold
    # measures are the placer's setup's (solver.answer.measures.measure_nodes), not charged here.
    cold = ANSWER_COLD_S_PER_NODE * (read if misses is None else misses) * PACE.ratio()
    return unsearched_with_orders(
        apply_policy_chains(request), clock, deadline - cold, why, nodes_sent=nodes_sent
    )
