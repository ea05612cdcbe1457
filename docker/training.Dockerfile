# Training image for the compute nodes: torch 2.13.0, the bench library, sshd. One file, two builds:
# - GPU (the defaults): CUDA 12.4, NVIDIA DALI (`mixed` decode on GPU nodes), Horovod 0.28.1 built
#   with NCCL for GPU collectives and Gloo as controller.
#     docker build -f docker/training.Dockerfile -t scalewatch-train .
# - CPU (docker/compose.yaml's node1/node2): a Debian base, the CPU torch wheel, no DALI, DDP over Gloo
#   (HOROVOD=0; the `auto` backend then picks DDP).
#     docker build -f docker/training.Dockerfile -t scalewatch-train-cpu \
#       --build-arg BASE=debian:bookworm-slim --build-arg SYSTEM_PACKAGES=python3.11-venv \
#       --build-arg TORCH=torch==2.13.0+cpu --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cpu \
#       --build-arg EXCLUDE="^(apache-airflow|torch|nvidia-dali)" --build-arg HOROVOD=0 .
# No keys in the image: a node's host key and authorized key come from the stack's key volume at start
# (docker/node-entrypoint.sh).
ARG BASE=nvidia/cuda:12.4.1-cudnn-devel-ubuntu22.04
FROM ${BASE}

ARG SYSTEM_PACKAGES="python3.11 python3.11-dev python3.11-venv python3-pip cmake g++ git libnccl2 libnccl-dev"
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends ${SYSTEM_PACKAGES} openssh-server openssh-client fio \
 && rm -rf /var/lib/apt/lists/*
RUN python3.11 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

# torch first and pinned, as on the CPU machines; its PyPI wheel is the CUDA build, the CPU build's
# comes from TORCH_INDEX (an extra index: empty keeps pip's own settings, a local find-links included).
ARG TORCH="torch==2.13.0"
ARG TORCH_INDEX=""
ARG EXCLUDE="^(apache-airflow|torch)"
COPY requirements.txt requirements-nodeps.txt /opt/scalewatch/
RUN pip install --no-cache-dir ${TORCH_INDEX:+--extra-index-url "$TORCH_INDEX"} "$TORCH" \
 && grep -v -E "$EXCLUDE" /opt/scalewatch/requirements.txt > /tmp/req.txt \
 && pip install --no-cache-dir -r /tmp/req.txt "$TORCH" \
 && pip install --no-cache-dir --no-deps -r /opt/scalewatch/requirements-nodeps.txt

# Horovod against this torch: NCCL for GPU collectives, Gloo as controller (no MPI needed).
# torch headers need C++17 while horovod 0.28.1 hard-codes C++14: a wrapper appends c++17 last.
ARG HOROVOD=1
ARG HOROVOD_GPU_OPERATIONS=NCCL
RUN if [ "$HOROVOD" = 1 ]; then \
      printf '#!/bin/sh\nexec g++ "$@" -std=c++17\n' > /usr/local/bin/g++17 && chmod +x /usr/local/bin/g++17 \
   && CXX=/usr/local/bin/g++17 HOROVOD_GPU_OPERATIONS=${HOROVOD_GPU_OPERATIONS} HOROVOD_WITH_PYTORCH=1 \
      HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
      pip install --no-cache-dir --no-build-isolation "horovod==0.28.1" \
   && horovodrun --check-build; fi

COPY pyproject.toml /opt/scalewatch/
COPY bench /opt/scalewatch/bench
RUN pip install --no-cache-dir --no-deps /opt/scalewatch

# The ssh launcher runs ranks with the worker's interpreter path (bench/launch/python.py): the Airflow
# image's /usr/local/bin/python (or python3: Airflow's task runner starts as python3) answers here with
# this venv.
RUN for name in python python3 python3.11; do \
      printf '#!/bin/sh\nexec /opt/venv/bin/python "$@"\n' > /usr/local/bin/$name && chmod +x /usr/local/bin/$name; \
    done \
 && mkdir -p /run/sshd
COPY docker/node-entrypoint.sh /usr/local/bin/scalewatch-node
ENTRYPOINT ["/usr/local/bin/scalewatch-node"]
CMD ["sshd"]
