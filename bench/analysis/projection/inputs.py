"""A workload's ceilings read from a run's results (or given whole on the command line), each overridden
by its flag, and the fabric the requested scales are projected on."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from bench.analysis.cluster import Cluster
from bench.analysis.projection.allreduce import FUSION_BYTES, Algorithm, Link, measured_link
from bench.analysis.projection.model import MB, Ceilings, Fabric
from bench.errors import ConfigError, ResultsInputError

ComputeFrom = Literal["one-rank", "independent"]
# Without a measured overlap, assume backward hides none of the allreduce: the projection errs low.
DEFAULT_EXPOSED_FRACTION = 1.0


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


def no_ceiling(where: str, col: str, flag: str, detail: str = "missing") -> ResultsInputError:
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
        raise no_ceiling(where, col, flag)
    values = _ceiling(rows, col, where)
    if not np.isfinite(values.to_numpy()).any():
        raise no_ceiling(where, col, flag, "has no value above zero on a completed, valid scale")
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
            raise no_ceiling(where_w, "independent_img_s", "--compute-img-s", "has no value at 2+ ranks on one node")
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
        raise no_ceiling(where, "storage_ceiling_mb_s", "--storage-ceiling (or storage_ceiling in --cluster)")
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


def machine_at(item: WorkloadInputs, measured: dict, given: Given) -> Fabric:
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
