"""The Slurm bench's bound on whole-node gangs (``bench.slurm_bound``)."""

from __future__ import annotations

from bench.slurm_bound import whole_node_gangs
from bench.slurm_compare import Submit


def test_a_whole_node_gang_can_start_only_on_the_empty_nodes_earlier_whole_node_jobs_left() -> None:
    stream = [
        Submit(1, 8, False),  # takes one of the three empty nodes
        Submit(2, 8, True),  # finds two: can start, takes them
        Submit(1, 4, False),  # smaller jobs never need an empty node
        Submit(2, 8, False),  # finds none
        Submit(4, 4, False),  # not a whole-node gang
    ]
    gangs = whole_node_gangs(3, stream)
    assert [(g.index, g.empty_at_arrival, g.can_start) for g in gangs] == [(1, 2, True), (3, 0, False)]


def test_a_whole_node_job_that_finds_no_room_takes_none() -> None:
    gangs = whole_node_gangs(1, [Submit(2, 8, False), Submit(1, 8, False), Submit(2, 8, False)])
    assert [(g.empty_at_arrival, g.can_start) for g in gangs] == [(1, False), (0, False)]


def test_best_fit_keeps_the_empty_node_a_later_whole_node_job_needs_and_first_fit_does_not() -> None:
    """Node a is empty, b has 2 GPUs free: first fit puts the 2-GPU job on a (name order), and the
    8-GPU job that comes next never starts; best fit puts it on b, and both start."""
    from bench.slurm_bound import arrival_order, best_fit, first_fit

    free = {"a": 8, "b": 2}
    stream = [Submit(1, 2, False), Submit(1, 8, False), Submit(2, 8, False)]
    first = arrival_order(free, stream, first_fit)
    best = arrival_order(free, stream, best_fit)
    assert (first.started, first.free_gpus, first.pending_gangs) == (1, 8, ("2x8@2",))
    assert (best.started, best.free_gpus, best.pending_gangs) == (2, 0, ("2x8@2",))
    assert free == {"a": 8, "b": 2}  # the caller's counts are not changed
