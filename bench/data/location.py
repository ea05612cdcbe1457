"""Where a suite's data lives: a folder on a file system, or a bucket and prefix on an S3 server. The one
place that decides the storage kind; staging, readers, the probe and checkpoints ask it.

Why the endpoint and keys are not in `dataset_path`: they are deployment secrets. The suite names only
`s3://BUCKET/PREFIX`; the endpoint and credentials come from the standard AWS variables
(`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_DEFAULT_REGION`) of the process
that reads the store (the CLI's, a node's own environment), or from the DAG's Airflow connection turned
into those variables where the DAG runs. No key is ever part of a location, an error or its repr.

Validation (`check_store`) runs before anything is written: the endpoint must answer, the bucket exist,
the credentials work, and the prefix hold nothing but what scalewatch wrote there (a marker object,
`MARKER`, claims a prefix the first time it is staged into; a prefix with objects and no marker is
someone else's). Each refusal names the setting and what the server said.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from bench.config.types import S3_SCHEME, S3Url, split_s3_url
from bench.errors import ConfigError

__all__ = ["S3Url"]  # re-exported: the settings' type for a field that may name a bucket

MARKER = ".scalewatch-prefix"  # the object that says this prefix is scalewatch's
ENV_ENDPOINT = "AWS_ENDPOINT_URL"
# S3's own endpoint variable (botocore >= 1.31): what a DAG's task hands its ranks, so that no other AWS
# client of the task process (a secrets backend, an XCom backend) is sent to the store under test
ENV_S3_ENDPOINT = "AWS_ENDPOINT_URL_S3"
ENDPOINT_RE = re.compile(r"^https?://[^\s/@?#]+(:\d+)?/?$")  # no userinfo, path, query or fragment
ENV_KEY = "AWS_ACCESS_KEY_ID"
ENV_SECRET = "AWS_SECRET_ACCESS_KEY"
ENV_REGION = "AWS_DEFAULT_REGION"


class StoreRefused(ConfigError):
    """The S3 store named by the suite cannot be used as given: the message names the setting and what
    the server said (never a key)."""


@dataclass(frozen=True)
class FileLocation:
    """A folder on a mounted file system (today's storage)."""

    path: Path
    kind: str = "file"

    def describe(self) -> str:
        return str(self.path)


@dataclass(frozen=True)
class S3Location:
    """A prefix in a bucket; `endpoint` is filled from the deployment (never from the suite)."""

    bucket: str
    prefix: str  # no leading or trailing '/': '' is the bucket's root
    endpoint: str = ""
    kind: str = "s3"

    @property
    def url(self) -> str:
        return f"{S3_SCHEME}{self.bucket}/{self.prefix}".rstrip("/")

    def key(self, *rel: str) -> str:
        """The object key of `rel` (parts joined by '/') under the prefix."""
        return "/".join(p.strip("/") for p in (self.prefix, *rel) if p.strip("/"))

    def child(self, *rel: str) -> S3Location:
        """The location one or more folders down (a workload's dataset under the suite's prefix)."""
        return S3Location(self.bucket, self.key(*rel), self.endpoint)

    def describe(self) -> str:
        """What the report, overview and alerts say where they say the mount for files."""
        return f"S3 ({self.endpoint or 'endpoint from the deployment'}, {self.bucket})"


@dataclass(frozen=True)
class S3Credentials:
    """The deployment's endpoint and keys. repr and str show the endpoint and region only."""

    endpoint: str
    access_key: str = field(repr=False)
    secret_key: str = field(repr=False)
    region: str = "us-east-1"


def is_s3(dataset_path: str | Path | None) -> bool:
    """True when the suite's dataset_path names a bucket. A pathlib.Path collapses `s3://` to `s3:/`
    (a suite config that typed the setting as a path): that form is read as S3 too, since no absolute
    file path starts with `s3:`."""
    text = str(dataset_path or "")
    return text.startswith(S3_SCHEME) or text.startswith("s3:/")


def parse_location(dataset_path: str | Path, env: Mapping[str, str] | None = None) -> FileLocation | S3Location:
    """dataset_path as a FileLocation or an S3Location (endpoint from `env`, os.environ by default);
    a malformed bucket or prefix is a ConfigError naming `dataset_path` and the rule."""
    if not is_s3(dataset_path):
        return FileLocation(Path(dataset_path))
    try:
        bucket, prefix = split_s3_url(str(dataset_path))
    except ValueError as error:
        raise ConfigError(str(error)) from None
    source = os.environ if env is None else env
    endpoint = source.get(ENV_S3_ENDPOINT) or source.get(ENV_ENDPOINT, "")
    return S3Location(bucket, prefix, endpoint)


def check_endpoint(endpoint: str, setting: str = ENV_ENDPOINT) -> str:
    """`endpoint` when it is http(s)://HOST[:PORT]; a ConfigError naming `setting` otherwise (a user:key@
    in it would reach the report and the alerts, which name the endpoint)."""
    if not ENDPOINT_RE.match(endpoint):
        raise ConfigError(f"{setting}: {endpoint!r} is not an http(s)://HOST[:PORT] address")
    return endpoint


def credentials_from_env(env: Mapping[str, str] | None = None) -> S3Credentials:
    """The endpoint and keys from the standard AWS variables; a missing one is a ConfigError naming it."""
    env = os.environ if env is None else env
    missing = [name for name in (ENV_ENDPOINT, ENV_KEY, ENV_SECRET) if not env.get(name)]
    if missing:
        raise ConfigError(
            f"dataset_path is an S3 location but {', '.join(missing)} is not set: outside Airflow the "
            "endpoint and keys come from the standard AWS variables (a DAG: the suite's aws_conn_id)"
        )
    endpoint = check_endpoint(env[ENV_ENDPOINT])
    return S3Credentials(endpoint, env[ENV_KEY], env[ENV_SECRET], env.get(ENV_REGION) or "us-east-1")


def _client_config(pool: int, retries: int):
    """Path-style addressing (RGW on an IP has no bucket host names), a connection pool for `pool`
    parallel requests, `retries` attempts (standard mode), no proxy. Response checksums only where asked
    for: botocore's default would CRC a whole-object GET (a store that sends checksums) and not a ranged
    one, so an image model's reads would pay a pass the records' do not; sizes are checked by the
    readers, contents by sha256 where the suite wrote them (staging, checkpoints)."""
    from botocore.config import Config

    return Config(
        s3={"addressing_style": "path"},
        max_pool_connections=pool,
        retries={"max_attempts": retries, "mode": "standard"},
        connect_timeout=5,
        read_timeout=60,
        proxies={},
        response_checksum_validation="when_required",
    )


def s3_client(creds: S3Credentials, pool: int = 32, retries: int = 3):
    """A boto3 S3 client on the deployment's endpoint with its keys (the worker staging, the CLI)."""
    import boto3

    return boto3.session.Session().client(
        "s3",
        endpoint_url=creds.endpoint,
        aws_access_key_id=creds.access_key,
        aws_secret_access_key=creds.secret_key,
        region_name=creds.region,
        config=_client_config(pool, retries),
    )


def node_s3_client(pool: int = 2, retries: int = 3):
    """A boto3 S3 client with this node's own credentials, for a rank or a node's probe.

    Why not credentials_from_env: the suite never hands a node the worker's keys (bench.launch.environment
    drops every *_KEY and *SECRET*), so a node reads its own, by boto3's chain: its AWS variables, then its
    ~/.aws/credentials and ~/.aws/config (where `endpoint_url` may stand). AWS_ENDPOINT_URL, which is no
    secret, does travel from the worker: the ranks read the endpoint the suite staged to. A node with no
    credentials is a ConfigError naming it."""
    import boto3

    session = boto3.session.Session()
    if session.get_credentials() is None:
        raise ConfigError(
            f"dataset_path is an S3 location but node {os.uname().nodename} has no S3 credentials: give the "
            f"node its own (its {ENV_KEY} and {ENV_SECRET}, or ~/.aws/credentials); the worker's never travel"
        )
    return session.client("s3", config=_client_config(pool, retries))
