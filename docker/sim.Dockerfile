# sparkgate runtime image: the SGLang-shaped simulator (python3 -m sparkgate.sim) standing in for the
# Spark engine in CI and demos, the sentinel (`sparkgate sentinel`, with pytest + testinfra and the
# tests/ suites) and the HAProxy gateway (haproxy from the base image). No GPU, no network: `invoke images.sim` stages a build context with the
# wheels downloaded on the host (.ci/wheels) plus a freshly built sparkgate wheel, and builds it with
# `docker build --network none` on the mmdebstrap base (docker/build-base.sh).
#
# Runs as root like the engine image it stands in for, so the shared log volume and testinfra checks
# see the same ownership in both. The compose file carries the healthcheck.
ARG BASE_IMAGE=sparkgate/base:bookworm
FROM ${BASE_IMAGE}

ENV PIP_NO_INDEX=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
COPY wheels /tmp/wheels
RUN python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir --no-index --find-links /tmp/wheels -r /tmp/wheels/requirements.txt \
 && rm -rf /tmp/wheels \
 && mkdir -p /var/log/sparkgate

# Bundle data (images.lock.yaml, profiles/, templates/), so the whole CLI works inside the image.
COPY bundle /opt/sparkgate
ENV PATH=/opt/venv/bin:${PATH} \
    PYTHONUNBUFFERED=1 \
    SPARKGATE_HOME=/opt/sparkgate

# Fail the build if the console script, the bundle data, the sentinel's suites or HAProxy do not work.
RUN sparkgate profiles >/dev/null \
 && python3 -m pytest --version >/dev/null \
 && haproxy -v >/dev/null

ENTRYPOINT ["sparkgate", "engine", "--launcher", "sim", "--log-file", "/var/log/sparkgate/engine.log", "--"]
