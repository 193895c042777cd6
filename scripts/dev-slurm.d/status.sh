# Sourced by scripts/dev-slurm: `status` (daemons, mode, topology and every node; exit 0 only when all is usable).
# shellcheck shell=bash

cmd_status() {
    local name pid healthy=0 mode daemons=(munged mariadb slurmdbd slurmctld)
    mode=$(current_mode)
    echo "mode: $mode"
    echo "topology: $TOPOLOGY (cluster $CLUSTER_NAME, $SLURM_CONF)"
    if [[ "$TOPOLOGY" == multi ]]; then
        mapfile -t -O 4 daemons < <(all_node_names | sed 's/^/slurmd-/')
    else
        daemons+=(slurmd)
    fi
    for name in "${daemons[@]}"; do
        if pid=$(recorded_pid "$name"); then echo "$name: running (pid $pid, started by dev-slurm)"
        elif pid=$(running_pid "$name"); then echo "$name: running (pid $pid, not started by dev-slurm)"
        else echo "$name: stopped"; fi
    done
    local state nodes
    # one query: each takes MessageTimeout when slurmctld is down
    nodes=$(timeout 10 sinfo -h -N -o '%N %T %P' 2>/dev/null | awk '{st[$1]=$2; p[$1]=p[$1] (p[$1] ? "," : "") $3} END {for (n in st) print n, st[n], p[n]}' | sort -V || true)
    if [[ "$TOPOLOGY" == multi ]]; then
        local i
        for ((i = 1; i <= NODE_COUNT; i++)); do
            name=$(node_name "$i")
            state=$(awk -v n="$name" '$1 == n {print $2 " (partitions " $3 ")"}' <<<"$nodes")
            echo "node $name: ${state:-unknown} address $(node_addr "$i") namespace $(netns_exists "$name" && echo "$name" || echo missing)"
            [[ "${state%% *}" =~ ^(idle|mixed|allocated|completing)$ ]] || healthy=1
        done
    else
        state=$(awk '{print $2; exit}' <<<"$nodes")
        echo "node: ${state:-unknown}"
        [[ "$state" =~ ^(idle|mixed|allocated|completing)$ ]] || healthy=1
    fi
    if [[ "$mode" == accounting ]] && ! dbd_works >/dev/null 2>&1; then
        echo "accounting: slurmdbd not answering"
        healthy=1
    fi
    echo "usable: $([[ $healthy == 0 ]] && echo yes || echo no)"
    return $healthy
}
