"""A gang that names no locality is kept close anyway: a reduction with nothing to invert.

A gang's members talk to each other whether its job says so or not: an all-reduce that crosses the
spine pays for it on every step. Slurm's topology/tree plugin packs every job onto the fewest
switches unasked; Volcano leaves a PodGroup without ``networkTopology`` wherever its members land.
topoplace does as Slurm does, in a batch where leaves matter already (:func:`keep_gangs_close`
says why only there): a job of more than one member with no fabric rule of its own, on the job or
on any role, gets a PREFERRED job locality with no tier limit. The topology tier then keeps it
under the lowest switch it can, below placed work (a gang is never left out for it), and it is
never a reason to refuse a plan. Its answer reports the tier and leaves it reached, as for any
gang; ``rules_held`` never counts against it (a PREFERRED rule with no tier limit has nothing to
break).

Without it, at 4,096 nodes the gangs that named nothing crossed the spines (tier 3) while the rest
of the batch was kept close (bench/RESULTS.md, session 15). Single pods are untouched, so pods are
still pooled (``solver.reduce.pools``).
"""

from __future__ import annotations

from solver.domain.cancel import checked
from solver.domain.model import Job, Locality, Requirement, SolveRequest
from solver.reduce.normalise import locality_matters

KEPT_CLOSE = Locality(mode=Requirement.PREFERRED, highest_tier=0)
_NAMED = (Requirement.REQUIRED, Requirement.PREFERRED)


def keep_gangs_close(request: SolveRequest) -> SolveRequest:
    """``request`` with every silent gang's locality :data:`KEPT_CLOSE` (the same object when none
    is), when leaves matter to the batch already (some job names a rule of place on the fabric).

    A batch in which no job names one keeps its model small: nodes of one shape under different
    leaves are one class (``normalise.locality_matters``), and a rule here would split them into a
    class a leaf — at 16,384 nodes x 500 jobs of ``bench.scenario`` a model too big to build in a
    5 s call, whose greedy answer then placed 392 jobs where the search had placed 407. The same
    trade as pooling, which anti-affinity anywhere in a batch turns off."""
    if not locality_matters(request)[0]:
        return request
    jobs = tuple(kept_close(job) for job in checked(request.jobs))
    if all(a is b for a, b in zip(jobs, request.jobs, strict=True)):
        return request
    return request.model_copy(update={"jobs": jobs})


def kept_close(job: Job) -> Job:
    """``job`` kept close if it is a gang that names no fabric rule of place, else ``job`` itself."""
    if sum(role.replicas for role in job.roles) < 2 or job.locality.mode in _NAMED:
        return job
    if job.role_affinity or any(role.locality.mode in _NAMED for role in job.roles):
        return job
    return job.model_copy(update={"locality": KEPT_CLOSE})
