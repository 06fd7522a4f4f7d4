"""The pooling inverted (``solver.reduce.pools``): results per job of the batch as it came, from
the results of the pooled batch the model placed.

It sits in the answer ring beside decode, which inverts normalise, rails and compile: every inverse
runs on the way out, after the search and the explanations (which speak of the pooled batch), so a
request's walk goes through each module once.
"""

from __future__ import annotations

from collections.abc import Sequence

from solver.domain.cancel import checked
from solver.domain.model import Job, JobResult, MemberPlacement, Node, Reason, ReasonCode, SolveRequest
from solver.reduce.pools import Pools


def unpool(pools: Pools, request: SolveRequest, jobs: Sequence[JobResult]) -> tuple[JobResult, ...]:
    """The pooling inverted: results per job of ``request`` (the batch before pooling), in its
    order. A pool's placed members go to its pods in the batch's order, one each; the pods left over
    are told how many of their kind were placed; a pool placed not at all passes its reason to each."""
    if all(len(m) == 1 for m in pools.members_of):
        return tuple(jobs)
    nodes = {n.name: n for n in request.inventory.nodes}
    out: dict[int, JobResult] = {}
    for result, batch in checked(zip(jobs, pools.members_of, strict=True)):
        if len(batch) == 1:
            out[batch[0]] = result
            continue
        members = sorted(result.members, key=lambda m: m.index) if result.placed else []
        for k, b in enumerate(batch):
            job = request.jobs[b]
            if k < len(members):
                member = members[k].model_copy(update={"role": job.roles[0].name, "index": 0})
                out[b] = _pod_placed(job, member, nodes[member.node])
            elif result.placed:
                message = (
                    f"{len(members)} of the batch's {len(batch)} pods of this shape and priority "
                    f"({job.roles[0].member.gpus} GPU(s)) were placed; the room left holds no more"
                )
                reason = Reason(code=ReasonCode.INSUFFICIENT_CAPACITY, message=message)
                out[b] = JobResult(job_id=job.id, placed=False, reason=reason)
            else:
                out[b] = JobResult(job_id=job.id, placed=False, reason=result.reason)
    return tuple(out[b] for b in range(len(request.jobs)))


def _pod_placed(job: Job, member: MemberPlacement, node: Node) -> JobResult:
    """A pod's result: one member on one node, so its footprint is that node's (no rule of place
    can name a pooled pod)."""
    rails = sorted({n.rail for n in node.nics if n.name in member.nics and n.rail is not None})
    return JobResult(
        job_id=job.id,
        placed=True,
        members=(member,),
        locality_tier=0,
        leaves_spanned=1 if node.leaf else 0,
        nvlink_domains_spanned=1 if node.nvlink_domain else 0,
        rails=tuple(rails),
    )
