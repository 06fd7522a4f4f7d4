"""Hostlist expansion and compression, against what Slurm 22.05's scontrol printed (pinned below) and,
when Slurm is installed, against scontrol itself on the same and on random inputs."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import tempfile

import pytest

from adapters.slurm.hostlist import HostlistError, compress, expand

# (input, `scontrol show hostlist`, `scontrol show hostlistsorted`) as printed by Slurm 22.05.8.
COMPRESS = [
    ("n3,n1,n2", "n[3,1-2]", "n[1-3]"),
    ("n1,n1,n2", "n[1,1-2]", "n[1,1-2]"),
    ("n9,n10,n11", "n[9-11]", "n[9-11]"),
    ("n09,n10", "n[09-10]", "n[09-10]"),
    ("a1b2,a1b3,a2b2", "a1b[2-3],a2b2", "a1b[2-3],a2b2"),
    ("n1,m1,n2", "n1,m1,n2", "m1,n[1-2]"),
    ("gpu001,gpu002,gpu003,gpu004,gpu010", "gpu[001-004,010]", "gpu[001-004,010]"),
    ("x,n1,n2", "x,n[1-2]", "n[1-2],x"),
    ("rack1-n01,rack1-n02,rack2-n01", "rack1-n[01-02],rack2-n01", "rack1-n[01-02],rack2-n01"),
    ("n001,n01,n1", "n[001,01,1]", "n[1,01,001]"),
    ("n99,n100,n101", "n[99-101]", "n[99-101]"),
    ("n010,n011,n12", "n[010-011,12]", "n[010-011,12]"),
]
# (expression, `scontrol show hostnames`) as printed by Slurm 22.05.8.
EXPAND = [
    ("n[1-3,5]", "n1 n2 n3 n5"),
    ("n[001-10]", "n001 n002 n003 n004 n005 n006 n007 n008 n009 n010"),
    ("n[9-11]", "n9 n10 n11"),
    ("n[1-2]x[3-4]", "n1x3 n1x4 n2x3 n2x4"),
    ("n1,n[1-2]", "n1 n1 n2"),
    ("n[01-3]", "n01 n02 n03"),
    ("n[8-10]-[1-2]", "n8-1 n8-2 n9-1 n9-2 n10-1 n10-2"),
    ("rack[1-2]-n[01-03]", "rack1-n01 rack1-n02 rack1-n03 rack2-n01 rack2-n02 rack2-n03"),
    ("gpu[001-004,010]", "gpu001 gpu002 gpu003 gpu004 gpu010"),
]


@pytest.mark.parametrize(("hosts", "plain", "sorted_"), COMPRESS)
def test_compress_matches_slurm(hosts: str, plain: str, sorted_: str) -> None:
    assert compress(hosts.split(",")) == plain
    assert compress(hosts.split(","), sort=True) == sorted_


@pytest.mark.parametrize(("expression", "hosts"), EXPAND)
def test_expand_matches_slurm(expression: str, hosts: str) -> None:
    assert expand(expression) == hosts.split()


@pytest.mark.parametrize("bad", ["n[3-1]", "n[1-2", "n1-2]", "n[a-b]", "n[]", "n[[1]]"])
def test_malformed_expressions_are_refused(bad: str) -> None:
    with pytest.raises(HostlistError):
        expand(bad)


def test_round_trip() -> None:
    names = [f"gpu{i:03d}" for i in (1, 2, 3, 7, 8, 100)]
    assert expand(compress(names)) == names


SCONTROL = shutil.which("scontrol")


_MINIMAL_CONF: list[str] = []


def _scontrol(*args: str) -> str:
    """`show hostlist`/`hostnames` need no controller, but scontrol still reads a slurm.conf: give it a
    minimal one of our own."""
    if not _MINIMAL_CONF:
        handle, path = tempfile.mkstemp(suffix=".conf")
        with os.fdopen(handle, "w") as file:
            file.write("ClusterName=hosts\nSlurmctldHost=localhost\nNodeName=n1\nPartitionName=p Nodes=n1\n")
        _MINIMAL_CONF.append(path)
    env = {**os.environ, "SLURM_CONF": _MINIMAL_CONF[0]}
    done = subprocess.run(
        [SCONTROL or "scontrol", *args], capture_output=True, text=True, env=env, check=False
    )
    return done.stdout.strip()


@pytest.mark.skipif(SCONTROL is None, reason="Slurm not installed: the pinned Slurm outputs above still run")
def test_against_scontrol_on_random_lists() -> None:
    assert _scontrol("show", "hostnames", "n[1-2]") == "n1\nn2"
    rng = random.Random(7)
    for _ in range(40):
        names = [
            f"{rng.choice(['n', 'gpu', 'r1-n'])}{rng.randint(0, 120):0{rng.choice([1, 2, 3])}d}"
            for _ in range(rng.randint(1, 8))
        ]
        text = ",".join(names)
        assert compress(names) == _scontrol("show", "hostlist", text), text
        assert expand(compress(names)) == _scontrol("show", "hostnames", compress(names)).split(), text


@pytest.mark.skipif(SCONTROL is None, reason="Slurm not installed: the pinned Slurm outputs above still run")
def test_sorted_against_scontrol_on_node_like_names() -> None:
    """Names of one width per prefix and no duplicates (what node names are). With mixed widths under
    one prefix Slurm's sort comparator is not transitive and the order depends on qsort's internals."""
    assert _scontrol("show", "hostnames", "n[1-2]") == "n1\nn2"
    rng = random.Random(11)
    for _ in range(40):
        numbers = rng.sample(range(0, 150), rng.randint(1, 10))
        names = [f"{rng.choice(['gpu', 'n'])}{n:03d}" for n in numbers]
        names = list(dict.fromkeys(names))
        text = ",".join(names)
        assert compress(names, sort=True) == _scontrol("show", "hostlistsorted", text), text
