"""torch DDP backend: real Gloo ranks on torchrun's env contract (rank 0 hosting the TCPStore)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from bench.errors import ConfigError

# Each rank: a tiny model, its own input; checks what backward leaves and what synchronize() writes.
# Rank 1 starts its backward only once rank 0's backward has returned (a state file rank 0 writes as it
# enters synchronize()), so rank 0's allreduces cannot finish inside its own backward: if they were waited
# for there (DDP's own hook would hide the wait inside backward, as compute), rank 0 would never write
# the file and rank 1 stops at its deadline saying so. Times are CLOCK_MONOTONIC, one clock for both.
RANK_SCRIPT = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path
    import torch
    from bench.train.dist import init
    dist = init("ddp", "none")
    gate = Path(sys.argv[1])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    trained, opt = dist.wrap(model, opt)
    x = torch.full((5, 4), float(dist.rank + 1))
    opt.zero_grad()
    if dist.rank == 1:
        deadline = time.monotonic() + 60
        while not gate.exists():
            if time.monotonic() > deadline:
                sys.exit("rank 0's backward did not return within 60 s while rank 1 held back its gradients: "
                         "it waits for the allreduce inside backward")
            time.sleep(0.01)
    backward_start = time.monotonic()
    trained(x).pow(2).sum().backward()
    backward_end = time.monotonic()
    local = [p.grad.clone().tolist() for p in model.parameters()]
    sync_start = time.monotonic()
    if dist.rank == 0:
        gate.write_text("rank 0's backward returned; it enters synchronize()")
    opt.synchronize()
    sync_end = time.monotonic()
    with opt.skip_synchronize():
        opt.step()
    print(json.dumps({"rank": dist.rank, "backend": dist.backend, "local": local,
                      "synced": [p.grad.tolist() for p in model.parameters()],
                      "params": [p.tolist() for p in model.parameters()],
                      "backward_start": backward_start, "backward_end": backward_end,
                      "sync_start": sync_start, "sync_end": sync_end}))
    """
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_env(rank: int, port: str, ranks: int = 2) -> dict[str, str]:
    """The env contract torchrun gives a rank on one host (loopback, Gloo)."""
    return {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": port,
        "RANK": str(rank),
        "WORLD_SIZE": str(ranks),
        "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": str(ranks),
        "GLOO_SOCKET_IFNAME": "lo",
    }


def run_two(script: str, *args: str, extra_env: dict | None = None) -> list[dict]:
    port = str(free_port())
    procs = []
    for rank in (0, 1):
        env = os.environ | torchrun_env(rank, port) | (extra_env or {})
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", script, *args],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outs, errs = [], []
    for p in procs:
        try:
            out, err = p.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        outs.append(out)
        errs.append(err)
    # every rank's stderr on a failure: a rank that stopped at its deadline says why, its peer only that it lost it
    said = "\n".join(
        f"rank {rank} (exit {p.returncode}): {err[-2000:]}"
        for rank, (p, err) in enumerate(zip(procs, errs, strict=True))
    )
    assert all(p.returncode == 0 for p in procs), said
    return [json.loads(out.strip().splitlines()[-1]) for out in outs]


@pytest.mark.slow
def test_ddp_averages_gradients_in_synchronize_and_exposes_the_wait_there(tmp_path):
    import torch

    r0, r1 = run_two(RANK_SCRIPT, str(tmp_path / "rank0-backward-returned"))
    assert r0["backend"] == r1["backend"] == "ddp"
    # backward returned before the allreduce was applied: each rank still held its own gradient then
    assert r0["local"] != r1["local"]
    expected = [(torch.tensor(a) + torch.tensor(b)) / 2 for a, b in zip(r0["local"], r1["local"], strict=True)]
    for rank in (r0, r1):
        for got, want in zip(rank["synced"], expected, strict=True):
            assert torch.allclose(torch.tensor(got), want, atol=1e-6)
    assert r0["params"] == r1["params"]  # one step from the same start with the same averaged gradient
    # rank 0's backward returned before rank 1 had computed any gradient (rank 1 waited for it: had the
    # allreduce been waited for inside backward, rank 1 would have stopped at its deadline), and rank 0's
    # synchronize() returned only after rank 1's backward had begun: the wait for the late rank, the
    # exposed communication, falls in synchronize(), timed where Horovod's is
    assert r0["backward_end"] <= r0["sync_start"] < r1["backward_start"], (r0, r1)
    assert r0["sync_end"] > r1["backward_start"], (r0, r1)


def test_unknown_backend_and_bind_are_refused_naming_the_field_and_values():
    from bench.config.models import TrainConfig
    from bench.config.types import parse
    from bench.train.dist import resolve

    with pytest.raises(ConfigError, match=r"--backend: Input should be 'horovod', 'ddp' or 'auto'"):
        parse(TrainConfig, {"workload": "ssd", "synthetic": True, "steps": 1, "backend": "mpi"}, prefix="--")
    with pytest.raises(ConfigError, match=r"bind: Input should be 'auto' or 'none'"):
        parse(TrainConfig, {"workload": "ssd", "synthetic": True, "steps": 1, "bind": "all"})
    with pytest.raises(ConfigError, match=r"backend: 'nccl' is not one of horovod, ddp, auto"):
        resolve("nccl")
    done = subprocess.run(
        [sys.executable, "-m", "bench", "train", "--workload", "ssd", "--synthetic", "--steps", "1", "--backend", "x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "argument --backend: invalid choice: 'x' (choose from 'horovod', 'ddp', 'auto')" in done.stderr


def test_auto_follows_the_launcher_env(monkeypatch):
    from bench.train.dist import horovod_imports, resolve

    for key in ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "RANK", "MASTER_ADDR"):
        monkeypatch.delenv(key, raising=False)
    assert resolve("auto") == ("horovod" if horovod_imports() else "ddp")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    assert resolve("auto") == "ddp"  # started by torchrun: DDP, whatever imports
    monkeypatch.setenv("HOROVOD_RANK", "0")
    # started by horovodrun (HOROVOD_RANK beside torchrun's names): Horovod where it imports, else DDP
    assert resolve("auto") == ("horovod" if horovod_imports() else "ddp")


CUDA_SCRIPT = textwrap.dedent(
    """
    import copy, json
    import torch
    from bench.train.dist import init
    dist = init("ddp", "none")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 3)).cuda()
    plain = copy.deepcopy(model)
    trained, opt = dist.wrap(model, torch.optim.SGD(model.parameters(), lr=0.1))
    x = torch.randn(4, 3, 32, 32, device="cuda")
    opt.zero_grad()
    trained(x).square().mean().backward()
    opt.synchronize()
    plain(x).square().mean().backward()
    same = all(torch.allclose(a.grad, b.grad, atol=1e-5) for a, b in zip(model.parameters(), plain.parameters()))
    print(json.dumps({"device": str(dist.device), "same": same, "kind": torch.distributed.get_backend()}))
    """
)


def test_ddp_on_a_gpu_runs_nccl_and_keeps_the_gradients():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no GPU here: the NCCL path runs on the GPU check")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    done = subprocess.run([sys.executable, "-c", CUDA_SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got == {"device": "cuda:0", "same": True, "kind": "nccl"}


# Each rank probes a 3 MiB "model" (DDP's buckets: 1 MiB then 25 MiB); rank 1 adds a delay to its copy.
PROBE_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    import torch
    from bench.train.dist import init
    from bench.train.dist.allreduce_probe import bucket_sizes, gradient_bytes, probe_allreduce
    dist = init("ddp", "none")
    model = torch.nn.Linear(1024, 768)  # 787,200 parameters: 3,148,800 gradient bytes in fp32
    probe = probe_allreduce(dist, gradient_bytes(model))
    buffer = torch.full((4,), float(dist.rank + 1))
    dist.allreduce_buckets([buffer])
    print(json.dumps({"probe": probe, "sum": buffer.tolist(), "sizes": bucket_sizes(3_148_800, *dist.bucket_bytes())}))
    dist.close()
    """
)


@pytest.mark.rates
@pytest.mark.slow
def test_the_allreduce_probe_sends_the_models_gradients_in_ddps_buckets():
    r0, r1 = run_two(PROBE_SCRIPT)
    assert r0["sum"] == r1["sum"] == [3.0] * 4  # a sum-allreduce across both ranks
    assert r0["sizes"] == [1 << 20, 3_148_800 - (1 << 20)]
    p0, p1 = r0["probe"], r1["probe"]
    assert p0 == p1  # the slowest rank's time, agreed: both ranks report the same figures
    assert p0["bytes"] == 3_148_800 and p0["buckets"] == 2 and 1 <= p0["reps"] <= 5
    assert 0 < p0["latency_s"] < p0["seconds"]  # a one-element allreduce is quicker than the model's 3 MB
    # nccl-tests' bus bandwidth: bytes / seconds x 2(N-1)/N, N = 2
    assert p0["bus_gb_s"] == pytest.approx(p0["bytes"] / p0["seconds"] / 1e9)
