"""scripts/test.sh's verdict over its phases (scripts/phases.sh), run by bash as test.sh runs it: a phase
that ran no test (pytest's exit 5) fails the suite (issue 51: a phase emptied by a marker typo stayed green)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def phases_exit(*phases: str) -> subprocess.CompletedProcess:
    script = f'set -euo pipefail; source "{SCRIPTS}/phases.sh"; phases_exit "$@"'
    return subprocess.run(["bash", "-c", script, "test.sh", *phases], capture_output=True, text=True, timeout=30)


def test_every_phase_passed_passes():
    done = phases_exit("other=0", "airflow=0", "rates=0")
    assert done.returncode == 0 and done.stderr == "", done


@pytest.mark.parametrize("empty", ["other", "airflow", "rates"])
def test_a_phase_that_collected_nothing_fails_the_suite_naming_it(empty):
    done = phases_exit(*(f"{p}={5 if p == empty else 0}" for p in ("other", "airflow", "rates")))
    assert done.returncode == 5, done
    assert f"phase '{empty}' ran no test (pytest exit 5: nothing collected" in done.stderr, done.stderr


def test_the_first_failing_phase_gives_the_status_and_each_is_named():
    done = phases_exit("other=0", "airflow=1", "rates=5")
    assert done.returncode == 1, done
    assert "phase 'airflow' failed (pytest exit 1)" in done.stderr and "phase 'rates' ran no test" in done.stderr


def test_test_sh_judges_its_four_lanes_and_phases_with_it():
    """The suite's last word is phases_exit over each phase's status (the three lanes of phase 1, phase 2)."""
    text = (SCRIPTS / "test.sh").read_text()
    last = [line for line in text.splitlines() if line.strip() and not line.startswith("#")][-1]
    assert last == 'phases_exit other="$rc_rest" airflow="$rc_airflow" dags="$rc_dags" rates="$rc_rates"', last
    for rc in ("rc_rest", "rc_airflow", "rc_dags", "rc_rates"):
        assert re.search(rf"\|\| {rc}=\$\?", text), rc  # each phase's pytest status is the one judged
