"""Session 19's markdown tables for bench/RESULTS-replay.md, from the sweeps' JSON rows.

Run from the repository root: ``python bench/results/replay-s19/tables.py``. Solver columns come from
runs at the share fix (``fff8867``) or later, the windows twin from runs at ``502a0db`` or later (it
orders the pods the solver orders); baselines from any run (their code did not change)."""

from __future__ import annotations

import glob
import json
import re
import statistics as st
from pathlib import Path

L18, L19 = "bench/results/replay-s18", "bench/results/replay-s19"
TW_ON, TW_WIN = "fgd/tight-gpu+unfed", "fgd/tight-gpu+unfed-bestof16"
SOLVERS = ("solver", "solver-bestof16")
POLICIES = ("fgd", TW_ON, "solver", TW_WIN, "solver-bestof16")
TRACES = ("default", "multigpu50", "gpuspec33", "gpushare100", "cpu250")
SEEDS = range(42, 52)
ORDER = {"twin19": 4, "s19b": 3, "s19": 2, "s18": 1}
OLD_TWIN = {"d472266", "fff8867", "e215128", "64428a7", "?"}  # before 502a0db
SPEED = ("fff8867", "e215128")  # runs before the last speed commit: no time ratio
NAME = re.compile(r"([a-z0-9]+)-(\d+)(?:-(s19b?|twin19))?")
Run = tuple[dict, str, str]  # (row, commit, tag)


def commits() -> dict[tuple[str, int, str], str]:
    """(trace, seed, tag) -> commit, from the s19 log (the first lane's first runs log none)."""
    out = {}
    start = re.compile(r"\S+ (?:lane\d )?start (\S+) (\d+) (\S+?)(-s19b?|-twin19)?(?: at (\w+))? \|")
    for line in Path(f"{L19}/sweep.log").read_text().splitlines():
        m = start.match(line)
        if m:
            out[m.group(1), int(m.group(2)), (m.group(4) or "")[1:]] = m.group(5) or "fff8867"
    return out


def load() -> dict[tuple[str, int], dict[str, list[Run]]]:
    runs: dict[tuple[str, int], dict[str, list[Run]]] = {}
    logged = commits()
    for folder, tagged in ((L18, False), (L19, True)):
        for path in sorted(glob.glob(f"{folder}/*-*.json")):
            m = NAME.fullmatch(Path(path).stem)
            if not m:
                continue
            v, s, tag = m.group(1), int(m.group(2)), (m.group(3) or "s19") if tagged else "s18"
            commit = logged.get((v, s, m.group(3) or ""), "?") if tagged else "d472266"
            for row in json.loads(Path(path).read_text())["runs"]:
                runs.setdefault((v, s), {}).setdefault(row["policy"], []).append((row, commit, tag))
    return runs


RUNS = load()


def pick(v: str, s: int, p: str) -> Run | None:
    """The latest usable run of policy ``p`` on trace ``v``, seed ``s``."""
    found = sorted(RUNS.get((v, s), {}).get(p, []), key=lambda x: ORDER[x[2]])
    if p in SOLVERS:
        found = [x for x in found if x[2] != "s18"]
    if p == TW_WIN:
        found = [x for x in found if x[1] not in OLD_TWIN]
    return found[-1] if found else None


def at(run: Run) -> float:
    return run[0]["curve"]["130"]


def same(a: Run, b: Run) -> bool:
    return a[0]["curve"] == b[0]["curve"] and a[0]["placed"] == b[0]["placed"]


def complete(v: str, s: int) -> bool:
    return all(pick(v, s, p) for p in POLICIES)


def summary(v: str, seeds: list[int], p: str) -> str:
    runs = [pick(v, s, p) for s in seeds]
    vals = [at(r) for r in runs if r]
    gain = [x - at(pick(v, s, "fgd")) for x, s in zip(vals, seeds, strict=True)]
    won, lost = sum(x > 0.005 for x in gain), sum(x < -0.005 for x in gain)
    secs = st.median(r[0]["seconds"] for r in runs if r)
    spread = f"{st.mean(vals):.2f} ({min(vals):.2f}–{max(vals):.2f})"
    if p == "fgd":
        return f"{spread}; {secs:.0f} s"
    return f"{spread} {st.mean(gain):+.2f}, {won}/{lost}; {secs:.0f} s"


def own_twin(v: str, s: int, run: Run) -> Run | None:
    """The windows twin timed in the same process as ``run`` (any twin version: its time)."""
    return next((x for x in RUNS[v, s][TW_WIN] if x[2] == run[2] and x[1] == run[1]), None)


def per_trace() -> None:
    print(
        "| trace | seeds | FGD | online twin | **solver online** | windows twin | **solver-bestof16** "
        "| solver-bestof16 ÷ twin s, median (min–max) | solver = twin (online / windows) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for v in TRACES:
        seeds = [s for s in SEEDS if complete(v, s)]
        if not seeds:
            continue
        ratios = []
        for s in seeds:
            run = pick(v, s, "solver-bestof16")
            twin = own_twin(v, s, run) if run[1] not in SPEED else None
            if twin:
                ratios.append(run[0]["seconds"] / twin[0]["seconds"])
        ratio = (
            f"{st.median(ratios):.1f}× ({min(ratios):.1f}–{max(ratios):.1f}), {len(ratios)} seeds"
            if ratios
            else "–"
        )
        online = sum(same(pick(v, s, "solver"), pick(v, s, TW_ON)) for s in seeds)
        windows = sum(same(pick(v, s, "solver-bestof16"), pick(v, s, TW_WIN)) for s in seeds)
        label = (
            f"{seeds[0]}–{seeds[-1]}" if seeds == list(range(seeds[0], seeds[-1] + 1)) else str(seeds)[1:-1]
        )
        cells = " | ".join(summary(v, seeds, p) for p in POLICIES)
        n = len(seeds)
        print(f"| {v} | {label} ({n}) | {cells} | {ratio} | {online}/{n} / {windows}/{n} |")


def per_seed() -> None:
    print(
        "| trace | seed | FGD | online twin | solver | windows twin | solver-bestof16 | solver runs at "
        "| s: solver / windows twin / solver-bestof16 |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---|---|")
    for v in TRACES:
        for s in (s for s in SEEDS if complete(v, s)):
            cells = []
            for p in POLICIES:
                run = pick(v, s, p)
                twin = {"solver": TW_ON, "solver-bestof16": TW_WIN}.get(p)
                ok = twin is None or same(run, pick(v, s, twin))
                cells.append(f"{at(run):.2f}" if ok else f"**{at(run):.2f}** ≠")
            online, windows = pick(v, s, "solver"), pick(v, s, "solver-bestof16")
            twin = own_twin(v, s, windows) or pick(v, s, TW_WIN)
            where = online[1] if online[1] == windows[1] else f"{online[1]} / {windows[1]}"
            secs = f"{online[0]['seconds']:.0f} / {twin[0]['seconds']:.0f} / {windows[0]['seconds']:.0f}"
            print(f"| {v} | {s} | " + " | ".join(cells) + f" | {where} | {secs} |")


if __name__ == "__main__":
    per_trace()
    print()
    per_seed()
