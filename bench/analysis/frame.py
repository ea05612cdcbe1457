"""The results frame: one row per (suite run, workload, GPUs), schema versioned (docs/schemas.md)."""

from __future__ import annotations

import json
import statistics

import numpy as np
import pandas as pd

from bench.errors import ResultsInputError
from bench.results.schema import COLUMNS, FRAME_SCHEMA_VERSION, METRICS

CONFIG_KEY_FIELDS = (
    "launcher",
    "dataset_path",
    "hosts",
    "partition",
    "account",
    "gpus_per_node",
    "ranks_per_node",
    "cpus_per_rank",
    "oversubscribe",
    "train.min_measure_s",
    "train.preset",
    "train.loader",
    "train.synthetic",
    "train.loader_threads",
    "train.batch_size",
    "train.image_size",
    "train.steps",
    "train.epochs",
    "train.warmup_steps",
    "train.amp",
    "train.drop_caches",
)
# Settings added later: in the digest only where they differ from their default, so the runs made
# before them keep their key (and their history) and a bf16 or compiled run never shares it.
CONFIG_KEY_ADDED = {"train.precision": "fp32", "train.compile": "none", "train.backend": "auto"}
CONFIG_KEY_CHECKPOINT = {"checkpoint": None, "checkpoint_every_steps": 0}
# The `where` settings among CONFIG_KEY_FIELDS that the key takes as they are (launcher and hosts aside)
KEY_WHERE = ("partition", "account", "gpus_per_node", "ranks_per_node", "cpus_per_rank", "oversubscribe")


def config_key(cfg) -> str:
    """What must match for two runs' figures to be comparable: history is matched on it (and the cluster).

    A readable prefix, then a digest of every setting in CONFIG_KEY_FIELDS (docs/schemas.md): the storage
    under test (dataset path), the hosts, partition and launcher, and every training setting that moves
    images/s. An NFS run and a local-NVMe run, or 20 and 200 steps, never share a history.
    """
    import hashlib

    doc = _key_doc(cfg)
    values = {}
    for name in CONFIG_KEY_FIELDS:
        value = doc
        for part in name.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        values[name] = value
    # Efficiency against another ideal is another series; linear (every series before ideals existed)
    # adds nothing, so those keys are unchanged.
    ideal = cfg.resolved_ideal() if hasattr(cfg, "resolved_ideal") else "linear"
    if ideal != "linear":
        values["ideal"] = ideal
    # The checkpoint phase's size and counts move its MB/s, and saves during training cost step time: in
    # the digest only where set, so the series of runs without them keep their keys.
    for name, off in CONFIG_KEY_CHECKPOINT.items():
        if doc.get(name, off) != off:
            values[name] = doc[name]
    for name, default in CONFIG_KEY_ADDED.items():
        value = doc.get("train", {}).get(name.split(".", 1)[1], default)
        if value != default:
            values[name] = value
    digest = hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:12]
    train = cfg.train
    source = "synthetic" if train.synthetic else train.loader
    prefix = f"{train.preset}/{source}/bs{train.batch_size}/img{train.image_size}/amp{int(train.amp)}"
    added = [getattr(train, n.split(".", 1)[1]) for n, d in CONFIG_KEY_ADDED.items() if _differs(train, n, d)]
    prefix += "".join(f"/{value}" for value in added)
    return f"{prefix}/{cfg.where.launcher}#{digest}"


def _key_doc(cfg) -> dict:
    """The values the key digests, in the shape every stored key was made from (the config's flat JSON of
    before the settings were grouped: hosts as {host, slots, port, user}, the checkpoint as its spec), so
    a series keeps its key, and its history, across that change."""
    where, checkpoint = cfg.where, cfg.checkpointing.spec
    return {
        "launcher": where.launcher,
        "dataset_path": str(cfg.data.dataset_path),
        # a host entry once held a port and a user too (never set: always 22 and none), and kept them in the key
        "hosts": [{"host": h.host, "slots": h.slots, "port": 22, "user": None} for h in where.hosts],
        **{name: getattr(where, name) for name in KEY_WHERE},
        "train": cfg.train.model_dump(mode="json"),
        "checkpoint": None if checkpoint is None else checkpoint.model_dump(mode="json"),
        "checkpoint_every_steps": cfg.checkpointing.checkpoint_every_steps,
    }


def _differs(train, name: str, default: str) -> bool:
    return getattr(train, name.split(".", 1)[1], default) != default


def row_from_result(
    suite_run_id: str,
    workload: str,
    gpus: int,
    result: dict,
    launcher: str,
    cluster: str,
    started_at: str,
    key: str = "",
) -> dict:
    """A frame row from a RunResult dict; a failed run keeps its state and reason, metrics stay NaN."""
    s = result.get("summary") if result.get("state") == "COMPLETED" else None
    row = {k: np.nan for k in METRICS}
    row.update(
        suite_run_id=suite_run_id,
        workload=workload,
        gpus=int(gpus),
        state=result.get("state", "FAILED"),
        valid=s is not None,
        cache_risk=False,
        cache_served=False,
        bandwidth_valid=False,
        bandwidth_note="no completed run",
        bytes_source="",
        drop_caches="not_requested",
        oversubscribed=False,
        slots="[]",
        slowest_rank=np.nan,
        slowest_host="",
        rank_breakdown="[]",
        node_figures="[]",
        config_key=key,
        launcher=launcher,
        cluster=cluster,
        started_at=started_at,
        reason=result.get("reason", ""),
        backend="",
        precision="",
        emulated=False,
        accelerator="",
        versions="{}",
        schema_version=FRAME_SCHEMA_VERSION,
        ckpt_state="",
        ckpt_note="",
    )
    if s is not None:
        epoch1 = s["epochs"][0]
        row.update(
            throughput_img_s=s["images_per_s"],
            epoch_time_s=s["epoch_time_s"],
            first_epoch_time_s=s["first_epoch_time_s"],
            avg_read_mb_s=s["storage"]["first_epoch_avg_read_mb_s"],
            peak_read_mb_s=s["storage"]["first_epoch_peak_read_mb_s"],
            gpu_util=s["utilisation"]["gpu_util"],
            gpu_mem_util=s["utilisation"]["gpu_mem_util"],
            cpu_util=s["utilisation"]["cpu_util"],
            mem_util=s["utilisation"]["mem_util"],
            bytes_from_storage=epoch1["bytes_from_storage"],
            bytes_consumed=epoch1["bytes_consumed"],
            dataset_bytes=s["storage"]["dataset_bytes"],
            cache_risk=s["storage"]["cache_risk"],
            bandwidth_valid=s["storage"]["bandwidth_valid"],
            bandwidth_note=s["storage"].get("bandwidth_note", ""),
            bytes_source=s["storage"].get("bytes_source") or "",
            storage_errors=s["storage"].get("s3_get_errors"),
            drop_caches=s["storage"]["drop_caches"],
            versions=json.dumps(s["versions"], sort_keys=True),
            # A summary without `backend` was written by the Horovod-only harness.
            backend=s.get("backend") or "horovod",
            precision=s.get("precision") or "",
            emulated=bool(s.get("emulated", False)),
            accelerator=s.get("accelerator") or "",
            gpu_busy_share=s["utilisation"].get("gpu_busy_share"),
        )
        row.update(_measurement(s))
        row.update(breakdown_columns(s))
        row["node_figures"] = node_figures_of(s)
        row.update(checkpoint_columns(s))
    return {k: (np.nan if v is None else v) for k, v in row.items()}


def _measurement(s: dict) -> dict:
    """Window, spread, interval and slots of one run summary (schema v2, docs/schemas.md)."""
    from bench.analysis.stats import interval, step_time_spread, throughput_replicates

    steps = [r["step_times_s"] for r in s["per_rank"]]
    boot = throughput_replicates(steps, s["batch_size"])
    low, high = interval(boot)
    slots = [{"rank": r["rank"], "host": r["host"], **r["slot"]} for r in s["per_rank"]]
    return {
        "measured_s": s["measured_s"],
        "min_measure_s": s["min_measure_s"],
        "step_time_spread": step_time_spread(steps),
        "throughput_ci_low": low,
        "throughput_ci_high": high,
        "throughput_boot": boot,  # replicates for the efficiency interval; never stored
        "oversubscribed": any(slot["oversubscribed"] for slot in slots),
        "slots": json.dumps(slots),
    }


def checkpoint_columns(s: dict) -> dict:
    """The summary's `checkpoint` as columns: the phase's aggregate write and read MB/s and bytes
    written where it completed (empty, with the phase's error in ckpt_note, where it failed: the scale's
    training figures stay as they are), and the stall share of the saves during training."""
    c = s.get("checkpoint")
    if not c:
        return {}
    out: dict = {"ckpt_state": "" if c["status"] == "off" else c["status"]}
    if c["status"] == "done":
        out |= {"ckpt_write_mb_s": c["write_mb_s"], "ckpt_read_mb_s": c["read_mb_s"], "ckpt_bytes": c["bytes"]}
        if not c["read"]["cold"]:  # the read figure is the page cache's: shown, never judged
            out["ckpt_state"] = "not_cold"
            out["ckpt_note"] = (
                f"{len(c['read']['not_cold'])} checkpoint read(s) started with their file in the page cache "
                "(a tmpfs, or eviction refused): read MB/s not judged"
            )
    elif c["status"] == "failed":
        out["ckpt_note"] = f"checkpoint phase failed: {c['error']}"
    if c.get("stall") and c["stall"].get("share") is not None:
        out["ckpt_stall_share"] = c["stall"]["share"]
    return out


def breakdown_columns(s: dict) -> dict:
    """The scale's step-time shares (mean over ranks), AU, and its straggler (schema v3 summaries)."""
    ranks = [r for r in s["per_rank"] if r.get("breakdown")]
    if not ranks:
        return {}
    per_rank = [
        {
            "rank": r["rank"],
            "host": r["host"],
            "images_per_s": r["images_per_s"],
            "measured_s": r["measured_s"],
            "images": r["images"],
            **r["breakdown"],
        }
        for r in ranks
    ]
    mean = lambda key: float(np.mean([r[key] for r in per_rank]))  # noqa: E731
    slow = straggler(per_rank)
    return {
        "data_wait_share": mean("data_wait_share"),
        "compute_share": mean("compute_share"),
        "comm_share": mean("comm_share"),
        "au": mean("au"),
        "straggler_gap": slow["gap"],
        "slowest_rank": slow["rank"],
        "slowest_host": slow["host"],
        "rank_breakdown": json.dumps(per_rank),
    }


def node_figures_of(s: dict) -> str:
    """The scale's per-node figures (bench.analysis.verdict.nodes.scale_nodes) as JSON: its ranks'
    images/s, compute rate and shares per host, with each node's epoch-1 read MB/s from the summary's
    `nodes` (absent in summaries before issue 49: no read figure then) and its ring test figures."""
    reads = {str(n["host"]): n.get("read_mb_s") for n in s.get("nodes") or []}
    rings = {str(n["host"]): {k: n.get(k) for k in RING_FIGURES} for n in s.get("nodes") or []}
    return json.dumps(scale_nodes(s["per_rank"], reads, rings), allow_nan=False)


# A node's ring test figures (bench.train.dist.ring), carried from the summary's `nodes` as they are.
RING_FIGURES = ("ring_recv_algbw_mb_s", "ring_send_algbw_mb_s", "ring_latency_us")


def scale_nodes(
    per_rank: list[dict], node_reads: dict[str, float] | None = None, node_rings: dict[str, dict] | None = None
) -> list[dict]:
    """A scale's per-node figures from its ranks (the run summary's per_rank, breakdown included):
    host, ranks, img_s (its ranks' images/s summed), compute_img_s (images per second of compute, per
    rank, the median over the node's ranks), comm_share and data_wait_share (mean over its ranks) and
    read_mb_s (epoch 1's read rate on that node, from the summary's `nodes`; None where not measured)
    and the ring test's figures (RING_FIGURES, from the summary's `nodes`; None where not measured)."""
    hosts: dict[str, list[dict]] = {}
    for r in per_rank:
        hosts.setdefault(str(r["host"]), []).append(r)
    out = []
    for host, ranks in hosts.items():
        br = [r.get("breakdown") or {} for r in ranks]
        pairs = zip(ranks, br, strict=True)
        compute = [float(r["images"]) / float(b["compute_s"]) for r, b in pairs if b.get("compute_s")]
        read = (node_reads or {}).get(host)
        ring = (node_rings or {}).get(host) or {}
        out.append(
            {
                "host": host,
                "ranks": len(ranks),
                "img_s": round(sum(float(r["images_per_s"]) for r in ranks), 3),
                "compute_img_s": round(statistics.median(compute), 3) if compute else None,
                "comm_share": _mean(br, "comm_share"),
                "data_wait_share": _mean(br, "data_wait_share"),
                "read_mb_s": round(float(read), 3) if _is_number(read) else None,
                **{k: round(float(ring[k]), 3) if _is_number(ring.get(k)) else None for k in RING_FIGURES},
            }
        )
    return out


def _mean(breakdowns: list[dict], key: str) -> float | None:
    """The mean of `key` over a node's ranks, only where every rank has it."""
    if not breakdowns or not all(_is_number(b.get(key)) for b in breakdowns):
        return None
    return round(statistics.fmean(float(b[key]) for b in breakdowns), 4)


def _is_number(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and np.isfinite(x)


def work_rate(r: dict) -> float:
    """A rank's images per second of its own time: step time minus its exposed communication wait."""
    own = max(float(r["measured_s"]) - float(r.get("comm_s", 0.0)), 1e-9)
    return float(r["images"]) / own


def straggler(per_rank: list[dict]) -> dict:
    """The rank with the lowest work rate and its gap below the median (0 with one rank)."""
    rates = [work_rate(r) for r in per_rank]
    median = statistics.median(rates)
    i = int(np.argmin(rates))
    gap = 1.0 - rates[i] / median if median > 0 and len(rates) > 1 else 0.0
    return {"rank": int(per_rank[i]["rank"]), "host": str(per_rank[i]["host"]), "gap": float(gap)}


def build_frame(rows: list[dict]) -> pd.DataFrame:
    boot = [r.get("throughput_boot") for r in rows]
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    frame["throughput_boot"] = pd.Series([b if isinstance(b, np.ndarray) else None for b in boot], dtype=object)
    for col in METRICS:
        frame[col] = pd.to_numeric(frame[col], errors="coerce").astype(float)
    frame["gpus"] = frame["gpus"].astype(int)
    return frame.sort_values(["workload", "gpus"]).reset_index(drop=True)


# A text cell a spreadsheet would run as a formula starts with one of these (OWASP, "CSV Injection"): a
# host name or reason written into results.csv is one. Such a cell is written with a leading quote, which
# a spreadsheet shows as text and drops; so is a cell that starts with the quote itself, so that reading
# drops exactly the quote writing added and every text reads back as it was.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
TEXT_QUOTE = "'"


def _quoted_on_write(text: str) -> bool:
    return text.startswith(FORMULA_STARTS) or text.startswith(TEXT_QUOTE)


def spreadsheet_text(value):
    """`value` as a CSV cell a spreadsheet shows and never runs: a text that could start a formula gets
    a leading quote; numbers (a negative one included) and other values are left as they are."""
    return TEXT_QUOTE + value if isinstance(value, str) and _quoted_on_write(value) else value


def plain_text(value):
    """The inverse of `spreadsheet_text`, for a cell read back: the quote it added is dropped."""
    if isinstance(value, str) and value.startswith(TEXT_QUOTE) and _quoted_on_write(value[1:]):
        return value[1:]
    return value


def to_spreadsheet_csv(frame: pd.DataFrame) -> str:
    """`frame` as CSV text whose text cells a spreadsheet opening it shows rather than runs. Its lines end
    in CR LF (RFC 4180's): the csv writer then quotes a cell holding a CR, which with pandas' "\n" it left
    bare, and a bare CR starts a new row in every reader, a spreadsheet's included (a row, and a first
    cell, of the host's choosing)."""
    safe = frame.copy()
    for col in safe.select_dtypes(include=["object", "string"]).columns:
        safe[col] = safe[col].map(spreadsheet_text)
    return safe.to_csv(index=False, lineterminator="\r\n")


def read_csv(path) -> pd.DataFrame:
    """A user's CSV (or one this project wrote: the quote `spreadsheet_text` put before a text cell is
    dropped), or a ResultsInputError naming the file and what is wrong with it."""
    try:
        frame = pd.read_csv(path)
    except FileNotFoundError:
        raise ResultsInputError(f"{path}: no such file") from None
    except pd.errors.EmptyDataError:
        raise ResultsInputError(f"{path}: empty file") from None
    except pd.errors.ParserError as error:
        raise ResultsInputError(f"{path}: not valid CSV ({error})") from None
    for col in frame.select_dtypes(include=["object", "string"]).columns:
        frame[col] = frame[col].map(plain_text)
    return frame


def read_results_csv(path) -> pd.DataFrame:
    """`bench evaluate` input: model,gpus and throughput_img_s or epoch_time_s; validated, named errors."""
    frame = read_csv(path)
    if frame.empty:
        raise ResultsInputError(f"{path}: no rows")
    for col in ("model", "gpus"):
        if col not in frame.columns:
            raise ResultsInputError(
                f"{path}: missing column '{col}' (need model,gpus and throughput_img_s or epoch_time_s)"
            )
    if "throughput_img_s" not in frame.columns and "epoch_time_s" not in frame.columns:
        raise ResultsInputError(f"{path}: need a 'throughput_img_s' or 'epoch_time_s' column")
    numeric = ["gpus", *(c for c in METRICS if c in frame.columns)]  # any known metric given must be a number
    for col in numeric:
        values = pd.to_numeric(frame[col], errors="coerce")
        bad = values.isna() & frame[col].notna()
        if bad.any():
            row = int(bad.idxmax())
            raise ResultsInputError(f"{path}: column '{col}' row {row + 2}: {frame[col][row]!r} is not a number")
        frame[col] = values
    judged = [c for c in ("throughput_img_s", "epoch_time_s", "avg_read_mb_s", "peak_read_mb_s") if c in frame]
    if "throughput_img_s" in judged and "epoch_time_s" in judged:
        judged.remove("epoch_time_s")  # scaling is judged on throughput when both are given
    for col in judged:  # a figure a row is judged on must be there and finite: a blank never passes
        bad = ~np.isfinite(frame[col].to_numpy(dtype=float, na_value=np.nan))
        if bad.any():
            row = int(bad.argmax())
            value = frame[col][row]
            what = "empty" if pd.isna(value) else f"{value!r} is not a finite number"
            raise ResultsInputError(f"{path}: column '{col}' row {row + 2}: {what}")
    if frame["gpus"].isna().any():
        raise ResultsInputError(f"{path}: column 'gpus' row {int(frame['gpus'].isna().idxmax()) + 2}: empty")
    if (frame["gpus"] <= 0).any() or (frame["gpus"] % 1 != 0).any():
        row = int(((frame["gpus"] <= 0) | (frame["gpus"] % 1 != 0)).idxmax())
        raise ResultsInputError(
            f"{path}: column 'gpus' row {row + 2}: must be a whole number > 0, got {frame['gpus'][row]}"
        )
    for col in ("throughput_img_s", "epoch_time_s"):
        if col in frame.columns and (frame[col] <= 0).any():
            row = int((frame[col] <= 0).idxmax())
            raise ResultsInputError(f"{path}: column '{col}' row {row + 2}: must be > 0, got {frame[col][row]}")
    frame["gpus"] = frame["gpus"].astype(int)
    dup = frame.duplicated(["model", "gpus"], keep="first")
    if dup.any():
        row = int(dup.idxmax())
        raise ResultsInputError(
            f"{path}: row {row + 2}: duplicate (model, gpus) = ({frame['model'][row]}, {frame['gpus'][row]})"
        )
    for model, group in frame.groupby("model"):
        if len(group) < 2:
            raise ResultsInputError(
                f"{path}: model '{model}' has one scale only (gpus={int(group['gpus'].iloc[0])}); "
                "scaling needs at least two"
            )
    return frame.rename(columns={"model": "workload"})
