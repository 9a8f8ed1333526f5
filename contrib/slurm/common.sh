# shellcheck shell=bash
# Sourced by gpufree's Slurm scripts (installed beside them in
# /usr/share/gpufree/slurm/; each finds it next to itself through
# `readlink -f "$0"`): their prelude and the one way they drain the node.
#
# slurmd and slurmstepd run them as root with no PATH, and bash's own
# default ends in `.`: a fixed one, /usr/local's and the system's bin
# directories, where gpufree and scontrol are found unless GPUFREE and
# SCONTROL name them. NODE is this node (GPUFREE_NODE, else the name slurmd
# gives it, SLURMD_NODENAME, where it sets one, else the short host name:
# a node whose NodeName is not its host name is still found); SELF the script's name, which starts every line it logs.
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
GPUFREE=${GPUFREE:-gpufree}
SCONTROL=${SCONTROL:-scontrol}
NODE=${GPUFREE_NODE:-${SLURMD_NODENAME:-$(hostname -s)}}
SELF=$(basename "$(readlink -f "$0")" .sh)

# Logs its arguments on stderr (slurmd's log), headed by the script.
say() {
    echo "gpufree $SELF: $*" >&2
}

# Whether gpufree cannot be found (installed in ~/.cargo/bin, off this
# PATH): then its silence would read as GPUs not free with an empty
# reason, so the scripts drain with MISSING, the true one, instead.
gpufree_missing() {
    command -v "$GPUFREE" >/dev/null 2>&1 && return 1
    MISSING="gpufree: $GPUFREE not found; set GPUFREE to its path"
    say "$MISSING"
}

# Whether `scontrol show node`'s answer $1 is of a node drained,
# draining, down or failed.
drained() {
    grep -Eq 'State=[^ ]*(DRAIN|DOWN|FAIL)' <<<"$1"
}

# The Reason in `scontrol show node`'s answer $1, without the
# ` [user@time]` Slurm appends ("" where there is none).
reason_of() {
    sed -n 's/^ *Reason=\(.*\) \[[^]]*\]$/\1/p' <<<"$1"
}

# Drains this node with the reason $1; 0 once drained. A node already
# drained or down for a reason that is not gpufree's keeps it (an admin's
# is never replaced): 2. So does one drained by another of gpufree's
# scripts where $2 is given, the reason this script set itself before (the
# health check's mark): only that one is replaced, so that the health
# check never resumes the prolog's or the epilog's drain. Where the node
# cannot be read, or the update fails, gpufree drains nothing, since it
# cannot tell whose drain it would replace: 1, and Slurm's own handling
# stands (a failing prolog or epilog drains the node as `Prolog
# error`/`Epilog error`, slurmstepd drains it as `Kill task failed`; the
# health check tries again at its next run).
drain() {
    local current
    if ! current=$("$SCONTROL" show node "$NODE" 2>&1); then
        say "cannot read node $NODE, not drained by gpufree: $current"
        return 1
    fi
    if drained "$current" && ! grep -q 'Reason=gpufree:' <<<"$current"; then
        say "$NODE is already drained or down for another reason; keeping it, not taking it over: $1"
        return 2
    fi
    if [ $# -ge 2 ] && drained "$current" && [ "$(reason_of "$current")" != "$2" ]; then
        say "$NODE is already drained by another of gpufree's scripts; keeping that: $1"
        return 2
    fi
    "$SCONTROL" update nodename="$NODE" state=drain reason="$1" || return 1
}
