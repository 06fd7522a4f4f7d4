"""Issue 21: ``nvidia-smi topo -m`` as people paste it — a shell prompt before the header, colour codes,
Windows line ends, the next prompt after the output, an older layout without ``NUMA Affinity`` — reads
as the clean capture does; anything else is refused at its line and column."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from solver.domain.errors import InvalidRequest
from solver.ingest.nvidia_smi import capture_metadata, parse_topology

TOPO = Path(__file__).resolve().parents[1] / "fixtures" / "topo"
DGX = (TOPO / "dgx-a100-8gpu-10nic.txt").read_text()
NV12 = (TOPO / "a100-nv12-8gpu-10nic-fixture.txt").read_text()
PROMPT = "root@dgx-01:~# nvidia-smi topo -m"


def parse(text: str) -> object:
    return parse_topology(text, node="n", source="t.txt")


def colour(text: str) -> str:
    """What a coloured terminal copy looks like: link words and headers wrapped in SGR codes."""
    text = re.sub(r"\b(NV\d+|PXB|PIX|SYS|NODE|PHB)\b", "\x1b[1;32m\\1\x1b[0m", text)
    return re.sub(r"\b(GPU\d)\b", "\x1b[4m\\1\x1b[24m", text)


@pytest.mark.parametrize(
    "pasted",
    [
        f"{PROMPT}\n{DGX}",  # the prompt and command before the header
        f"Last login: Fri Dec  4 07:00:01 2026\n{PROMPT}\n\n{DGX}\nroot@dgx-01:~# \n",  # and after
        DGX.replace("\n", "\r\n"),  # Windows line ends
        colour(DGX),  # a coloured terminal
        "\x1b]0;root@dgx-01: ~\x07" + colour(f"{PROMPT}\n{DGX}").replace("\n", "\r\n") + "root@dgx-01:~# ",
    ],
    ids=["prompt-before", "noise-around", "crlf", "ansi", "all-at-once"],
)
def test_pasted_captures_read_like_the_clean_one(pasted: str) -> None:
    assert parse(pasted) == parse(DGX)


def test_a_prompt_line_is_not_blamed_as_a_missing_header() -> None:
    """Was: "no header row" at the prompt line."""
    assert parse(f"{PROMPT}\n{NV12}") == parse(NV12)


def test_a_matrix_row_before_any_header_is_still_refused_where_it_is() -> None:
    lines = DGX.splitlines()
    header = next(i for i, line in enumerate(lines) if line.lstrip().startswith("GPU0"))
    del lines[header]
    with pytest.raises(InvalidRequest) as caught:
        parse("\n".join([PROMPT, *lines]))
    (problem,) = caught.value.problems
    assert problem.path == f"t.txt:{header + 2}:1"
    assert "matrix row, but no line before it names the columns" in problem.message


def test_text_with_no_matrix_says_so() -> None:
    with pytest.raises(InvalidRequest, match="no line names the columns GPU0"):
        parse(f"{PROMPT}\nbash: nvidia-smi: command not found\n")


def test_a_bad_cell_among_colour_codes_is_located_in_the_visible_text() -> None:
    text = colour(DGX).replace("PXB", "PQB", 1)
    with pytest.raises(InvalidRequest) as caught:
        parse(text)
    (problem,) = caught.value.problems  # one problem, not a cascade from the escape codes
    assert "unknown link word 'PQB'" in problem.message
    line, col = map(int, problem.path.split(":")[1:])
    visible = DGX.splitlines()[line - 1]
    assert visible[col - 1 :].startswith("PXB")


def without_numa_affinity(text: str) -> str:
    """The layout of drivers before the NUMA Affinity column: header and GPU rows lose that cell."""
    out = []
    for line in text.splitlines():
        if "CPU Affinity" in line:
            line = line.replace("NUMA Affinity", "").replace("GPU NUMA ID", "")
        elif line.startswith("GPU"):
            cells = line.split()
            line = "\t".join(cells[: len(cells) - 2])  # drop NUMA Affinity and GPU NUMA ID
        out.append(line)
    return "\n".join(out) + "\n"


def test_an_older_layout_without_numa_affinity_reads_numa_from_the_cpu_sets() -> None:
    """Was: the matrix blamed ("no PCIe tree fits") because NODE vs SYS needs NUMA nodes."""
    old = parse(without_numa_affinity(DGX))
    new = parse(DGX)
    # NUMA ids are renumbered in CPU order (1, 3, 5, 7 → 0, 1, 2, 3), the grouping is the same.
    renumber = {1: 0, 3: 1, 5: 2, 7: 3}
    assert [g.numa for g in old.gpus] == [renumber[g.numa] for g in new.gpus]
    assert [s.parent for s in old.pcie_switches] == [s.parent for s in new.pcie_switches]
    assert old.cpu_milli == new.cpu_milli == 256_000


def test_capture_metadata_comment() -> None:
    text = "# topoplace: gpu_model=H100-SXM5-80GB gpu_memory_mib=81920\n# topoplace: cpu_milli=224000\n" + DGX
    assert capture_metadata(text) == {
        "gpu_model": "H100-SXM5-80GB",
        "gpu_memory_mib": "81920",
        "cpu_milli": "224000",
    }
