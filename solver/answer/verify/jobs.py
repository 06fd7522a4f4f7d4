"""Jobs and gangs: every request job answered once; a placed gang has every role between its
minimum and its replicas, distinct member indexes, no unknown role; an unplaced job has a reason.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from solver.domain.model import (
    Job,
    JobResult,
    SolveRequest,
    SolveResult,
)


def job_set(request: SolveRequest, result: SolveResult) -> Iterator[str]:
    """Every request job is answered exactly once, and nothing else is."""
    asked = {job.id for job in request.jobs}
    answered = Counter(jr.job_id for jr in result.jobs)
    for job_id, times in answered.items():
        if job_id not in asked:
            yield f"job {job_id} is in the result but not in the request"
        elif times > 1:
            yield f"job {job_id} appears {times} times in the result"
    for job in request.jobs:
        if job.id not in answered:
            yield f"job {job.id} of the request is missing from the result"


def gang(job: Job, jr: JobResult) -> Iterator[str]:
    """All of a gang or nothing: each role between its minimum and its replicas, indexes distinct."""
    if not jr.placed:
        if jr.members:
            yield f"job {job.id} is not placed but lists {len(jr.members)} members"
        if jr.reason is None:
            yield f"job {job.id} is not placed but gives no reason"
        return
    roles = {role.name: role for role in job.roles}
    for m in jr.members:
        if m.role not in roles:
            yield f"job {job.id} lists member {m.index} of role {m.role}, which the job does not have"
    for role in job.roles:
        indexes = [m.index for m in jr.members if m.role == role.name]
        if len(indexes) < role.minimum:
            yield (
                f"job {job.id} role {role.name} is placed with {len(indexes)} members "
                f"but its gang needs at least {role.minimum}"
            )
        if len(indexes) > role.replicas:
            yield (
                f"job {job.id} role {role.name} is placed with {len(indexes)} members "
                f"but has only {role.replicas} replicas"
            )
        for index, times in Counter(indexes).items():
            if times > 1:
                yield f"job {job.id} role {role.name} member {index} is placed {times} times"
            if index >= role.replicas:
                yield (
                    f"job {job.id} role {role.name} member {index} is out of range ({role.replicas} replicas)"
                )
