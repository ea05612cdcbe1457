"""The environment a run measured: what a change point is compared against.

Each rank reads its own node (driver, CUDA, NCCL, libraries, kernel, OS image, Slurm, NICs, the
dataset's mount, GPU VBIOS); a run's fingerprint merges its nodes. A field that cannot be read is
recorded as "unknown", never guessed: a fingerprint that says "unknown" on both sides of a change
says nothing changed there only as far as anyone could see.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import shutil
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path

from bench.data.location import S3Location, parse_location

UNKNOWN = "unknown"
REDACTED = "REDACTED"
# A mount option or URL query parameter whose name says it holds a secret (rclone's secret_access_key,
# CIFS password=, a presigned URL's token or signature): its value never leaves the node.
SECRET_NAME = re.compile(r"key|secret|pass|token|cred|auth|sig", re.I)
_URL = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<rest>.*)", re.S)
# Fields of a node that a run reports per node (they can differ between nodes).
PER_NODE = ("nic_speeds", "gpu_vbios", "kernel", "driver", "mount")
# Shown in this order; every one is always present.
FIELDS = (
    "driver",
    "cuda",
    "nccl",
    "torch",
    "dali",
    "horovod",
    "kernel",
    "os_image",
    "slurm",
    "nodes",
    "nic_speeds",
    "mount",
    "gpu_vbios",
)


def _run(argv: list[str], timeout: float = 5.0) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else None


def _module_version(name: str) -> str:
    try:
        module = __import__(name, fromlist=["__version__"])
    except Exception:  # absent, or broken on import: either way not what ran
        return "absent"
    return str(getattr(module, "__version__", UNKNOWN))


def _torch_builds() -> tuple[str, str]:
    """CUDA and NCCL as torch was built with them and loads them ("none" on a CPU build)."""
    try:
        import torch
    except ImportError:
        return UNKNOWN, UNKNOWN
    cuda = torch.version.cuda or "none"
    nccl = "none"
    if torch.cuda.is_available():
        try:
            nccl = ".".join(str(p) for p in torch.cuda.nccl.version())
        except Exception:
            nccl = UNKNOWN
    return cuda, nccl


def _nvml() -> tuple[str, list[str]]:
    """Driver version and each GPU's VBIOS, through NVML; unknown where there is no driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return "none" if not Path("/proc/driver/nvidia").exists() else UNKNOWN, []
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        vbios = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            try:
                vbios.append(pynvml.nvmlDeviceGetVbiosVersion(pynvml.nvmlDeviceGetHandleByIndex(i)))
            except Exception:
                vbios.append(UNKNOWN)
        return str(driver.decode() if isinstance(driver, bytes) else driver), [str(v) for v in vbios]
    except Exception:
        return UNKNOWN, []
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def os_image(release: Path = Path("/etc/os-release")) -> str:
    try:
        for line in release.read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return UNKNOWN


def nic_speeds(net: Path = Path("/sys/class/net")) -> dict[str, str]:
    """Each physical-looking interface's link speed in Mbit/s ("unknown" where the driver says none)."""
    out: dict[str, str] = {}
    try:
        names = sorted(p.name for p in net.iterdir())
    except OSError:
        return out
    for name in names:
        if name == "lo":
            continue
        try:
            speed = (net / name / "speed").read_text().strip()
        except OSError:
            speed = ""
        out[name] = f"{speed} Mb/s" if speed.lstrip("-").isdigit() and int(speed) > 0 else UNKNOWN
    return out


def _redact_pairs(text: str, sep: str) -> str:
    """`name=value` items whose name says secret get `name=REDACTED`; every other item stays as it was."""
    items = text.split(sep)
    for i, item in enumerate(items):
        name, eq, _value = item.partition("=")
        if eq and SECRET_NAME.search(name):
            items[i] = f"{name}={REDACTED}"
    return sep.join(items)


def _redact_url(scheme: str, rest: str) -> str:
    """`scheme://[userinfo@]host[/path][?query][#fragment]` without its userinfo and secret query values."""
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, tail = rest[:end], rest[end:]
    path, q, query = tail.partition("?")
    if q:
        query, h, fragment = query.partition("#")
        tail = path + q + _redact_pairs(query, "&") + h + fragment
    return scheme + authority.rpartition("@")[2] + tail


def redact_source(source: str) -> str:
    """A mount source without credentials: a URL loses its userinfo (`https://user:pw@host/x` ->
    `https://host/x`) and its secret-named query parameters, a `user:password@host:path` source its
    userinfo. Anything else (`nas01:/export`, `/dev/vda1`, `backup@nas:/data`) is returned unchanged,
    so a fingerprint without secrets reads exactly as before and no change is seen where none was."""
    url = _URL.fullmatch(source)
    if url is not None:
        return _redact_url(url["scheme"], url["rest"])
    userinfo, at, rest = source.rpartition("@")
    return rest if at and ":" in userinfo and "/" not in userinfo else source


def redact_options(options: str) -> str:
    """Mount options with each secret-named option's value replaced (`password=REDACTED`)."""
    return _redact_pairs(options, ",")


def redact_mount(mount: dict) -> dict:
    """A mount entry as it may be stored, shown and sent: source and options without credentials."""
    out = dict(mount)
    if isinstance(out.get("source"), str):
        out["source"] = redact_source(out["source"])
    if isinstance(out.get("options"), str):
        out["options"] = redact_options(out["options"])
    return out


def mount_of(path: Path | str, mounts: Path = Path("/proc/mounts")) -> dict[str, str]:
    """The mount holding `path`: filesystem type, server/source and options (the longest prefix), with
    credentials removed here, on the node (`redact_mount`): the fingerprint reaches the store, the
    dashboard and alerts, and /proc/mounts holds a FUSE URL's password or an rclone key verbatim."""
    target = os.path.realpath(str(path))
    best: tuple[str, str, str, str] | None = None
    try:
        lines = mounts.read_text().splitlines()
    except OSError:
        return {"fstype": UNKNOWN, "source": UNKNOWN, "options": UNKNOWN, "mountpoint": UNKNOWN}
    for line in lines:
        parts = line.split()
        if len(parts) < 4:
            continue
        source, point, fstype, options = parts[:4]
        point = point.replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) > len(best[1])):
            best = (source, point, fstype, options)
    if best is None:
        return {"fstype": UNKNOWN, "source": UNKNOWN, "options": UNKNOWN, "mountpoint": UNKNOWN}
    return redact_mount({"fstype": best[2], "source": best[0], "options": best[3], "mountpoint": best[1]})


def storage_of(data: Path | str | None) -> dict[str, str]:
    """Where the node reads the dataset from, as the fingerprint's `mount`: its file system's mount, or for
    a bucket `S3 (endpoint, bucket)` (the endpoint this node's ranks read, no key), so the report, overview
    and alerts name the store where they name the mount."""
    if data is None:
        return {"fstype": "none (synthetic)"}
    location = parse_location(data)
    if isinstance(location, S3Location):
        return {"fstype": "s3", "source": location.describe(), "mountpoint": location.url}
    return mount_of(data)


STORAGE_LINE_MAX = 300


def environment_nodes(runs: Iterable[dict]) -> Iterator[dict]:
    """Every node fingerprint the runs' summaries carry (`environment`, one per node and scale)."""
    for run in runs:
        summary = (run.get("result") or {}).get("summary") or {}
        yield from (node for node in summary.get("environment") or [] if isinstance(node, dict))


def storage_under_test(runs: Iterable[dict], dataset_path: Path | str) -> str:
    """How the report and the alerts name the storage under test, from what the nodes read (their
    fingerprints' `mount`): `S3 (endpoint, bucket)` for a bucket, `PATH on FSTYPE SOURCE` for a file
    system (each distinct one, nodes disagreeing); the dataset_path alone where no node reported."""
    seen: set[str] = set()
    for node in environment_nodes(runs):
        mount = node.get("mount")
        if not isinstance(mount, dict) or mount.get("fstype") in (None, "none (synthetic)"):
            continue
        mount = redact_mount(mount)
        if mount["fstype"] == "s3":
            seen.add(str(mount.get("source", UNKNOWN)))
        else:
            seen.add(f"{dataset_path} on {mount['fstype']} {mount.get('source', UNKNOWN)}")
    line = "; ".join(sorted(seen)) or str(dataset_path)
    return " ".join(line.split())[:STORAGE_LINE_MAX]  # one line in an alert, whatever a node reported


def slurm_version() -> str:
    text = _run(["sinfo", "--version"]) or _run(["srun", "--version"])
    return text.split()[-1] if text else "none"


def node_fingerprint(host: str, data: Path | str | None) -> dict:
    """What this node runs, read here (called once per node by its first rank)."""
    cuda, nccl = _torch_builds()
    driver, vbios = _nvml()
    return {
        "host": host,
        "driver": driver,
        "cuda": cuda,
        "nccl": nccl,
        "torch": _module_version("torch"),
        "dali": _module_version("nvidia.dali"),
        "horovod": _module_version("horovod"),
        "kernel": platform.release() or UNKNOWN,
        "os_image": os_image(),
        "slurm": slurm_version(),
        "nic_speeds": nic_speeds(),
        "mount": storage_of(data),
        "gpu_vbios": ",".join(vbios) if vbios else "none",
    }


def _text(value) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {_text(v)}" for k, v in sorted(value.items())) or UNKNOWN
    return str(value)


def run_fingerprint(nodes: Iterable[dict]) -> dict[str, str]:
    """One run's fingerprint from its nodes': a field the nodes agree on once, else per host. A node's mount
    is redacted again here: a rank report written before `mount_of` redacted holds it verbatim."""
    nodes = sorted(
        ({**n, "mount": redact_mount(n["mount"])} if isinstance(n.get("mount"), dict) else n for n in nodes),
        key=lambda n: str(n.get("host", "")),
    )
    out: dict[str, str] = {}
    for field in FIELDS:
        if field == "nodes":
            out[field] = ",".join(str(n.get("host", UNKNOWN)) for n in nodes) or UNKNOWN
            continue
        values = {str(n.get("host", UNKNOWN)): _text(n.get(field, UNKNOWN)) for n in nodes}
        distinct = set(values.values())
        if not distinct:
            out[field] = UNKNOWN
        elif len(distinct) == 1:
            out[field] = distinct.pop()
        else:
            out[field] = "; ".join(f"{h}: {v}" for h, v in values.items())
    return out


def differences(before: dict[str, str], after: dict[str, str]) -> list[dict[str, str]]:
    """What differs between two runs' fingerprints, field by field (in FIELDS order)."""
    out = []
    for field in FIELDS:
        old, new = before.get(field, UNKNOWN), after.get(field, UNKNOWN)
        if old != new:
            out.append({"field": field, "before": old, "after": new})
    return out


def describe(changes: list[dict[str, str]], since: str | None = None) -> str:
    """`NCCL 2.21.5 -> 2.23.4, kernel 6.1 -> 6.8 from the run of 2026-11-16` (empty when nothing differs)."""
    if not changes:
        return ""
    text = ", ".join(f"{c['field']} {c['before']} -> {c['after']}" for c in changes)
    return f"{text} from the run of {since}" if since else text


def run_before(run_ids: list[str], changed_in: str) -> str | None:
    """The run just before `changed_in` in series order; None where it is the first or not in the series."""
    at = run_ids.index(changed_in) if changed_in in run_ids else 0
    return run_ids[at - 1] if at > 0 else None


def across_change(run_ids: list[str], changed_in: str, environments: dict[str, dict[str, str]]) -> list[dict]:
    """What differs between the run before a change point and the run it happened in (`run_ids` in series
    order); [] where either run's environment was not recorded."""
    before = run_before(run_ids, changed_in)
    if before not in environments or changed_in not in environments:
        return []
    return differences(environments[before], environments[changed_in])
