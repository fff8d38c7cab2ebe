#!/usr/bin/env bash
# A real single-host SLURM cluster for the `slurm` test group (Debian/Ubuntu, run as root,
# no systemd needed): one slurmctld and two slurmd "nodes" n1, n2 on loopback, each with
# fake GPUs through GRES so that `--gpus-per-node=N` sets SLURM_GPUS_ON_NODE=N.
#
#   scripts/ci/slurm-cluster.sh start   # install (apt) if needed, configure, start; idempotent
#   scripts/ci/slurm-cluster.sh stop    # stop every daemon this script started
#   scripts/ci/slurm-cluster.sh status  # exit 0 when both nodes answer
#
# Facts behind the settings: shared/reference/slurm-single-host.md (no cgroups in the
# sandbox: linuxproc process tracking, no task plugin; no accounting daemon: finished jobs
# are kept for `scontrol show job` with MinJobAge). It changes /etc/slurm, /etc/munge,
# /etc/hosts (one marked line) and /var/{spool,log}/slurm*: meant for CI machines.
# Exit status of start: 0 ready; 3 cannot run here (not root, no apt, no package): the
# caller says so loudly; anything else: a real failure.
set -euo pipefail

NODES=(n1 n2)
GPUS=${SLURM_CI_GPUS:-16}         # per node: room for eight 2-GPU jobs at once
CPUS=${SLURM_CI_CPUS:-16}         # per node, declared (config_overrides): jobs share cores
FAKE_GPU_DIR=/var/lib/slurm-fakegpu
HOST=$(hostname)
T0=$(date +%s%N)
say() {
    local ms=$((($(date +%s%N) - T0) / 1000000))
    printf 'slurm-cluster [%d.%01ds] %s\n' $((ms / 1000)) $((ms % 1000 / 100)) "$*" >&2
}
unavailable() { say "cannot run a cluster here: $*"; exit 3; }

nodes_idle() {
    local states
    states=$(sinfo -h -o %t 2>/dev/null | sort -u | tr '\n' ' ') || return 1
    [ "$states" = "idle " ] || [ "$states" = "mix " ] || [ "$states" = "idle mix " ] ||
        [ "$states" = "alloc " ] || [ "$states" = "alloc idle " ] || [ "$states" = "alloc mix " ]
}

install_packages() {
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null &&
        command -v sbatch >/dev/null && command -v munged >/dev/null && return 0
    command -v apt-get >/dev/null || unavailable "slurm is not installed and there is no apt-get"
    say "apt: installing slurmctld slurmd slurm-client munge"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null || unavailable "apt-get update failed"
    apt-get install -y -q --no-install-recommends slurmctld slurmd slurm-client munge \
        >/dev/null || unavailable "apt-get install slurmctld slurmd slurm-client munge failed"
}

start_munge() {
    [ -s /etc/munge/munge.key ] || mungekey --create --keyfile=/etc/munge/munge.key
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
    install -d -o munge -g munge -m 0755 /run/munge /var/log/munge /var/lib/munge
    if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
        runuser -u munge -- /usr/sbin/munged
    fi
    munge -n | unmunge >/dev/null
}

write_config() {
    getent hosts "$HOST" >/dev/null || echo "127.0.0.1 $HOST" >>/etc/hosts
    # Node *names* go into SLURM_JOB_NODELIST; safelaunch's master is the first of them.
    grep -q '# slurm-ci fake nodes' /etc/hosts ||
        echo "127.0.0.1 ${NODES[*]}  # slurm-ci fake nodes" >>/etc/hosts
    # GRES drops a GPU without a device file and refuses plain files: character devices
    # like /dev/null stand in for them.
    install -d "$FAKE_GPU_DIR"
    for i in $(seq 0 $((GPUS - 1))); do
        [ -c "$FAKE_GPU_DIR/gpu$i" ] || mknod "$FAKE_GPU_DIR/gpu$i" c 1 3
    done
    install -d /etc/slurm /var/spool/slurmctld /var/log/slurm
    for n in "${NODES[@]}"; do install -d "/var/spool/slurmd/$n"; done
    printf 'AutoDetect=off\nName=gpu File=%s/gpu[0-%d]\n' "$FAKE_GPU_DIR" $((GPUS - 1)) \
        >/etc/slurm/gres.conf
    cat >/etc/slurm/slurm.conf <<EOF
# Written by safelaunch's scripts/ci/slurm-cluster.sh: a CI cluster on loopback.
ClusterName=ci
SlurmctldHost=$HOST
SlurmUser=root
AuthType=auth/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=/var/log/slurm/jobcomp.log
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=3600
KillWait=30
SchedulerParameters=sched_interval=1
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd/%n
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd-%n.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd-%n.log
NodeName=n[1-${#NODES[@]}] NodeHostname=$HOST NodeAddr=127.0.0.1 Port=[17001-$((17000 + ${#NODES[@]}))] CPUs=$CPUS RealMemory=4000 Gres=gpu:$GPUS State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
}

pid_alive() { [ -s "$1" ] && [ -d "/proc/$(cat "$1")" ]; }  # kill -0 needs the owner

start() {
    [ "$(id -u)" -eq 0 ] || unavailable "not root (the daemons and apt need it)"
    if pid_alive /run/slurmctld.pid && nodes_idle; then
        say "already running: $(sinfo -h -N -o '%N:%t' | tr '\n' ' ')"
        return 0
    fi
    install_packages
    say "munge"
    start_munge
    say "config: /etc/slurm/slurm.conf (${#NODES[@]} nodes, $GPUS fake GPUs, $CPUS CPUs each)"
    write_config
    pid_alive /run/slurmctld.pid || slurmctld
    for n in "${NODES[@]}"; do pid_alive "/run/slurmd-$n.pid" || slurmd -N "$n"; done
    for _ in $(seq 1 120); do
        nodes_idle && break
        sleep 0.5
    done
    if ! nodes_idle; then
        sinfo -N -o '%N %t %E' >&2 || true
        tail -n 20 /var/log/slurm/*.log >&2 || true
        say "FAILED: the nodes did not become idle"
        exit 1
    fi
    timeout 60 srun -N "${#NODES[@]}" true
    say "ready: $(sinfo -h -N -o '%N:%t:%G' | tr '\n' ' ')(srun -N${#NODES[@]} works)"
}

stop_pidfile() {
    local file=$1 pid
    [ -s "$file" ] || return 0
    pid=$(cat "$file")
    if kill -0 "$pid" 2>/dev/null; then
        kill "$pid"
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    fi
    rm -f "$file"
}

stop() {
    if command -v scancel >/dev/null && pid_alive /run/slurmctld.pid; then
        scancel --full --user=root 2>/dev/null || true
    fi
    for n in "${NODES[@]}"; do stop_pidfile "/run/slurmd-$n.pid"; done
    stop_pidfile /run/slurmctld.pid
    stop_pidfile /run/munge/munged.pid
    say "stopped"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
status) pid_alive /run/slurmctld.pid && nodes_idle ;;
*)
    echo "usage: $0 start|stop|status" >&2
    exit 2
    ;;
esac
