"""The test kit: one way to make each thing a test needs, realistic by default.

* ``nodes.py``: :func:`node` over a kind of :class:`Hardware` (``HGX``, ``SMALL``,
  ``DISTANCE_TREE``, ``DISTANCE_TREE_CROSSED``), :func:`allocation`, :func:`inventory`,
  :func:`cluster`, :func:`fat_tree`, :func:`all_pairs`;
* ``jobs.py``: :func:`shape`, :func:`role`, :func:`job`, :func:`request`;
* ``answers.py``: hand-built answers for the verifier (:func:`member`, :func:`placed`,
  :func:`unplaced`, :func:`result`);
* ``oracle.py``: brute-force optima (:func:`best_placed_work`, :func:`best_share_work`, to hold
  against a result's :func:`placed_work`) and the random batches they can judge
  (:func:`fabric_problems`, :func:`small_problems`, :func:`share_problems`; keep them small: the
  oracles are exponential);
* ``plans.py``: :func:`plan_answer`, a plan in the model's variables as the answer the verifier
  checks;
* ``pki.py``: :func:`pki`, a CA with a server and a client certificate as PEM files (TLS tests);
* ``whatif.py``: what-if scenarios over a small busy cluster (:func:`busy_cluster`,
  :func:`scenario`, :func:`trace_scenario`) and two policies to compare (``SOLVER``, ``BESTFIT``).

    from tests import kit

    kit.request(kit.inventory(kit.node("n0"), kit.node("n1", leaf="leaf1")), [kit.job("train", 8, 2)])
"""

from tests.kit.answers import member, metrics_for, placed, result, unplaced, with_footprint
from tests.kit.jobs import hook_policy, job, request, role, shape
from tests.kit.nodes import (
    DISTANCE_TREE,
    DISTANCE_TREE_CROSSED,
    HGX,
    SMALL,
    Hardware,
    all_pairs,
    allocation,
    cluster,
    fat_tree,
    inventory,
    node,
)
from tests.kit.oracle import (
    best_placed_work,
    best_share_work,
    fabric_problems,
    member_options,
    placed_work,
    share_problems,
    small_problems,
)
from tests.kit.pki import Pki, pki
from tests.kit.plans import plan_answer
from tests.kit.whatif import BESTFIT, SOLVER, busy_cluster, scenario, trace_scenario

__all__ = [
    "BESTFIT",
    "DISTANCE_TREE",
    "DISTANCE_TREE_CROSSED",
    "HGX",
    "SMALL",
    "SOLVER",
    "Hardware",
    "Pki",
    "all_pairs",
    "allocation",
    "best_placed_work",
    "best_share_work",
    "busy_cluster",
    "cluster",
    "fabric_problems",
    "fat_tree",
    "hook_policy",
    "inventory",
    "job",
    "member",
    "member_options",
    "metrics_for",
    "node",
    "pki",
    "placed",
    "placed_work",
    "plan_answer",
    "request",
    "result",
    "role",
    "scenario",
    "shape",
    "share_problems",
    "small_problems",
    "trace_scenario",
    "unplaced",
    "with_footprint",
]
