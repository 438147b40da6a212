# sparkgate engine image for the NVIDIA DGX Spark (linux/arm64, GB10 sm_121, CUDA 13).
#
# SGLang here is the inclusionAI fork (branch ling_v3_support_mxfp4_humming) at one pinned commit:
# no stock SGLang release and no published image has the FP8 LM head or the NEXTN draft's LM-head
# module sharing. Every ARG default below equals images.lock.yaml; tests/unit/test_dockerfile.py fails
# when the two drift. The build needs the network (GitHub, PyPI, FlashInfer's wheel index), so it runs
# on the Spark itself:
#
#   invoke images.spark            # passes every pin from images.lock.yaml as --build-arg
#
# The image runs as root on purpose: the engine needs the GPU device nodes and `ipc: host` (CUDA IPC and
# shared memory with the host), and its kernel caches live in root-owned named volumes. It publishes no
# port; only the gate is reachable. There is no HEALTHCHECK here: the rendered compose file carries the
# engine's healthcheck (`sparkgate healthcheck`), with a start period sized for the Spark's cold start.

# FROM cannot be made conditional, so the digest is appended only when one is given:
# `${BASE_DIGEST:+@}${BASE_DIGEST}` expands to "@sha256:..." or to nothing. The first RUN then refuses
# an empty digest unless SPARKGATE_ALLOW_UNPINNED_BASE=1 (development builds only).
ARG BASE_IMAGE=nvidia/cuda:13.0.2-devel-ubuntu24.04
ARG BASE_DIGEST=sha256:5dc1bca23d05bd37b011be68ec470c03b403a5da07ec3a86e41af9470e9d0cc6
FROM ${BASE_IMAGE}${BASE_DIGEST:+@}${BASE_DIGEST}

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

ARG BASE_IMAGE
ARG BASE_DIGEST
ARG SPARKGATE_ALLOW_UNPINNED_BASE=0
RUN if [ -z "${BASE_DIGEST}" ]; then \
      if [ "${SPARKGATE_ALLOW_UNPINNED_BASE}" != "1" ]; then \
        echo "sparkgate: refusing the unpinned base ${BASE_IMAGE}: pass --build-arg BASE_DIGEST=sha256:<64 hex> (images.lock.yaml base_images.cuda-devel-arm64.digest, filled by 'invoke images.lock' on a host that reaches the registry), or --build-arg SPARKGATE_ALLOW_UNPINNED_BASE=1 for a development build" >&2; \
        exit 1; \
      fi; \
      echo "sparkgate: WARNING: building on the unpinned base ${BASE_IMAGE} (SPARKGATE_ALLOW_UNPINNED_BASE=1); do not deploy this image" >&2; \
    elif ! printf '%s' "${BASE_DIGEST}" | grep -Eqx 'sha256:[0-9a-f]{64}'; then \
      echo "sparkgate: BASE_DIGEST '${BASE_DIGEST}' is not of the form sha256:<64 lowercase hex>" >&2; \
      exit 1; \
    fi

# git clones the fork; build-essential is the host compiler for source builds during the install and
# for FlashInfer's JIT at run time (nvcc comes with the base); python3-venv bootstraps uv.
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential ca-certificates git python3-venv \
 && rm -rf /var/lib/apt/lists/*

# Python 3.11 venv made with uv, as the NVIDIA/Ant recipe does (uv fetches a standalone CPython 3.11
# into UV_PYTHON_INSTALL_DIR, so the interpreter lives in the image, not in a cache).
ARG UV_VERSION=0.13.9
ARG PYTHON_VERSION=3.11
ENV VIRTUAL_ENV=/opt/venv \
    UV_PYTHON_INSTALL_DIR=/opt/python \
    UV_NO_CACHE=1 \
    UV_LINK_MODE=copy \
    UV_HTTP_TIMEOUT=600
RUN python3 -m venv /opt/uv \
 && /opt/uv/bin/pip install --no-cache-dir "uv==${UV_VERSION}" \
 && ln -s /opt/uv/bin/uv /usr/local/bin/uv \
 && uv venv --seed --python "${PYTHON_VERSION}" "${VIRTUAL_ENV}"
ENV PATH=/opt/venv/bin:${PATH}

# The fork at the pinned commit itself, wherever its branch has moved since: a blobless clone carries the branch's
# whole history (commits and trees; file contents are fetched for the one checkout), the pin must be in it, and the
# build checks that commit out and prints its full SHA (to pin it unabbreviated). Unreviewed commits never enter.
ARG SGLANG_REPO=https://github.com/inclusionAI/sglang.git
ARG SGLANG_BRANCH=ling_v3_support_mxfp4_humming
ARG SGLANG_COMMIT=079d40460
# setuptools_scm derives the dev counter from the clone depth; pin the version string instead, so a
# shallow and a full clone of the same commit report the same version (kernel caches key on it).
ARG SGLANG_VERSION=0.0.0.dev1+g079d40460
RUN git clone --quiet --filter=blob:none --no-checkout --branch "${SGLANG_BRANCH}" "${SGLANG_REPO}" /opt/sglang \
 && tip="$(git -C /opt/sglang rev-parse HEAD)" \
 && if ! full="$(git -C /opt/sglang rev-parse --verify --quiet "${SGLANG_COMMIT}^{commit}")" \
       || ! git -C /opt/sglang merge-base --is-ancestor "${full}" "${tip}"; then \
      echo "sparkgate: ${SGLANG_COMMIT} (images.lock.yaml sglang_fork) is not a commit in the history of ${SGLANG_REPO} branch ${SGLANG_BRANCH} (at ${tip}); check the pin and the branch in images.lock.yaml and the defaults in this Dockerfile" >&2; \
      exit 1; \
    fi \
 && git -C /opt/sglang checkout --quiet --detach "${full}" \
 && echo "sparkgate: SGLang fork at ${full} (pinned ${SGLANG_COMMIT}; branch ${SGLANG_BRANCH} is at ${tip})"

# MAX_JOBS bounds compile parallelism: unified memory is shared with the GPU, and too many parallel
# nvcc jobs wedge the GB10 driver instead of failing with an OOM. It stays set at run time, where
# FlashInfer's JIT reads it too. SGLANG_BUILD_RUST_EXTS=none skips the Rust/gRPC tree (~30 min).
ARG MAX_JOBS=4
ENV MAX_JOBS=${MAX_JOBS} \
    NINJA_NUM_JOBS=${MAX_JOBS} \
    CMAKE_BUILD_PARALLEL_LEVEL=${MAX_JOBS}
RUN SETUPTOOLS_SCM_PRETEND_VERSION="${SGLANG_VERSION}" SGLANG_BUILD_RUST_EXTS=none \
    uv pip install -e "/opt/sglang/python[all]"

# Kernel packages pinned to the versions the recipe was measured with, installed after the fork so
# these pins win over whatever the fork's own metadata asks for. flashinfer-cubin releases after
# 0.6.13 are published on FlashInfer's own index, not on PyPI; it has no dependencies.
ARG HUMMING_KERNELS_VERSION=0.1.12
ARG FLASHINFER_PYTHON_VERSION=0.6.17
ARG FLASHINFER_CUBIN_VERSION=0.6.17
ARG FLASHINFER_INDEX_URL=https://flashinfer.ai/whl
RUN uv pip install "humming-kernels[cu13]==${HUMMING_KERNELS_VERSION}" "flashinfer-python==${FLASHINFER_PYTHON_VERSION}" \
 && uv pip install --no-deps --extra-index-url "${FLASHINFER_INDEX_URL}" "flashinfer-cubin==${FLASHINFER_CUBIN_VERSION}"

# sparkgate itself (entrypoint guard, healthcheck, build guard) and the engagement probe plugin, in the
# same venv as SGLang: `sparkgate engine` starts SGLang with its own interpreter. sparkgate's exact
# runtime pins are applied on top of the fork's environment; the build guard below is the real gate.
COPY pyproject.toml /opt/sparkgate/src/pyproject.toml
COPY sparkgate /opt/sparkgate/src/sparkgate
COPY probe /opt/sparkgate/probe
RUN uv pip install /opt/sparkgate/src /opt/sparkgate/probe \
 && mkdir -p /var/log/sparkgate

# Bundle data, so `sparkgate verify --profile NAME` also works inside the image.
COPY images.lock.yaml /opt/sparkgate/images.lock.yaml
COPY profiles /opt/sparkgate/profiles
COPY templates /opt/sparkgate/templates
ENV SPARKGATE_HOME=/opt/sparkgate \
    PYTHONUNBUFFERED=1

# Refuse the image unless the installed code is the fork the profiles need: SGLANG_ENABLE_FP8_LM_HEAD in
# Envs and its "Online FP8 quantization enabled for lm_head." log line in bailing_moe_v3.py,
# BailingMoeForCausalLMNextN.set_lm_head_from_target, the probe's hook targets resolve, SGLang's own
# parser accepts every spark-fork profile's argv.json, and humming-kernels is installed at the pin. Humming
# is found, not imported: there is no GPU during the build, and importing the kernels may need libcuda.
RUN sparkgate build-guard

LABEL org.opencontainers.image.title="sparkgate engine" \
      org.opencontainers.image.base.name="${BASE_IMAGE}" \
      org.opencontainers.image.base.digest="${BASE_DIGEST}" \
      io.sparkgate.sglang.repo="${SGLANG_REPO}" \
      io.sparkgate.sglang.branch="${SGLANG_BRANCH}" \
      io.sparkgate.sglang.commit="${SGLANG_COMMIT}" \
      io.sparkgate.sglang.version="${SGLANG_VERSION}"

ENTRYPOINT ["sparkgate", "engine", "--launcher", "spark", "--log-file", "/var/log/sparkgate/engine.log", "--preflight", "/bundle/preflight.json", "--"]
CMD ["--help"]
