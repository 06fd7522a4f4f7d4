"""``nvidia-smi topo -m`` ingest, checked against real captures.

The captures live in ``/work/shared/data/topo`` (read-only, outside the repo) and are copied unchanged
into ``fixtures/topo`` so the suite runs anywhere; a test keeps the copies honest when the originals
are present. Each capture is checked against what a person reads off it (pairing, NVLink, NUMA, CPUs)
and against every PCIe cell of the matrix, read here by a separate, deliberately naive reader.
"""

from __future__ import annotations

import re
from itertools import combinations
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver.domain.errors import InvalidRequest
from solver.domain.model import Distance, Gpu, Nic, Node, PcieSwitch, SwitchKind
from solver.domain.topology import device_distance, pcie_distance
from solver.ingest.nvidia_smi import gpu_nic_pairing, parse_topology

REPO = Path(__file__).resolve().parents[1]
TOPO = REPO / "fixtures" / "topo"
SHARED_TOPO = REPO.parent / "shared" / "data" / "topo"
CAPTURES = ("dgx-a100-8gpu-10nic.txt", "a100-nv12-8gpu-10nic-fixture.txt", "pcie-only-8gpu.txt")
DGX, NV12, PCIE = CAPTURES


def capture(name: str) -> str:
    return (TOPO / name).read_text()


def parse(name: str) -> Node:
    return parse_topology(capture(name), node=name.removesuffix(".txt"), source=name)


def naive_matrix(text: str) -> dict[tuple[str, str], str]:
    """Every off-diagonal cell as ``{(row, column): word}``, device names as in the header."""
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    columns = re.findall(r"\b(?:GPU|NIC)\d+\b", lines[0])
    matrix: dict[tuple[str, str], str] = {}
    for line in lines[1:]:
        words = line.split()
        if line.startswith("Legend:"):
            break
        for column, word in zip(columns, words[1 : 1 + len(columns)], strict=True):
            if column != words[0]:
                matrix[(words[0], column)] = word
    return matrix


def nic_names(text: str) -> dict[str, str]:
    return dict(re.findall(r"^\s*(NIC\d+):\s*(\S+)\s*$", text, flags=re.MULTILINE))


def problem_paths(error: pytest.ExceptionInfo[InvalidRequest]) -> list[str]:
    return [p.path for p in error.value.problems]


def problem_at(error: pytest.ExceptionInfo[InvalidRequest], path: str) -> str:
    """The message of the problem at ``path``; fails listing all problems when there is none."""
    found = [p.message for p in error.value.problems if p.path == path]
    assert found, f"no problem at {path}: {error.value}"
    return found[0]


# --------------------------------------------------------------------------- the captures themselves


@pytest.mark.parametrize("name", CAPTURES)
def test_fixture_copies_are_unchanged(name: str) -> None:
    if not (SHARED_TOPO / name).exists():
        pytest.skip("the shared captures are not mounted here")
    assert (TOPO / name).read_bytes() == (SHARED_TOPO / name).read_bytes()


@pytest.mark.parametrize("name", CAPTURES)
def test_every_pcie_cell_is_reproduced_by_the_tree(name: str) -> None:
    text = capture(name)
    node = parse(name)
    names = nic_names(text)
    checked = 0
    for (row, column), word in naive_matrix(text).items():
        if word.startswith("NV"):
            continue
        got = device_distance(node, names.get(row, row), names.get(column, column))
        assert got.name == word, f"{row}/{column}: matrix {word}, tree {got.name}"
        checked += 1
    assert checked > 0


@pytest.mark.parametrize("name", CAPTURES)
def test_nvlink_bonds_match_the_nv_cells(name: str) -> None:
    expected = {
        frozenset((row, column)): int(word[2:])
        for (row, column), word in naive_matrix(capture(name)).items()
        if word.startswith("NV")
    }
    got = {frozenset((link.gpu_a, link.gpu_b)): link.links for link in parse(name).nvlinks}
    assert got == expected
    assert len(parse(name).nvlinks) == len(expected)


@pytest.mark.parametrize("name", CAPTURES)
def test_gpus_are_indexed_and_described(name: str) -> None:
    node = parse_topology(capture(name), node="n1", gpu_model="A100", gpu_memory_mib=81920)
    assert [g.id for g in node.gpus] == [f"GPU{k}" for k in range(8)]
    assert [g.index for g in node.gpus] == list(range(8))
    assert {g.model for g in node.gpus} == {"A100"}
    assert {g.memory_mib for g in node.gpus} == {81920}
    assert node.name == "n1"


@pytest.mark.parametrize("name", CAPTURES)
def test_every_device_has_a_leaf_under_a_host_bridge_root(name: str) -> None:
    node = parse(name)
    by_id = {s.id: s for s in node.pcie_switches}
    for switch in node.pcie_switches:
        if not switch.parent:
            assert switch.kind == SwitchKind.HOST_BRIDGE
        else:
            assert switch.parent in by_id
    for device_switch in [g.pcie_switch for g in node.gpus] + [n.pcie_switch for n in node.nics]:
        assert device_switch in by_id


@pytest.mark.parametrize("name", CAPTURES)
def test_tabs_and_spaces_read_the_same(name: str) -> None:
    text = capture(name)
    as_tabs = "\n".join(re.sub(r" {2,}", "\t", line) for line in text.splitlines())
    as_spaces = text.expandtabs(8)
    node = parse(name)
    assert parse_topology(as_tabs, node=node.name, source=name) == node
    assert parse_topology(as_spaces, node=node.name, source=name) == node


# --------------------------------------------------------------------------- DGX A100


def test_dgx_pairs_gpu_pairs_with_nic_pairs_in_order() -> None:
    pairing = gpu_nic_pairing(parse(DGX))
    assert pairing == {
        "GPU0": ["mlx5_0", "mlx5_1"],
        "GPU1": ["mlx5_0", "mlx5_1"],
        "GPU2": ["mlx5_2", "mlx5_3"],
        "GPU3": ["mlx5_2", "mlx5_3"],
        "GPU4": ["mlx5_4", "mlx5_5"],
        "GPU5": ["mlx5_4", "mlx5_5"],
        "GPU6": ["mlx5_6", "mlx5_7"],
        "GPU7": ["mlx5_6", "mlx5_7"],
    }


def test_dgx_numa_and_cpus() -> None:
    node = parse(DGX)
    assert [g.numa for g in node.gpus] == [3, 3, 1, 1, 7, 7, 5, 5]
    assert {n.name: n.numa for n in node.nics} == {
        "mlx5_0": 3,
        "mlx5_1": 3,
        "mlx5_2": 1,
        "mlx5_3": 1,
        "mlx5_4": 7,
        "mlx5_5": 7,
        "mlx5_6": 5,
        "mlx5_7": 5,
        "mlx5_8": None,  # storage NICs: SYS to every GPU, nothing tells their NUMA node
        "mlx5_9": None,
    }
    assert {n.id: n.cpu_milli for n in node.numa_nodes} == {1: 32000, 3: 32000, 5: 32000, 7: 32000}
    # Issue 21: the rows list only the CPUs of the GPUs' NUMA nodes (128); CPUs are numbered from 0
    # and the highest listed is 255, so the machine has (at least) 256.
    assert node.cpu_milli == 256_000


def test_dgx_gpus_behind_one_switch_are_pxb_even_though_the_cell_says_nv12() -> None:
    node = parse(DGX)
    assert device_distance(node, "GPU0", "GPU1") == Distance.PXB
    assert device_distance(node, "GPU0", "GPU2") == Distance.SYS
    assert device_distance(node, "mlx5_8", "mlx5_9") == Distance.PIX


# --------------------------------------------------------------------------- A100 NV12 (litgpt)


def test_nv12_pairing_is_not_gpu_k_with_nic_k() -> None:
    pairing = gpu_nic_pairing(parse(NV12))
    assert pairing == {
        "GPU0": ["mlx5_2", "mlx5_3"],
        "GPU1": ["mlx5_2", "mlx5_3"],
        "GPU2": ["mlx5_0", "mlx5_1"],
        "GPU3": ["mlx5_0", "mlx5_1"],
        "GPU4": ["mlx5_8", "mlx5_9"],
        "GPU5": ["mlx5_8", "mlx5_9"],
        "GPU6": ["mlx5_4", "mlx5_5"],
        "GPU7": ["mlx5_4", "mlx5_5"],
    }
    paired = {nic for nics in pairing.values() for nic in nics}
    assert {"mlx5_6", "mlx5_7"}.isdisjoint(paired)


def test_nv12_spare_nics_are_pix_to_each_other_only() -> None:
    node = parse(NV12)
    assert device_distance(node, "mlx5_6", "mlx5_7") == Distance.PIX
    assert {device_distance(node, "mlx5_6", g.id) for g in node.gpus} == {Distance.SYS}


def test_nv12_numa_and_cpus() -> None:
    node = parse(NV12)
    assert [g.numa for g in node.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert {n.name: n.numa for n in node.nics} == {
        "mlx5_0": 0,
        "mlx5_1": 0,
        "mlx5_2": 0,
        "mlx5_3": 0,
        "mlx5_4": 1,
        "mlx5_5": 1,
        "mlx5_6": None,
        "mlx5_7": None,
        "mlx5_8": 1,
        "mlx5_9": 1,
    }
    # 0-63,128-191 and 64-127,192-254 (the capture's second range stops at 254)
    assert {n.id: n.cpu_milli for n in node.numa_nodes} == {0: 128_000, 1: 127_000}
    assert node.cpu_milli == 255_000


def test_nv12_same_numa_roots_stay_sys_apart_as_the_matrix_says() -> None:
    """GPU0 and mlx5_0 both print NUMA 0 but the matrix says SYS: the roots carry no NUMA node."""
    node = parse(NV12)
    assert device_distance(node, "GPU0", "mlx5_0") == Distance.SYS
    roots = [s for s in node.pcie_switches if not s.parent]
    assert len(roots) == 5
    assert {r.numa for r in roots} == {None}


# --------------------------------------------------------------------------- PCIe only


def test_pcie_only_has_no_nics_no_nvlink_no_numa() -> None:
    node = parse(PCIE)
    assert node.nics == ()
    assert node.nvlinks == ()
    assert node.numa_nodes == ()
    assert {g.numa for g in node.gpus} == {None}
    assert node.cpu_milli == 96_000
    assert gpu_nic_pairing(node) == {f"GPU{k}": [] for k in range(8)}


def test_pcie_only_pairs_quads_and_halves() -> None:
    node = parse(PCIE)
    pix_got = set()
    for a, b in combinations(range(8), 2):
        distance = device_distance(node, f"GPU{a}", f"GPU{b}")
        if distance == Distance.PIX:
            pix_got.add((a, b))
        same_quad = a // 4 == b // 4
        assert distance in ((Distance.PIX, Distance.PXB) if same_quad else (Distance.SYS,))
    # The capture's comment says "GPU pairs share one PCIe switch", but its matrix prints PXB for
    # GPU2/GPU3 and GPU6/GPU7: only (0, 1) and (4, 5) are PIX, and the matrix is the truth.
    assert pix_got == {(0, 1), (4, 5)}


# --------------------------------------------------------------------------- synthetic shapes


INTEL_LIKE = """\
        GPU0    GPU1    GPU2    GPU3    GPU4    NIC0    CPU Affinity    NUMA Affinity
GPU0     X      PIX     PHB     NODE    SYS     PIX     0-15            0
GPU1    PIX      X      PHB     NODE    SYS     PIX     0-15            0
GPU2    PHB     PHB      X      NODE    SYS     PHB     0-15            0
GPU3    NODE    NODE    NODE     X      SYS     NODE    0-15            0
GPU4    SYS     SYS     SYS     SYS      X      SYS     16-31           1
NIC0    PIX     PIX     PHB     NODE    SYS      X
"""


def test_phb_and_node_cells_are_reproduced() -> None:
    node = parse_topology(INTEL_LIKE, node="intel")
    for (row, column), word in naive_matrix(INTEL_LIKE).items():
        assert device_distance(node, row, column).name == word, (row, column)
    assert [n.name for n in node.nics] == ["NIC0"]  # no legend: the column name
    assert node.nics[0].numa == 0
    assert {n.id: n.cpu_milli for n in node.numa_nodes} == {0: 16_000, 1: 16_000}
    assert gpu_nic_pairing(node)["GPU2"] == []  # PHB is farther than PXB


def test_old_drivers_name_nic_columns_after_the_nic() -> None:
    text = """\
        GPU0    GPU1    mlx5_0  CPU Affinity    NUMA Affinity
GPU0     X      NV4     PIX     0-7             0
GPU1    NV4      X      PIX     0-7             0
mlx5_0  PIX     PIX      X
"""
    node = parse_topology(text, node="old")
    assert gpu_nic_pairing(node) == {"GPU0": ["mlx5_0"], "GPU1": ["mlx5_0"]}
    assert [(link.gpu_a, link.gpu_b, link.links) for link in node.nvlinks] == [("GPU0", "GPU1", 4)]


def test_soc_is_read_as_sys() -> None:
    text = """\
        GPU0    GPU1    CPU Affinity
GPU0     X      SOC     0-7
GPU1    SOC      X      8-15
"""
    node = parse_topology(text, node="old")
    assert device_distance(node, "GPU0", "GPU1") == Distance.SYS


def test_unknown_switch_falls_back_to_device_numa() -> None:
    node = Node(name="n", pcie_switches=(PcieSwitch(id="hb", kind=SwitchKind.HOST_BRIDGE),))
    assert pcie_distance(node, "", "", 0, 0) == Distance.NODE
    assert pcie_distance(node, "", "missing", 1, 1) == Distance.NODE
    assert pcie_distance(node, "", "", 0, 1) == Distance.SYS
    assert pcie_distance(node, "", "hb", 0, 0) == Distance.SYS  # a known root without NUMA decides
    assert pcie_distance(node, "", "", None, None) == Distance.SYS
    assert pcie_distance(node, "hb", "hb", None, None) == Distance.PIX


# --------------------------------------------------------------------------- malformed input
# dgx-a100-8gpu-10nic.txt: lines 1-2 comments, 3 header, 4-11 GPU0-7, 12-21 NIC0-9; columns are
# 8 characters wide: the cell of column k (GPU0..7 = 0..7, NIC0..9 = 8..17) starts at 9 + 8k.


def dgx_lines() -> list[str]:
    return capture(DGX).splitlines()


def col(k: int) -> int:
    return 9 + 8 * k


def parse_lines(lines: list[str]) -> pytest.ExceptionInfo[InvalidRequest]:
    with pytest.raises(InvalidRequest) as error:
        parse_topology("\n".join(lines) + "\n", node="bad", source="dgx.txt")
    return error


def replace_cell(line: str, k: int, word: str) -> str:
    """Replace the cell of column ``k`` (starting at col(k)) keeping every other column in place."""
    start = col(k) - 1
    match = re.compile(r"\S+").search(line, start)
    assert match is not None and match.start() <= start + 1
    return line[: match.start()] + word + line[match.end() :]


def test_column_arithmetic_matches_the_capture() -> None:
    lines = dgx_lines()
    assert lines[2][col(11) - 1 : col(11) + 3] == "NIC3"
    assert lines[6][col(10) - 1 : col(10) + 2] == "PXB"  # GPU3/NIC2
    assert lines[8][col(5) : col(5) + 1] == "X"  # own cells are " X ": one column further


def test_asymmetric_cell_is_reported_at_the_lower_cell_naming_its_mirror() -> None:
    lines = dgx_lines()
    lines[11] = replace_cell(lines[11], 0, "SYS")  # NIC0/GPU0 becomes SYS; GPU0/NIC0 is PXB
    error = parse_lines(lines)
    message = problem_at(error, f"dgx.txt:12:{col(0)}")
    assert "asymmetric" in message
    assert f"line 4, column {col(8)}" in message
    assert problem_paths(error) == [f"dgx.txt:12:{col(0)}"]


def test_missing_row_is_reported_at_its_header_column() -> None:
    lines = dgx_lines()
    del lines[14]  # NIC3
    error = parse_lines(lines)
    assert "no row for NIC3" in problem_at(error, f"dgx.txt:3:{col(11)}")


def test_row_with_too_few_cells_is_reported_past_its_last_cell() -> None:
    lines = dgx_lines()
    lines[5] = lines[5].rstrip().removesuffix("N/A").rstrip()  # GPU2 loses GPU NUMA ID
    error = parse_lines(lines)
    message = problem_at(error, f"dgx.txt:6:{len(lines[5]) + 1}")
    assert "has 20 cells, expected 21" in message


def test_row_with_too_many_cells_is_reported_at_the_first_extra_one() -> None:
    lines = dgx_lines()
    lines[12] = lines[12].rstrip() + "     SYS"  # NIC1 gets a 19th cell
    error = parse_lines(lines)
    message = problem_at(error, f"dgx.txt:13:{len(lines[12]) - 2}")
    assert "has 19 cells, expected 18 or 21" in message


def test_unknown_link_word() -> None:
    lines = dgx_lines()
    lines[6] = replace_cell(lines[6], 10, "PXX")  # GPU3/NIC2
    error = parse_lines(lines)
    assert "unknown link word 'PXX'" in problem_at(error, f"dgx.txt:7:{col(10)}")
    assert len(error.value.problems) == 1  # the mirror cannot be compared with a word we do not know


def test_no_header() -> None:
    lines = dgx_lines()
    del lines[2]
    error = parse_lines(lines)
    assert problem_paths(error) == ["dgx.txt:3:1"]
    assert "no header" in error.value.problems[0].message


def test_empty_text_has_no_header() -> None:
    with pytest.raises(InvalidRequest, match="no header"):
        parse_topology("# only a comment\n", node="x")


def test_duplicate_row() -> None:
    lines = dgx_lines()
    lines.insert(5, lines[4])  # GPU1 again, as line 6
    error = parse_lines(lines)
    assert "duplicate row GPU1 (first at line 5)" in problem_at(error, "dgx.txt:6:1")


def test_every_problem_is_reported_at_once() -> None:
    lines = dgx_lines()
    lines[11] = replace_cell(lines[11], 0, "SYS")  # asymmetric, line 12
    lines[6] = replace_cell(lines[6], 10, "PXB?")  # unknown word, line 7
    lines[8] = replace_cell(lines[8], 5, "PIX")  # GPU5 own cell, line 9
    lines[9] = replace_cell(lines[9], 0, "X")  # GPU6/GPU0 X off the diagonal, line 10
    lines[3] = replace_cell(lines[3], 9, "NV2")  # GPU0/NIC1 NVLink to a NIC, line 4
    error = parse_lines(lines)
    assert set(problem_paths(error)) == {
        f"dgx.txt:12:{col(0)}",
        f"dgx.txt:7:{col(10)}",
        f"dgx.txt:9:{col(5) + 1}",
        f"dgx.txt:10:{col(0)}",
        f"dgx.txt:4:{col(9)}",
    }
    assert "own cell must be X" in problem_at(error, f"dgx.txt:9:{col(5) + 1}")
    assert "off the diagonal" in problem_at(error, f"dgx.txt:10:{col(0)}")
    assert "NVLink joins GPUs only" in problem_at(error, f"dgx.txt:4:{col(9)}")


def test_columns_count_tabs_as_one_character() -> None:
    text = capture(NV12)  # tab separated
    lines = text.splitlines()
    lines[2] = lines[2].replace("\tPXB\t", "\tPXQ\t", 1)  # GPU0/NIC2
    error = parse_lines(lines)
    expected_col = lines[2].index("PXQ") + 1
    assert "unknown link word 'PXQ'" in problem_at(error, f"dgx.txt:3:{expected_col}")


def test_matrix_no_pcie_tree_can_reproduce_is_refused() -> None:
    text = """\
        GPU0    GPU1    GPU2    CPU Affinity
GPU0     X      PXB     SYS     0-7
GPU1    PXB      X      PXB     0-7
GPU2    SYS     PXB      X      0-7
"""
    with pytest.raises(InvalidRequest) as error:
        parse_topology(text, node="x", source="t")
    assert "no PCIe tree fits" in problem_at(error, "t:2:25")


def test_unreadable_cpu_affinity() -> None:
    text = """\
        GPU0    GPU1    CPU Affinity
GPU0     X      PIX     0-7
GPU1    PIX      X      zero
"""
    with pytest.raises(InvalidRequest) as error:
        parse_topology(text, node="x", source="t")
    assert "unreadable CPU Affinity 'zero'" in problem_at(error, "t:3:25")


# --------------------------------------------------------------------------- property: any PCIe forest


@st.composite
def pcie_nodes(draw: st.DrawFn) -> Node:
    """A random node: 1-3 host-bridge roots on NUMA 0/1/unknown, optional upstream switches, leaves,
    1-6 GPUs (at least one under each root, so every root's NUMA node is printed) and 0-4 NICs."""
    n_roots = draw(st.integers(1, 3))
    switches: list[PcieSwitch] = []
    leaves: list[tuple[str, int]] = []  # (leaf id, root index)
    for r in range(n_roots):
        numa = draw(st.sampled_from([0, 1, None]))
        switches.append(PcieSwitch(id=f"hb{r}", kind=SwitchKind.HOST_BRIDGE, numa=numa))
        for u in range(draw(st.integers(1, 2))):
            parent = f"hb{r}"
            if draw(st.booleans()):
                parent = f"up{r}{u}"
                switches.append(PcieSwitch(id=parent, parent=f"hb{r}", numa=numa))
            for leaf in range(draw(st.integers(1, 2))):
                switches.append(PcieSwitch(id=f"leaf{r}{u}{leaf}", parent=parent, numa=numa))
                leaves.append((f"leaf{r}{u}{leaf}", r))
    root_numa = [s.numa for s in switches if not s.parent]
    n_gpus = draw(st.integers(n_roots, 6))
    gpu_leaves = [next(leaf for leaf, root in leaves if root == r) for r in range(n_roots)]
    gpu_leaves += [draw(st.sampled_from(leaves))[0] for _ in range(n_gpus - n_roots)]
    nic_leaves = draw(st.lists(st.sampled_from(leaves), max_size=4))
    root_of = dict(leaves)
    return Node(
        name="random",
        pcie_switches=tuple(switches),
        gpus=tuple(
            Gpu(id=f"GPU{k}", index=k, pcie_switch=leaf, numa=root_numa[root_of[leaf]])
            for k, leaf in enumerate(gpu_leaves)
        ),
        nics=tuple(
            Nic(name=f"mlx5_{k}", pcie_switch=leaf, numa=root_numa[root_of[leaf]])
            for k, (leaf, _) in enumerate(nic_leaves)
        ),
    )


def render(node: Node, nvlinked: set[frozenset[str]], separator: str) -> str:
    """What ``nvidia-smi topo -m`` would print for ``node``, hiding NVLinked GPU pairs behind NV4."""
    gpus = [g.id for g in node.gpus]
    devices = gpus + [n.name for n in node.nics]
    columns = [*gpus, *(f"NIC{k}" for k in range(len(node.nics)))]
    lines = [separator.join(["", *columns, "CPU Affinity", "NUMA Affinity"])]
    for row, (device, column) in enumerate(zip(devices, columns, strict=True)):
        cells = [column]
        for other in devices:
            if other == device:
                cells.append("X")
            elif frozenset((device, other)) in nvlinked:
                cells.append("NV4")
            else:
                cells.append(device_distance(node, device, other).name)
        if row < len(gpus):
            numa = node.gpus[row].numa
            cells += [
                "0-7" if numa is None else f"{8 * numa}-{8 * numa + 7}",
                "N/A" if numa is None else str(numa),
            ]
        lines.append(separator.join(cells))
    lines += ["", "NIC Legend:", ""] + [f"  NIC{k}: {nic.name}" for k, nic in enumerate(node.nics)]
    return "\n".join(lines) + "\n"


@given(node=pcie_nodes(), data=st.data())
@settings(max_examples=150, deadline=None)
def test_any_pcie_forest_is_recovered_from_its_matrix(node: Node, data: st.DataObject) -> None:
    """Whatever the tree, the ingest finds one that prints the same matrix, even with GPU↔GPU cells
    hidden behind NVLink, and the NVLink bonds come back as they were printed."""
    gpu_pairs = [frozenset(pair) for pair in combinations([g.id for g in node.gpus], 2)]
    nvlinked = set(data.draw(st.lists(st.sampled_from(gpu_pairs), unique=True) if gpu_pairs else st.just([])))
    separator = data.draw(st.sampled_from(["\t", "    ", "\t\t"]))
    parsed = parse_topology(render(node, nvlinked, separator), node="random")
    devices = [g.id for g in node.gpus] + [n.name for n in node.nics]
    for a, b in combinations(devices, 2):
        if frozenset((a, b)) not in nvlinked:
            assert device_distance(parsed, a, b) == device_distance(node, a, b), (a, b)
    assert {frozenset((v.gpu_a, v.gpu_b)) for v in parsed.nvlinks} == nvlinked
    assert [g.numa for g in parsed.gpus] == [g.numa for g in node.gpus]
