"""When each GPU frees: the GPUs running jobs hold, by node and GRES index, and when those jobs end.

A job typed for a later start (:mod:`adapters.slurm.later`) waits for its switch groups to be free on
one node. Which groups are busy *now* says little about when they free: on a cluster with long jobs
in the background (or Slurm's lowest-index-first choice piling work on ``sw0``), a group held for the
hour and a group held for a minute look the same. The running jobs' end times (Slurm's ``EndTime``:
start + time limit, the latest they can run) tell them apart.

Read incrementally by the agent's refresh thread, never on a submit: ``squeue -t R`` (ids and end
times, one call) each read, ``scontrol -d show job`` only for jobs that started since the last read
(one call per job, or one for all when many started at once — the agent's first read).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from adapters.slurm.gres import parse_gres_item, split_outside_parens
from adapters.slurm.hostlist import HostlistError, expand
from adapters.slurm.job_devices import NODE_GRES

SQUEUE_RUNNING = ["-h", "-t", "R", "-o", "%i|%e"]  # id | EndTime
BATCH_READ = 8  # more new jobs than this in one read: one ``scontrol show job`` of all jobs instead
_JOB_ID = re.compile(r"JobId=(\d+)")


def parse_running(text: str) -> dict[str, float]:
    """Job id → end (epoch seconds) from ``squeue -h -t R -o '%i|%e'``. A job without a readable end
    (``Unknown``, ``NONE``: no time limit) ends never (``inf``); a line without two fields is skipped."""
    ends: dict[str, float] = {}
    for line in text.splitlines():
        job_id, sep, end = line.partition("|")
        if not sep or not job_id.strip():
            continue
        try:
            ends[job_id.strip()] = datetime.fromisoformat(end.strip()).timestamp()
        except ValueError:
            ends[job_id.strip()] = float("inf")
    return ends


def gpus_held(job_text: str) -> dict[str, dict[str, tuple[int, ...]]]:
    """Job id → node → GPU GRES indices the job holds there, from ``scontrol -d show job`` text (one
    or many jobs). A GRES item that does not parse is skipped: this runs in the agent's refresh."""
    held: dict[str, dict[str, tuple[int, ...]]] = {}
    for block in re.split(r"\n\s*\n", job_text):
        job_id = _JOB_ID.search(block)
        if not job_id:
            continue
        nodes: dict[str, tuple[int, ...]] = {}
        for hostlist, gres in NODE_GRES.findall(block):
            indices: list[int] = []
            for text in split_outside_parens(gres):
                try:
                    item = parse_gres_item(text)
                except ValueError:
                    continue
                if item.name == "gpu":
                    indices.extend(item.indices)
            try:
                nodes.update(dict.fromkeys(expand(hostlist), tuple(indices)))
            except HostlistError:
                continue
        held[job_id.group(1)] = nodes
    return held


@dataclass
class RunningJobs:
    """The running jobs' GPUs (node → GRES index → end), kept from read to read: a job is read once,
    when it is first seen running; its end is updated every read (a time limit can change)."""

    _held: dict[str, dict[str, tuple[int, ...]]] = field(default_factory=dict)
    _ends: dict[str, float] = field(default_factory=dict)

    def read(self, ends: Mapping[str, float], show: Callable[[list[str]], str | None]) -> None:
        """Take one ``squeue`` read (``ends``); ``show(ids)`` returns ``scontrol -d show job`` text for
        those ids (for all jobs when given none), or None when the call failed: those jobs are read
        again next time. A job missing from the text (ended meanwhile) holds nothing."""
        for gone in self._held.keys() - ends.keys():
            del self._held[gone]
        new = [job_id for job_id in ends if job_id not in self._held]
        batches: list[list[str]] = [[]] if len(new) > BATCH_READ else [[job_id] for job_id in new]
        for ids in batches:
            text = show(ids)
            if text is not None:
                found = gpus_held(text)
                for job_id in ids or new:
                    self._held[job_id] = found.get(job_id, {})
        self._ends = dict(ends)

    def ends(self) -> dict[str, dict[int, float]]:
        """Node → GPU GRES index → when the job holding it ends (epoch seconds)."""
        out: dict[str, dict[int, float]] = {}
        for job_id, nodes in self._held.items():
            end = self._ends.get(job_id, float("inf"))
            for node, indices in nodes.items():
                out.setdefault(node, {}).update(dict.fromkeys(indices, end))
        return out
