"""What can be checked of docker/ without a Docker engine: sources exist, pins hold, compose resolves.

Building the images and running the stack is scripts/stack-check.sh's job (too long for CI: see
docker/README.md for the measured build times); these checks keep the files and the names the stack's
contract gives (services, healthchecks, the nodes suite, scripts/stack.sh's commands) in step.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = sorted((ROOT / "docker").glob("*.Dockerfile"))


def instructions(path: Path) -> list[tuple[str, str]]:
    """(instruction, rest) per line, continuations joined, comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            out.append((op.upper(), rest.strip()))
    return out


def arg_defaults(ops: list[tuple[str, str]]) -> dict[str, str]:
    """ARG NAME=default, quotes stripped: what a build without --build-arg uses."""
    out = {}
    for op, rest in ops:
        if op == "ARG" and "=" in rest:
            name, _, value = rest.partition("=")
            out[name] = value.strip('"')
    return out


def bases(dockerfile: Path) -> list[str]:
    """Each FROM's image with its build arguments' defaults put in (stage names are not images)."""
    ops = instructions(dockerfile)
    args = arg_defaults(ops)
    stages = set()
    out = []
    for op, rest in ops:
        if op == "FROM":
            image, *alias = rest.split()
            image = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], image)
            if image not in stages:
                out.append(image)
            if alias:
                stages.add(alias[-1])
    return out


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_sources_exist_and_base_is_pinned(dockerfile):
    ops = instructions(dockerfile)
    found = bases(dockerfile)
    assert found and all(":" in b and not b.endswith(":latest") for b in found), found
    for op, rest in ops:
        if op == "COPY":
            parts = [p for p in rest.split() if not p.startswith("--")]
            for source in parts[:-1]:
                assert (ROOT / source).exists(), f"{dockerfile.name}: COPY {source} does not exist"


def test_training_image_pins_torch_and_builds_horovod_with_nccl():
    text = (ROOT / "docker" / "training.Dockerfile").read_text()
    assert '"torch==2.13.0"' in text and "HOROVOD_GPU_OPERATIONS=NCCL" in text and "horovod==0.28.1" in text


def test_compose_services_resolve():
    doc = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())
    services = doc["services"]
    assert {"postgres", "airflow-init", "api-server", "scheduler", "dag-processor", "triggerer"} <= set(services)
    for name, svc in services.items():
        for dep in svc.get("depends_on", {}):
            assert dep in services, f"{name} depends on unknown {dep}"
        for volume in svc.get("volumes", []):
            src = volume.split(":")[0]
            if src.startswith("./"):
                assert (ROOT / "docker" / src).exists(), f"{name}: {src} missing"
            else:
                assert src in doc["volumes"], f"{name}: volume {src} not declared"
    env = services["scheduler"]["environment"]
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert "SCALEWATCH_RESULTS_URL" not in env  # no store URL (with its password) in the environment
    store = json.loads(env["AIRFLOW_CONN_SCALEWATCH_RESULTS"])
    assert store["conn_type"] == "postgres" and store["schema"] == "scalewatch"
    assert "healthcheck" in services["postgres"]


def test_official_bases_stay_the_defaults():
    """The published files build on the official images; the Debian stand-ins only by build argument."""
    assert bases(ROOT / "docker" / "airflow.Dockerfile") == ["apache/airflow:3.3.2-python3.11"]
    assert bases(ROOT / "docker" / "training.Dockerfile") == ["nvidia/cuda:12.4.1-cudnn-devel-ubuntu22.04"]
    doc = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())
    assert doc["services"]["postgres"]["image"] == "${SCALEWATCH_POSTGRES_IMAGE:-postgres:16}"
    assert doc["services"]["api-server"]["build"]["args"]["AIRFLOW_BASE"].endswith(":-apache/airflow:3.3.2-python3.11}")


COMPOSE = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())
LONG_RUNNING = ["postgres", "api-server", "scheduler", "dag-processor", "triggerer", "node1", "node2"]


def test_stack_services_have_healthchecks_and_the_ui_port():
    services = COMPOSE["services"]
    for name in LONG_RUNNING:
        check = services[name].get("healthcheck", {})
        assert check.get("test") and not check.get("disable"), f"{name}: no healthcheck"
    assert services["api-server"]["ports"] == ["127.0.0.1:8080:8080"]  # this machine only, unless published
    # scripts/stack.sh waits for exactly these
    assert "SERVICES=(" + " ".join(LONG_RUNNING) + ")" in (ROOT / "scripts" / "stack.sh").read_text()


def test_compute_nodes_come_from_the_cpu_training_image_with_keys_from_a_volume():
    services = COMPOSE["services"]
    for name in ("node1", "node2"):
        node = services[name]
        assert node["build"]["dockerfile"] == "docker/training.Dockerfile"
        assert node["build"]["args"]["HOROVOD"] == "0" and node["build"]["args"]["TORCH"] == "torch==2.13.0+cpu"
        # the nodes hold their host key and the authorized key, never the workers' client key
        assert "node-keys:/node-keys:ro" in node["volumes"]
        assert not any(v.split(":")[0] == "stack-keys" for v in node["volumes"]), node["volumes"]
        assert node["depends_on"]["keys"]["condition"] == "service_completed_successfully"
    assert {"stack-keys:/stack-keys", "node-keys:/node-keys"} <= set(services["keys"]["volumes"])  # the one writer
    for name, service in services.items():  # only the Airflow services (and the writer) mount the client key
        if any(v.split(":")[0] == "stack-keys" for v in service.get("volumes", [])):
            assert name == "keys" or service["image"].startswith("${SCALEWATCH_AIRFLOW_IMAGE"), name
    entrypoint = (ROOT / "docker" / "node-entrypoint.sh").read_text()
    assert "ssh-keygen -q -t ed25519 -N '' -C scalewatch-worker -f \"$KEYS/client_key\"" in entrypoint
    assert '-h "$NODE_KEYS/host_key" -o AuthorizedKeysFile="$NODE_KEYS/authorized_keys"' in entrypoint
    for dockerfile in DOCKERFILES:  # nothing key-like copied into an image
        for op, rest in instructions(dockerfile):
            if op in ("COPY", "ADD"):
                assert not re.search(r"key|known_hosts|id_(rsa|ed25519)", rest.replace("node-entrypoint", "")), rest
    # scripts/stack.sh builds the training image (podman) with compose's arguments
    script = (ROOT / "scripts" / "stack.sh").read_text()
    for name, value in services["node1"]["build"]["args"].items():
        if not str(value).startswith("${"):
            assert f"{name}={value}" in script or f'"{name}={value}"' in script, f"stack.sh: build arg {name}"


def test_the_stack_suite_reaches_both_nodes_over_the_keys_volume():
    from bench.config.models import SuiteSettings

    doc = yaml.safe_load((ROOT / "docker" / "suites" / "nodes.yaml").read_text())
    settings = SuiteSettings(**{k: v for k, v in doc.items() if k not in ("schedule", "description")})
    assert settings.where.launcher == "ssh"
    assert sorted(h.split(":")[0] for h in doc["hosts"]) == ["node1", "node2"]
    assert str(settings.where.ssh_config) == "/stack-keys/ssh_config"
    airflow = COMPOSE["services"]["scheduler"]
    assert "./suites:/opt/scalewatch/suites:ro" in airflow["volumes"]
    assert airflow["environment"]["SCALEWATCH_SUITES"] == "/opt/scalewatch/suites"
    assert "stack-keys:/stack-keys:ro" in airflow["volumes"]
    assert (ROOT / "docker" / "suites" / "nodes.yaml").stem == "nodes"  # DAG scaling_regression__nodes


def test_stack_script_commands_and_admin_password():
    script = (ROOT / "scripts" / "stack.sh").read_text()
    for command in ("up) up ;;", "down) down ;;"):
        assert command in script
    assert "SCALEWATCH_ADMIN_PASSWORD: required" in script
    init = COMPOSE["services"]["airflow-init"]
    assert init["environment"]["SCALEWATCH_ADMIN_PASSWORD"].startswith("${SCALEWATCH_ADMIN_PASSWORD:?")
    assert "down -v" not in script and "volume rm" not in script  # down keeps the volumes
    # its own folder (logs, pip settings, a rootfs it removes): never a fixed name in a world-writable place
    state = re.search(r"^STATE=(.*)$", script, re.M).group(1)
    assert "/tmp" not in state and "$HOME" in state, state
    # the stack's own images come from this checkout at every up (cached layers), never kept because they exist
    for image in ("$AIRFLOW_IMAGE", "$TRAINING_IMAGE"):
        assert f'-t "{image}"' in script and f'have_image "{image}"' not in script, image


def test_what_the_stack_runs_needs_is_in_its_images():
    """What the stack's first runs found missing (each a failed run on the stack): the nodes answer at the
    worker's interpreter path as python and python3; the Airflow image draws the report's charts; the local
    PostgreSQL is UTF8 (SQL_ASCII made psycopg 3 hand SQLAlchemy bytes); every component shares the log
    server's secret key, and the task logs on a volume only the Airflow services mount (never the nodes')."""
    training = (ROOT / "docker" / "training.Dockerfile").read_text()
    assert "for name in python python3 python3.11" in training and "/usr/local/bin/$name" in training
    airflow_reqs = (ROOT / "requirements-airflow.txt").read_text().split()
    assert any(r.startswith("matplotlib") for r in airflow_reqs)
    assert "-E UTF8" in (ROOT / "docker" / "local-postgres-entrypoint.sh").read_text()
    env = COMPOSE["services"]["scheduler"]["environment"]
    assert env["AIRFLOW__API__SECRET_KEY"].startswith("${AIRFLOW_SECRET_KEY:?")
    logs = env["AIRFLOW__LOGGING__BASE_LOG_FOLDER"]
    mounted = {v.split(":")[1]: v.split(":")[0] for v in COMPOSE["services"]["scheduler"]["volumes"]}
    assert mounted[logs] == "airflow-logs"
    assert not any(v.split(":")[0] == "airflow-logs" for v in COMPOSE["services"]["node1"]["volumes"])


AIRFLOW_SERVICES = ["airflow-init", "api-server", "scheduler", "dag-processor", "triggerer"]


def _mounted(service: dict, volume: str) -> bool:
    return any(v.split(":")[0] == volume for v in service.get("volumes", []))


def test_each_database_role_holds_its_own_database_and_the_superuser_password_stays_with_postgres():
    """Issue 61 item 7: the results store's role (its own password) is the only database credential besides
    Airflow's own role in the Airflow services, whose environment every task inherits; the superuser's password
    is in the server's container and the one-shot service that makes the roles, nowhere else."""
    services = COMPOSE["services"]
    holders = {name for name, svc in services.items() if "POSTGRES_PASSWORD" in json.dumps(svc.get("environment", {}))}
    assert holders == {"postgres", "postgres-roles"}, holders
    assert services["postgres"]["environment"]["POSTGRES_USER"] == "postgres"
    for name in AIRFLOW_SERVICES:
        env = services[name]["environment"]
        assert "://airflow:${AIRFLOW_DB_PASSWORD:?" in env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"], name
        store = json.loads(env["AIRFLOW_CONN_SCALEWATCH_RESULTS"])
        assert store["login"] == "scalewatch" and store["password"].startswith("${SCALEWATCH_RESULTS_PASSWORD:?"), name
    roles = services["postgres-roles"]
    assert roles["volumes"] == ["./postgres-roles.sh:/usr/local/bin/scalewatch-postgres-roles:ro"]
    assert roles["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert services["airflow-init"]["depends_on"]["postgres-roles"]["condition"] == "service_completed_successfully"
    # every secret compose requires, scripts/stack.sh makes (the admin's password is the person's to give)
    required = set(re.findall(r"\$\{(\w+):\?", (ROOT / "docker" / "compose.yaml").read_text()))
    made = re.search(r"^SECRET_KEYS=\((.*)\)$", (ROOT / "scripts" / "stack.sh").read_text(), re.M).group(1).split()
    assert required - {"SCALEWATCH_ADMIN_PASSWORD"} == set(made), (required, made)
    # podman-compose 1.0.3 keeps no depends_on order: stack.sh starts the roles before Airflow's migration
    script = (ROOT / "scripts" / "stack.sh").read_text()
    assert script.index("wait_exit postgres-roles") < script.index("wait_exit airflow-init")


def test_nodes_are_on_an_internal_network_of_their_own_with_the_workers_that_ssh():
    """PostgreSQL and the API server on `control`; the nodes on `nodes` only (internal: no way out), shared
    with the scheduler and triggerer, which run the ssh launcher."""
    services = COMPOSE["services"]
    assert COMPOSE["networks"]["nodes"] == {"internal": True}
    on = {name: set(svc.get("networks", [])) for name, svc in services.items()}
    assert on["node1"] == on["node2"] == on["keys"] == {"nodes"}
    ssh_side = {name for name, nets in on.items() if "nodes" in nets}
    assert ssh_side == {"node1", "node2", "keys", "scheduler", "triggerer"}
    for name in ("postgres", "postgres-roles", "airflow-init", "api-server", "dag-processor"):
        assert on[name] == {"control"}, name
    # podman's CNI turns DNS off on internal networks: the stack's podman settings use netavark
    assert 'network_backend = "netavark"' in (ROOT / "docker" / "podman-containers.conf").read_text()


def test_every_service_drops_all_capabilities_and_adds_back_only_what_it_uses():
    services = COMPOSE["services"]
    for name, svc in services.items():
        assert svc.get("cap_drop") == ["ALL"], name
        assert "NET_RAW" not in svc.get("cap_add", []), name
    for name in [*AIRFLOW_SERVICES, "postgres-roles"]:
        assert "cap_add" not in services[name], name  # a user process: no capability at all
    assert services["keys"]["cap_add"] == ["CHOWN"]


def test_each_volume_is_mounted_only_where_it_is_used():
    services = COMPOSE["services"]
    assert {name for name, svc in services.items() if _mounted(svc, "airflow-auth")} == {"airflow-init", "api-server"}
    assert {name for name, svc in services.items() if _mounted(svc, "stack-keys")} == {"keys", "scheduler", "triggerer"}
    assert {name for name, svc in services.items() if _mounted(svc, "pgdata")} == {"postgres"}
    assert not any(_mounted(services[name], "airflow-logs") for name in ("node1", "node2", "keys", "airflow-init"))
    # the admin's password file: created 600 (os.open's mode) and made 600 before the password is written
    init = "\n".join(services["airflow-init"]["command"])
    assert "os.O_NOFOLLOW, 0o600)" in init
    assert init.index("os.fchmod(fd, 0o600)") < init.index("out.write(")
    assert ".write_text(" not in init and ".chmod(" not in init
