"""Policy chains as HAMi v2.10 names them, mapped onto topoplace's objective tiers and filters.

HAMi lets a pod name an ordered, comma-separated list of policies at node level
(``hami.io/node-scheduler-policy``) and at GPU level (``hami.io/gpu-scheduler-policy``):
``binpack``, ``spread`` and ``numa`` are sort keys in order, ``topology-aware`` and ``mutex`` are
filters. topoplace optimises tiers instead of sorting candidates, so a chain becomes:

==================  ==================================================================
``binpack``         the PACKING tier, binpack (at GPU level: shares fill used GPUs first)
``spread``          the PACKING tier, spread (at GPU level: shares go to the emptiest GPU)
``numa``            every member's NUMA rule at least PREFERRED; the TOPOLOGY tier scores it
``topology-aware``  every multi-GPU member's NVLink and GPU↔NIC alignment at least PREFERRED
``mutex``           every member mutex: idle GPUs only, nothing shares them afterwards
``fragmentation``   the FRAGMENTATION tier (FGD's measure); also ``fgd``
==================  ==================================================================

The order of the sort keys orders the tiers they map to (``numa,binpack`` puts TOPOLOGY above
PACKING; ``binpack,numa`` the reverse); PLACED_WORK always stays first. This is a reduction in
cvxpy's sense with nothing to invert: the rewritten request is solved and verified as any other.
"""

from __future__ import annotations

from solver.domain.cancel import checked
from solver.domain.chains import words
from solver.domain.model import Job, MemberShape, ObjectiveTier, Packing, Policy, Requirement, SolveRequest

TIER_OF = {
    "binpack": ObjectiveTier.PACKING,
    "spread": ObjectiveTier.PACKING,
    "numa": ObjectiveTier.TOPOLOGY,
    "topology-aware": ObjectiveTier.TOPOLOGY,
    "fragmentation": ObjectiveTier.FRAGMENTATION,
    "fgd": ObjectiveTier.FRAGMENTATION,
}


def apply_policy_chains(request: SolveRequest) -> SolveRequest:
    """The request with its policy chains turned into tiers, packing and member rules."""
    node, gpu = words(request.policy.node_policy), words(request.policy.gpu_policy)
    if not node and not gpu:
        return request
    # GPU-level binpack/spread only orders shares inside a node (``spreads_shares``): not a tier.
    chain = node + [w for w in gpu if w not in node and w not in ("binpack", "spread")]
    policy = request.policy.model_copy(update={"objective": tier_order(request.policy, chain)})
    if "spread" in node:
        policy = policy.model_copy(update={"packing": Packing.SPREAD})
    elif "binpack" in node:
        policy = policy.model_copy(update={"packing": Packing.BINPACK})
    jobs = tuple(with_member_rules(job, set(chain)) for job in checked(request.jobs))
    return request.model_copy(update={"policy": policy, "jobs": jobs})


def tier_order(policy: Policy, chain: list[str]) -> tuple[ObjectiveTier, ...]:
    """PLACED_WORK first, then the chain's tiers in the chain's order, then the rest as they were."""
    named = list(dict.fromkeys(TIER_OF[w] for w in chain if w in TIER_OF))
    rest = [t for t in policy.objective if t not in named and t != ObjectiveTier.PLACED_WORK]
    return (ObjectiveTier.PLACED_WORK, *named, *rest)


def with_member_rules(job: Job, chain: set[str]) -> Job:
    roles = tuple(r.model_copy(update={"member": member_rules(r.member, chain)}) for r in job.roles)
    return job.model_copy(update={"roles": roles})


def member_rules(member: MemberShape, chain: set[str]) -> MemberShape:
    """Raise rules to PREFERRED where the chain asks for them; never lower a REQUIRED one."""
    update: dict[str, object] = {}

    def at_least_preferred(rule: Requirement) -> Requirement:
        return rule if rule == Requirement.REQUIRED else Requirement.PREFERRED

    if "numa" in chain:
        update["numa"] = at_least_preferred(member.numa)
    if "topology-aware" in chain and member.gpus > 1:
        update["nvlink"] = at_least_preferred(member.nvlink)
    if "topology-aware" in chain and member.nics.mode >= 2:
        update["alignment"] = member.alignment.model_copy(
            update={"mode": at_least_preferred(member.alignment.mode)}
        )
    if "mutex" in chain:
        update["mutex"] = True
    return member.model_copy(update=update) if update else member


def spreads_shares(policy: Policy) -> bool:
    """GPU-level ``spread``: a share goes to the emptiest GPU that takes it, not the fullest."""
    return "spread" in words(policy.gpu_policy)


def chooses_share_gpu(policy: Policy) -> bool:
    """No GPU-level ``binpack`` or ``spread`` and a FRAGMENTATION tier: a lone share's GPU is the
    objective's to choose (the one that leaves the least fragmentation, as FGD picks it), the
    fullest among equals. A GPU-level word is the operator's rule (HAMi's), kept as it reads."""
    named = {"binpack", "spread"} & set(words(policy.gpu_policy))
    return not named and ObjectiveTier.FRAGMENTATION in policy.objective
