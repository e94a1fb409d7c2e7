# syntax=docker/dockerfile:1
# uds-vm-operator image: multi-stage, non-root, no build tools (no pip, no setuptools) in the final stage.
# The base is pinned by digest, or the build stops (issue 32): give the one your mirror serves,
#   --build-arg PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:...   (`skopeo inspect` / `docker buildx imagetools
# inspect` against the mirror tells the digest). ALLOW_UNPINNED_BASE=true accepts a tag (a developer's machine).
# The tests build FROM a base made from Debian's packages (tools/images/base.sh), by digest: any image with
# python3 >= 3.11, venv and groupadd/useradd works.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG ALLOW_UNPINNED_BASE=false

FROM ${PYTHON_IMAGE} AS build
ARG PYTHON_IMAGE
ARG ALLOW_UNPINNED_BASE
RUN case "$PYTHON_IMAGE" in \
      *@sha256:*) ;; \
      *) [ "$ALLOW_UNPINNED_BASE" = true ] || { echo "error: the base image $PYTHON_IMAGE is not pinned by digest;" \
           "build with --build-arg PYTHON_IMAGE=$PYTHON_IMAGE@sha256:<digest> (or ALLOW_UNPINNED_BASE=true)" >&2; \
           exit 1; } ;; \
    esac
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
# Every dependency is hash-locked (requirements*.lock, checked against pyproject.toml by `make lock-check`).
# wheelhouse/ holds the locked wheels when `make image` builds (offline); empty, pip takes the same hashed
# files from the index. Wheels only: no compiler, no sdist runs code at build time.
COPY requirements.lock requirements-build.lock ./
COPY wheelhouse/ /wheels/
RUN set -eu; \
    if ls /wheels/*.whl >/dev/null 2>&1; then from="--no-index --find-links /wheels"; else from=""; fi; \
    python3 -m venv /opt/build; \
    /opt/build/bin/pip install --quiet $from --require-hashes --no-deps --only-binary=:all: -r requirements-build.lock; \
    python3 -m venv --without-pip /opt/venv; \
    /opt/build/bin/pip --python /opt/venv/bin/python install --quiet $from --require-hashes --no-deps \
      --only-binary=:all: --no-compile -r requirements.lock
COPY pyproject.toml README.md ./
COPY src ./src
# The package itself, built by the locked setuptools (no build isolation: nothing fetched), installed without
# deps (all locked above). Then one compileall over the whole venv: no start of the operator compiles anything.
# unchecked-hash: the image never changes, so a .pyc need not be checked against its source's mtime.
RUN /opt/build/bin/pip wheel --quiet --no-deps --no-build-isolation --no-index -w /tmp/dist . \
 && /opt/build/bin/pip --python /opt/venv/bin/python install --quiet --no-deps --no-index --no-compile /tmp/dist/*.whl \
 && /opt/venv/bin/python -m compileall -q -j0 --invalidation-mode unchecked-hash /opt/venv/lib

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="uds-vm-operator" \
      org.opencontainers.image.description="Hardened, digest-verified VMs on KubeVirt + CDI" \
      org.opencontainers.image.licenses="Apache-2.0"
# pip/setuptools (and the wheels ensurepip would install them from) are not needed at run time: removed to
# shrink the attack surface. The official python images delete every .pyc of the stdlib, and the operator runs
# as a non-root user with PYTHONDONTWRITEBYTECODE, so without this compileall each start would compile ~190
# stdlib modules from source again: ~15 MB of bytecode bought once here (bench/operator_startup.py).
# regopy (`uds-vmctl compliance validate`) loads libatomic.so.1, which slim bases lack: installed from the
# base's own apt sources only when missing (the Debian-made test base already has it, so that build is offline).
RUN if ! ldconfig -p | grep -q 'libatomic\.so\.1 '; then \
      apt-get update -qq && apt-get install -y -qq --no-install-recommends libatomic1 && rm -rf /var/lib/apt/lists/*; \
    fi; \
    python3 -m pip uninstall -y pip setuptools wheel >/dev/null 2>&1 || true; \
    rm -rf /usr/share/python-wheels /usr/local/lib/python3*/ensurepip/_bundled /usr/lib/python3*/ensurepip/_bundled \
 && python3 -m compileall -q -j0 --invalidation-mode unchecked-hash \
      "$(python3 -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')" \
 && groupadd --gid 65532 nonroot && useradd --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin nonroot
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["uds-vm-operator"]
CMD ["run", "--all-namespaces"]
