"""What ranks' slots say about each other: the kernel's core-list format, the peers the ranks exchange
at start, and the contention those peers show (ranks sharing cores or a GPU, more threads than cores).

Low on purpose (stdlib only): training computes these facts (bench.train.slots, bench.train.dist) and
the summary (bench.metrics.summary) and the verdicts (bench.analysis) read them, without either
importing the training side.
"""

from __future__ import annotations

from dataclasses import dataclass


def parse_cpulist(text: str) -> list[int]:
    """`0-3,8,10-11` -> [0, 1, 2, 3, 8, 10, 11] (the kernel's list format)."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def cpu_ranges(cpus: list[int] | tuple[int, ...] | set[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5' (the kernel's list format, as a note shows it)."""
    out: list[str] = []
    for cpu in sorted(set(cpus)):
        if out and cpu == int(out[-1].rpartition("-")[2]) + 1:
            out[-1] = f"{out[-1].partition('-')[0]}-{cpu}"
        else:
            out.append(str(cpu))
    return ",".join(out)


@dataclass(frozen=True)
class Peer:
    """What one rank runs on, as exchanged at start: enough to see two ranks fighting over a core or GPU."""

    rank: int
    host: str
    cpus: tuple[int, ...]
    threads: int  # torch intra-op threads the rank asks for
    gpu: str | None  # the GPU's identity (UUID where known): indices differ under CUDA_VISIBLE_DEVICES
    planned: bool = False  # the suite's launcher placed it, in a run that allowed oversubscription

    @classmethod
    def from_dict(cls, d: dict) -> Peer:
        """A peer as exchanged (JSON): its fields, with the cores as a tuple again."""
        return cls(
            d["rank"], str(d["host"]), tuple(int(c) for c in d["cpus"]), int(d["threads"]), d["gpu"], bool(d["planned"])
        )


def contention(peers: list[Peer]) -> dict[int, dict]:
    """Per rank: `shared_with` (ranks on its host whose cores or GPU overlap its own), `oversubscribed`
    (shared, or its host's ranks ask for more threads than their cores) and a `contention` note naming
    the ranks and cores ("" when none, or when the sharing was the suite's own oversubscribe)."""
    out: dict[int, dict] = {}
    by_host: dict[str, list[Peer]] = {}
    for p in peers:
        by_host.setdefault(p.host, []).append(p)
    for host, group in by_host.items():
        union = sorted({c for p in group for c in p.cpus})
        threads = sum(p.threads for p in group)
        too_many = threads > len(union)
        for p in group:
            notes: list[str] = []
            shared = []
            for q in group:
                if q.rank == p.rank:
                    continue
                cores = sorted(set(p.cpus) & set(q.cpus))
                same_gpu = p.gpu is not None and p.gpu == q.gpu
                if cores or same_gpu:
                    shared.append(q.rank)
                pair = f"ranks {min(p.rank, q.rank)} and {max(p.rank, q.rank)} on {host}"  # the same words on both
                if cores:
                    notes.append(f"{pair} share cores {cpu_ranges(cores)}")
                if same_gpu:
                    notes.append(f"{pair} share GPU {p.gpu}")
            if too_many:
                ranks = ", ".join(str(q.rank) for q in sorted(group, key=lambda q: q.rank))
                who = f"ranks {ranks} on {host} run" if len(group) > 1 else f"rank {p.rank} on {host} runs"
                notes.append(f"{who} {threads} threads on {len(union)} core(s) {cpu_ranges(union)}")
            out[p.rank] = {
                "shared_with": sorted(shared),
                "oversubscribed": bool(shared) or too_many,
                "contention": "" if p.planned else "; ".join(notes),
            }
    return out


def contention_summary(slots: list[dict]) -> str:
    """The ranks' contention notes as one line, each note once (both ranks of a pair name it)."""
    notes = [n for slot in slots for n in (slot.get("contention") or "").split("; ") if n]
    return "; ".join(dict.fromkeys(notes))
