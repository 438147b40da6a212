# sparkgate runtime image: the SGLang-shaped simulator (python3 -m sparkgate_sim) standing in for the Spark
# engine in CI and demos, the sentinel (`sparkgate sentinel`, with pytest + testinfra and the package's suites)
# and the HAProxy gateway. No GPU.
#
# The build context is the repository root (.dockerignore lets through only what is copied here), so the
# same file serves `docker compose up --build` in a fresh clone and CI's offline `invoke images.runtime`:
#
#   base      BASE_IMAGE: the digest-pinned Debian bookworm from images.lock.yaml (base_images.runtime-base),
#             or the offline mmdebstrap base sparkgate/base:bookworm (docker/build-base.sh), which already
#             holds every OS package below, so its build needs no network.
#   Python    from .ci/wheels when `invoke images.wheels` has put wheels there (then --no-index: the build
#             runs with --network none), else from PyPI at the exact pins of pyproject.toml.
#
# Runs as root like the engine image it stands in for, so the shared log volume and testinfra checks see
# the same ownership in both. The compose file carries the healthcheck.
ARG BASE_IMAGE=debian:bookworm-slim@sha256:abd67ffcfa541b485a3dff59865ab629aa048a6c613e639d36e7456b0b229241
FROM ${BASE_IMAGE}

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# The packages docker/build-base.sh puts into the offline base (a unit test holds the two lists equal):
# python3 + venv (bookworm: CPython 3.11), ps and ss for testinfra, haproxy for the gateway. Only the
# missing ones are installed, so the offline base never reaches for a mirror.
ARG OS_PACKAGES="python3 python3-venv procps iproute2 haproxy ca-certificates"
# hadolint ignore=SC2016,SC2086
RUN missing=$(for p in ${OS_PACKAGES}; do dpkg-query -W -f '${Status}\n' "$p" 2>/dev/null | grep -q 'ok installed' || echo "$p"; done) \
 && if [ -n "$missing" ]; then \
      apt-get update \
      && apt-get install -y --no-install-recommends $missing \
      && rm -rf /var/lib/apt/lists/*; \
    fi \
 && mkdir -p /var/log/sparkgate

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1 \
    SPARKGATE_HOME=/opt/sparkgate
# setuptools at the pin image_build.BUILD_REQUIREMENTS downloads: the packages below build with
# --no-build-isolation, so an offline build needs no index for its build backend either.
ARG SETUPTOOLS_VERSION=84.2.1

# Third-party dependencies first, from pyproject.toml alone: a source change reuses this layer.
# .ci holds only wheels/ here (or nothing) after .dockerignore.
COPY pyproject.toml /opt/sparkgate/pyproject.toml
COPY .ci /tmp/ci
# hadolint ignore=SC2086
RUN python3 -m venv /opt/venv \
 && python3 -c 'import tomllib; p = tomllib.load(open("/opt/sparkgate/pyproject.toml", "rb"))["project"]; print("\n".join(p["dependencies"] + p["optional-dependencies"]["runtime"]))' >/tmp/requirements.txt \
 && offline="" \
 && if [ -f /tmp/ci/wheels/manifest.json ]; then offline="--no-index --find-links /tmp/ci/wheels"; fi \
 && /opt/venv/bin/pip install $offline -r /tmp/requirements.txt "setuptools==${SETUPTOOLS_VERSION}" \
 && rm -rf /tmp/requirements.txt

# sparkgate and the simulator from this checkout, plus the bundle data (images.lock.yaml, profiles/,
# templates/), so `sparkgate verify --profile NAME` works inside the image (SPARKGATE_HOME). The sentinel's suites
# are in the package (sparkgate/suites, with their own pytest.ini): no test tree and no fixtures in the image.
COPY sparkgate /opt/sparkgate/src/sparkgate
COPY simulator /opt/sparkgate/simulator
RUN cp /opt/sparkgate/pyproject.toml /opt/sparkgate/src/pyproject.toml \
 && /opt/venv/bin/pip install --no-index --no-build-isolation --no-deps /opt/sparkgate/src /opt/sparkgate/simulator \
 && rm -rf /opt/sparkgate/src /opt/sparkgate/simulator /tmp/ci
COPY images.lock.yaml /opt/sparkgate/images.lock.yaml
COPY profiles /opt/sparkgate/profiles
COPY templates /opt/sparkgate/templates
ENV PATH=/opt/venv/bin:${PATH}

# Fail the build if the console script, the simulator, the bundle data, the sentinel's suites or HAProxy
# do not work.
RUN sparkgate --help >/dev/null \
 && python3 -c 'from sparkgate import display; display.profiles_table()' \
 && python3 -c 'import sparkgate_sim' \
 && python3 -m pip check \
 && python3 -c 'import subprocess, sys; from sparkgate import suites; sys.exit(subprocess.call([*suites.argv("infra", "infra"), str(suites.SUITES / "smoke"), "--collect-only"], stdout=subprocess.DEVNULL))' \
 && haproxy -v >/dev/null

ENTRYPOINT ["sparkgate", "engine", "--launcher", "sim", "--log-file", "/var/log/sparkgate/engine.log", "--"]
