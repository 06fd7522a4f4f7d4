#!/usr/bin/env bash
# Install Debian's Slurm and MUNGE where they are missing, for the Slurm adapter's end-to-end test and bench.
#
# Idempotent and fast when everything is present (one dpkg query, no network). Needs root (or sudo) only
# when something is actually missing. Non-interactive: never prompts, never starts the daemons (the test
# starts its own slurmctld/slurmd/munged in a temporary directory).
set -euo pipefail

# lua-posix: job_submit.lua talks to the agent's unix socket from slurmctld's Lua 5.1, no process per submit.
# lua5.1: the interpreter tests/slurm/test_hook_lua.py and the --hook-cost bench run job_submit.lua in.
PACKAGES=(slurmctld slurmd slurm-client munge lua-posix lua5.1)

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-slurm: apt-get not found; install ${missing[*]} by hand (the Slurm end-to-end test will skip)" >&2
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"; else
    echo "install-slurm: not root and no sudo; cannot install ${missing[*]}" >&2
    exit 1
  fi
fi

echo "install-slurm: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# policy-rc.d 101: the package scripts must not start system daemons (no systemd in CI containers anyway).
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
  $SUDO chmod +x "$policy"
  created_policy=1
fi
trap '[ "$created_policy" = 1 ] && $SUDO rm -f "$policy"' EXIT
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
