"""One scale on one fabric: the time a step takes (compute plus the allreduce backward does not hide), the
images/s the storage allows, and which of compute, communication or storage binds."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from bench.analysis.cluster import Cluster
from bench.analysis.projection.allreduce import (
    Algorithm,
    Link,
    allreduce_s,
    check_ranks,
    ring_allreduce_s,
    tree_allreduce_s,
)
from bench.errors import ConfigError

BOUND_BY: tuple[str, ...] = ("compute", "communication", "storage")
# A scale is communication-bound when its exposed allreduce is at least half the step (as long as compute).
COMM_BOUND_SHARE = 0.5
MB = 1e6


@dataclass(frozen=True)
class Fabric:
    """Where a scale runs: the link (flat, or a cluster's intra/inter-node pair), the storage, the capacity."""

    flat: Link | None = None
    cluster: Cluster | None = None
    storage_bytes_s: float | None = None
    storage_source: str = ""
    name: str = "this machine"
    # One compute node's own read ceiling (the probe's per_node_mb_s) and what binds storage_bytes_s
    # ('client' or 'store', the probe's bound): with both, a scale on n nodes reads at most n x one node.
    storage_per_node_bytes_s: float | None = None
    storage_bound: str = ""

    def storage_at(self, gpus: int) -> tuple[float | None, str]:
        """(bytes/s the storage gives the nodes `gpus` GPUs train on, what binds it): n x one node's
        ceiling while that is under the store's figure; the store's figure (and its bound) above, and
        where the node count is unknown (no cluster described)."""
        if self.storage_bytes_s is None:
            return None, ""
        nodes = self.nodes(gpus)  # unknown without a cluster: the store's figure, as measured
        per_node = self.storage_per_node_bytes_s
        if nodes is not None and per_node is not None and nodes * per_node < self.storage_bytes_s:
            return nodes * per_node, "client"
        return self.storage_bytes_s, self.storage_bound

    def link(self, gpus: int) -> Link | None:
        if self.flat is not None or gpus == 1:
            return self.flat
        c = self.cluster
        if c is None:
            return None
        if gpus <= c.gpus_per_node:
            return Link(c.intra_node_link, c.latency_within(), "intra_node", f"{c.name} intra_node_link")
        assert c.inter_node_link is not None  # the cluster model refuses nodes > 1 without it
        bus = min(c.intra_node_link, c.inter_node_link)
        return Link(bus, c.latency_across(), "inter_node", f"{c.name} inter_node_link")

    def nodes(self, gpus: int) -> int | None:
        return None if self.cluster is None else math.ceil(gpus / self.cluster.gpus_per_node)

    def check_fits(self, gpus: Iterable[int]) -> None:
        """More ranks than the described cluster holds is beyond the model: refused, never extrapolated."""
        c = self.cluster
        for n in gpus:
            check_ranks(n)
            if c is not None and n > c.gpus:
                raise ConfigError(
                    f"--gpus: {n} GPUs exceed the described cluster {c.name!r}: nodes {c.nodes} x "
                    f"gpus_per_node {c.gpus_per_node} = {c.gpus}"
                )


@dataclass(frozen=True)
class Ceilings:
    """One workload's measured (or given) ceilings: everything a projection needs, with where each came from."""

    workload: str
    one_rank_img_s: float  # the efficiency reference: one GPU alone
    compute_img_s: float  # per GPU once two or more share nodes (= one_rank_img_s on the one-rank basis)
    compute_basis: str
    batch_size: int
    allreduce_bytes: float
    buckets: int
    bytes_per_image: float
    exposed_fraction: float
    exposed_source: str


def project_scale(c: Ceilings, gpus: int, fabric: Fabric, algorithm: Algorithm = "auto") -> dict:
    """One scale on one fabric: images/s, efficiency, exposed communication, storage use and the binding part.

    Raises ConfigError where the fabric has no link for a multi-rank scale (nothing to project from)."""
    check_ranks(gpus)
    compute_s = c.batch_size / (c.one_rank_img_s if gpus == 1 else c.compute_img_s)
    link = fabric.link(gpus)
    if gpus == 1:
        total, used, ring, tree = 0.0, "none", 0.0, 0.0
    elif link is None:
        raise ConfigError(
            f"{c.workload}: no link to project {gpus} GPUs over on {fabric.name}: give --link or --cluster"
        )
    else:
        total, used = allreduce_s(c.allreduce_bytes, gpus, link, c.buckets, algorithm)
        ring = ring_allreduce_s(c.allreduce_bytes, gpus, link, c.buckets)
        tree = tree_allreduce_s(c.allreduce_bytes, gpus, link, c.buckets)
    exposed = c.exposed_fraction * total
    step = compute_s + exposed
    compute_bound = gpus * c.batch_size / step
    storage, storage_binds = fabric.storage_at(gpus)
    storage_bound = math.inf if storage is None else storage / c.bytes_per_image
    images = min(compute_bound, storage_bound)
    if storage_bound < compute_bound:
        bound_by = "storage"
    elif exposed / step >= COMM_BOUND_SHARE:
        bound_by = "communication"
    else:
        bound_by = "compute"
    return {
        "workload": c.workload,
        "gpus": gpus,
        "kind": "projection",
        "images_per_s": images,
        "efficiency": images / (gpus * c.one_rank_img_s),
        "bound_by": bound_by,
        "fabric": fabric.name,
        "nodes": fabric.nodes(gpus),
        "link": None if gpus == 1 or link is None else link.span,
        "bus_bandwidth_gb_s": None if gpus == 1 or link is None else link.bus_bytes_s / 1e9,
        "latency_s": None if gpus == 1 or link is None else link.latency_s,
        "link_source": None if gpus == 1 or link is None else link.source,
        "algorithm": used,
        "allreduce_s": total,
        "allreduce_ring_s": ring,
        "allreduce_tree_s": tree,
        "exposed_comm_s": exposed,
        "exposed_comm_share": exposed / step,
        "compute_s": compute_s,
        "step_s": step,
        "compute_comm_bound_img_s": compute_bound,
        "storage_bound_img_s": None if math.isinf(storage_bound) else storage_bound,
        "storage_demand_mb_s": compute_bound * c.bytes_per_image / MB,
        "storage_ceiling_mb_s": None if storage is None else storage / MB,
        "storage_utilisation": None if storage is None else images * c.bytes_per_image / storage,
        "storage_source": fabric.storage_source or None,
        "storage_binds": storage_binds or None,
        "compute_img_s_per_gpu": c.compute_img_s if gpus > 1 else c.one_rank_img_s,
        "compute_basis": c.compute_basis if gpus > 1 else "one-rank",
        "exposed_fraction": c.exposed_fraction,
        "exposed_fraction_source": c.exposed_source,
        "batch_size": c.batch_size,
        "allreduce_bytes": c.allreduce_bytes,
        "buckets": c.buckets,
        "bytes_per_image": c.bytes_per_image,
    }


def measured_row(c: Ceilings, measured: dict, fabric: Fabric, algorithm: Algorithm) -> dict:
    """A measured scale beside what the model makes of it on this machine's own ceilings."""
    try:
        model = project_scale(c, measured["gpus"], fabric, algorithm)
    except ConfigError as error:
        model = {"workload": c.workload, "gpus": measured["gpus"], "bound_by": None, "note": str(error)}
    row = {**model, "kind": "measured"}
    row["projected_images_per_s"] = model.get("images_per_s")
    row["projected_efficiency"] = model.get("efficiency")
    row["images_per_s"] = measured["images_per_s"]
    row["efficiency"] = measured["efficiency"]
    projected = row["projected_images_per_s"]
    row["projection_error"] = None if projected is None else projected / measured["images_per_s"] - 1
    for key in ("bottleneck", "allreduce_s_measured"):
        if measured.get(key) is not None:
            row[f"measured_{key.removesuffix('_measured')}"] = measured[key]
    return row
