# sparkgate's Prometheus (the `monitoring` compose profile): Debian bookworm's own `prometheus` package, which
# ships `promtool` too, at the exact version images.lock.yaml pins (debian_packages.prometheus; a unit test
# holds ARG PROMETHEUS_VERSION equal to it). No Prometheus release binary and no registry image is used.
#
# The build context is docker/ (this file, and nothing else is needed from it). Two ways, one file:
#
#   offline   `invoke images.prometheus`: BASE_IMAGE=sparkgate/base:bookworm (docker/build-base.sh), the
#             context staged with debs/: the package and its dependencies missing from that base, downloaded
#             on the host by apt (signature-checked against Debian's archive keyring), so the build runs with
#             --network none and installs them with dpkg;
#   registry  `docker compose --profile monitoring up --build` in a clone: no debs/, BASE_IMAGE the
#             digest-pinned debian:bookworm-slim, and apt-get installs prometheus=VERSION from the mirror.
#
# Either way the build fails unless dpkg reports exactly PROMETHEUS_VERSION and promtool runs. The moment-timezone
# raw data (212 MB of JSON the web UI never loads; it uses the bundled moment-timezone-with-data.min.js) is left
# out. Runs as the package's `prometheus` system user; the compose file gives it a read-only root filesystem,
# its config (read-only) and its data volume. /etc/prometheus/sparkgate is where the config volume mounts: a
# named volume takes this directory's owner, so the one-shot `prometheus-config` can write it as that user.
ARG BASE_IMAGE=debian:bookworm-slim@sha256:abd67ffcfa541b485a3dff59865ab629aa048a6c613e639d36e7456b0b229241
FROM ${BASE_IMAGE}

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

ARG PROMETHEUS_VERSION=2.42.0+ds-5+deb12u1
# The wildcard matches nothing in the registry context (then only this file is copied).
COPY prometheus.Dockerfile debs* /tmp/prometheus-debs/
RUN printf 'path-exclude=/usr/share/javascript/moment-timezone/data/*\n' >/etc/dpkg/dpkg.cfg.d/90sparkgate-prometheus \
 && if [ -n "$(find /tmp/prometheus-debs -name '*.deb' -print -quit)" ]; then \
      dpkg --force-unsafe-io -i /tmp/prometheus-debs/*.deb; \
    else \
      apt-get update \
      && apt-get install -y --no-install-recommends "prometheus=${PROMETHEUS_VERSION}" \
      && rm -rf /var/lib/apt/lists/*; \
    fi \
 && rm -rf /tmp/prometheus-debs \
 && install -d -o prometheus -g prometheus -m 0755 /etc/prometheus/sparkgate \
 && test "$(dpkg-query -W -f '${Version}' prometheus)" = "${PROMETHEUS_VERSION}" \
 && prometheus --version \
 && promtool --version >/dev/null

LABEL io.sparkgate.prometheus.package="prometheus=${PROMETHEUS_VERSION}"
# The system user the package's postinst creates (adduser --system); its uid is whatever that picks.
# hadolint ignore=DL3066
USER prometheus
WORKDIR /var/lib/prometheus
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
