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

render_slurm_conf() {  # MODE (accounting|none) -> slurm.conf text on stdout
    local mode=$1 storage
    if [[ "$mode" == accounting ]]; then
        storage="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost"
    else
        storage="AccountingStorageType=accounting_storage/none"
    fi
    cat <<EOF
# Written by guarded-sbatch scripts/dev-slurm (mode: $mode). Edits are overwritten by the next \`up\`.
ClusterName=$CLUSTER_NAME
SlurmctldHost=localhost
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
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=$(own_pidfile_of slurmctld)
SlurmdPidFile=$(own_pidfile_of slurmd)
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
$storage
JobAcctGatherType=jobacct_gather/linux
JobCompType=jobcomp/none
MinJobAge=$MIN_JOB_AGE_S
JobRequeue=1
MailProg=/bin/true
MessageTimeout=10
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
# more CPUs than the machine has (config_overrides): 20+ small jobs and their sidecars run side by side
NodeName=localhost NodeHostname=$(hostname) CPUs=${DEV_SLURM_CPUS:-32} RealMemory=$(real_memory_mb) State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
    extra_conf_lines
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
