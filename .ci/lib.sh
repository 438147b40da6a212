# shellcheck shell=bash
# Shared by .ci/run and .ci/dockerd: start and stop a Docker engine on machines without systemd.
#
# These machines have no init system that starts dockerd, and /etc/init.d/docker cannot be used: it
# raises `ulimit -n` above the hard limit, which fails because root lacks CAP_SYS_RESOURCE. So dockerd
# is started directly, detached with setsid, its log and pid kept in the state directory.

SPARKGATE_DAEMON_JSON='{
  "ip": "127.0.0.1",
  "default-address-pools": [{"base": "172.30.0.0/16", "size": 24}],
  "log-driver": "json-file",
  "log-opts": {"max-size": "10m", "max-file": "2"}
}'

engine_up() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

# Write /etc/docker/daemon.json unless an administrator's own file is already there.
#  - "ip": the default bridge publishes on 127.0.0.1 only (compose networks need explicit
#    127.0.0.1 bindings; the templates do that).
#  - default-address-pools: compose networks come from 172.30.N.0/24 instead of walking forward through
#    172.18-31/16 and then 192.168.x/20 over many create/remove cycles.
#  - log rotation keeps long CI runs from filling the disk.
write_daemon_json() {
  mkdir -p /etc/docker
  if [ ! -s /etc/docker/daemon.json ]; then
    printf '%s\n' "$SPARKGATE_DAEMON_JSON" >/etc/docker/daemon.json
    echo "wrote /etc/docker/daemon.json"
  elif [ "$(cat /etc/docker/daemon.json)" = "$SPARKGATE_DAEMON_JSON" ]; then
    echo "/etc/docker/daemon.json is sparkgate's already"
  else
    echo "WARNING: keeping the existing /etc/docker/daemon.json (not sparkgate's); compose address pools may differ" >&2
  fi
}

# start_dockerd STATE_DIR: start dockerd unless an engine already answers. Prints nothing to stdout
# but progress; sets DOCKERD_PID when it started one (empty otherwise).
#
# A no-op nvidia-container-runtime-hook is put first on dockerd's PATH: dockerd registers its built-in
# "nvidia" device driver only when that hook is on its PATH at start, and with it the spark compose
# file's GPU reservation (deploy.resources.reservations.devices) validates and starts on this GPU-less
# machine. It proves the rendered file is accepted end to end, not that GPUs work; it is optional, as
# the sim target has no GPU keys at all.
start_dockerd() {
  local state=$1
  DOCKERD_PID=
  if engine_up; then
    echo "a Docker engine already answers ($(docker version --format '{{.Server.Version}}')); using it"
    return 0
  fi
  mkdir -p "$state/bin"
  # Fallback only: cgroups are normally mounted when these machines boot.
  if [ ! -e /sys/fs/cgroup/cgroup.controllers ] && ! mountpoint -q /sys/fs/cgroup/memory; then
    apt-get install -y -qq --no-install-recommends cgroupfs-mount >/dev/null && cgroupfs-mount
  fi
  write_daemon_json
  printf '#!/bin/sh\n# sparkgate CI stub: accept the OCI hook call and do nothing (no GPU here)\ncat >/dev/null 2>&1\nexit 0\n' \
    >"$state/bin/nvidia-container-runtime-hook"
  chmod 755 "$state/bin/nvidia-container-runtime-hook"
  PATH="$state/bin:$PATH" setsid nohup dockerd </dev/null >>"$state/dockerd.log" 2>&1 &
  DOCKERD_PID=$!
  echo "$DOCKERD_PID" >"$state/dockerd.pid"
  local _
  for _ in $(seq 1 120); do
    engine_up && break
    kill -0 "$DOCKERD_PID" 2>/dev/null || break
    sleep 0.5
  done
  if ! engine_up; then
    echo "dockerd did not come up; last lines of $state/dockerd.log:" >&2
    tail -n 40 "$state/dockerd.log" >&2
    return 1
  fi
  echo "dockerd $(docker version --format '{{.Server.Version}}') is up (pid $DOCKERD_PID, log $state/dockerd.log)"
}

# stop_dockerd PID: stop the dockerd this script started (its managed containerd goes with it).
stop_dockerd() {
  local pid=$1 _
  [ -n "$pid" ] || return 0
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid"
  for _ in $(seq 1 60); do
    kill -0 "$pid" 2>/dev/null || { echo "stopped dockerd (pid $pid)"; return 0; }
    sleep 0.5
  done
  echo "dockerd (pid $pid) ignored SIGTERM for 30 s; sending SIGKILL" >&2
  kill -KILL "$pid" 2>/dev/null || true
}

uplink() { ip -4 route show default 2>/dev/null | awk '{print $5; exit}'; }

# Egress guard: containers never need the uplink (builds run with --network none and wheels come from
# the host), so forwarded traffic towards it is dropped. Loopback-published ports are unaffected.
# Sets EGRESS_RULE_ADDED=1 when this call inserted the rule (a rule found in place is left to its owner).
# shellcheck disable=SC2034 # read by the scripts that source this file
add_egress_drop() {
  local dev=$1
  EGRESS_RULE_ADDED=
  [ -n "$dev" ] || { echo "no default route; no egress rule needed"; return 0; }
  if iptables -C DOCKER-USER -o "$dev" -j DROP 2>/dev/null; then
    echo "DOCKER-USER already drops egress on $dev"
  else
    iptables -I DOCKER-USER -o "$dev" -j DROP
    EGRESS_RULE_ADDED=1
    echo "DOCKER-USER drops egress on $dev"
  fi
}

remove_egress_drop() {
  local dev=$1
  [ -n "$dev" ] || return 0
  while iptables -D DOCKER-USER -o "$dev" -j DROP 2>/dev/null; do :; done
}

# Compose projects named sparkgate-*: found by the compose project label on containers, networks and
# volumes, never by grepping names.
sparkgate_projects() {
  {
    docker ps -a --format '{{.Label "com.docker.compose.project"}}'
    docker network ls --format '{{.Label "com.docker.compose.project"}}'
    docker volume ls --format '{{.Label "com.docker.compose.project"}}'
  } 2>/dev/null | grep '^sparkgate-' | sort -u || true
}

down_sparkgate_projects() {
  engine_up || return 0
  local project
  for project in $(sparkgate_projects); do
    if docker compose version >/dev/null 2>&1; then
      docker compose -p "$project" down -v --remove-orphans -t 5 >/dev/null 2>&1 || true
    fi
    # Whatever compose could not remove (or no compose plugin at all): by label.
    docker ps -aq --filter "label=com.docker.compose.project=$project" | xargs -r docker rm -f >/dev/null 2>&1 || true
    docker network ls -q --filter "label=com.docker.compose.project=$project" | xargs -r docker network rm >/dev/null 2>&1 || true
    docker volume ls -q --filter "label=com.docker.compose.project=$project" | xargs -r docker volume rm >/dev/null 2>&1 || true
    echo "removed compose project $project"
  done
}

# Where the tests' CPU went: CI's two cores are busy nearly all the test step, so its time is the suite's CPU time
# over two. The kernel's process accounting (acct) keeps each ended process's CPU; the report sums it by command.
# Best-effort: without accounting in the kernel it says so and CI goes on.
cpu_accounting_on() {
  : >"$1" && accton "$1" >/dev/null 2>&1 && echo "process accounting on ($1)" \
    || echo "process accounting unavailable here: no CPU-by-command table at the end"
}

cpu_accounting_report() {
  [ -s "$1" ] || return 0
  accton off >/dev/null 2>&1 || true
  printf '\n== CPU seconds by command (process accounting, from the tests step on)\n'
  dump-acct "$1" 2>/dev/null | awk -F'|' '
    { name = $1; sub(/ +$/, "", name); cpu[name] += $3 + $4; n[name]++; total += $3 + $4 }
    END {
      for (name in cpu) printf "%8.0f s %7d  %s\n", cpu[name] / 100, n[name], name | "sort -rn | head -15"
      close("sort -rn | head -15")
      printf "%8.0f s  all processes\n", total / 100
    }'
}
