"""Airflow connections -> bench's typed options. Secrets stay in private files, never in logs or XComs.

Resolved in whichever process builds the launcher (worker or triggerer), so key material is there
wherever the trigger runs; the files go to a folder created fresh and private (mkdtemp, mode 0700)
for this process, never to a predictable shared path another local user could plant first.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from bench.config.models import DataSettings, HostSlots
from bench.data.location import (
    ENV_ENDPOINT,
    ENV_KEY,
    ENV_REGION,
    ENV_S3_ENDPOINT,
    ENV_SECRET,
    check_endpoint,
    is_s3,
)
from bench.errors import ConfigError
from bench.launch.sshopts import SshOptions, known_hosts_line, write_private

# Per process: one private folder per connection version, so each poll does not write keys anew.
_resolved: dict[str, tuple[SshOptions, str | None]] = {}
# conn_id -> (version, its private folder): a changed connection's old keys go at once, the rest at exit.
_folders: dict[str, tuple[str, Path]] = {}


def remove_key_folders() -> None:
    """Delete every private folder this process wrote key material to (at exit, or when done)."""
    for _, folder in _folders.values():
        shutil.rmtree(folder, ignore_errors=True)
    _folders.clear()
    _resolved.clear()


atexit.register(remove_key_folders)


def ssh_options(conn_id: str, hosts: tuple[HostSlots, ...] = ()) -> tuple[SshOptions, str | None]:
    """SshOptions from an SSH connection (key_file or private_key, host_key); also its host (login node).

    host_key in the connection extra pins the key of the connection's host; other hosts' keys come
    from extra `known_hosts` (text) or the system known_hosts. Host-key checking is never turned off.
    """
    from airflow.sdk import BaseHook

    conn = BaseHook.get_connection(conn_id)
    extra = conn.extra_dejson
    version = hashlib.sha256(
        json.dumps([conn_id, conn.host, conn.port, conn.login, extra], sort_keys=True, default=str).encode()
    ).hexdigest()
    if version in _resolved:
        return _resolved[version]
    if conn_id in _folders:  # the connection changed since: its old key material goes now
        old_version, old_home = _folders.pop(conn_id)
        _resolved.pop(old_version, None)
        shutil.rmtree(old_home, ignore_errors=True)
    home = Path(tempfile.mkdtemp(prefix="scalewatch-ssh-"))  # fresh, 0700, ours alone
    _folders[conn_id] = (version, home)
    key_file = extra.get("key_file")
    if extra.get("private_key"):
        key_file = str(write_private(home / "id", extra["private_key"].strip() + "\n"))
    known = ""
    if extra.get("host_key") and conn.host:
        known += known_hosts_line(conn.host, conn.port or 22, extra["host_key"])
    if extra.get("known_hosts"):
        known += extra["known_hosts"].strip() + "\n"
    known_file = str(write_private(home / "known_hosts", known)) if known else None
    opts = SshOptions(
        user=conn.login or None,
        key_file=key_file,
        known_hosts_file=known_file,
        port=conn.port or None,
        connect_timeout_s=int(extra.get("conn_timeout", 10)),
    )
    _resolved[version] = (opts, conn.host or None)
    return _resolved[version]


def aws_variables(conn_id: str) -> dict[str, str]:
    """The standard AWS variables (bench.data.location) from an Airflow connection of the Amazon
    provider's `aws` type: login the access key, password the secret (or extra aws_access_key_id and
    aws_secret_access_key), extra endpoint_url (or service_config.s3.endpoint_url) and region_name.

    Read through Airflow's own connection lookup (variables, secrets backend, metadata database), so the
    provider need not be installed on the worker for the suite to use its connection type. A missing
    field is left out: bench.data.location.credentials_from_env names it."""
    from airflow.sdk import BaseHook

    conn = BaseHook.get_connection(conn_id)
    if conn.conn_type != "aws":  # another connection's login and password are no AWS keys
        raise ConfigError(f"aws_conn_id: connection {conn_id!r} is of type {conn.conn_type!r}, not 'aws'")
    extra = conn.extra_dejson
    s3_service = (extra.get("service_config") or {}).get("s3") or {}
    found = {
        ENV_ENDPOINT: extra.get("endpoint_url") or s3_service.get("endpoint_url"),
        ENV_KEY: conn.login or extra.get("aws_access_key_id"),
        ENV_SECRET: conn.password or extra.get("aws_secret_access_key"),
        ENV_REGION: extra.get("region_name"),
    }
    variables = {name: str(value) for name, value in found.items() if value}
    if ENV_ENDPOINT in variables:
        check_endpoint(variables[ENV_ENDPOINT], f"aws_conn_id {conn_id!r}: endpoint_url")
    return variables


def s3_store_variables(data: DataSettings) -> dict[str, str] | None:
    """What the worker stages into the suite's bucket with: its aws_conn_id's variables; None where the
    data is not in a bucket or the suite names no connection (the worker's own AWS variables then)."""
    if not (data.aws_conn_id and is_s3(data.dataset_path)):
        return None
    return aws_variables(data.aws_conn_id)


def export_s3_endpoint(data: DataSettings) -> None:
    """Put the suite's S3 endpoint from its aws_conn_id in this task's environment, where the ranks and
    node probes it starts take it from (bench.launch.environment keeps AWS_ENDPOINT_URL_S3, no secret,
    and drops every key): they read the endpoint the suite staged to, with their node's own credentials.
    As AWS_ENDPOINT_URL_S3, S3's own variable: the global AWS_ENDPOINT_URL would also send any other AWS
    client of this process (a secrets backend) to the store under test. Each Airflow task runs in its
    own process, so this reaches no other task."""
    variables = s3_store_variables(data)
    if variables and variables.get(ENV_ENDPOINT):
        os.environ[ENV_S3_ENDPOINT] = variables[ENV_ENDPOINT]
