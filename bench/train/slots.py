"""Which cores (and GPU) each rank owns on its node, and binding a process to them.

Production gives each rank one GPU and the CPU cores local to that GPU's NUMA node (NVIDIA's advice
for DALI); a CPU node gives each rank `cpus_per_rank` cores. A rank and every thread it starts (torch
intra-op, DALI or DataLoader workers) then run inside its slot, so a scale measures the
infrastructure, not ranks competing for the cores the suite itself handed out twice.

What the ranks' slots say about each other (Peer, contention, the core-list format) lives in
bench.slots, which the summary and the verdicts read without importing training: import it from there.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.errors import LaunchError
from bench.slots import Peer, parse_cpulist

SLOT_ENV = "SCALEWATCH_SLOT"  # the rank wrapper tells its training process what it was given
# Even with `oversubscribe`, a node never runs more than this many ranks per core: past that a
# form value (gpus=[4096]) would only exhaust the worker's memory and process table.
MAX_RANKS_PER_CORE = 4


class SlotError(LaunchError):
    """A rank has no slot of its own on its node (and oversubscription was not allowed)."""


@dataclass(frozen=True)
class Slot:
    cpus: tuple[int, ...]
    gpu: int | None
    numa_node: int | None
    bound_by: str  # "scalewatch": we set the affinity; "slurm": the scheduler already had
    oversubscribed: bool

    def as_dict(self) -> dict:
        return asdict(self) | {"cpus": list(self.cpus)}

    def to_env(self, oversubscribe: bool = False) -> str:
        """For SLOT_ENV, with the run's `oversubscribe`: ranks told they may share cores are not contention."""
        return json.dumps(self.as_dict() | {"oversubscribe": oversubscribe})


def usable_cpus() -> list[int]:
    """The cores this process may run on (its affinity, which a cgroup cpuset or Slurm may narrow)."""
    return sorted(os.sched_getaffinity(0))


def cpu_slots(cpus_per_rank: int, cpus: list[int] | None = None) -> int:
    return len(cpus if cpus is not None else usable_cpus()) // cpus_per_rank


def check_capacity(host: str, ranks: int, cpus_per_rank: int, oversubscribe: bool, cpus: list[int]) -> None:
    """Refuse, before anything launches, more ranks than `host` has slots (unless told to oversubscribe)."""
    slots = cpu_slots(cpus_per_rank, cpus)
    if ranks > slots and not oversubscribe:
        raise SlotError(
            f"host {host}: {ranks} ranks asked, but it has {slots} slot(s) ({len(cpus)} usable cores / "
            f"cpus_per_rank {cpus_per_rank}); set oversubscribe to run them anyway (rows are marked and "
            "never enter history)"
        )
    if ranks > MAX_RANKS_PER_CORE * max(1, len(cpus)):
        raise SlotError(
            f"host {host}: {ranks} ranks on {len(cpus)} cores is more than {MAX_RANKS_PER_CORE} per core, "
            "even with oversubscribe"
        )


def gpu_numa_cpus() -> list[tuple[int | None, list[int]]]:
    """Per visible GPU: its NUMA node and the cores local to it (from sysfs via NVML's PCI bus id)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no driver or no NVML: a CPU node
        return []
    out: list[tuple[int | None, list[int]]] = []
    try:
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            bus = pynvml.nvmlDeviceGetPciInfo(handle).busId
            bus = bus.decode() if isinstance(bus, bytes) else bus
            device = Path("/sys/bus/pci/devices") / bus.lower()[-12:]
            try:
                node = int((device / "numa_node").read_text())
                cpus = parse_cpulist((device / "local_cpulist").read_text())
            except (OSError, ValueError):
                node, cpus = None, usable_cpus()
            out.append((node if node is not None and node >= 0 else None, cpus))
    finally:
        pynvml.nvmlShutdown()
    return out


def plan_slot(
    host: str,
    local_rank: int,
    local_size: int,
    cpus_per_rank: int,
    oversubscribe: bool,
    allowed: list[int] | None = None,
    gpus: list[tuple[int | None, list[int]]] | None = None,
    scheduler_bound: bool = False,
) -> Slot:
    """The slot of one rank on its node; the same inputs give every rank of the node disjoint slots."""
    allowed = sorted(allowed if allowed is not None else usable_cpus())
    gpus = gpus if gpus is not None else gpu_numa_cpus()
    if gpus:
        return _gpu_slot(host, local_rank, local_size, oversubscribe, allowed, gpus)
    if scheduler_bound and len(allowed) == cpus_per_rank:
        # The scheduler (srun --cpu-bind) already gave this task exactly one slot's cores.
        return Slot(tuple(allowed), None, None, "slurm", False)
    start = local_rank * cpus_per_rank
    if start + cpus_per_rank <= len(allowed):
        return Slot(tuple(allowed[start : start + cpus_per_rank]), None, None, "scalewatch", False)
    if not oversubscribe:
        raise SlotError(
            f"host {host}: local rank {local_rank} has no slot: {len(allowed)} usable cores give "
            f"{cpu_slots(cpus_per_rank, allowed)} slot(s) of {cpus_per_rank} core(s) for {local_size} ranks; "
            "set oversubscribe to share cores"
        )
    n = max(1, len(allowed))
    cpus = tuple(sorted({allowed[(start + i) % n] for i in range(min(cpus_per_rank, n))}))
    return Slot(cpus, None, None, "scalewatch", True)


def _gpu_slot(
    host: str,
    local_rank: int,
    local_size: int,
    oversubscribe: bool,
    allowed: list[int],
    gpus: list[tuple[int | None, list[int]]],
) -> Slot:
    if local_rank >= len(gpus) and not oversubscribe:
        raise SlotError(
            f"host {host}: local rank {local_rank} has no GPU of its own ({len(gpus)} GPU(s) for {local_size} "
            "ranks); set oversubscribe to share GPUs"
        )
    gpu = local_rank % len(gpus)
    node, local_cpus = gpus[gpu]
    cpus = [c for c in local_cpus if c in allowed] or allowed
    # Ranks whose GPUs share this NUMA node split its cores between them.
    sharing = [r for r in range(min(local_size, len(gpus))) if gpus[r][0] == node]
    position = sharing.index(gpu) if gpu in sharing else 0
    chunk = max(1, len(cpus) // max(1, len(sharing)))
    mine = tuple(cpus[position * chunk : (position + 1) * chunk]) or tuple(cpus)
    return Slot(mine, gpu, node, "scalewatch", local_rank >= len(gpus))


def bind(slot: Slot) -> None:
    """Pin this process (and so every thread and child it starts later) to the slot's cores."""
    os.sched_setaffinity(0, set(slot.cpus))


def planned_slot() -> dict | None:
    """The slot the suite's rank wrapper planned for this process (None when started some other way)."""
    return json.loads(os.environ.get(SLOT_ENV, "null") or "null") or None


def recorded_slot() -> dict:
    """What this training process actually runs on, with what the wrapper planned: for the summary."""
    planned = planned_slot() or {}
    return {
        "cpus": usable_cpus(),
        "gpu": planned.get("gpu"),
        "numa_node": planned.get("numa_node"),
        "bound_by": planned.get("bound_by", "none"),
        "oversubscribed": bool(planned.get("oversubscribed", False)),
    }


def bind_all_threads(cpus: set[int] | list[int] | tuple[int, ...]) -> None:
    """Pin every thread this process already runs (torch, Gloo, Horovod's) and, through inheritance,
    every one it starts later: sched_setaffinity(0) alone moves only the calling thread."""
    cpus = set(cpus)
    os.sched_setaffinity(0, cpus)
    for task in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(task), cpus)
        except (ProcessLookupError, PermissionError):  # a thread that just ended
            continue


def auto_slot(me: Peer, peers: list[Peer]) -> tuple[int, ...]:
    """`--bind auto`: the cores this rank takes when its host's ranks were started unpinned.

    The ranks of one host that were given the same CPU set split it by their order (local rank), as
    the suite's slots do: len // n cores each. More ranks than cores share round-robin and stay marked.
    """
    group = sorted((p for p in peers if p.host == me.host and p.cpus == me.cpus), key=lambda p: p.rank)
    if len(group) <= 1:
        return me.cpus
    position = [p.rank for p in group].index(me.rank)
    per_rank = max(1, len(me.cpus) // len(group))
    return plan_slot(me.host, position, len(group), per_rank, True, allowed=list(me.cpus), gpus=[]).cpus
