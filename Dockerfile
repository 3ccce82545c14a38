# Aura training image: PyTorch + Aura in a venv, entry point = the `aura` CLI (the same one CI tests).
#   docker compose build                                   (CUDA: official PyTorch image, GPU hosts)
#   docker compose -f docker-compose.yml -f docker-compose.cpu.yml build   (CPU-only variant)
#   docker compose run --rm trainer doctor
# Any base with Python >= 3.10 works (official CUDA PyTorch image, Debian/Ubuntu python3): Aura installs into
# /opt/venv, created with --system-site-packages so a torch already in the base (the CUDA build) is kept.
# Behind a corporate mirror nothing is edited, everything is a build argument or a BuildKit secret:
#   --build-arg BASE_IMAGE=...  INDEX_URL=...  EXTRA_INDEX_URL=...
#   --build-arg TORCH_SPEC='torch==2.13.0+cpu' TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu  (CPU torch)
#   --secret id=pip_cert,src=/path/to/ca-bundle.crt   (the mirror's CA: mounted for pip only, never in a layer)
#   --build-arg WHEELHOUSE=.wheelhouse                (a folder of wheels inside the build context; optional)
ARG BASE_IMAGE=pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime
FROM ${BASE_IMAGE}

ARG EXTRAS=qlora
ARG USER_UID=1000
ARG USER_GID=1000
ARG PYTHON=python3
ARG TORCH_SPEC=torch>=2.6
ARG TORCH_INDEX_URL=""
ARG INDEX_URL=""
ARG EXTRA_INDEX_URL=""
ARG WHEELHOUSE=""

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HOME=/cache/huggingface \
    AURA_LANG=es \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# Unprivileged user whose uid/gid match the host's (bind-mounted data and runs stay writable); an id the base
# already uses is reused rather than duplicated.
RUN (getent group "${USER_GID}" >/dev/null || groupadd --gid "${USER_GID}" aura) \
    && (getent passwd "${USER_UID}" >/dev/null \
        || useradd --uid "${USER_UID}" --gid "${USER_GID}" --create-home --shell /bin/bash aura) \
    && mkdir -p /workspace /data /runs /cache/huggingface \
    && chown -R "${USER_UID}:${USER_GID}" /workspace /data /runs /cache

WORKDIR /opt/aura
COPY pyproject.toml README.md ./
COPY aura ./aura
COPY scripts/ddp_launch.sh /usr/local/bin/ddp_launch.sh
# The build context is bind-mounted read-only for the optional wheel folder (never copied into a layer); the CA
# bundle comes as the secret pip_cert. DL3013: this installs the local checkout, pinned by pyproject.toml.
# hadolint ignore=DL3013
RUN --mount=type=secret,id=pip_cert \
    --mount=type=bind,target=/tmp/context \
    if [ -s /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi \
    && pip_args=() \
    && if [ -n "${INDEX_URL}" ]; then pip_args+=(--index-url "${INDEX_URL}"); fi \
    && if [ -n "${EXTRA_INDEX_URL}" ]; then pip_args+=(--extra-index-url "${EXTRA_INDEX_URL}"); fi \
    && if [ -n "${WHEELHOUSE}" ]; then pip_args+=(--find-links "/tmp/context/${WHEELHOUSE}"); fi \
    && torch_args=() \
    && if [ -n "${TORCH_INDEX_URL}" ]; then torch_args+=(--extra-index-url "${TORCH_INDEX_URL}"); fi \
    && "${PYTHON}" -m venv --system-site-packages /opt/venv \
    && /opt/venv/bin/python -c "import sys; assert sys.version_info >= (3, 10), sys.version" \
    && /opt/venv/bin/python -m pip install --no-cache-dir "${pip_args[@]}" "${torch_args[@]}" "${TORCH_SPEC}" \
    && /opt/venv/bin/python -m pip install --no-cache-dir "${pip_args[@]}" ".${EXTRAS:+[${EXTRAS}]}" \
    && /opt/venv/bin/python -c "import torch, aura; print('torch', torch.__version__, 'aura', aura.__version__)" \
    && rm -rf /opt/aura/build \
    && chmod 0755 /usr/local/bin/ddp_launch.sh

USER ${USER_UID}:${USER_GID}
WORKDIR /workspace

ENTRYPOINT ["aura"]
CMD ["--help"]
