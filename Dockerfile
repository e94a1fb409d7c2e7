# syntax=docker/dockerfile:1
# uds-vm-operator image: multi-stage, non-root, no build tools in the final stage.
# Pin the base by digest for releases (replace the placeholder digests with the ones your registry mirror
# serves: `docker buildx imagetools inspect python:3.11-slim-bookworm`); Zarf ships whatever this builds.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:0000000000000000000000000000000000000000000000000000000000000000

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
# Wheels only (kopf, lightkube, pydantic, regopy, zstandard ship manylinux wheels): no compiler needed.
# --no-compile, then one compileall over the whole venv: site-packages *and* this package get bytecode, so
# no start of the operator compiles anything. unchecked-hash: the image never changes, so a .pyc need not be
# checked against its source's mtime (which a builder that rewrites timestamps would otherwise invalidate).
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install --only-binary=:all: --no-compile . \
 && /opt/venv/bin/python -m compileall -q -j0 --invalidation-mode unchecked-hash /opt/venv/lib

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="uds-vm-operator" \
      org.opencontainers.image.description="Hardened, digest-verified VMs on KubeVirt + CDI" \
      org.opencontainers.image.licenses="Apache-2.0"
# pip/setuptools are not needed at run time: remove them from the base to shrink the attack surface.
# The official python images delete every .pyc of the stdlib, and the operator runs as a non-root user with
# PYTHONDONTWRITEBYTECODE, so without this compileall each start would compile ~190 stdlib modules (asyncio,
# ssl, email, json, ...) from source again: ~15 MB of bytecode bought once here (bench/operator_startup.py).
RUN python -m pip uninstall -y pip setuptools wheel >/dev/null 2>&1 || true \
 && python -m compileall -q -j0 --invalidation-mode unchecked-hash \
      "$(python -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')" \
 && groupadd --gid 65532 nonroot && useradd --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin nonroot
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["uds-vm-operator"]
CMD ["run", "--all-namespaces"]
