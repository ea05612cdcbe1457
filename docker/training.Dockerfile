# Training image for GPU nodes: CUDA 12, torch 2.13.0, NVIDIA DALI, Horovod with NCCL (Gloo controller).
# Build from the repository root: docker build -f docker/training.Dockerfile -t scalewatch-train .
FROM nvidia/cuda:12.4.1-cudnn-devel-ubuntu22.04

ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3.11 python3.11-dev python3.11-venv python3-pip \
      cmake g++ git openssh-client fio libnccl2 libnccl-dev \
 && rm -rf /var/lib/apt/lists/*
RUN python3.11 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

COPY requirements.txt requirements-nodeps.txt /opt/scalewatch/
# torch first and pinned, as on the CPU machines; its PyPI wheel is the CUDA build here.
RUN pip install --no-cache-dir "torch==2.13.0" \
 && grep -v -E "^(apache-airflow|torch)" /opt/scalewatch/requirements.txt > /tmp/req.txt \
 && pip install --no-cache-dir -r /tmp/req.txt \
 && pip install --no-cache-dir --no-deps -r /opt/scalewatch/requirements-nodeps.txt

# Horovod against this torch: NCCL for GPU collectives, Gloo as controller (no MPI needed).
# torch headers need C++17 while horovod 0.28.1 hard-codes C++14: a wrapper appends c++17 last.
RUN printf '#!/bin/sh\nexec g++ "$@" -std=c++17\n' > /usr/local/bin/g++17 && chmod +x /usr/local/bin/g++17 \
 && CXX=/usr/local/bin/g++17 HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 \
    HOROVOD_WITHOUT_MPI=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
    pip install --no-cache-dir --no-build-isolation "horovod==0.28.1" \
 && horovodrun --check-build

COPY pyproject.toml /opt/scalewatch/
COPY bench /opt/scalewatch/bench
RUN pip install --no-cache-dir --no-deps /opt/scalewatch
ENTRYPOINT ["bench"]
CMD ["train", "--help"]
