"""Throwaway: the Session 19 markdown tables from the sweeps' JSON files (s18 and s19)."""
import glob, json, re, statistics as st
L18, L19 = "bench/results/replay-s18", "bench/results/replay-s19"
TW_ON, TW_WIN = "fgd/tight-gpu+unfed", "fgd/tight-gpu+unfed-bestof16"
SOLVERS = ("solver", "solver-bestof16")
TRACES = ["default", "multigpu50", "gpuspec33", "gpushare100", "cpu250"]
SEEDS = range(42, 52)

def commits():
    """(trace, seed, tag) -> commit, from the s19 log; s18's runs were at d472266."""
    out = {}
    for line in open(f"{L19}/sweep.log"):
        m = re.match(r"\S+ (?:lane2 )?start (\S+) (\d+) (\S+?)(-s19b?|-twin19)?(?: at (\w+))? \|", line)
        if m:
            out[m.group(1), int(m.group(2)), (m.group(4) or "")[1:]] = m.group(5) or "fff8867"
    return out

C = commits()
runs = {}  # (trace, seed) -> policy -> (row, commit, file tag)
def load(path, commit, tag):
    name = path.rsplit("/", 1)[1][:-5]
    m = re.fullmatch(r"([a-z0-9]+)-(\d+)(?:-(s19b?|twin19))?", name)
    if not m:
        return
    v, s = m.group(1), int(m.group(2))
    for r in json.load(open(path))["runs"]:
        runs.setdefault((v, s), {}).setdefault(r["policy"], []).append((r, commit, tag))
for f in sorted(glob.glob(f"{L18}/*-*.json")):
    load(f, "d472266", "s18")
for f in sorted(glob.glob(f"{L19}/*-*.json")):
    name = f.rsplit("/", 1)[1][:-5]
    m = re.fullmatch(r"([a-z0-9]+)-(\d+)(?:-(s19b?|twin19))?", name)
    if m:
        load(f, C.get((m.group(1), int(m.group(2)), m.group(3) or ""), "?"), m.group(3) or "s19")

ORDER = {"twin19": 4, "s19b": 3, "s19": 2, "s18": 1}
OLD_TWIN = {"d472266", "fff8867", "e215128", "64428a7", "?"}  # before 502a0db: the twin ordered unfit pods
def pick(v, s, p, solver=False):
    """The latest run of p: for the solver, the newest commit's (s19b, then s19; not s18's d472266,
    before the share fix); for the windows twin, a run at 502a0db or later only."""
    c = runs.get((v, s), {}).get(p, [])
    c = sorted(c, key=lambda x: ORDER[x[2]])
    if solver:
        c = [x for x in c if x[2] != "s18"]
    if p == TW_WIN:
        c = [x for x in c if x[1] not in OLD_TWIN]
    return c[-1] if c else None
at = lambda r: r["curve"]["130"]
def same(a, b):
    return a["curve"] == b["curve"] and a["placed"] == b["placed"]

head = ("| trace | seeds | FGD | online twin | **solver online** | windows twin | **solver-bestof16** "
        "| solver-bestof16 ÷ twin s, median (min–max) | solver = twin (online / windows) |")
print(head)
print("|---|---|---|---|---|---|---|---|---|")
for v in TRACES:
    seeds = [s for s in SEEDS if all(pick(v, s, p, p in SOLVERS) for p in ("fgd", TW_ON, TW_WIN, *SOLVERS))]
    if not seeds:
        continue
    def summ(p):
        vals = [at(pick(v, s, p, p in SOLVERS)[0]) for s in seeds]
        d = [x - at(pick(v, s, "fgd")[0]) for x, s in zip(vals, seeds)]
        won, lost = sum(x > 0.005 for x in d), sum(x < -0.005 for x in d)
        sec = st.median(pick(v, s, p, p in SOLVERS)[0]["seconds"] for s in seeds)
        if p == "fgd":
            return f"{st.mean(vals):.2f} ({min(vals):.2f}–{max(vals):.2f}); {sec:.0f} s"
        return f"{st.mean(vals):.2f} ({min(vals):.2f}–{max(vals):.2f}) {st.mean(d):+.2f}, {won}/{lost}; {sec:.0f} s"
    # the time ratio: twin and solver of one process, at the last speed commit only
    ratios = []
    for s in seeds:
        r = pick(v, s, "solver-bestof16", True)
        if r[1] not in ("fff8867", "e215128"):  # the speed commits' runs
            tw = [x for x in runs[v, s][TW_WIN] if x[2] == r[2] and x[1] == r[1]]
            if tw:
                ratios.append(r[0]["seconds"] / tw[0][0]["seconds"])
    ratio = f"{st.median(ratios):.1f}× ({min(ratios):.1f}–{max(ratios):.1f}), {len(ratios)} seeds" if ratios else "–"
    son = sum(same(pick(v, s, "solver", True)[0], pick(v, s, TW_ON)[0]) for s in seeds)
    swin = sum(same(pick(v, s, "solver-bestof16", True)[0], pick(v, s, TW_WIN)[0]) for s in seeds)
    first, last = seeds[0], seeds[-1]
    label = f"{first}–{last}" if seeds == list(range(first, last + 1)) else ",".join(map(str, seeds))
    print(f"| {v} | {label} ({len(seeds)}) | {summ('fgd')} | {summ(TW_ON)} | {summ('solver')} | {summ(TW_WIN)} "
          f"| {summ('solver-bestof16')} | {ratio} | {son}/{len(seeds)} / {swin}/{len(seeds)} |")
print()
print("| trace | seed | FGD | online twin | solver | windows twin | solver-bestof16 | solver runs at | s: solver / windows twin / solver-bestof16 |")
print("|---|---:|---:|---:|---:|---:|---:|---|---|")
for v in TRACES:
    for s in SEEDS:
        if not all(pick(v, s, p, p in SOLVERS) for p in ("fgd", TW_ON, TW_WIN, *SOLVERS)):
            continue
        cells = []
        for p in ("fgd", TW_ON, "solver", TW_WIN, "solver-bestof16"):
            r = pick(v, s, p, p in SOLVERS)[0]
            c = f"{at(r):.2f}"
            twin = {"solver": TW_ON, "solver-bestof16": TW_WIN}.get(p)
            if twin and not same(r, pick(v, s, twin)[0]):
                c = f"**{c}** ≠"
            cells.append(c)
        so, sb = pick(v, s, "solver", True), pick(v, s, "solver-bestof16", True)
        tw = [x for x in runs[v, s][TW_WIN] if x[2] == sb[2] and x[1] == sb[1]] or [pick(v, s, TW_WIN)]
        at_c = so[1] if so[1] == sb[1] else f"{so[1]} / {sb[1]}"
        print(f"| {v} | {s} | " + " | ".join(cells) + f" | {at_c} | {so[0]['seconds']:.0f} / {tw[0][0]['seconds']:.0f} / {sb[0]['seconds']:.0f} |")
