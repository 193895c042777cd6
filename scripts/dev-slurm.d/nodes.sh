# Sourced by scripts/dev-slurm: the multi-node topology. Each node is a Linux network namespace (named like the
# node) joined to a bridge in the root namespace by a veth pair, with its own address in one private /24 and,
# through `unshare --uts`, its own hostname; its slurmd runs inside (slurmd -N NODE), and so does every job
# step Slurm starts there. The file system stays shared, like a cluster's home and project file systems:
# the munge socket, slurm.conf and the run folders are the same on every node. slurmctld, slurmdbd, MariaDB
# and munged stay in the root namespace, which reaches the nodes through the bridge's address.
#
# Everything made here is listed in $STATE_DIR/net-made ("netns NAME", "link NAME", "hosts"), and `down`
# removes exactly what is listed there: nothing else on the machine is touched.
# shellcheck shell=bash

NET_MADE="$STATE_DIR/net-made"
HOSTS_BEGIN="# BEGIN guarded-sbatch dev-slurm nodes ($STATE_DIR; scripts/dev-slurm down removes them)"
HOSTS_END="# END guarded-sbatch dev-slurm nodes ($STATE_DIR)"

node_name() { echo "$NODE_PREFIX$1"; }
node_addr() { echo "$SUBNET.$((10 + $1))"; }
node_veth() { echo "gsbv${SUBNET##*.}n$1"; }  # host side; at most 15 characters
node_index() {  # NAME -> its number, or fails for a name that is not one of this cluster's nodes
    local i
    for ((i = 1; i <= NODE_COUNT; i++)); do [[ "$(node_name "$i")" == "$1" ]] && { echo "$i"; return 0; }; done
    return 1
}
all_node_names() { local i; for ((i = 1; i <= NODE_COUNT; i++)); do node_name "$i"; done; }

made() { grep -qxF "$1" "$NET_MADE" 2>/dev/null; }
note_made() { made "$1" || echo "$1" >>"$NET_MADE"; }

link_exists() { ip link show "$1" >/dev/null 2>&1; }
netns_exists() { [[ -e "/run/netns/$1" ]]; }

check_subnet_free() {  # an address of our /24 on a link we did not make: refuse rather than share it
    local owner
    owner=$(ip -o -4 addr show | awk -v net="$SUBNET." 'index($4, net) == 1 {print $2}' | grep -vxF "$BRIDGE" | head -n1 || true)
    [[ -z "$owner" ]] || die "$SUBNET.0/24 is already used by link $owner; pick another with DEV_SLURM_SUBNET=A.B.C"
}

ensure_network() {
    local i name veth
    touch "$NET_MADE"
    if ! link_exists "$BRIDGE"; then
        check_subnet_free
        ip link add "$BRIDGE" type bridge || die "could not create bridge $BRIDGE (needs root and CAP_NET_ADMIN)"
        note_made "link $BRIDGE"
    fi
    ip -4 addr show dev "$BRIDGE" | grep -qF " $BRIDGE_ADDR/" || ip addr add "$BRIDGE_ADDR/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    for ((i = 1; i <= NODE_COUNT; i++)); do
        name=$(node_name "$i") veth=$(node_veth "$i")
        if ! netns_exists "$name"; then
            ip netns add "$name" || die "could not create network namespace $name"
            note_made "netns $name"
        fi
        ip netns exec "$name" ip link set lo up
        if ! link_exists "$veth"; then
            ip link add "$veth" type veth peer name eth0 netns "$name" || die "could not create veth pair $veth"
            note_made "link $veth"
        fi
        ip link set "$veth" master "$BRIDGE"
        ip link set "$veth" up
        ip netns exec "$name" ip -4 addr show dev eth0 | grep -qF " $(node_addr "$i")/" \
            || ip netns exec "$name" ip addr add "$(node_addr "$i")/24" dev eth0
        ip netns exec "$name" ip link set eth0 up
    done
    ensure_hosts_entries
}

hosts_block() {
    local i
    echo "$HOSTS_BEGIN"
    for ((i = 1; i <= NODE_COUNT; i++)); do echo "$(node_addr "$i") $(node_name "$i")"; done
    # IPv4-mapped forms too: a dual-stack server (torch's c10d store) sees its peers as ::ffff:A.B.C.D, and
    # glibc's files backend does not map them back by itself (c10d then warns on every connection)
    for ((i = 1; i <= NODE_COUNT; i++)); do echo "::ffff:$(node_addr "$i") $(node_name "$i")"; done
    echo "$HOSTS_END"
}

# /etc/hosts without our block (written in place: it may be a bind mount that a rename would not replace)
hosts_without_block() { awk -v b="$HOSTS_BEGIN" -v e="$HOSTS_END" '$0 == b {skip = 1} !skip {print} $0 == e {skip = 0}' /etc/hosts; }

ensure_hosts_entries() {
    local want current
    want="$(hosts_without_block)"$'\n'"$(hosts_block)"
    current=$(cat /etc/hosts)
    [[ "$current" == "$want" ]] && return 0
    printf '%s\n' "$want" >/etc/hosts
    note_made hosts
}

remove_hosts_entries() {
    local rest
    made hosts || return 0
    rest=$(hosts_without_block)
    printf '%s\n' "$rest" >/etc/hosts
}

# node_pids NAME: every process whose network namespace is the node's (its slurmd, slurmstepd, job steps)
node_pids() { netns_exists "$1" && ip netns pids "$1" 2>/dev/null; }

kill_node_processes() {  # NAME: SIGKILL, as a power cut would; bounded wait
    local name=$1 pids
    pids=$(node_pids "$name" | tr '\n' ' ')
    [[ -n "${pids// /}" ]] || return 0
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    wait_until 10 "" node_is_empty "$name" || say "processes still left in $name: $(node_pids "$name" | tr '\n' ' ')"
}

node_is_empty() { [[ -z "$(node_pids "$1")" ]]; }

remove_network() {
    local line kind name
    [[ -f "$NET_MADE" ]] || return 0
    # each step tolerates what an interrupted earlier `down` already removed (it is run again to finish)
    while read -r kind name; do
        if [[ "$kind" == netns ]] && netns_exists "$name"; then kill_node_processes "$name"; fi
    done <"$NET_MADE"
    while read -r kind name; do
        if [[ "$kind" == netns ]] && netns_exists "$name"; then ip netns del "$name"; fi
    done <"$NET_MADE"
    # veth pairs vanish with their namespace, a moment after `ip netns del` (the kernel tears a namespace down
    # asynchronously): a link gone between the check and the delete is fine; the bridge last
    tac "$NET_MADE" | while read -r kind name; do
        [[ "$kind" == link ]] || continue
        link_exists "$name" || continue
        ip link del "$name" 2>/dev/null || ! link_exists "$name" || die "could not remove the link $name"
    done
    remove_hosts_entries
    rm -f "$NET_MADE"
    say "removed the nodes' namespaces, links and /etc/hosts entries"
}

# --- the nodes' slurmd ----------------------------------------------------------------------------

# in_node NAME CMD...: CMD in the node's network namespace and a UTS namespace of its own (for its hostname).
# nsenter, not `ip netns exec`: that one also remounts /sys, which hides /sys/fs/cgroup from slurmd.
in_node() { local name=$1; shift; nsenter --net="/run/netns/$name" -- unshare --uts -- "$@"; }

start_node_slurmd() {  # NAME
    local name=$1
    running_pid "slurmd-$name" >/dev/null && return 0
    install -d -m 0755 "${SLURMD_SPOOL//%n/$name}"
    rm -f "$(own_pidfile_of "slurmd-$name")"
    # shellcheck disable=SC2016
    in_node "$name" /bin/sh -c 'hostname "$1" && exec slurmd -N "$1" -f "$2"' sh "$name" "$SLURM_CONF" \
        </dev/null 9>&- >>"$LOG_DIR/slurmd-$name.start.log" 2>&1 || die "slurmd of $name failed to start; see $LOG_DIR/slurmd-$name.log"
    record "slurmd-$name"
}

start_node_slurmds() { local name; for name in $(all_node_names); do start_node_slurmd "$name"; done; }

stop_node_slurmds() { local name; for name in $(all_node_names); do stop_daemon "slurmd-$name"; done; }

node_slurmds_alive() { local name; for name in $(all_node_names); do running_pid "slurmd-$name" >/dev/null || return 1; done; }

# shell NAME [CMD...]: a shell (or CMD) on the node: its network namespace and its hostname
cmd_shell() {
    local name=${1:-}
    [[ -n "$name" ]] || die "usage: scripts/dev-slurm shell NODE [COMMAND...]; nodes: $(all_node_names | tr '\n' ' ')"
    node_index "$name" >/dev/null || die "no node $name in this cluster; nodes: $(all_node_names | tr '\n' ' ')"
    netns_exists "$name" || die "node $name has no namespace (is the cluster up? scripts/dev-slurm up)"
    shift
    (($# > 0)) || set -- "${SHELL:-/bin/bash}"
    # shellcheck disable=SC2016
    exec nsenter --net="/run/netns/$name" -- unshare --uts -- /bin/sh -c 'hostname "$0" && exec "$@"' "$name" "$@"
}

# node-fail NAME: the node loses power: every process in it is killed (slurmd, slurmstepd, the job's tasks).
# Slurm marks it DOWN after SlurmdTimeout; `node-up NAME` boots it again (ReturnToService=2 makes it usable).
cmd_node_fail() {
    local name=${1:-}
    node_index "$name" >/dev/null || die "usage: scripts/dev-slurm node-fail NODE; nodes: $(all_node_names | tr '\n' ' ')"
    kill_node_processes "$name"
    rm -f "$PID_DIR/slurmd-$name.pid"
    say "$name is down (every process in it killed); Slurm notices within ${SLURMD_TIMEOUT_S}s"
}

cmd_node_up() {
    local name=${1:-}
    node_index "$name" >/dev/null || die "usage: scripts/dev-slurm node-up NODE; nodes: $(all_node_names | tr '\n' ' ')"
    ensure_network
    start_node_slurmd "$name"
    timeout 10 scontrol update nodename="$name" state=resume >/dev/null 2>&1 || true
    wait_until "$NODE_WAIT_S" "$name is back" node_usable_named "$name" || die "$name not usable after ${NODE_WAIT_S}s; see $LOG_DIR/slurmd-$name.log"
}

node_usable_named() { [[ "$(timeout 10 sinfo -h -n "$1" -N -o %T 2>/dev/null | head -n1)" =~ ^(idle|mixed|allocated|completing)$ ]]; }
