"""One node that stands out against its peers: named, with its figure and its peers' median.

Why a node rule beside the rank rules: the failure a cluster check meets most is one degraded node (a
NIC at half speed, a throttled disk or CPU). The probe then reads the whole level at the slow node's
pace and used to call that the store's limit, and in training the slow node's link carries the
gradients too, so every rank waits alike and the rank straggler rule sees no straggler. Each node's
own figures (the probe's read MB/s on a level read together; a scale's per-node read MB/s, images/s
and time in collectives) name it instead.

NODE_RULE (written once; docs/metrics.md quotes it): a node stands out when one of its figures is more
than NODE_GAP below the median of the same figure on its peers (the other nodes of the same level or
scale), with at least two nodes that have the figure. Higher is better for every figure judged here
(MB/s, images/s). A cluster of equal nodes names nobody: each node's figure is its peers' median. With
two nodes the median of the peers is the other node, so only the slower one can stand out.

A node that returns no figures (named in `missing_nodes`) is named too: its level or scale is not
judged on the nodes that answered.
"""

from __future__ import annotations

import json
import math
import statistics

NODE_GAP = 0.25
NODE_RULE = (
    f"a node stands out when its figure is more than {NODE_GAP:.0%} below the median of the same figure "
    "on its peers (the other nodes read or trained beside it), with at least two nodes measured; "
    "equal nodes name nobody"
)
# The per-node figures of a scale the rule reads, with the words its evidence uses.
SCALE_FIGURES = {"read_mb_s": ("reads", "MB/s"), "compute_img_s": ("computes", "images/s of compute")}


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


def probe_slow_nodes(levels: list[dict]) -> list[dict]:
    """The probe's `slow_nodes`: [{host, mb_s, peers_median_mb_s}] of the largest conclusive level that
    read on two nodes or more (its `per_node` figures, read together); [] where none stands out or no
    such level counted (a level too short or not cold is no figure to name a node by)."""
    counted = [lv for lv in levels if lv.get("conclusive") and len(lv.get("per_node") or []) >= 2]
    if not counted:
        return []
    top = max(counted, key=lambda lv: lv["nodes"])
    figures = {str(p["host"]): p.get("mb_s") for p in top["per_node"]}
    return [
        {"host": s["host"], "mb_s": round(s["value"], 3), "peers_median_mb_s": round(s["peers_median"], 3)}
        for s in stand_out(figures)
    ]


def probe_bound(slow_nodes: list[dict], aggregate_bound: str) -> str:
    """The probe's `bound`: 'node' where a node stands out on the level it was read on (the aggregate is
    that node's pace, not the store's), else 'client' or 'store' by the aggregate (bench.data.probe)."""
    return "node" if slow_nodes else aggregate_bound


def scale_nodes(per_rank: list[dict], node_reads: dict[str, float] | None = None) -> list[dict]:
    """A scale's per-node figures from its ranks (the run summary's per_rank, breakdown included):
    host, ranks, img_s (its ranks' images/s summed), compute_img_s (images per second of compute, per
    rank, the median over the node's ranks), comm_share and data_wait_share (mean over its ranks) and
    read_mb_s (epoch 1's read rate on that node, from the summary's `nodes`; None where not measured)."""
    hosts: dict[str, list[dict]] = {}
    for r in per_rank:
        hosts.setdefault(str(r["host"]), []).append(r)
    out = []
    for host, ranks in hosts.items():
        br = [r.get("breakdown") or {} for r in ranks]
        pairs = zip(ranks, br, strict=True)
        compute = [float(r["images"]) / float(b["compute_s"]) for r, b in pairs if b.get("compute_s")]
        read = (node_reads or {}).get(host)
        out.append(
            {
                "host": host,
                "ranks": len(ranks),
                "img_s": round(sum(float(r["images_per_s"]) for r in ranks), 3),
                "compute_img_s": round(statistics.median(compute), 3) if compute else None,
                "comm_share": _mean(br, "comm_share"),
                "data_wait_share": _mean(br, "data_wait_share"),
                "read_mb_s": None if read is None else round(float(read), 3),
            }
        )
    return out


def _mean(breakdowns: list[dict], key: str) -> float | None:
    """The mean of `key` over a node's ranks, only where every rank has it."""
    if not breakdowns or not all(_finite(b.get(key)) for b in breakdowns):
        return None
    return round(statistics.fmean(float(b[key]) for b in breakdowns), 4)


def slow_node(nodes: list[dict], probe_slow: list[dict] | None = None) -> tuple[str, str]:
    """(host, evidence) of the node that stands out in a scale, or ("", ""): by its own per-node figures
    (SCALE_FIGURES, NODE_RULE), else by the probe of the same run where it named one of this scale's
    nodes (the probe reads each node alone of the training's gradients, which on a slow link make every
    rank wait alike). One node of a scale is no peer group: it names nobody by its own figures."""
    for key, (verb, unit) in SCALE_FIGURES.items():
        found = stand_out({n["host"]: n.get(key) for n in nodes})
        if found:
            s = found[0]
            return s["host"], (
                f"node {s['host']} {verb} {s['value']:.2f} {unit} against its peers' median {s['peers_median']:.2f} "
                f"({1 - s['value'] / s['peers_median']:.0%} below; {NODE_RULE})"
            )
    hosts = {n["host"] for n in nodes}
    for s in probe_slow or []:
        if s["host"] in hosts and len(hosts) > 1:
            return s["host"], (
                f"node {s['host']} read {s['mb_s']:.2f} MB/s in this run's storage probe against its peers' median "
                f"{s['peers_median_mb_s']:.2f} MB/s ({1 - s['mb_s'] / s['peers_median_mb_s']:.0%} below; {NODE_RULE})"
            )
    return "", ""


def missing_nodes(expected_hosts: list[str], nodes: list[dict]) -> list[str]:
    """The hosts a scale placed ranks on that returned no figures."""
    have = {n["host"] for n in nodes}
    return [h for h in expected_hosts if h not in have]


def nodes_json(nodes: list[dict]) -> str:
    return json.dumps(nodes, allow_nan=False, default=lambda x: None)
