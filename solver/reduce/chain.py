"""The reductions a validated request goes through before compile sees it, in one place.

Two halves, because the pipeline needs the middle: :func:`rewrite` gives the request the answer is
verified against (policy chains become tiers and member rules; silent gangs are kept close), and
:func:`problem_of` turns it into the problem the model is built from (pods pooled, nodes grouped
into classes, rail sets expanded). The tests build their models through these too, so that a
reduction added here reaches every model built, not only the service's.
"""

from __future__ import annotations

from dataclasses import replace

from solver.domain.model import SolveRequest
from solver.reduce.gangs import keep_gangs_close
from solver.reduce.intranode import hosts_some_member
from solver.reduce.normalise import Normalised, normalise
from solver.reduce.policy import apply_policy_chains
from solver.reduce.pools import pool
from solver.reduce.rails import expand_rails


def rewrite(request: SolveRequest) -> SolveRequest:
    """``request`` with its policy chains applied and its silent gangs kept close."""
    return keep_gangs_close(apply_policy_chains(request))


def problem_of(request: SolveRequest) -> Normalised:
    """The problem compile builds a model of, from a :func:`rewrite`-ten request: its pods pooled
    (``pooled_from`` says how), its nodes normalised (those no member fits alone left out), its
    rail-aligned roles expanded into rail-set variants."""
    pooled, pools = pool(request)
    return replace(expand_rails(normalise(pooled, hosts_some_member)), pooled_from=pools.members_of)
