"""A rank's process leaves without the interpreter's teardown (bench.train.runner.leave_rank_process): its exit
code, what it printed and what it registered to run at exit all still arrive."""

from __future__ import annotations

import os
import subprocess
import sys

CODE = """
import atexit, logging, sys
logging.basicConfig(stream=sys.stderr, level=logging.INFO)
atexit.register(lambda: print("atexit ran", end=""))
from bench.train.runner import leave_rank_process
print("printed, unflushed", end="")
logging.getLogger("rank").info("logged")
sys.stderr.write("stderr, unflushed")
leave_rank_process(3)
print("never")
"""


def test_the_exit_code_buffered_output_and_atexit_handlers_survive_the_fast_exit():
    # buffered streams, as a rank's are on a pipe (this machine's environment may set PYTHONUNBUFFERED)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    done = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 3, done.stderr
    # atexit handlers run before the streams are flushed: both lines arrive, in that order, and nothing after
    assert done.stdout == "printed, unflushedatexit ran", done.stdout
    assert "logged" in done.stderr and done.stderr.endswith("stderr, unflushed"), done.stderr


def test_bench_train_exits_through_it_with_its_summary_line(tmp_path):
    """`python -m bench train` (what every launcher starts) prints its summary line and exits 0; a bad flag
    still exits 2 with the message (the fast exit passes main's code on)."""
    out = tmp_path / "m"
    cmd = [sys.executable, "-m", "bench", "train", "--workload", "ssd", "--synthetic", "--steps", "1"]
    cmd += ["--warmup-steps", "0", "--batch-size", "2", "--image-size", "64", "--metrics-out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().startswith('{"workload": "ssd", "ranks": 1'), done.stdout
    assert (out / "summary.json").is_file()
    bad = subprocess.run([*cmd, "--steps", "-1"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "steps" in bad.stderr, (bad.returncode, bad.stderr[-2000:])
