"""Scaling projected past this machine, from the ceilings a run measured (docs/design.md, "Projection").

Per rank and step, a scale of N GPUs spends the time one GPU needs for its batch (from the measured 1-rank
rate, or the node ceiling per rank), plus the part of the gradient allreduce that backward does not hide:

    step(N)    = batch / compute_img_s + exposed_fraction x allreduce(N)
    images/s   = min(N x batch / step(N), storage_ceiling / bytes_per_image)
    efficiency = images/s / (N x one-rank images/s)

The allreduce follows nccl-tests' doc/PERFORMANCE.md: an allreduce of S bytes over n ranks, each with bus
bandwidth B to the others, moves 2(n-1)/n x S through every rank's link whatever the algorithm, so at best
t = (S/B) x 2(n-1)/n, and busbw = algbw x 2(n-1)/n = S/t x 2(n-1)/n. The latency term is the algorithm's
(alpha = one hop's latency, k buckets of S/k bytes; Thakur, Rabenseifner and Gropp 2005):

    ring: k x 2(n-1) x alpha + (S/B) x 2(n-1)/n      (reduce-scatter then all-gather, n-1 steps each)
    tree: k x 2 ceil(log2 n) x alpha + (S/B) x 2(n-1)/n   (reduce up and broadcast down a binary tree)

B is a GPU's bus bandwidth inside a node (`intra_node_link`) while the scale fits one node, and across
nodes the lower of that and the node's network (`inter_node_link`, all its NICs): a ring laid node after
node sends the same bytes over every edge, and a node's edges out share its NICs.

Pure functions over plain values and frames: the CLI (`bench/cli/project.py`) reads files and flags.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from bench.analysis.cluster import Cluster
from bench.errors import ConfigError, ResultsInputError

Algorithm = Literal["ring", "tree", "auto"]
ComputeFrom = Literal["one-rank", "independent"]
BOUND_BY: tuple[str, ...] = ("compute", "communication", "storage")
# Horovod's tensor fusion buffer (HOROVOD_FUSION_THRESHOLD default): gradients go out in buckets this big.
FUSION_BYTES = 64 * 2**20
# Without a measured overlap, assume backward hides none of the allreduce: the projection errs low.
DEFAULT_EXPOSED_FRACTION = 1.0
# A scale is communication-bound when its exposed allreduce is at least half the step (as long as compute).
COMM_BOUND_SHARE = 0.5
MB = 1e6


@dataclass(frozen=True)
class Link:
    """What one rank's allreduce gets: bus bandwidth (bytes/s), one hop's latency (s), and where it came from."""

    bus_bytes_s: float
    latency_s: float
    span: str  # "intra_node", "inter_node" or "flat" (one link for every scale)
    source: str


def _check_ranks(ranks: int) -> None:
    if ranks < 1:
        raise ConfigError(f"gpus: {ranks} must be at least 1")


def bandwidth_term_s(nbytes: float, ranks: int, bus_bytes_s: float) -> float:
    """(S/B) x 2(n-1)/n: the time every allreduce algorithm needs at least to move S bytes (nccl-tests)."""
    _check_ranks(ranks)
    return nbytes / bus_bytes_s * 2 * (ranks - 1) / ranks


def latency_term_s(ranks: int, latency_s: float, buckets: int, algorithm: Algorithm) -> float:
    """Hops per bucket times the latency: 2(n-1) for a ring, 2 ceil(log2 n) for a tree (auto: the fewer)."""
    _check_ranks(ranks)
    ring = 2 * (ranks - 1)
    tree = 2 * math.ceil(math.log2(ranks)) if ranks > 1 else 0
    hops = {"ring": ring, "tree": tree, "auto": min(ring, tree)}[algorithm]
    return buckets * hops * latency_s


def ring_allreduce_s(nbytes: float, ranks: int, link: Link, buckets: int = 1) -> float:
    return latency_term_s(ranks, link.latency_s, buckets, "ring") + bandwidth_term_s(nbytes, ranks, link.bus_bytes_s)


def tree_allreduce_s(nbytes: float, ranks: int, link: Link, buckets: int = 1) -> float:
    return latency_term_s(ranks, link.latency_s, buckets, "tree") + bandwidth_term_s(nbytes, ranks, link.bus_bytes_s)


def allreduce_s(nbytes: float, ranks: int, link: Link, buckets: int, algorithm: Algorithm) -> tuple[float, str]:
    """Seconds per step and the algorithm used; `auto` takes the cheaper, as NCCL's tuner would (ties: ring)."""
    ring, tree = ring_allreduce_s(nbytes, ranks, link, buckets), tree_allreduce_s(nbytes, ranks, link, buckets)
    if algorithm == "ring" or (algorithm == "auto" and ring <= tree):
        return ring, "ring"
    return tree, "tree"


def bus_bandwidth(nbytes: float, ranks: int, seconds: float) -> float:
    """nccl-tests' busbw: algbw x 2(n-1)/n, what the link delivered whatever the rank count."""
    return nbytes / seconds * 2 * (ranks - 1) / ranks


def measured_link(
    nbytes: float, ranks: int, seconds: float, latency_s: float, buckets: int, algorithm: Algorithm
) -> Link:
    """The bus bandwidth an allreduce of `nbytes` over `ranks` taking `seconds` implies, its latency removed first
    (with latency 0 the busbw carries it, as nccl-tests' figure does for one message size)."""
    if ranks < 2:
        raise ConfigError(f"--allreduce-gpus: {ranks}: an allreduce needs at least 2 ranks to measure a link")
    moving = seconds - latency_term_s(ranks, latency_s, buckets, algorithm)
    if not moving > 0:
        raise ConfigError(
            f"--latency: {latency_s:g} s x {buckets} bucket(s) is all of the {seconds:g} s allreduce measured at "
            f"{ranks} ranks (allreduce_s): no time is left for the bytes"
        )
    return Link(bus_bandwidth(nbytes, ranks, moving), latency_s, "flat", f"measured at {ranks} ranks")


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
            _check_ranks(n)
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
    _check_ranks(gpus)
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


# --- Reading ceilings from a run folder and from flags ---------------------------------------------------------


@dataclass(frozen=True)
class Given:
    """Ceilings given on the command line (bytes, bytes/s, seconds): each one overrides the run folder's."""

    workload: str | None = None
    compute_img_s: float | None = None
    compute_from: ComputeFrom = "one-rank"
    batch_size: int | None = None
    allreduce_bytes: float | None = None
    allreduce_s: float | None = None
    allreduce_gpus: int | None = None
    buckets: int | None = None
    bucket_bytes: float = FUSION_BYTES
    link_bytes_s: float | None = None
    latency_s: float | None = None
    storage_bytes_s: float | None = None
    bytes_per_image: float | None = None
    exposed_fraction: float | None = None
    algorithm: Algorithm = "auto"


@dataclass(frozen=True)
class WorkloadInputs:
    """A workload's ceilings, this machine's fabric (for checking the model on the measured scales), and them."""

    ceilings: Ceilings
    machine: Fabric
    measured: tuple[dict, ...] = ()
    allreduce_s_detail: str = "missing"  # why this machine has no link: the column missing or without a value


def read_results(path: Path) -> tuple[pd.DataFrame, str]:
    """A run folder's results.csv (or a results CSV named directly): the frame and the name errors use."""
    from bench.analysis.frame import read_csv

    csv = path / "results.csv" if path.is_dir() else path
    if path.is_dir() and not csv.exists():
        raise ResultsInputError(f"run folder {path}: no results.csv")
    frame = read_csv(csv)
    if frame.empty:
        raise ResultsInputError(f"{csv}: no rows")
    if "workload" not in frame and "model" in frame:
        frame = frame.rename(columns={"model": "workload"})
    for col in ("workload", "gpus", "throughput_img_s"):
        if col not in frame:
            raise ResultsInputError(f"{csv}: missing column '{col}'")
    return frame, f"run folder {path}" if path.is_dir() else str(csv)


def _truthy(series: pd.Series) -> np.ndarray:
    return series.astype(str).str.strip().str.lower().isin(("true", "1", "1.0", "yes")).to_numpy()


def _numbers(frame: pd.DataFrame, col: str, where: str, positive: bool = True) -> pd.Series:
    """A column as floats; a value that is there but not a finite number (or not > 0) is refused, naming it."""
    values = pd.to_numeric(frame[col], errors="coerce")
    bad = (values.isna() & frame[col].notna() & (frame[col].astype(str).str.strip() != "")).to_numpy()
    finite = values.to_numpy(dtype=float)
    bad = bad | ~np.isnan(finite) & (~np.isfinite(finite) | ((finite <= 0) if positive else (finite < 0)))
    if bad.any():
        i = int(bad.argmax())
        need = "a finite number > 0" if positive else "a finite number >= 0"
        raise ResultsInputError(f"{where}: column '{col}' row {i + 2}: {frame[col].iloc[i]!r} is not {need}")
    return values.astype(float)


def usable_rows(frame: pd.DataFrame, where: str) -> pd.DataFrame:
    """Completed, valid scales on their own slots, with a positive measured rate: what ceilings come from."""
    f = frame.copy()
    f["gpus"] = _numbers(f, "gpus", where)
    if (f["gpus"].dropna() % 1 != 0).any():
        i = int((f["gpus"].fillna(0) % 1 != 0).to_numpy().argmax())
        raise ResultsInputError(f"{where}: column 'gpus' row {i + 2}: {frame['gpus'].iloc[i]!r} is not a whole number")
    f["throughput_img_s"] = _numbers(f, "throughput_img_s", where, positive=False)
    keep = (f["throughput_img_s"].fillna(0).to_numpy() > 0) & np.isfinite(f["gpus"].to_numpy())
    if "valid" in f:
        keep &= _truthy(f["valid"])
    if "oversubscribed" in f:
        keep &= ~_truthy(f["oversubscribed"])
    f = f[keep].copy()
    f["gpus"] = f["gpus"].astype(int)
    return f.sort_values("gpus").reset_index(drop=True)


def _no_ceiling(where: str, col: str, flag: str, detail: str = "missing") -> ResultsInputError:
    return ResultsInputError(
        f"{where} has no ceilings: column {col} {detail}; run the suite with ceilings on or give {flag}"
    )


def _ceiling(rows: pd.DataFrame, col: str, where: str) -> pd.Series:
    """A ceiling column's values > 0 (zero, e.g. an allreduce at one rank, is no figure: NaN); negative or
    non-numeric values are refused naming the row."""
    values = _numbers(rows, col, where, positive=False)
    return values.where(values > 0)


def _column(rows: pd.DataFrame, col: str, where: str, flag: str) -> pd.Series:
    """A ceiling column with at least one value among the usable rows, or the refusal naming it and its flag."""
    if col not in rows:
        raise _no_ceiling(where, col, flag)
    values = _ceiling(rows, col, where)
    if not np.isfinite(values.to_numpy()).any():
        raise _no_ceiling(where, col, flag, "has no value above zero on a completed, valid scale")
    return values


def _one_node(row: pd.Series) -> bool:
    """True unless the row's slots name more than one host (no slots: nothing says it spans nodes)."""
    try:
        slots = json.loads(row.get("slots") or "[]")
    except (TypeError, ValueError):
        return True
    return len({s.get("host") for s in slots if isinstance(s, dict)}) <= 1


_BATCH_RE = re.compile(r"/bs(\d+)/")


def _batch_size(rows: pd.DataFrame, where: str, given: Given) -> int:
    if given.batch_size is not None:
        return given.batch_size
    if "batch_size" in rows:
        values = _numbers(rows, "batch_size", where).dropna()
        if len(values):
            return int(values.iloc[-1])
    for key in rows.get("config_key", pd.Series(dtype=object)).dropna().astype(str):
        match = _BATCH_RE.search(key)
        if match:
            return int(match.group(1))
    raise ResultsInputError(
        f"{where}: no per-rank batch size (column batch_size missing and config_key has no /bs<N>/); give --batch-size"
    )


def ceilings_from_rows(workload: str, rows: pd.DataFrame, where: str, given: Given) -> WorkloadInputs:
    """One workload's ceilings from its usable rows (see `usable_rows`), each overridden by its flag."""
    where_w = f"{where} (workload {workload})"
    one = rows[rows["gpus"] == 1]
    measured_one = float(one["throughput_img_s"].iloc[-1]) if len(one) else None
    one_rank, compute, basis = _compute_rate(rows, where_w, given, measured_one)
    if given.allreduce_bytes is not None:
        nbytes = given.allreduce_bytes
    else:
        values = _column(rows, "allreduce_bytes", where_w, "--allreduce-bytes")
        nbytes = float(values.dropna().iloc[-1])
    batch = _batch_size(rows, where_w, given)
    buckets = given.buckets if given.buckets is not None else max(1, math.ceil(nbytes / given.bucket_bytes))
    # The measured allreduce: this machine's link (unless --link) and how much of it backward hid.
    seconds, at = _measured_allreduce(rows, where_w, given)
    flat = _flat_link(given, nbytes, seconds, at, buckets)
    fraction, source = _exposed_fraction(rows, where_w, given, batch, seconds, at)
    per_image = _bytes_per_image(rows, where_w, given)
    storage, storage_source = _storage_ceiling(rows, where_w, given)
    ceilings = Ceilings(
        workload=workload,
        one_rank_img_s=one_rank,
        compute_img_s=compute,
        compute_basis=basis,
        batch_size=batch,
        allreduce_bytes=nbytes,
        buckets=buckets,
        bytes_per_image=per_image,
        exposed_fraction=fraction,
        exposed_source=source,
    )
    machine = Fabric(flat=flat, storage_bytes_s=storage, storage_source=storage_source, name="this machine")
    detail = "has no value at 2+ ranks" if "allreduce_s" in rows else "missing"
    return WorkloadInputs(ceilings, machine, tuple(_measured_scales(rows, measured_one)), detail)


def _compute_rate(
    rows: pd.DataFrame, where_w: str, given: Given, measured_one: float | None
) -> tuple[float, float, str]:
    """(one-rank images/s, compute images/s per rank, where the compute rate came from)."""
    if given.compute_img_s is not None:  # the GPU described: its own rate is the efficiency reference too
        one_rank = compute = given.compute_img_s
        basis = "given (--compute-img-s)"
    elif measured_one is None:
        raise ResultsInputError(f"{where_w}: no 1-rank scale (column throughput_img_s at gpus 1); give --compute-img-s")
    else:
        one_rank = compute = measured_one
        basis = "one-rank"
    if given.compute_img_s is None and given.compute_from == "independent":
        values = _column(rows, "independent_img_s", where_w, "--compute-img-s")
        fit = [i for i in rows.index if rows.at[i, "gpus"] >= 2 and np.isfinite(values[i]) and _one_node(rows.loc[i])]
        if not fit:
            raise _no_ceiling(where_w, "independent_img_s", "--compute-img-s", "has no value at 2+ ranks on one node")
        top = max(fit, key=lambda i: rows.at[i, "gpus"])
        compute = float(values[top]) / int(rows.at[top, "gpus"])
        basis = f"independent ceiling per rank at {int(rows.at[top, 'gpus'])} ranks"
    return one_rank, compute, basis


def _measured_allreduce(rows: pd.DataFrame, where_w: str, given: Given) -> tuple[float | None, int | None]:
    """(allreduce seconds, the ranks it was measured at): the flags', else the largest multi-rank scale's."""
    seconds, at = given.allreduce_s, given.allreduce_gpus
    if seconds is None and "allreduce_s" in rows:
        values = _ceiling(rows, "allreduce_s", where_w)
        fit = [i for i in rows.index if rows.at[i, "gpus"] >= 2 and np.isfinite(values[i])]
        if at is not None:
            fit = [i for i in fit if rows.at[i, "gpus"] == at]
        if fit:
            top = max(fit, key=lambda i: rows.at[i, "gpus"])
            seconds, at = float(values[top]), int(rows.at[top, "gpus"])
    if seconds is not None and at is None:
        multi = rows[rows["gpus"] >= 2]
        if multi.empty:
            raise ConfigError("--allreduce-gpus: the run has no multi-rank scale; name the ranks --allreduce-s was at")
        at = int(multi["gpus"].max())
    return seconds, at


def _flat_link(given: Given, nbytes: float, seconds: float | None, at: int | None, buckets: int) -> Link | None:
    """The flat link: --link's, else the one the measured allreduce implies, else none."""
    latency = given.latency_s if given.latency_s is not None else 0.0
    if given.link_bytes_s is not None:
        return Link(given.link_bytes_s, latency, "flat", "given (--link)")
    if seconds is not None and at is not None:
        return measured_link(nbytes, at, seconds, latency, buckets, given.algorithm)
    return None


def _exposed_fraction(
    rows: pd.DataFrame, where_w: str, given: Given, batch: int, seconds: float | None, at: int | None
) -> tuple[float, str]:
    """(share of the allreduce backward does not hide, where it came from)."""
    fraction, source = DEFAULT_EXPOSED_FRACTION, "default: backward hides none (no overlap measured)"
    if given.exposed_fraction is not None:
        fraction, source = given.exposed_fraction, "given (--exposed-fraction)"
    elif seconds is not None and at is not None and "comm_share" in rows:
        shares = _numbers(rows, "comm_share", where_w, positive=False)
        fit = [i for i in rows.index if rows.at[i, "gpus"] == at and np.isfinite(shares[i])]
        if fit:
            i = fit[-1]
            step = batch * at / float(rows.at[i, "throughput_img_s"])  # one rank's step: batch / its share
            fraction = min(1.0, float(shares[i]) * step / seconds)
            source = f"measured at {at} ranks (comm_share x step / allreduce_s)"
    return fraction, source


def _bytes_per_image(rows: pd.DataFrame, where_w: str, given: Given) -> float:
    if given.bytes_per_image is not None:
        return given.bytes_per_image
    demand = _column(rows, "per_gpu_read_mb_s", where_w, "--bytes-per-image")
    top = int(np.nanargmax(demand.to_numpy()))  # the most demanding scale per GPU, as sizing takes it
    per_gpu_img_s = float(rows["throughput_img_s"].iloc[top]) / int(rows["gpus"].iloc[top])
    return float(demand.iloc[top]) * MB / per_gpu_img_s


def _storage_ceiling(rows: pd.DataFrame, where_w: str, given: Given) -> tuple[float | None, str]:
    """(storage read ceiling in bytes/s, where it came from): --storage-ceiling's, else fio's, else none."""
    if given.storage_bytes_s is not None:
        return given.storage_bytes_s, "given (--storage-ceiling)"
    if "storage_ceiling_mb_s" in rows and np.isfinite(_ceiling(rows, "storage_ceiling_mb_s", where_w)).any():
        storage = float(_ceiling(rows, "storage_ceiling_mb_s", where_w).dropna().iloc[-1]) * MB
        return storage, "measured (fio, storage_ceiling_mb_s)"
    return None, ""


def _measured_scales(rows: pd.DataFrame, measured_one: float | None) -> list[dict]:
    """Each scale as measured: images/s, efficiency against the run's own 1-rank rate, its bottleneck
    and its measured allreduce."""
    measured = []
    for _, r in rows.iterrows():
        entry = {"gpus": int(r["gpus"]), "images_per_s": float(r["throughput_img_s"])}
        # measured efficiency: against the run's own 1-rank rate, whatever GPU the flags describe
        entry["efficiency"] = None if measured_one is None else entry["images_per_s"] / (entry["gpus"] * measured_one)
        if isinstance(r.get("bottleneck"), str) and r["bottleneck"]:
            entry["bottleneck"] = r["bottleneck"]
        if "allreduce_s" in rows and pd.to_numeric(r["allreduce_s"], errors="coerce") > 0:
            entry["allreduce_s_measured"] = float(r["allreduce_s"])
        measured.append(entry)
    return measured


def inputs_from_run(frame: pd.DataFrame, where: str, given: Given) -> list[WorkloadInputs]:
    """Every workload of a results frame (or the one --workload names) with its ceilings."""
    rows = usable_rows(frame, where)
    names = list(dict.fromkeys(rows["workload"].astype(str)))
    if given.workload is not None:
        if given.workload not in names:
            raise ConfigError(f"--workload: {given.workload!r} has no completed scale in {where} (has {names})")
        names = [given.workload]
    if not names:
        raise ResultsInputError(f"{where}: no completed, valid scale with a throughput_img_s")
    return [ceilings_from_rows(w, rows[rows["workload"].astype(str) == w], where, given) for w in names]


def inputs_from_flags(given: Given) -> WorkloadInputs:
    """Ceilings given whole on the command line, for a projection without a run folder."""
    required = {
        "--workload": given.workload,
        "--compute-img-s": given.compute_img_s,
        "--batch-size": given.batch_size,
        "--allreduce-bytes": given.allreduce_bytes,
        "--bytes-per-image": given.bytes_per_image,
    }
    missing = [flag for flag, value in required.items() if value is None]
    if missing:
        raise ConfigError(f"{', '.join(missing)}: needed without a RUN_DIR (the ceilings a run would have measured)")
    if given.compute_from == "independent":
        raise ConfigError("--compute-from: 'independent' reads a run folder; give --compute-img-s per GPU instead")
    assert given.workload and given.compute_img_s and given.batch_size and given.allreduce_bytes
    assert given.bytes_per_image
    frame = pd.DataFrame({"workload": [given.workload], "gpus": [1], "throughput_img_s": [given.compute_img_s]})
    if given.allreduce_s is not None and given.allreduce_gpus is None:
        raise ConfigError("--allreduce-gpus: needed with --allreduce-s without a RUN_DIR (the ranks measured at)")
    inputs = ceilings_from_rows(given.workload, frame, "the command line", given)
    return replace(inputs, measured=())


def target_fabric(inputs: WorkloadInputs, cluster: Cluster | None, given: Given, where: str) -> Fabric:
    """The fabric the requested scales are projected on: flags, then the cluster file, then this machine's."""
    machine = inputs.machine
    if cluster is not None and given.latency_s is not None:  # the flag wins over the file, for both spans
        cluster = cluster.model_copy(
            update={"latency": given.latency_s, "intra_node_latency": None, "inter_node_latency": None}
        )
    if cluster is None:
        flat = machine.flat
    elif given.link_bytes_s is not None:
        latency = given.latency_s if given.latency_s is not None else cluster.latency_across()
        flat = Link(given.link_bytes_s, latency, "flat", "given (--link)")
    else:
        flat = None
    if given.storage_bytes_s is not None:
        storage, source = given.storage_bytes_s, "given (--storage-ceiling)"
    elif cluster is not None and cluster.storage_ceiling is not None:
        storage, source = cluster.storage_ceiling, f"{cluster.name} storage_ceiling"
    elif machine.storage_bytes_s is not None:
        storage, source = machine.storage_bytes_s, machine.storage_source
    else:
        raise _no_ceiling(where, "storage_ceiling_mb_s", "--storage-ceiling (or storage_ceiling in --cluster)")
    name = cluster.name if cluster is not None else "this machine's ceilings"
    measured = storage == machine.storage_bytes_s and source == machine.storage_source  # the probe's curve
    return Fabric(
        flat=flat,
        cluster=cluster,
        storage_bytes_s=storage,
        storage_source=source,
        name=name,
        storage_per_node_bytes_s=machine.storage_per_node_bytes_s if measured else None,
        storage_bound=machine.storage_bound if measured else "",
    )


def _machine_at(item: WorkloadInputs, measured: dict, given: Given) -> Fabric:
    """A measured scale is checked on the link its own allreduce probe measured (the ceiling of that scale, in
    the same run), unless --link gave one; scales without a probe use the largest scale's."""
    own = measured.get("allreduce_s_measured")
    if own is None or given.link_bytes_s is not None or measured["gpus"] < 2:
        return item.machine
    c = item.ceilings
    latency = given.latency_s if given.latency_s is not None else 0.0
    try:
        link = measured_link(c.allreduce_bytes, measured["gpus"], own, latency, c.buckets, given.algorithm)
    except ConfigError:  # the latency given leaves this scale's probe no time: keep the largest scale's link
        return item.machine
    return replace(item.machine, flat=link)


def project(
    inputs: list[WorkloadInputs], gpus: list[int], cluster: Cluster | None, given: Given, where: str
) -> list[dict]:
    """Measured scales (each beside the model's figure on this machine) then the requested scales, per workload.

    A run without a measured allreduce and no --link or cluster has nothing to carry the gradients at 2+ GPUs:
    refused naming allreduce_s."""
    out: list[dict] = []
    for item in inputs:
        target = target_fabric(item, cluster, given, where)
        target.check_fits(gpus)
        if any(n > 1 for n in gpus) and target.flat is None and target.cluster is None:
            raise _no_ceiling(
                f"{where} (workload {item.ceilings.workload})",
                "allreduce_s",
                "--allreduce-s (with --allreduce-gpus), --link or --cluster",
                item.allreduce_s_detail,
            )
        rows = [measured_row(item.ceilings, m, _machine_at(item, m, given), given.algorithm) for m in item.measured]
        rows += [project_scale(item.ceilings, n, target, given.algorithm) for n in gpus]
        out += sorted(rows, key=lambda r: (r["gpus"], r["kind"] != "measured"))
    return out
