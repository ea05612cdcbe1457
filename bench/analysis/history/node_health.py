"""Per-node health across runs: a node that is the slowest in several recent runs is named.

One slow run is noise or a busy neighbour; the same node behind its peers run after run is a
defective node (a throttled GPU, a bad DIMM, a NIC at half speed), which cluster acceptance suites
flag by exactly this rule. A node's work rate in a run is its ranks' images per second of their own
compute (data wait and exposed communication excluded, so a node is not blamed for the storage or a
slower peer), compared with the median node of that run.

The single-run rule agrees with it (issue 49): a node the newest run of a cluster named as standing out
against its peers (the `slow_node` column, bench.analysis.verdict.nodes: more than 25% below their
median) is listed at once, marked as one run; a link at a third of its peer's is not noise in any run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd

# A node counts as "the slowest" in a run only when it is at least this far behind the median node.
MIN_GAP = 0.05
RECENT_RUNS = 5
NAMED_AFTER = 3  # slowest in at least this many of the recent runs


@dataclass(frozen=True)
class NodeRun:
    suite_run_id: str
    started_at: str
    host: str
    work_rate: float  # images per second of compute, its ranks summed
    data_wait_share: float
    behind: float  # (median node's work rate - this node's) / median; 0 for the median node


def node_runs(results: pd.DataFrame) -> list[NodeRun]:
    """Each (run, host) of the rows that span two or more hosts, from their per-rank breakdown."""
    out: list[NodeRun] = []
    for row in results.to_dict("records"):
        try:
            ranks = json.loads(row.get("rank_breakdown") or "[]")
        except (TypeError, ValueError):
            continue
        hosts: dict[str, list[dict]] = {}
        for r in ranks:
            if r.get("host") and r.get("images") and r.get("measured_s") and r.get("compute_share"):
                hosts.setdefault(str(r["host"]), []).append(r)
        if len(hosts) < 2:
            continue
        rates = {
            h: sum(r["images"] / (r["measured_s"] * r["compute_share"]) for r in rs) / len(rs)
            for h, rs in hosts.items()
        }
        median = float(np.median(list(rates.values())))
        for host, rs in hosts.items():
            out.append(
                NodeRun(
                    str(row["suite_run_id"]),
                    str(row.get("started_at") or ""),
                    host,
                    rates[host],
                    float(np.mean([r.get("data_wait_share", 0.0) for r in rs])),
                    max(0.0, (median - rates[host]) / median) if median > 0 else 0.0,
                )
            )
    return out


def slow_nodes(
    results: pd.DataFrame, recent: int = RECENT_RUNS, named_after: int = NAMED_AFTER, min_gap: float = MIN_GAP
) -> list[dict]:
    """Nodes slowest (by at least `min_gap`) in `named_after` or more of the last `recent` multi-node runs,
    per cluster, worst first: {"kind": "slow", "cluster", "host", "slowest_in", "runs", "behind_min",
    "behind_max", "line"} (`kind` tells them from bench.analysis.history.interference's node lines)."""
    out = []
    if results.empty or "rank_breakdown" not in results:
        return out
    for cluster, rows in results.groupby(results.get("cluster", pd.Series("", index=results.index))):
        per_run: dict[str, list[NodeRun]] = {}
        for item in node_runs(rows):
            per_run.setdefault(item.suite_run_id, []).append(item)
        order = sorted(per_run, key=lambda sid: min(n.started_at for n in per_run[sid]))[-recent:]
        if not order:
            continue
        slowest: dict[str, list[float]] = {}
        for sid in order:
            # a run with several rows (workloads, scales) counts once: a host's worst gap in it
            by_host: dict[str, float] = {}
            for n in per_run[sid]:
                by_host[n.host] = max(by_host.get(n.host, 0.0), n.behind)
            host, gap = max(by_host.items(), key=lambda kv: kv[1])
            if gap >= min_gap:
                slowest.setdefault(host, []).append(gap)
        for host, gaps in slowest.items():
            if len(gaps) >= named_after:
                lo, hi = min(gaps), max(gaps)
                span = f"{lo:.0%}" if round(lo, 2) == round(hi, 2) else f"{lo * 100:.0f}-{hi:.0%}"
                out.append(
                    {
                        "kind": "slow",
                        "cluster": str(cluster),
                        "host": host,
                        "slowest_in": len(gaps),
                        "runs": len(order),
                        "behind_min": lo,
                        "behind_max": hi,
                        "line": f"{host} slowest in {len(gaps)} of the last {len(order)} runs, {span} behind",
                    }
                )
    out += named_in_newest_run(results, {(d["cluster"], d["host"]) for d in out})
    return sorted(out, key=lambda d: (-d["slowest_in"], -d["behind_max"]))


def named_in_newest_run(results: pd.DataFrame, already: set[tuple[str, str]]) -> list[dict]:
    """The nodes each cluster's newest run named (`slow_node`), not already named across runs: one entry
    per host, `slowest_in` 1 of 1 run, its line saying at which scales and "(one run)"."""
    if "slow_node" not in results or results.empty:
        return []
    out = []
    clusters = results.get("cluster", pd.Series("", index=results.index)).fillna("").astype(str)
    for cluster, rows in results.groupby(clusters):
        newest = rows[rows["started_at"].astype(str) == rows["started_at"].astype(str).max()]
        scales: dict[str, list[str]] = {}
        for r in newest.to_dict("records"):
            host = r.get("slow_node")
            if isinstance(host, str) and host and (str(cluster), host) not in already:
                scales.setdefault(host, []).append(f"{r['workload']} @ {int(r['gpus'])} GPUs")
        for host, where in scales.items():
            line = f"{host} stood out against its peers in the latest run ({', '.join(where)}) (one run)"
            entry = {"kind": "slow", "cluster": str(cluster), "host": host, "slowest_in": 1, "runs": 1}
            out.append(entry | {"behind_min": float("nan"), "behind_max": 0.0, "line": line})
    return out
