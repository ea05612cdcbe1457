"""scripts/gpu-check.sh installs only the wheels pinned in scripts/gpu-check-requirements.txt, each checked
against its sha256 (pip --require-hashes): a wheel swapped into the folder stops the check before anything
from it can run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu-check.sh"
REQUIREMENTS = ROOT / "scripts" / "gpu-check-requirements.txt"
PIN = re.compile(r"(?P<name>[A-Za-z0-9_.-]+)==(?P<version>[A-Za-z0-9_.+!-]+)(?P<hashes>( --hash=sha256:[0-9a-f]{64})+)")


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins() -> dict[str, str]:
    lines = [line for line in REQUIREMENTS.read_text().splitlines() if line.strip() and not line.startswith("#")]
    matches = [PIN.fullmatch(line) for line in lines]
    assert all(matches), [line for line, m in zip(lines, matches, strict=True) if not m]
    return {_normal(m["name"]): m["version"] for m in matches}


def _packages() -> set[str]:
    """The PACKAGES array of the script: what `bench train` needs beside a CUDA torch image."""
    body = re.search(r"^PACKAGES=\((.*?)\)", SCRIPT.read_text(), re.S | re.M).group(1)
    return {_normal(p) for p in body.split()}


def test_every_wheel_the_script_expects_is_pinned_with_its_hash():
    assert REQUIREMENTS.is_file(), "scripts/gpu-check-requirements.txt: the pinned, hashed wheels"
    pins = _pins()
    assert _packages() <= set(pins), _packages() - set(pins)


def test_a_wheel_swapped_into_the_folder_is_refused_before_anything_runs(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for name, version in _pins().items():  # each pinned wheel's name, with bytes that are not its own
        (wheels / f"{name.replace('-', '_')}-{version}-py3-none-any.whl").write_bytes(b"planted, not the pinned wheel")
    env = {**os.environ, "OUT": str(tmp_path / "out"), "GPUCHECK_WHEELS": str(wheels), "PYTHON": sys.executable}
    done = subprocess.run([str(SCRIPT)], env=env, capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert "DO NOT MATCH THE HASHES" in output, output[-3000:]
    assert "torch sees no CUDA GPU" not in output  # the check itself never started
    assert not (tmp_path / "out" / "gpu-check.json").exists()
