# Aura training image: CUDA PyTorch + Aura, entry point = the `aura` CLI (the same one CI tests).
#   docker compose build
#   docker compose run --rm trainer doctor
#   docker compose run --rm trainer launch check-dist
# The base already ships a CUDA build of torch; `pip install` keeps it (aura needs torch>=2.6).
ARG BASE_IMAGE=pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime
FROM ${BASE_IMAGE}

ARG EXTRAS=qlora
ARG USER_UID=1000
ARG USER_GID=1000

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HOME=/cache/huggingface \
    AURA_LANG=es

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# Unprivileged user whose uid/gid match the host's (bind-mounted data and runs stay writable).
RUN groupadd --gid "${USER_GID}" aura \
    && useradd --uid "${USER_UID}" --gid "${USER_GID}" --create-home --shell /bin/bash aura \
    && mkdir -p /workspace /data /runs /cache/huggingface \
    && chown -R aura:aura /workspace /data /runs /cache

WORKDIR /opt/aura
COPY pyproject.toml README.md ./
COPY aura ./aura
COPY scripts/ddp_launch.sh /usr/local/bin/ddp_launch.sh
# DL3013: this installs the local checkout (".[extras]"); its dependencies are pinned by pyproject.toml.
# hadolint ignore=DL3013
RUN python -m pip install ".[${EXTRAS}]" \
    && python -c "import torch, aura; print('torch', torch.__version__, 'aura', aura.__version__)" \
    && chmod 0755 /usr/local/bin/ddp_launch.sh

USER ${USER_UID}:${USER_GID}
WORKDIR /workspace

ENTRYPOINT ["aura"]
CMD ["--help"]
