"""One node that stands out against its peers: named, with its figure and its peers' median.

Why a node rule beside the rank rules: the failure a cluster check meets most is one degraded node (a
NIC at half speed, a throttled disk or CPU). The probe then reads the whole level at the slow node's
pace and used to call that the store's limit, and in training the slow node's link carries the
gradients too, so every rank waits alike and the rank straggler rule sees no straggler. Each node's
own figures (the probe's read MB/s on a level read together; a scale's per-node read MB/s, images/s,
time in collectives and its ring test's send/receive MB/s) name it instead.

NODE_RULE (written once; docs/metrics.md quotes it): a node stands out when one of its figures is more
than NODE_GAP below the median of the same figure on its peers (the other nodes of the same level or
scale), with at least two nodes that have the figure. Higher is better for every figure judged here
(MB/s, images/s). A cluster of equal nodes names nobody: each node's figure is its peers' median. With
two nodes the median of the peers is the other node, so only the slower one can stand out.

The ring test's figures (a node's best send and receive rate to a ring neighbour, measured one
transfer at a time) are judged on scales of three nodes or more (RING_MIN_NODES): with two nodes a
transfer's figure belongs to both of its ends, and naming one would be a guess.

A node that returns no figures (named in `missing_nodes`) is named too: its level or scale is not
judged on the nodes that answered.

Not judged: a node's share of the allreduce (`comm_share`, stored and shown per node). It is no
higher-is-better figure of the node itself: a node slow in its CPU or disk makes its peers wait for it
in every collective, so the peers show the higher share and the slow node the lower, and on a slow link
every rank waits alike. Judged by this rule it would name a healthy node, or nobody.
"""

from __future__ import annotations

import json
import math
import statistics

# The frame takes each node's figures from the summary (it imports nothing of the verdict).
from bench.analysis.frame import scale_nodes as scale_nodes

NODE_GAP = 0.25
NODE_RULE = (
    f"a node stands out when its figure is more than {NODE_GAP:.0%} below the median of the same figure "
    "on its peers (the other nodes read or trained beside it), with at least two nodes measured; "
    "equal nodes name nobody"
)
# The per-node figures of a scale the rule reads, with the words its evidence uses.
SCALE_FIGURES = {
    "read_mb_s": ("reads", "MB/s"),
    "compute_img_s": ("computes", "images/s of compute"),
    "ring_recv_algbw_mb_s": ("receives", "MB/s on the ring test (algbw from its best partner)"),
    "ring_send_algbw_mb_s": ("sends", "MB/s on the ring test (algbw to its best partner)"),
}
# The ring test's figures (bench.train.dist.ring) are judged from three nodes: a node's figure is its
# best partner's transfer, and with two nodes each has one partner, so a transfer's figure belongs to
# both ends alike (a receive held at one node reads the same as a send held at the other).
RING_FIGURES = ("ring_recv_algbw_mb_s", "ring_send_algbw_mb_s")
RING_MIN_NODES = 3


def _finite(x) -> bool:
    return x is not None and isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def stand_out(figures: dict[str, float]) -> list[dict]:
    """Each host whose figure is more than NODE_GAP below its peers' median: [{host, value,
    peers_median}], slowest first; [] with fewer than two hosts that have a finite figure."""
    have = {h: float(v) for h, v in figures.items() if _finite(v)}
    if len(have) < 2:
        return []
    out = []
    for host, value in have.items():
        peers = statistics.median(v for h, v in have.items() if h != host)
        if peers > 0 and value < (1.0 - NODE_GAP) * peers:
            out.append({"host": host, "value": value, "peers_median": peers})
    return sorted(out, key=lambda x: x["value"] / x["peers_median"])


def probe_slow_nodes(levels: list[dict], labels: dict[str, str] | None = None) -> list[dict]:
    """The probe's `slow_nodes`: [{host, mb_s, peers_median_mb_s}] of the largest conclusive level that
    read on two nodes or more (its `per_node` figures, read together); [] where none stands out or no
    such level counted (a level too short or not cold is no figure to name a node by). `labels`: a
    node's own name -> the suite's name for it (its ssh host, as the ranks report their host)."""
    counted = [lv for lv in levels if lv.get("conclusive") and len(lv.get("per_node") or []) >= 2]
    if not counted:
        return []
    top = max(counted, key=lambda lv: lv["nodes"])
    figures = {(labels or {}).get(str(p["host"]), str(p["host"])): p.get("mb_s") for p in top["per_node"]}
    return [
        {"host": s["host"], "mb_s": round(s["value"], 3), "peers_median_mb_s": round(s["peers_median"], 3)}
        for s in stand_out(figures)
    ]


def probe_bound(slow_nodes: list[dict], aggregate_bound: str) -> str:
    """The probe's `bound`: 'node' where a node stands out on the level it was read on (the aggregate is
    that node's pace, not the store's), else 'client' or 'store' by the aggregate (bench.storage.fio_probe)."""
    return "node" if slow_nodes else aggregate_bound


def slow_node(nodes: list[dict], probe_slow: list[dict] | None = None, reads_valid: bool = True) -> tuple[str, str]:
    """(host, evidence) of the node that stands out in a scale, or ("", ""): first a node of this scale
    the same run's probe named (each node's reads measured side by side, none of the training's
    gradients on its link: on a slow link every rank waits alike in training, so the training's own
    figures can stay level), then the scale's own per-node figures (SCALE_FIGURES, NODE_RULE; its read
    MB/s only where `reads_valid`: a cache-served or too-short epoch 1 is no read figure). One node of
    a scale is no peer group: it names nobody."""
    hosts = {n["host"] for n in nodes}
    if len(hosts) < 2:
        return "", ""
    for s in probe_slow or []:
        if s["host"] in hosts:
            return s["host"], (
                f"node {s['host']} read {s['mb_s']:.2f} MB/s in this run's storage probe against its peers' median "
                f"{s['peers_median_mb_s']:.2f} MB/s ({1 - s['mb_s'] / s['peers_median_mb_s']:.0%} below; {NODE_RULE})"
            )
    for key, (verb, unit) in SCALE_FIGURES.items():
        if key == "read_mb_s" and not reads_valid:
            continue
        if key in RING_FIGURES and len(hosts) < RING_MIN_NODES:
            continue
        found = stand_out({n["host"]: n.get(key) for n in nodes})
        if found:
            s = found[0]
            return s["host"], (
                f"node {s['host']} {verb} {s['value']:.2f} {unit} against its peers' median {s['peers_median']:.2f} "
                f"({1 - s['value'] / s['peers_median']:.0%} below; {NODE_RULE})"
            )
    return "", ""


def missing_nodes(expected_hosts: list[str], nodes: list[dict]) -> list[str]:
    """The hosts a scale placed ranks on that returned no figures."""
    have = {n["host"] for n in nodes}
    return [h for h in expected_hosts if h not in have]


def _figures(row) -> list[dict]:
    try:
        nodes = json.loads(row.get("node_figures") or "[]")
    except (TypeError, json.JSONDecodeError):
        return []
    return nodes if isinstance(nodes, list) else []


def missing_figures(nodes: list[dict]) -> str:
    """Why a multi-node scale cannot be judged on its nodes: a node that returned no figure its peers
    returned (an epoch-1 read rate, a compute rate) is named; '' where every node has them. A scale is
    never judged on the nodes that answered."""
    if len(nodes) < 2:
        return ""
    why = []
    for key, (_, unit) in SCALE_FIGURES.items():
        have = [n for n in nodes if _finite(n.get(key))]
        if have and len(have) < len(nodes):
            lacking = ", ".join(str(n["host"]) for n in nodes if not _finite(n.get(key)))
            why.append(f"node(s) {lacking} returned no {unit} figure ({key}) where their peers did")
    return "; ".join(why)


def node_problems(frame, reasons):
    """`reasons` (each row's inconclusive reason, a pandas Series) with the missing-figure reason added
    where a row had none."""
    out = reasons.copy()
    for idx, row in frame.iterrows():
        if out[idx] or not bool(row.get("valid", False)):
            continue
        out[idx] = missing_figures(_figures(row))
    return out


# Causes the rank rules explain by something other than the node itself (ranks sharing cores, foreign
# processes on a rank's slot): a node slow for them keeps that cause; it is still named in slow_node.
EXPLAINED = ("contention", "interference")


def add_slow_nodes(frame, probe_slow: list[dict] | None = None):
    """The frame with `slow_node` (the host that stands out, '' none) on every row; a failing row
    whose node stands out gets the cause `node` with its evidence (the rank rules' cause kept after it:
    on a slow link every rank waits alike, so they read it as communication), unless the rules found
    contention or interference (EXPLAINED: what slows the node is named already)."""
    from bench.analysis.verdict.rules import FAIL

    f = frame.copy()
    f["slow_node"] = ""
    for idx, row in f.iterrows():
        if not bool(row.get("valid", False)):
            continue
        host, evidence = slow_node(_figures(row), probe_slow, row.get("bandwidth_valid") is True)
        if not host:
            continue
        f.at[idx, "slow_node"] = host
        if row.get("verdict") == FAIL and row.get("bottleneck") not in EXPLAINED:
            before = str(row.get("bottleneck") or "")
            was = f" (the rank rules read it as {before}: {row.get('bottleneck_evidence')})" if before else ""
            f.at[idx, "bottleneck"] = "node"
            f.at[idx, "bottleneck_evidence"] = evidence + was
    return f


def node_warnings(frame, probe_slow: list[dict] | None = None) -> list[dict]:
    """A node that stands out on a scale that met its bounds, as a warning (the verdict, the alert and
    the overview name it): a node ceiling measured on the same slots carries the slow node's loss into
    the ideal, so the efficiency alone can hide it."""
    from bench.analysis.verdict.rules import PASS

    out = []
    for _, row in frame.iterrows():
        if row.get("slow_node") and row.get("verdict") == PASS:
            _, evidence = slow_node(_figures(row), probe_slow, row.get("bandwidth_valid") is True)
            out.append(
                {
                    "workload": row["workload"],
                    "gpus": int(row["gpus"]),
                    "metric": "slow_node",
                    "expectation": "NodeDoesNotStandOut",
                    "value": row["slow_node"],
                    "bound": f"within {NODE_GAP:.0%} of its peers' median",
                    "reason": evidence,
                }
            )
    return out
