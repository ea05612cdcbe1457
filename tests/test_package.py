"""scalewatch installed as a package into an Airflow that already exists (issue 50): the built wheel, put into a
fresh virtual environment beside Airflow, brings the plugin through the `airflow.plugins` entry point and the
DAGs through the one documented line (scalewatch.dags), suites from SCALEWATCH_SUITES, and nothing of the
checkout's plugins/ or dags/ is on any path.

The fresh environment reuses the project's installed libraries (Airflow, GX, torch) through a .pth line naming
.venv's site-packages, for speed: a plain path line, so .venv's own .pth files (the checkout's editable bench)
are not run and bench too comes from the wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

# What a team writes: one line in one file of its dags folder (docs/deploy.md, README).
DAG_LINE = "from scalewatch.dags import declare; declare(globals())  # airflow DAGs: scalewatch\n"

CHECK = r"""
import json, sys
from pathlib import Path

import bench, scalewatch
from airflow import plugins_manager
from airflow.dag_processing.dagbag import DagBag

dags_folder, home = sys.argv[1], sys.argv[2]
bag = DagBag(dags_folder)
plugins = {p["name"]: p for p in plugins_manager.get_plugin_info()}
mine = plugins.get("scalewatch", {})
from airflow.api_fastapi.app import create_app
from fastapi.testclient import TestClient

client = TestClient(create_app(), follow_redirects=False)
history = client.get("/scalewatch/reports/history")
missing = client.get("/scalewatch/reports/no-such-page")
print(json.dumps({
    "bench": bench.__file__,
    "scalewatch": scalewatch.__file__,
    "path": sys.path,
    "dags": sorted(bag.dags),
    "import_errors": {str(k): v for k, v in bag.import_errors.items()},
    "form": sorted(bag.dags["scaling_regression__team"].params) if "scaling_regression__team" in bag.dags else [],
    "team_default_gpus": (
        bag.dags["scaling_regression__team"].params["gpus"] if "scaling_regression__team" in bag.dags else None
    ),
    "schedule": str(bag.dags["scaling_regression"].timetable) if "scaling_regression" in bag.dags else None,
    "plugin_source": str(mine.get("source")),
    "views": [v.get("href") for v in mine.get("external_views", [])],
    "apps": [a.get("url_prefix") for a in mine.get("fastapi_apps", [])],
    "history_status": history.status_code,
    "history_location": history.headers.get("location", ""),
    "missing_status": missing.status_code,
}))
"""


def build_wheel(out: Path) -> Path:
    """The wheel from a copy of the sources (a build in the checkout would leave build/ and egg-info there)."""
    src = out / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("bench", "plugins"):
        shutil.copytree(ROOT / name, src / name, ignore=ignore)
    shutil.copy2(ROOT / "pyproject.toml", src / "pyproject.toml")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = out.glob("scalewatch_bench-*.whl")
    return wheel


def without_checkout(env) -> dict[str, str]:
    """The environment less PYTHONPATH (the tests put the checkout and its plugins/ there): pip found the
    checkout's egg-info through it and took the wheel for installed already."""
    return {k: v for k, v in env.items() if k != "PYTHONPATH"}


def fresh_venv(path: Path, wheel: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    python = path / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
            env={"PATH": os.environ["PATH"]},
        ).stdout.strip()
    )
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
        env=without_checkout(os.environ),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # after the install, so that pip never meets .venv's editable bench (same distribution and version)
    (site / "zz_shared_libraries.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def test_the_wheel_installed_beside_airflow_brings_the_plugin_the_dags_and_the_suites(tmp_path):
    wheel = build_wheel(tmp_path / "dist")
    python = fresh_venv(tmp_path / "venv", wheel)
    team = tmp_path / "team-airflow"
    (team / "dags").mkdir(parents=True)
    (team / "plugins").mkdir()  # the team's own, empty: the plugin comes from the entry point
    (team / "suites").mkdir()
    (team / "dags" / "scalewatch_dags.py").write_text(DAG_LINE)
    (team / "suites" / "team.yaml").write_text('description: the team\'s suite\nschedule: "0 5 * * 1"\ngpus: [1, 4]\n')
    env = {
        "PATH": str(python.parent) + os.pathsep + os.environ["PATH"],
        "HOME": str(team),
        "AIRFLOW_HOME": str(team / "home"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(team / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(team / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__API_AUTH__JWT_SECRET": "package-test-not-for-production",
        "SCALEWATCH_HOME": str(team / "sw"),
        "SCALEWATCH_SUITES": str(team / "suites"),
    }
    done = subprocess.run(
        [str(python), "-c", CHECK, str(team / "dags"), str(team / "home")],
        capture_output=True,
        text=True,
        env=env,
        cwd=team,  # not the checkout: nothing of it is importable from here
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    installed = str(tmp_path / "venv")
    assert found["bench"].startswith(installed) and found["scalewatch"].startswith(installed), found
    checkout = [str(ROOT), str(ROOT / "plugins"), str(ROOT / "dags")]  # .venv's libraries are shared on purpose
    assert not [p for p in found["path"] if p in checkout or p.startswith((f"{ROOT}/plugins/", f"{ROOT}/dags/"))]
    assert found["import_errors"] == {}
    assert {"scaling_regression", "scaling_regression__team"} <= set(found["dags"]), found["dags"]
    assert "0 3 * * 1" in found["schedule"]  # the weekly cron stays the default
    assert {"gpus", "workloads", "launcher", "min_scaling_efficiency"} <= set(found["form"])
    assert found["team_default_gpus"] == [1, 4]  # the suite file's default on its DAG's form
    assert "entrypoint" in found["plugin_source"].lower().replace(" ", ""), found["plugin_source"]
    assert found["views"] == ["/scalewatch/reports/history"] and found["apps"] == ["/scalewatch/reports"]
    # the history page is served by the installed plugin: it asks for a login (not a 404 for a missing page)
    assert found["history_status"] in (302, 303, 307, 401), found
    assert found["missing_status"] != found["history_status"] or found["history_location"], found
