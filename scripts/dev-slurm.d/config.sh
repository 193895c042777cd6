# Sourced by scripts/dev-slurm: renders slurm.conf / slurmdbd.conf and installs site-plugin files.
# Uses the variables and helpers (say, die, own_pidfile_of, STATE_DIR, LOG_DIR, ...) defined there.
# shellcheck shell=bash

# --- configuration ----------------------------------------------------------------------------------

real_memory_mb() {
    local total headroom
    total=$(($(awk '/^MemTotal:/ {print $2}' /proc/meminfo) / 1024))  # not `free`: procps may be absent
    headroom=$((total / 10 > 1024 ? total / 10 : 1024))
    echo $((total - headroom > 1024 ? total - headroom : total / 2))
}

extra_conf_lines() {  # the site-plugin lines: from $DEV_SLURM_EXTRA_CONF, else the remembered copy
    if [[ -v DEV_SLURM_EXTRA_CONF ]]; then
        if [[ -n "$DEV_SLURM_EXTRA_CONF" ]]; then
            [[ -f "$DEV_SLURM_EXTRA_CONF" ]] || die "DEV_SLURM_EXTRA_CONF=$DEV_SLURM_EXTRA_CONF does not exist; give a file of slurm.conf lines"
            cp "$DEV_SLURM_EXTRA_CONF" "$STATE_DIR/extra.conf"
        else
            rm -f "$STATE_DIR/extra.conf"
        fi
    fi
    [[ -f "$STATE_DIR/extra.conf" ]] && cat "$STATE_DIR/extra.conf"
    return 0
}

render_slurm_conf() {  # MODE (accounting|none) -> slurm.conf text on stdout, for $TOPOLOGY (multi|single)
    local mode=$1 storage ctld_host slurmd_log=slurmd.log
    if [[ "$mode" == accounting ]]; then
        # sacct in a job (a sidecar on a node) must reach slurmdbd too: from a node's namespace that is the bridge
        storage="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$([[ "$TOPOLOGY" == multi ]] && echo "$BRIDGE_ADDR" || echo localhost)"
    else
        storage="AccountingStorageType=accounting_storage/none"
    fi
    if [[ "$TOPOLOGY" == multi ]]; then
        # slurmctld stays in the root namespace; every node reaches it on the bridge's address
        ctld_host="$(hostname)($BRIDGE_ADDR)"
        slurmd_log=slurmd-%n.log
    else
        ctld_host=localhost
    fi
    cat <<EOF
# Written by guarded-sbatch scripts/dev-slurm (mode: $mode, topology: $TOPOLOGY). Edits are overwritten by the next \`up\`.
ClusterName=$CLUSTER_NAME
SlurmctldHost=$ctld_host
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=500
SlurmdParameters=config_overrides
ReturnToService=2
StateSaveLocation=$CTLD_SPOOL
SlurmdSpoolDir=$SLURMD_SPOOL
SlurmctldPidFile=$(own_pidfile_of slurmctld)
SlurmdPidFile=$(own_pidfile_of slurmd)
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/$slurmd_log
SlurmctldDebug=info
SlurmdDebug=info
$storage
JobAcctGatherType=jobacct_gather/linux
JobCompType=jobcomp/none
MinJobAge=$MIN_JOB_AGE_S
JobRequeue=1
MailProg=/bin/true
MessageTimeout=10
# a loaded 2-core machine can take more than the default 60 s to end a cancelled step: draining the node for it
# ("Kill task failed") would fail every test after it
UnkillableStepTimeout=180
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
EOF
    if [[ "$TOPOLOGY" == multi ]]; then
        render_multi_nodes
    else
        cat <<EOF
# more CPUs than the machine has (config_overrides): 20+ small jobs and their sidecars run side by side
NodeName=localhost NodeHostname=$(hostname) CPUs=${DEV_SLURM_CPUS:-32} RealMemory=$(real_memory_mb) State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
    fi
    extra_conf_lines
}

# Multi-node: each node declares this machine's own cores and an equal share of its memory; the partitions
# oversubscribe the cores (OverSubscribe=FORCE) so that many small test jobs still run side by side. Compute
# nodes weigh less, so jobs go there first; the service nodes take the sidecars and per-user monitors of a
# config that names the service partition, and ordinary jobs only when the compute nodes are full.
render_multi_nodes() {
    local i name weight cpus mem compute=() service=()
    cpus=$(nproc)
    mem=$(($(real_memory_mb) / NODE_COUNT))
    echo "# a node that stops answering is DOWN after SlurmdTimeout (default 300 s); its jobs end NODE_FAIL or requeue"
    echo "SlurmdTimeout=$SLURMD_TIMEOUT_S"
    for ((i = 1; i <= NODE_COUNT; i++)); do
        name=$(node_name "$i")
        if ((i <= COMPUTE_COUNT)); then weight=1; compute+=("$name"); else weight=10; service+=("$name"); fi
        echo "NodeName=$name NodeHostname=$name NodeAddr=$(node_addr "$i") CPUs=$cpus RealMemory=$mem Weight=$weight State=UNKNOWN"
    done
    local share="MaxTime=INFINITE State=UP OverSubscribe=FORCE:$OVERSUBSCRIBE"
    echo "PartitionName=debug Nodes=$(IFS=,; echo "${compute[*]},${service[*]}") Default=YES $share"
    echo "PartitionName=compute Nodes=$(IFS=,; echo "${compute[*]}") $share"
    echo "PartitionName=service Nodes=$(IFS=,; echo "${service[*]}") $share"
}

render_dbd_conf() {
    cat <<EOF
# Written by guarded-sbatch scripts/dev-slurm.
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
LogFile=$LOG_DIR/slurmdbd.log
PidFile=$(own_pidfile_of slurmdbd)
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=$DB_USER
StoragePass=$DB_PASS
StorageLoc=$DB_NAME
EOF
}

# write_if_changed FILE MODE < text: returns 0 when the file changed.
write_if_changed() {
    local file=$1 perm=$2 tmp
    tmp=$(mktemp "$file.XXXXXX")
    cat >"$tmp"
    chmod "$perm" "$tmp"
    if [[ -f "$file" ]] && cmp -s "$tmp" "$file"; then
        rm -f "$tmp"
        return 1
    fi
    mv -f "$tmp" "$file"
    return 0
}

copy_lua_files() {  # returns 0 when some lua file changed
    local changed=1 f
    [[ -n "${DEV_SLURM_LUA_DIR:-}" ]] || return 1
    [[ -d "$DEV_SLURM_LUA_DIR" ]] || die "DEV_SLURM_LUA_DIR=$DEV_SLURM_LUA_DIR is not a folder; give the folder holding cli_filter.lua / job_submit.lua"
    for f in "$DEV_SLURM_LUA_DIR"/*.lua; do
        [[ -f "$f" ]] || continue
        if write_if_changed "$CONF_DIR/$(basename "$f")" 644 <"$f"; then changed=0; fi
    done
    return $changed
}
