#!/bin/bash
# Slurm Prolog (slurm.conf: Prolog=/etc/slurm/prolog.d/gpufree.sh).
#
# Runs as root on each node before a job, with no PATH (it sets its own,
# /usr/local's and the system's bin directories, where gpufree and scontrol
# are found unless GPUFREE and SCONTROL name them). Waits (up to
# GPUFREE_PROLOG_TIMEOUT) for the job's GPUs to be free and lets the job
# start once they are. Past the timeout it refuses to start the job on GPUs
# that are not free: it drains the node itself with gpufree's one-line
# reason (`scontrol update ... state=drain reason="gpufree: ..."`, as NHC
# does) and exits non-zero, on which Slurm requeues the job held.
# slurmctld's own Reason, `Prolog error`, is set only on a node not draining
# yet (Slurm 22.05), so the Reason an operator reads (`sinfo -R`) is
# gpufree's; a node already drained or down for another reason keeps that
# reason (an admin's is never replaced). The full diagnosis goes to slurmd's
# log. GPUs come from SLURM_JOB_GPUS (or CUDA_VISIBLE_DEVICES), global
# indices: the prolog runs outside the job's cgroup. gpufree's --gpu takes
# NVML indices, which match the /dev/nvidiaN numbering gres.conf uses on
# ordinary hosts. On a node whose GPUs are split by MIG, SLURM_JOB_GPUS
# numbers the MIG gres, not GPUs: give this script the job's MIG UUIDs
# instead (GPUFREE_JOB_GPUS, comma-separated `MIG-...`, which --gpu takes),
# or it waits on whole GPUs.
set -u
# slurmd gives it no PATH, and bash's own default ends in `.`: a fixed one.
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
GPUFREE=${GPUFREE:-gpufree}
SCONTROL=${SCONTROL:-scontrol}
NODE=${GPUFREE_NODE:-$(hostname -s)}
WAIT=${GPUFREE_PROLOG_TIMEOUT:-30s}
gpus=${GPUFREE_JOB_GPUS:-${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-}}}
[ -n "$gpus" ] || exit 0 # a job without GPUs

# Drains this node with the reason $1, unless it is already drained or down
# for a reason that is not gpufree's: that one stays.
drain() {
    local current
    if ! current=$("$SCONTROL" show node "$NODE" 2>&1); then
        echo "gpufree prolog: cannot read node $NODE, not drained by gpufree: $current" >&2
        return 1
    fi
    if echo "$current" | grep -Eq 'State=[^ ]*(DRAIN|DOWN|FAIL)' &&
        ! echo "$current" | grep -q 'Reason=gpufree:'; then
        echo "gpufree prolog: $NODE is already drained or down for another reason; keeping it" >&2
        return 0
    fi
    "$SCONTROL" update nodename="$NODE" state=drain reason="$1"
}

args=()
IFS=',' read -r -a ids <<<"$gpus"
for g in "${ids[@]}"; do
    args+=(--gpu "$g")
done

if "$GPUFREE" wait "${args[@]}" --timeout "$WAIT" --quiet; then
    exit 0
fi
# The first finding of the diagnosis is the reason: in full in slurmd's
# log, cut to 100 bytes as the node's Reason.
first=$("$GPUFREE" why "${args[@]}" --no-color 2>&1 | sed -n '2{s/^ *[0-9]*\. *[a-z]* *//;p}')
echo "gpufree prolog: GPUs $gpus of job ${SLURM_JOB_ID:-?} not free after $WAIT: $first" >&2
reason="gpufree: GPUs $gpus not free after $WAIT: $first"
[ "${#reason}" -le 100 ] || reason="${reason:0:97}..."
drain "$reason"
exit 1
