"""A real Slurm cluster of emulated GPU nodes on loopback, for the end-to-end test, the bench and for
admins who want to try the hook before touching production.

One ``munged`` (own key and socket), one ``slurmctld`` and one ``slurmd -N <node>`` per node, all in a
private directory, each slurmd on its own port of 127.0.0.1 (``NodeAddr=127.0.0.1 Port=…``). GPUs and
NICs are character devices made with ``mknod`` in that directory (Slurm refuses regular files) and
typed by PCIe switch group from an ``nvidia-smi topo -m`` capture, exactly as ``topoplace slurm
gres-conf`` writes them for a real site. Needs root (mknod, SlurmUser=root) and Debian's
``slurmctld slurmd slurm-client munge`` (``scripts/install-slurm.sh``).

:meth:`EmulatedCluster.stop` cancels every job, waits until no ``slurmstepd`` below our slurmds is
left, then stops the daemons it started, by their recorded PIDs.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from adapters.slurm.gresconf import Sockets, gres_conf_lines, gres_string
from adapters.slurm.hostlist import compress, expand
from adapters.slurm.nodetypes import load_node_type

HERE = Path(__file__).resolve().parent
BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "sinfo", "scancel")


def missing_binaries() -> list[str]:
    """Slurm/MUNGE programs not on PATH (also searched in /usr/sbin, where Debian puts daemons)."""
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    return [b for b in BINARIES if shutil.which(b, path=path) is None]


def _free_port_block(count: int) -> int:
    """A base port with ``count`` consecutive ports free on 127.0.0.1 (checked, not guaranteed)."""
    for base in range(17000 + (os.getpid() % 200) * 50, 60000, 97):
        sockets = []
        try:
            for port in range(base, base + count + 1):
                s = socket.socket()
                s.bind(("127.0.0.1", port))
                sockets.append(s)
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise RuntimeError("no free port block on 127.0.0.1")


@dataclass
class ClusterSpec:
    nodes: int = 16
    nodes_per_leaf: int = 4
    leaves_per_spine: int = 2
    capture: Path = Path("fixtures/topo/a100-nv12-8gpu-10nic-fixture.txt")
    prefix: str = "gn"
    sockets: int = 2
    cores_per_socket: int = 8
    memory_mib: int = 512_000
    # Several node types: node i gets captures[i % len] (every leaf then holds every type). Empty:
    # every node is ``capture``.
    captures: tuple[Path, ...] = ()
    # GRES typed per PCIe switch group (``gpu:sw0:2``, the README's install step 2), or plain
    # ``gpu:8,nic:8`` with the same devices, Cores= and Links= (Slurm as most sites run it).
    typed: bool = True
    features: str = ""  # node Features= (e.g. the GPU model, for gpu:<model>:N requests)
    # Nodes take the captures in runs of this many (1: in turn). Runs keep each capture's hostlist
    # file name short on large clusters (a name lists every node of its type).
    type_run: int = 1

    def names(self) -> list[str]:
        width = max(2, len(str(self.nodes)))
        return [f"{self.prefix}{i:0{width}d}" for i in range(1, self.nodes + 1)]

    def node_types(self) -> dict[Path, list[str]]:
        """Capture → the nodes of that type, in node order."""
        captures = self.captures or (self.capture,)
        types: dict[Path, list[str]] = {}
        for i, name in enumerate(self.names()):
            types.setdefault(captures[(i // self.type_run) % len(captures)], []).append(name)
        return types


@dataclass
class EmulatedCluster:
    root: Path
    spec: ClusterSpec = field(default_factory=ClusterSpec)
    taskprolog: bool = True
    pids: dict[str, int] = field(default_factory=dict)

    # ----------------------------------------------------------------- paths and env

    @property
    def conf(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    @property
    def topo_dir(self) -> Path:
        return self.root / "topo"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["SLURM_CONF"] = str(self.conf)
        env["PATH"] = env.get("PATH", "") + ":/usr/sbin:/sbin"
        return env

    def run(self, *argv: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            argv, env=self.env(), capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
        return done

    # ----------------------------------------------------------------- files

    def write_files(self, hook_conf: dict[str, str] | None = None) -> None:
        for sub in ("etc", "dev", "spool", "pid", "log", "state", "munge", "out", "topo"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.root / "munge", 0o700)
        types = {
            path: (load_node_type(path.resolve()), nodes) for path, nodes in self.spec.node_types().items()
        }
        for gpus in range(max(len(t.node.gpus) for t, _ in types.values())):
            self._mknod(self.root / "dev" / f"nvidia{gpus}", 195, gpus)
        for k in range(max(len(t.node.nics) for t, _ in types.values())):
            self._mknod(self.root / "dev" / f"nic{k}", 231, k)
        names = self.spec.names()
        hostlist = compress(names, sort=True)
        lines = ["AutoDetect=off"]
        node_lines = []
        for path, (node_type, nodes) in types.items():
            shutil.copy(path, self.topo_dir / f"{compress(nodes, sort=True)}.txt")
            lines += gres_conf_lines(
                node_type,
                nodes,
                gpu_file=str(self.root / "dev" / "nvidia{index}"),
                nic_file=str(self.root / "dev" / "nic{index}"),
                sockets=Sockets(self.spec.sockets, self.spec.cores_per_socket),
                typed=self.spec.typed,
            )
            node_lines.append((nodes, gres_string(node_type, typed=self.spec.typed)))
        (self.root / "etc" / "gres.conf").write_text("\n".join(lines) + "\n")
        (self.root / "etc" / "topology.conf").write_text(self._topology(names))
        (self.root / "etc" / "job_submit.lua").write_text((HERE / "job_submit.lua").read_text())
        conf = {"python": "/usr/bin/python3", "client": str(HERE / "place_client.py"), **(hook_conf or {})}
        self.write_hook_conf(conf)
        prolog = self.root / "etc" / "taskprolog"
        # What an admin's wrapper sets: where slurm.conf (and gres.conf) and the captures are (no sysfs
        # NIC names on emulated nodes), and a log of plan/allocation disagreements.
        prolog.write_text(
            f"#!/bin/sh\nexport SLURM_CONF={self.conf}\nexport TOPOPLACE_TOPO_DIR={self.topo_dir}\n"
            f"export TOPOPLACE_PROLOG_LOG={self.root / 'log' / 'taskprolog.log'}\n"
            f"exec /bin/sh {HERE / 'taskprolog.sh'}\n"
        )
        prolog.chmod(0o755)
        self.conf.write_text(self._slurm_conf(names, hostlist, node_lines))
        if not (self.root / "munge" / "munge.key").exists():
            (self.root / "munge" / "munge.key").write_bytes(os.urandom(1024))
            os.chmod(self.root / "munge" / "munge.key", 0o600)

    def write_hook_conf(self, values: dict[str, str]) -> None:
        path = self.root / "etc" / "job_submit_topoplace.conf"
        current = {}
        if path.exists():
            for line in path.read_text().splitlines():
                key, _, value = line.partition("=")
                current[key.strip()] = value.strip()
        current.update(values)
        path.write_text("".join(f"{k} = {v}\n" for k, v in current.items()))

    @staticmethod
    def _mknod(path: Path, major: int, minor: int) -> None:
        if not path.exists():
            os.mknod(path, 0o666 | 0o020000, os.makedev(major, minor))

    def _topology(self, names: list[str]) -> str:
        per_leaf, per_spine = self.spec.nodes_per_leaf, self.spec.leaves_per_spine
        leaves = [names[i : i + per_leaf] for i in range(0, len(names), per_leaf)]
        lines = [
            f"SwitchName=leaf{k + 1} Nodes={compress(group, sort=True)}" for k, group in enumerate(leaves)
        ]
        spines = [
            list(range(1, len(leaves) + 1))[i : i + per_spine] for i in range(0, len(leaves), per_spine)
        ]
        for s, group in enumerate(spines):
            lines.append(
                f"SwitchName=spine{s + 1} Switches={compress([f'leaf{k}' for k in group], sort=True)}"
            )
        if len(spines) > 1:
            lines.append(
                f"SwitchName=core Switches={compress([f'spine{s + 1}' for s in range(len(spines))])}"
            )
        return "\n".join(lines) + "\n"

    def _slurm_conf(self, names: list[str], hostlist: str, node_lines: list[tuple[list[str], str]]) -> str:
        base = _free_port_block(len(names) + 2)
        port = {name: base + 2 + i for i, name in enumerate(names)}
        nodes = "\n".join(
            f"NodeName={compress(group, sort=True)} NodeHostname=localhost NodeAddr=127.0.0.1 "
            f"Port={compress([str(port[n]) for n in group])} "
            f"Sockets={self.spec.sockets} CoresPerSocket={self.spec.cores_per_socket} ThreadsPerCore=1 "
            f"RealMemory={self.spec.memory_mib} Gres={gres}"
            + (f" Features={self.spec.features}" if self.spec.features else "")
            for group, gres in node_lines
        )
        self.ctld_port = base
        r = self.root
        taskprolog = f"TaskProlog={r}/etc/taskprolog\n" if self.taskprolog else ""
        return f"""# topoplace emulated cluster (adapters/slurm/emulate.py)
ClusterName=topoplace
SlurmctldHost={socket.gethostname().split(".")[0]}(127.0.0.1)
SlurmctldPort={base}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={r}/munge/munge.sock
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool/%n
SlurmctldPidFile={r}/pid/slurmctld.pid
SlurmdPidFile={r}/pid/slurmd.%n.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd.%n.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
TopologyPlugin=topology/tree
GresTypes=gpu,nic
JobSubmitPlugins=lua
{taskprolog}SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
SchedulerParameters=sched_min_interval=100000,bf_interval=1
MessageTimeout=30
{nodes}
PartitionName=gpu Nodes={hostlist} Default=YES MaxTime=INFINITE State=UP
"""

    # ----------------------------------------------------------------- daemons

    def start(self, timeout_s: float = 60) -> None:
        r = self.root
        munged = subprocess.Popen(
            [
                "munged",
                "-F",
                "--force",
                f"--socket={r}/munge/munge.sock",
                f"--key-file={r}/munge/munge.key",
                f"--log-file={r}/log/munged.log",
                f"--pid-file={r}/munge/munged.pid",
                f"--seed-file={r}/munge/seed",
            ],
            env=self.env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.pids["munged"] = munged.pid
        self._munged = munged
        self._wait_for(lambda: (r / "munge" / "munge.sock").exists(), 10, "munged socket")
        self.run("slurmctld", "-i", "-f", str(self.conf))
        self.pids["slurmctld"] = self._read_pid(r / "pid" / "slurmctld.pid", "slurmctld pid file")
        for name in self.spec.names():
            self.run("slurmd", "-N", name, "-f", str(self.conf))
        for name in self.spec.names():
            self.pids[f"slurmd.{name}"] = self._read_pid(r / "pid" / f"slurmd.{name}.pid", f"slurmd {name}")
        self._wait_for(self._all_idle, timeout_s, "every node IDLE")

    def _all_idle(self) -> bool:
        done = self.run("sinfo", "-h", "-N", "-o", "%T", check=False)
        states = done.stdout.split()
        return done.returncode == 0 and len(states) == self.spec.nodes and all(s == "idle" for s in states)

    @classmethod
    def _read_pid(cls, path: Path, what: str) -> int:
        """The pid a daemon wrote. The file can exist before the number is in it (the daemon creates,
        then writes), so wait for a whole number, not for the file."""
        cls._wait_for(lambda: path.exists() and path.read_text().strip().isdigit(), 10, what)
        return int(path.read_text())

    @staticmethod
    def _wait_for(condition, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if condition():
                return
            time.sleep(0.2)
        raise TimeoutError(f"timed out waiting for {what}")

    def reload_hook(self) -> None:
        """job_submit.lua is re-read when its mtime changes; the conf file is read on every submit."""

    def jobs(self) -> dict[str, dict[str, object]]:
        """Every job of ``scontrol show job -d`` (:func:`parse_jobs`)."""
        return parse_jobs(self.run("scontrol", "show", "job", "-d").stdout)

    # ----------------------------------------------------------------- stopping

    def stepds(self) -> list[int]:
        """slurmstepd processes below our slurmds."""
        parents: dict[int, int] = {}
        names: dict[int, str] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            pid = int(entry.name)
            names[pid] = stat[stat.index("(") + 1 : stat.rindex(")")]
            parents[pid] = int(stat[stat.rindex(")") + 2 :].split()[1])
        ours = {pid for key, pid in self.pids.items() if key.startswith("slurmd.")}
        found = []
        for pid, name in names.items():
            if not name.startswith("slurmstepd"):
                continue
            current, seen = pid, set()
            while current in parents and current not in seen and current > 1:
                seen.add(current)
                current = parents[current]
                if current in ours:
                    found.append(pid)
                    break
        return found

    def stop(self, timeout_s: float = 30) -> None:
        if "slurmctld" in self.pids:
            self.run("scancel", "--full", "-u", "root", check=False)
            self.run("scancel", "-u", "root", check=False)
            try:
                self._wait_for(
                    lambda: not self.run("squeue", "-h", check=False).stdout.strip() and not self.stepds(),
                    timeout_s,
                    "jobs to end",
                )
            except TimeoutError:
                for pid in self.stepds():
                    self._kill(pid, signal.SIGKILL)
        for key in [k for k in self.pids if k.startswith("slurmd.")] + ["slurmctld"]:
            if key in self.pids:
                self._kill(self.pids.pop(key), signal.SIGTERM)
        if "munged" in self.pids:
            self._munged.terminate()
            try:
                self._munged.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._munged.kill()
            self.pids.pop("munged")

    @staticmethod
    def _kill(pid: int, sig: int) -> None:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        for _ in range(50):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def parse_jobs(text: str) -> dict[str, dict[str, object]]:
    """The jobs of ``scontrol show job -d`` text: state, pending reason, submit and start time, and per
    node the GRES it holds (``{"gn01": "gpu:sw0:2(IDX:0-1),nic:sw0:2(IDX:0-1)"}``), the comment and
    the plan text in it."""
    jobs: dict[str, dict[str, object]] = {}
    for block in re.split(r"\n\s*\n", text):
        job_id = re.search(r"JobId=(\d+)", block)
        if not job_id:
            continue
        fields = {
            key: (found.group(1) if (found := re.search(rf"\b{key}=(\S+)", block)) else "")
            for key in ("JobState", "Reason", "SubmitTime", "StartTime")
        }
        alloc: dict[str, str] = {}
        for hostlist, gres in re.findall(r"^\s+Nodes=(\S+) CPU_IDs=\S+ Mem=\S+ GRES=(\S*)", block, re.M):
            alloc.update(dict.fromkeys(expand(hostlist), gres))
        plan = re.search(r"topoplace/v1 id=\S+(?: \S+:gpu=\S*:nic=\S*)*", block)
        comment = re.search(r"^\s+Comment=(.*)$", block, re.M)
        jobs[job_id.group(1)] = {
            "state": fields["JobState"],
            "reason": fields["Reason"],
            "submitted": fields["SubmitTime"],
            "started": fields["StartTime"],
            "alloc": alloc,
            "plan": plan.group(0) if plan else "",
            "comment": comment.group(1).strip() if comment else "",
        }
    return jobs
