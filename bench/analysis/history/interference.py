"""Interference that persists is a node finding (issue 62): a node whose ranks lose their cores to the same
process in several recent runs is named with that process, as a node slowest in several runs is.

One run beside a busy neighbour is re-measured and, if it stays, INCONCLUSIVE
(bench.analysis.verdict.interference): the run's verdict is protected. But the same process on the same
node run after run (a monitoring agent pinned to a training core, a stray service left enabled) is a
defect of that node that no re-measure fixes, and nobody hears of it while every week reads "inconclusive,
interference". So, per cluster, over its last RECENT_RUNS suite runs (node_health's window and rule):
a (host, process) whose share of that host's ranks' slot cores was at least INTERFERENCE_SHARE (the cause
rules' threshold) in NAMED_AFTER or more of them is named.

A host's share in a run is the worst of its ranks that the process topped (a process pinned to one core
takes one rank's cores, not the node's average), the worst over the run's rows (workloads and scales): a
run counts once. The runs considered (`of`) are those with a foreign-share figure at all: a run from
before the figure was measured is not a clean run.

Each row is read from its per-rank figures (`rank_breakdown`) where it has them; a frame without them
(the overview reads only each row's own columns, bench.results.schema.NODE_LINE, never every rank's) is
read from the row's worst rank (`foreign_cpu_share`, and `foreign_top` as "rank R on HOST: proc (pid N) on
core C"): the node the row itself names, so a second node beside a worse one shows in the alert only.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from bench.analysis.history.node_health import NAMED_AFTER, RECENT_RUNS
from bench.analysis.verdict.bottleneck import INTERFERENCE_SHARE

# A rank's top foreign process (bench.metrics.sources.interference): "name (pid N) on core C[, S% of it]".
# The name ends at the last "(pid N)": a command name may itself hold parentheses.
_NAMED = re.compile(r"^(?P<name>.+?)\s*\(pid \d+\)(?!.*\(pid \d+\))")
# A row's worst rank (bench.analysis.verdict.ceilings): "rank R on HOST: <its top>".
_ROW_TOP = re.compile(r"^rank \S+ on (?P<host>[^:\s]+): (?P<top>.*)$", re.DOTALL)


@dataclass(frozen=True)
class Seen:
    """One host's foreign share in one row, and the process that topped it (None: unnamed or none)."""

    suite_run_id: str
    started_at: str
    host: str
    process: str | None
    share: float


def process_name(top: object) -> str | None:
    """The process a `foreign_top` names ("busy.sh (pid 123) on core 1" -> "busy.sh"); None for none or
    "unnamed": an unnamed share cannot be told to be the same process run after run."""
    if not isinstance(top, str) or not top.strip():
        return None
    text = top.strip()
    found = _NAMED.match(text)
    name = found["name"] if found else text.split(",")[0].split(" on core ")[0]
    name = name.strip()
    return None if not name or name.startswith("unnamed") else name


def _share(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def _from_ranks(row: dict, ranks: list) -> list[Seen]:
    out = []
    for r in ranks:
        share = _share(r.get("foreign_cpu_share")) if isinstance(r, dict) else None
        if share is not None and r.get("host"):
            process = process_name(r.get("foreign_top"))
            out.append(Seen(str(row["suite_run_id"]), str(row.get("started_at") or ""), str(r["host"]), process, share))
    return out


def _from_row(row: dict) -> list[Seen]:
    share = _share(row.get("foreign_cpu_share"))
    if share is None:
        return []
    named = _ROW_TOP.match(str(row.get("foreign_top") or "").strip())
    host, process = (named["host"], process_name(named["top"])) if named else ("", None)
    return [Seen(str(row["suite_run_id"]), str(row.get("started_at") or ""), host, process, share)]


def seen_in(results: pd.DataFrame) -> list[Seen]:
    """Every (row, host) foreign share: from the row's ranks where it has per-rank figures, else its worst
    rank's (an entry with host "" where no rank lost any: the run was measured, and clean)."""
    out: list[Seen] = []
    for row in results.to_dict("records"):
        try:
            ranks = json.loads(row.get("rank_breakdown") or "[]")
        except (TypeError, ValueError):
            ranks = []
        per_rank = _from_ranks(row, ranks if isinstance(ranks, list) else [])
        out += per_rank or _from_row(row)
    return out


def _runs_named(per_run: dict[str, list[Seen]], order: list[str]) -> dict[tuple[str, str], list[float]]:
    """(host, process) -> its share in each of the `order` runs where it took at least INTERFERENCE_SHARE
    (a run with several rows counts once, at its worst)."""
    named: dict[tuple[str, str], list[float]] = {}
    for sid in order:
        worst: dict[tuple[str, str], float] = {}
        for s in per_run[sid]:
            if s.process and s.host and s.share >= INTERFERENCE_SHARE:
                worst[(s.host, s.process)] = max(worst.get((s.host, s.process), 0.0), s.share)
        for key, share in worst.items():
            named.setdefault(key, []).append(share)
    return named


def _entry(cluster: str, host: str, process: str, shares: list[float], of: int) -> dict:
    share = float(np.median(shares))
    line = f"node {host}: `{process}` took {share:.0%} of the ranks' cores in {len(shares)} of the last {of} runs"
    return {
        "kind": "interference",
        "cluster": cluster,
        "host": host,
        "process": process,
        "share": share,
        "runs": len(shares),
        "of": of,
        "line": line,
    }


def interfering_nodes(results: pd.DataFrame, recent: int = RECENT_RUNS, named_after: int = NAMED_AFTER) -> list[dict]:
    """(host, process) pairs that took at least INTERFERENCE_SHARE of the host's ranks' cores in
    `named_after` or more of the cluster's last `recent` measured runs, most runs first, then the largest
    share: {"kind": "interference", "cluster", "host", "process", "share" (median of those runs'), "runs",
    "of" (the runs considered), "line"}."""
    out: list[dict] = []
    if results.empty or "suite_run_id" not in results:
        return out
    clusters = results.get("cluster", pd.Series("", index=results.index)).fillna("").astype(str)
    for cluster, rows in results.groupby(clusters):
        per_run: dict[str, list[Seen]] = {}
        for s in seen_in(rows):
            per_run.setdefault(s.suite_run_id, []).append(s)
        order = sorted(per_run, key=lambda sid: min(s.started_at for s in per_run[sid]))[-recent:]
        for (host, process), shares in _runs_named(per_run, order).items():
            if len(shares) >= named_after:
                out.append(_entry(str(cluster), host, process, shares, len(order)))
    return sorted(out, key=lambda d: (-d["runs"], -d["share"], d["cluster"], d["host"]))


def interference_node_lines(store, cluster: str) -> list[dict]:
    """The interfering nodes of `cluster` in the results store, for the run's outcome and its alert
    (bench.suite.record.finish): read from every rank's figures of the cluster's rows."""
    frame = store.frame()
    if frame.empty or "cluster" not in frame:
        return []
    return interfering_nodes(frame[frame["cluster"].astype(str) == cluster])
