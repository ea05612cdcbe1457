"""A described cluster for `bench project`, and the unit strings it is written in.

Rates, sizes and latencies are written with their units ("100Gbit", "25GB/s", "5us", "64MiB"): a bare
number is refused, because a link of "100" could be bits or bytes per second and the two differ eightfold.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, model_validator

from bench.config.types import Frozen, parse
from bench.errors import ConfigError

_NUMBER = r"([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)"
_PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}
_RATE_RE = re.compile(rf"^{_NUMBER}\s*(Ki|Mi|Gi|Ti|Pi|[kKMGTP]?)(bits?|b|B|bytes?)(/s|ps|/sec)?$")
_SIZE_RE = re.compile(rf"^{_NUMBER}\s*(Ki|Mi|Gi|Ti|Pi|[kKMGTP]?)(B|bytes?)?$")
_TIME_RE = re.compile(rf"^{_NUMBER}\s*(ns|us|µs|μs|ms|s)$")
_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0}
RATE_EXAMPLES = "e.g. '100Gbit', '25GB/s', '400Gbps', '900GiB/s'"


def _text(value: object, what: str, examples: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str):
        raise ValueError(f"{value!r} is not a {what} with units ({examples})")
    return value.strip()


def _scale(prefix: str) -> float:
    return _BINARY[prefix] if prefix in _BINARY else _PREFIX[prefix]


def rate_bytes_s(value: object) -> float:
    """A rate string in bytes per second: b/bit(s) are bits, B/byte(s) bytes; k, M, G, T decimal, Ki.. binary."""
    text = _text(value, "rate", RATE_EXAMPLES)
    match = _RATE_RE.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a rate ({RATE_EXAMPLES})")
    number, prefix, unit, _ = match.groups()
    rate = float(number) * _scale(prefix) / (8.0 if unit.startswith("b") else 1.0)
    if not (math.isfinite(rate) and rate > 0):
        raise ValueError(f"{text!r} must be a rate above zero")
    return rate


def size_bytes(value: object) -> float:
    """A size in bytes: a plain number is bytes; '45MB', '1.5MiB' and '64 KiB' carry their prefix."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = repr(value)
    text = _text(value, "size", "e.g. '45MB', '1.5MiB', 4096")
    match = _SIZE_RE.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a size (e.g. '45MB', '1.5MiB', 4096)")
    size = float(match.group(1)) * _scale(match.group(2))
    if not (math.isfinite(size) and size > 0):
        raise ValueError(f"{text!r} must be a size above zero")
    return size


def seconds(value: object) -> float:
    """A latency with its unit (ns, us, ms, s); zero is allowed (a link whose latency is folded elsewhere)."""
    text = _text(value, "duration", "e.g. '5us', '2ms'")
    match = _TIME_RE.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a duration (e.g. '5us', '0.5ms', '0s')")
    duration = float(match.group(1)) * _SECONDS[match.group(2)]
    if not math.isfinite(duration):
        raise ValueError(f"{text!r} must be a finite duration")
    return duration


def parse_unit(parser, value: object, field: str) -> float:
    """One unit string from a flag: ConfigError naming the flag (exit 2 at the CLI)."""
    try:
        return parser(value)
    except ValueError as error:
        raise ConfigError(f"{field}: {error}") from None


Rate = Annotated[float, BeforeValidator(rate_bytes_s)]
Latency = Annotated[float, BeforeValidator(seconds)]


class Cluster(Frozen):
    """The cluster a projection is for. Link rates are bus bandwidths in nccl-tests' sense: `intra_node_link`
    what one GPU's allreduce gets inside a node (NVLink, PCIe), `inter_node_link` what a node's network
    carries to the fabric, all its NICs together. Rates are held in bytes per second, latencies in seconds."""

    name: str = Field("cluster", min_length=1, max_length=100)
    nodes: int = Field(ge=1, le=1_000_000, strict=True)
    gpus_per_node: int = Field(ge=1, le=1024, strict=True)
    intra_node_link: Rate
    inter_node_link: Rate | None = None
    latency: Latency
    intra_node_latency: Latency | None = None
    inter_node_latency: Latency | None = None
    storage_ceiling: Rate | None = None

    @model_validator(mode="after")
    def _multi_node_needs_a_network(self) -> Cluster:
        if self.nodes > 1 and self.inter_node_link is None:
            raise ValueError(f"inter_node_link: {self.nodes} nodes need the network's rate ({RATE_EXAMPLES})")
        return self

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def latency_within(self) -> float:
        return self.latency if self.intra_node_latency is None else self.intra_node_latency

    def latency_across(self) -> float:
        return self.latency if self.inter_node_latency is None else self.inter_node_latency


def load_cluster(path: Path) -> Cluster:
    """A cluster file (YAML or JSON; JSON is YAML): unknown keys and bad values refused naming the field."""
    import yaml

    try:
        doc: Any = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"--cluster: {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"--cluster: {path}: cannot read ({error})") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"--cluster: {path}: not YAML or JSON ({str(error).splitlines()[0]})") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"--cluster: {path}: must be a mapping of nodes, gpus_per_node, links and latency")
    return parse(Cluster, doc, prefix=f"--cluster {path.name}: ")
