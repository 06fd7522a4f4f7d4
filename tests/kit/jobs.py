"""Member shapes, roles, jobs and requests: one builder each.

job("train", 8, 2, nics=NicMode.PER_GPU, align=Requirement.PREFERRED)  # a one-role gang
job("mixed", roles=(role("ps", 1, shape(0, cpu_milli=4000)), role("worker", 4, shape(8))))
request([node("n0")], [job("a", 4)], fat_tree(2), seed=1)                # policy keywords last
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from hypothesis import strategies as st

from solver.domain.model import (
    DEFAULT_TIERS,
    Alignment,
    AntiAffinity,
    Distance,
    FabricSwitch,
    GpuShare,
    Inventory,
    Job,
    Locality,
    MemberShape,
    NicMode,
    NicRequest,
    Node,
    ObjectiveTier,
    Packing,
    Policy,
    Requirement,
    Role,
    Scope,
    SolveRequest,
)

NONE = Requirement.NONE


def shape(
    gpus: int = 0,
    *,
    nics: NicMode = NicMode.NONE,
    nic_count: int = 0,
    align: Requirement = NONE,
    distance: Distance = Distance.PIX,
    numa: Requirement = NONE,
    nvlink: Requirement = NONE,
    cpu_milli: int = 0,
    memory_mib: int = 0,
    models: Sequence[str] = (),
    selector: Mapping[str, str] | None = None,
    share: GpuShare | None = None,
    mutex: bool = False,
) -> MemberShape:
    """What one member asks for: ``gpus`` whole GPUs (or ``share`` of one), NICs, and its rules."""
    return MemberShape(
        gpus=gpus,
        gpu_share=share,
        gpu_models=tuple(models),
        mutex=mutex,
        nics=NicRequest(mode=nics, count=nic_count),
        alignment=Alignment(mode=align, distance=distance),
        numa=numa,
        nvlink=nvlink,
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        node_selector=dict(selector or {}),
    )


def role(name: str, replicas: int, member: MemberShape, min_replicas: int | None = None) -> Role:
    return Role(name=name, replicas=replicas, min_replicas=min_replicas, member=member)


def job(
    id: str,
    gpus: int = 0,
    members: int = 1,
    *,
    role: str = "worker",
    minimum: int | None = None,
    roles: Sequence[Role] = (),
    priority: int = 0,
    labels: Mapping[str, str] | None = None,
    locality: Locality | None = None,
    nvlink_domain: Requirement = NONE,
    away: Mapping[str, str] | None = None,
    scope: Scope = Scope.NODE,
    exclusive: bool = False,
    **member: object,
) -> Job:
    """A gang job: one role ``role`` of ``members`` members (at least ``minimum``) of
    ``shape(gpus, **member)``, or the given ``roles``. ``away`` keeps it from work so labelled
    (anti-affinity at ``scope``, NODE by default); ``exclusive`` keeps its nodes to itself."""
    if not roles:
        roles = (Role(name=role, replicas=members, min_replicas=minimum, member=shape(gpus, **member)),)  # type: ignore[arg-type]
    elif gpus or member or minimum is not None or members != 1:
        raise TypeError("job(): give either roles or one role's shape, not both")
    anti = (AntiAffinity(labels=dict(away), scope=scope),) if away else ()
    return Job(
        id=id,
        priority=priority,
        labels=dict(labels or {}),
        roles=tuple(roles),
        locality=locality or Locality(),
        nvlink_domain=nvlink_domain,
        anti_affinity=anti,
        exclusive_nodes=exclusive,
    )


def request(
    where: Inventory | Iterable[Node],
    jobs: Iterable[Job] = (),
    switches: Iterable[FabricSwitch] = (),
    *,
    request_id: str = "",
    **policy: object,
) -> SolveRequest:
    """A request over an inventory, or over ``where``'s nodes under ``switches`` (no fabric unless
    given); ``policy`` keywords (``time_limit_s=2``, ``seed=1`` ...) override the defaults."""
    inventory = (
        where if isinstance(where, Inventory) else Inventory(nodes=tuple(where), switches=tuple(switches))
    )
    return SolveRequest(
        request_id=request_id,
        inventory=inventory,
        jobs=tuple(jobs),
        policy=Policy(**policy),  # type: ignore[arg-type]
    )


@st.composite
def hook_policy(draw: st.DrawFn, names: Sequence[str]) -> dict[str, object]:
    """Policy keywords of what the Slurm hook asks at a submit — the default tiers under binpack,
    spread or fill, one worker, 5 s — or Volcano for a one-job session: the same, then the nodes
    ``names`` in a preferred order (its node affinity)."""
    policy: dict[str, object] = {
        "packing": draw(st.sampled_from((Packing.BINPACK, Packing.SPREAD, Packing.FILL))),
        "workers": 1,
        "time_limit_s": 5.0,
    }
    if draw(st.booleans()):
        policy["objective"] = (*DEFAULT_TIERS, ObjectiveTier.NODE_ORDER)
        policy["node_order"] = tuple(draw(st.permutations(list(names))))
    return policy
