"""A real running Airflow as a team deploys it: api-server, scheduler, dag-processor and triggerer as separate
processes, its metadata on PostgreSQL (a database of its own on the server scripts/postgres.sh starts, never
the results store's)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.dags.conftest import airflow_env
from tests.infra.browser import CHROMIUM, CHROMIUM_ARGS

PASSWORD = "sw-test-pw"
NOBODY_PASSWORD = "sw-nobody-pw"
VIEWER_PASSWORD = "viewer-pw-for-tests"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SECRET_TOKEN = "services/T0SECRET/B0SECRET/liveSECRETtoken"
SMTP_PASSWORD = "smtpSECRETpw"


class MetadataDatabase:
    """A PostgreSQL database of its own for one running Airflow's metadata, on the test server
    (SCALEWATCH_TEST_PG_URL), dropped at the end; the results store never shares it."""

    def __init__(self) -> None:
        import uuid

        import sqlalchemy as sa

        server = os.environ.get("SCALEWATCH_TEST_PG_URL")
        if not server:
            pytest.fail("the running Airflow keeps its metadata on PostgreSQL: source scripts/postgres.sh first")
        self.admin_url = sa.engine.make_url(server)
        self.name = f"airflow_meta_{uuid.uuid4().hex[:8]}"
        url = self.admin_url.set(database=self.name)
        self.url = url.render_as_string(hide_password=False)  # postgresql+psycopg: the only driver installed
        self.async_url = url.set(drivername="postgresql+psycopg_async").render_as_string(hide_password=False)
        self._execute(f"CREATE DATABASE {self.name}")

    def _execute(self, sql: str) -> None:
        import sqlalchemy as sa

        admin = sa.create_engine(self.admin_url, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                conn.exec_driver_sql(sql)
        finally:
            admin.dispose()

    def env(self) -> dict[str, str]:
        return {
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.url,
            # Airflow derives postgresql+asyncpg, which is not installed: psycopg 3 serves both
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": self.async_url,
        }

    def drop(self) -> None:
        self._execute(f"DROP DATABASE IF EXISTS {self.name} WITH (FORCE)")


class RunningAirflow:
    def __init__(self, home: Path, webhook_port: int = 9, smtp_port: int = 25) -> None:
        self.home, self.port = home, _free_port()
        self.suites = home / "suites"
        self.suites.mkdir(exist_ok=True)
        self.metadata = MetadataDatabase()
        self.url = f"http://127.0.0.1:{self.port}"
        passwords = home / "passwords.json"
        passwords.write_text(json.dumps({"admin": PASSWORD, "nobody": NOBODY_PASSWORD, "viewer": VIEWER_PASSWORD}))
        self.env = (
            os.environ
            | airflow_env(home)
            | {
                "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                # "nobody" has no role: the auth manager grants it read access to no DAG at all; "viewer" reads
                # every DAG and may change none
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,nobody:,viewer:viewer",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
                "AIRFLOW__API_AUTH__JWT_SECRET": "test-jwt-secret-not-for-production",
                "AIRFLOW__API__PORT": str(self.port),
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
                # the bundle's file list every 5 s; a listed file is parsed again every [dag_processor]
                # min_file_process_interval, Airflow's default 30 s, which the suite-file waits allow for
                # (the [scheduler] name of that setting, set here before, is not read by Airflow 3)
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
                **self.metadata.env(),
                "SCALEWATCH_SCHEDULE": "none",  # the embedded default runs only when a test triggers it
                # empty: only the scheduled test puts a suite file here (and takes it away again)
                "SCALEWATCH_SUITES": str(self.suites),
                "AIRFLOW_CONN_SW_SLACK": json.dumps(
                    {"conn_type": "http", "host": f"http://127.0.0.1:{webhook_port}", "password": SECRET_TOKEN}
                ),
                "AIRFLOW_CONN_SW_SMTP": json.dumps(
                    {
                        "conn_type": "smtp",
                        "host": "127.0.0.1",
                        "port": smtp_port,
                        "login": "alerts",
                        "extra": {"allow_plaintext_login": True},  # the loopback test relay has no TLS
                        "password": SMTP_PASSWORD,
                    }
                ),
            }
        )
        self.procs: dict[str, subprocess.Popen] = {}

    def start_component(self, name: str, *args: str) -> None:
        airflow = str(Path(sys.executable).with_name("airflow"))
        log = (self.home / f"{name}.log").open("ab")
        self.procs[name] = subprocess.Popen(
            [airflow, *args], env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def stop_component(self, name: str) -> None:
        proc = self.procs.pop(name)
        os.killpg(proc.pid, 15)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()

    def start(self) -> RunningAirflow:
        done = subprocess.run(
            [str(Path(sys.executable).with_name("airflow")), "db", "migrate"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        self.start_component("api-server", "api-server", "--port", str(self.port), "--host", "127.0.0.1")
        for name in ("scheduler", "dag-processor", "triggerer"):
            self.start_component(name, name)
        self.wait_for(lambda: httpx.get(f"{self.url}/api/v2/monitor/health", timeout=5).status_code == 200, 180)
        self.token = httpx.post(
            f"{self.url}/auth/token", json={"username": "admin", "password": PASSWORD}, timeout=30
        ).json()["access_token"]
        self.wait_for(lambda: self.get("/api/v2/dags/scaling_regression").status_code == 200, 180)
        assert not (self.home / "airflow.db").exists()  # the metadata went to PostgreSQL, not SQLite
        return self

    def wait_for(self, predicate, timeout: float):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                value = predicate()
                if value:
                    return value
            except httpx.HTTPError as error:
                last = error
            time.sleep(1)
        raise TimeoutError(f"airflow not ready: {last}; see {self.home}/*.log")

    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}

    def token_for(self, username: str, password: str) -> str:
        response = httpx.post(f"{self.url}/auth/token", json={"username": username, "password": password}, timeout=30)
        assert response.status_code in (200, 201), response.text
        return response.json()["access_token"]

    def get(self, path: str) -> httpx.Response:
        return httpx.get(self.url + path, headers=self.headers(), timeout=30)

    def post(self, path: str, body: dict) -> httpx.Response:
        return httpx.post(self.url + path, headers=self.headers(), json=body, timeout=30)

    def trigger(self, conf: dict) -> httpx.Response:
        return self.post("/api/v2/dags/scaling_regression/dagRuns", {"logical_date": None, "conf": conf})

    def wait_run(self, run_id: str, timeout: float = 400) -> str:
        def finished():
            state = self.get(f"/api/v2/dags/scaling_regression/dagRuns/{run_id}").json()["state"]
            return state if state in ("success", "failed") else None

        return self.wait_for(finished, timeout)

    def stop(self) -> None:
        for name in list(self.procs):
            self.stop_component(name)
        self.metadata.drop()


@pytest.fixture(scope="package")
def receivers():
    from tests.infra.receivers import SmtpReceiver, WebhookReceiver

    with WebhookReceiver() as webhook, SmtpReceiver() as smtp:
        yield webhook, smtp


@pytest.fixture(scope="package")
def slurm(tmp_path_factory):
    from tests.infra.slurm_cluster import SlurmCluster

    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm-live")).start()
    yield cluster
    cluster.stop()


# Package scope: a running Airflow (and its Slurm) takes up to half of one of this box's two cores; kept up
# for the whole session it skewed the measured tests that run after tests/airflow (tests/bench).
@pytest.fixture(scope="package")
def running_airflow(tmp_path_factory, receivers, slurm):
    webhook, smtp = receivers
    af = RunningAirflow(tmp_path_factory.mktemp("airflow-live"), webhook.port, smtp.port)
    af.env |= slurm.env  # the worker and triggerer use this cluster's Slurm CLI
    af.start()
    yield af
    af.stop()


def wait_until(predicate, timeout: float):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(1)
    raise TimeoutError("condition not met")


@pytest.fixture
def page(running_airflow, tmp_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(30_000)
        yield page
        page.screenshot(path=str(tmp_path / "last.png"), full_page=True)
        browser.close()


def view_showing(page, text: str, timeout: float = 60):
    """Where the page a nav link opened shows `text`: Airflow 3 embeds a plugin's page in an iframe (or
    shows it whole). Polled until the text is there, never a fixed wait that a slow render outlasts."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if page.locator("iframe").count():
            frame = page.frame_locator("iframe").first
            if frame.get_by_text(text).count():
                return frame
        elif page.get_by_text(text).count():
            return page
        page.wait_for_timeout(200)  # the poll's interval (Playwright's own clock), not an ordering sleep
    raise TimeoutError(f"{text!r} not shown within {timeout} s")


def login(page, url: str, username: str = "admin", password: str = PASSWORD) -> None:
    page.goto(url + "/")
    page.locator("input[name=username]").fill(username)
    page.locator("input[name=password]").fill(password)
    page.locator("button[type=submit]").click()
    page.wait_for_url(lambda u: "/auth/login" not in u)
