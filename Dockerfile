# syntax=docker/dockerfile:1
# cpn operator image: `docker build -t cpn:0.1.0 .`, then set the image in manifests/.
# Stage 1 builds the wheel (hatchling, as pyproject.toml says) and installs it with its
# dependencies, at the versions requirements.lock pins, into a virtual environment; stage 2
# is a slim runtime with only that environment, run as a non-root user. The default
# command is the operator, `cpn run`.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python -m venv /opt/cpn \
 && /opt/cpn/bin/pip install "build>=1.2" "hatchling>=1.25"
COPY pyproject.toml README.md requirements.lock ./
COPY operator ./operator
COPY predictor ./predictor
COPY testbed ./testbed
# The CRDs, for `cpn validate` in the image (packaged as cpn/crds by pyproject's force-include).
COPY crds ./crds
# --no-isolation: use the hatchling installed above instead of fetching it again.
RUN /opt/cpn/bin/python -m build --wheel --no-isolation --outdir /dist . \
 && /opt/cpn/bin/pip install -c requirements.lock /dist/cpn-*.whl \
 && /opt/cpn/bin/pip uninstall --yes build hatchling \
 && /opt/cpn/bin/cpn --help
# Train the bundled predictor once so its inner cross-validation's answer ships in the image
# (predictor/calibration_cache.py): the operator then trains in about a second at each start.
RUN CPN_CACHE_DIR=/opt/cpn/cache /opt/cpn/bin/python -c \
    "from predictor.online import OnlinePredictor; OnlinePredictor()"

FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="cpn" \
      org.opencontainers.image.description="Multi-cluster scheduler for AI training jobs (operator)" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/cpn/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MPLCONFIGDIR=/tmp/matplotlib \
    HOME=/tmp \
    CPN_CACHE_DIR=/opt/cpn/cache
# A fixed numeric uid/gid, so that `runAsNonRoot: true` can verify it without /etc/passwd.
RUN groupadd --system --gid 10001 cpn \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin cpn \
 && install -d -o 10001 -g 10001 -m 0750 /var/lib/cpn
COPY --from=build /opt/cpn /opt/cpn
USER 10001:10001
WORKDIR /var/lib/cpn
EXPOSE 8080 9090
ENTRYPOINT ["cpn", "run"]
