#!/usr/bin/env bash
# A private one-node Slurm cluster on loopback for the time of one command, so that tests can run a
# real `srun` (Debian 12's Slurm 22.05) instead of setting SLURM_* variables by hand.
#   slurm_cluster.sh COMMAND [ARG...]
# In a fresh temporary folder: a munge key and munged on its own socket, a slurm.conf (the node is
# `localhost` at 127.0.0.1 with at least 2 CPUs, free ports, proctrack/linuxproc, no task plugin, no
# cgroups, no accounting), slurmctld and slurmd in the foreground as children of this script. Once
# sinfo shows the node idle, COMMAND runs with SLURM_CONF pointing at the cluster; then every job is
# cancelled, the daemons are stopped and the folder is deleted. The cluster's logs are printed when
# the cluster does not come up or COMMAND fails.
# Exit status: COMMAND's; 2 when the cluster could not be made (one line says why), 3 when Slurm or
# munge is not installed (scripts/setup.sh installs them), 4 when not run as root.
# A watchdog stops the daemons too when this script is killed (SIGKILL included).
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"

die() { echo "slurm_cluster.sh: $2" >&2; exit "$1"; }
[ $# -ge 1 ] || die 2 "usage: slurm_cluster.sh COMMAND [ARG...]"
for tool in munged slurmctld slurmd slurmstepd srun sinfo scontrol scancel squeue python3; do
  command -v "$tool" >/dev/null ||
    die 3 "$tool is not installed: run scripts/setup.sh as root (it installs Debian's slurmctld, slurmd, slurm-client and munge)"
done
# slurmd runs each task as the user who submitted it, which needs root; the daemons run as root here.
[ "$(id -u)" -eq 0 ] || die 4 "a private Slurm cluster needs root (slurmd starts tasks as their user): run as root"

# slurmd 22.05 starts its cgroup plugin whatever ProctrackType and TaskPlugin say, and stops without
# a cgroup file system at /sys/fs/cgroup (systemd mounts one; a bare chroot has none).
awk '$2 ~ "^/sys/fs/cgroup" {found = 1} END {exit !found}' /proc/self/mounts ||
  die 2 "no cgroup file system at /sys/fs/cgroup, which slurmd 22.05 needs: mount one (in a chroot: mount --rbind /sys/fs/cgroup ROOT/sys/fs/cgroup)"

# Slurm variables of an outer job (a test run inside an allocation) would send srun there.
for v in $(compgen -e | grep '^SLURM_' || true); do unset "$v"; done

# A short path: munged's socket name must fit a sockaddr_un (108 bytes).
# munged wants its socket's folder searchable by everyone; the key itself is root's alone.
dir=$(mktemp -d /tmp/nanoddp-slurm.XXXXXX)
chmod 711 "$dir"
mkdir -p "$dir/state" "$dir/spool"
pids=()

show_logs() {
  local log
  for log in "$dir"/*.log; do
    [ -s "$log" ] && { echo "--- $log (last 20 lines)"; tail -n 20 "$log"; } >&2
  done
  return 0
}

# Cancels the cluster's jobs (their steps' slurmstepd would outlive slurmd), then stops the daemons
# newest first, each with SIGTERM and after 5 s SIGKILL.
stop_cluster() {
  if [ -S "$dir/munge.socket" ] && [ ${#pids[@]} -ge 2 ]; then
    timeout 10 scancel --quiet --full --user=root >/dev/null 2>&1 || true
    for _ in $(seq 50); do
      [ -z "$(timeout 5 squeue -h -o %i 2>/dev/null)" ] && break
      sleep 0.2
    done
  fi
  local i
  # One at a time: slurmd and slurmctld still talk to munged while they shut down.
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    kill -TERM "${pids[$i]}" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "${pids[$i]}" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "${pids[$i]}" 2>/dev/null || true
    wait "${pids[$i]}" 2>/dev/null || true
  done
  pids=()
}

# Stops COMMAND (srun cancels its step on SIGTERM), SIGKILL after 5 s.
stop_command() {
  [ -f "$dir/command.pid" ] || return 0
  local pid
  pid=$(cat "$dir/command.pid")
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
}

on_exit() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "${watchdog:-}" ]; then
    kill -KILL "$watchdog" 2>/dev/null
    wait "$watchdog" 2>/dev/null || true
  fi
  stop_command
  stop_cluster
  [ "$rc" -ne 0 ] && show_logs
  rm -rf "$dir"
  exit "$rc"
}
trap on_exit EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
ctld_port=$(free_port)
slurmd_port=$(free_port)
while [ "$slurmd_port" = "$ctld_port" ]; do slurmd_port=$(free_port); done
# -n2 --cpus-per-task 1 needs two CPUs; config_overrides lets a smaller machine claim them.
cpus=$(nproc)
[ "$cpus" -ge 2 ] || cpus=2

dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none
chmod 400 "$dir/munge.key"
cat >"$dir/slurm.conf" <<EOF
ClusterName=nanoddp-test
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
InactiveLimit=0
KillWait=5
MailProg=/bin/true
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF="$dir/slurm.conf"

# The daemons (in the foreground: they log to stderr) write to their logs only: an inherited
# stdout would keep the caller's pipe open.
munged --foreground --socket="$dir/munge.socket" --key-file="$dir/munge.key" --pid-file="$dir/munged.pid" \
  --log-file="$dir/munged.log" --seed-file="$dir/munged.seed" </dev/null >>"$dir/munged.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  [ -S "$dir/munge.socket" ] && break
  kill -0 "${pids[0]}" 2>/dev/null || die 2 "munged exited while starting (its log follows)"
  sleep 0.1
done
[ -S "$dir/munge.socket" ] || die 2 "munged did not open its socket within 10 s (its log follows)"
slurmctld -D -c -i -f "$SLURM_CONF" </dev/null >>"$dir/slurmctld.log" 2>&1 &
pids+=($!)
slurmd -D -N localhost -f "$SLURM_CONF" </dev/null >>"$dir/slurmd.log" 2>&1 &
pids+=($!)

# The watchdog: when this script dies without its trap (SIGKILL), it stops COMMAND and the cluster.
parent=$$
( trap '' TERM INT
  while kill -0 "$parent" 2>/dev/null; do sleep 1; done
  stop_command
  stop_cluster
  rm -rf "$dir" ) </dev/null >/dev/null 2>&1 &
watchdog=$!

state=""
for _ in $(seq 150); do
  state=$(timeout 5 sinfo -h -n localhost -o %t 2>/dev/null || true)
  [ "$state" = idle ] && break
  for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null || die 2 "a Slurm daemon (pid $pid) exited while starting (logs follow)"; done
  sleep 0.2
done
[ "$state" = idle ] || die 2 "the node did not become idle within 30 s (sinfo says '${state:-nothing}'; logs follow)"

# In the background, so that a SIGTERM to this script is handled at once, not after COMMAND.
"$@" &
echo $! >"$dir/command.pid"
wait $!
