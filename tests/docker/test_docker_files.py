"""What can be checked of docker/ without a Docker engine: sources exist, pins hold, compose resolves."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = sorted((ROOT / "docker").glob("*.Dockerfile"))


def instructions(path: Path) -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", path.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            out.append((op.upper(), rest.strip()))
    return out


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_sources_exist_and_base_is_pinned(dockerfile):
    ops = instructions(dockerfile)
    bases = [rest for op, rest in ops if op == "FROM"]
    assert bases and all(":" in b and not b.endswith(":latest") for b in bases)
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
    store = json.loads(env["AIRFLOW_CONN_SCALEWATCH_RESULTS"].replace("${POSTGRES_PASSWORD}", "pw"))
    assert store["conn_type"] == "postgres" and store["schema"] == "scalewatch"
    assert "healthcheck" in services["postgres"]
