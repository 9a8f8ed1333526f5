#!/bin/bash
# Slurm Epilog (slurm.conf: Epilog=/etc/slurm/epilog.d/gpufree.sh).
#
# Runs as root on each node after a job, with no PATH (it sets its own,
# /usr/local's and the system's bin directories, where gpufree and scontrol
# are found unless GPUFREE and SCONTROL name them). Frees the job's GPUs of
# what the job left behind (processes that escaped its cgroup, renamed
# workers, DataLoader children), by identity, and confirms the memory came
# back. When the GPUs stay busy (a process stuck in the driver, memory that
# is not released), it drains the node itself with gpufree's one-line reason
# (`scontrol update ... state=drain reason="gpufree: ..."`, as NHC does) and
# exits non-zero, instead of giving the next job a full GPU. slurmctld
# drains a node on an epilog's failure with the Reason `Epilog error` only
# where the node is not draining yet (Slurm 22.05, `_drain_node`), so the
# Reason an operator reads (`sinfo -R`) is gpufree's. A node already drained
# or down for another reason keeps that reason (an admin's is never
# replaced).
#
# On a node whose GPUs are split by MIG, other jobs run on the same GPU and
# SLURM_JOB_GPUS numbers the MIG gres, not GPUs: give the job's MIG UUIDs
# in GPUFREE_JOB_GPUS (comma-separated `MIG-...`). Without them the epilog
# signals nothing on such a GPU and drains the node, saying why.
set -u
# slurmd gives it no PATH, and bash's own default ends in `.`: a fixed one.
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
GPUFREE=${GPUFREE:-gpufree}
SCONTROL=${SCONTROL:-scontrol}
NODE=${GPUFREE_NODE:-$(hostname -s)}
GRACE=${GPUFREE_EPILOG_GRACE:-10s}
TIMEOUT=${GPUFREE_EPILOG_TIMEOUT:-60s}
gpus=${GPUFREE_JOB_GPUS:-${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-}}}
[ -n "$gpus" ] || exit 0

# Drains this node with the reason $1, unless it is already drained or down
# for a reason that is not gpufree's: that one stays.
drain() {
    local current
    if ! current=$("$SCONTROL" show node "$NODE" 2>&1); then
        echo "gpufree epilog: cannot read node $NODE, not drained by gpufree: $current" >&2
        return 1
    fi
    if echo "$current" | grep -Eq 'State=[^ ]*(DRAIN|DOWN|FAIL)' &&
        ! echo "$current" | grep -q 'Reason=gpufree:'; then
        echo "gpufree epilog: $NODE is already drained or down for another reason; keeping it" >&2
        return 0
    fi
    "$SCONTROL" update nodename="$NODE" state=drain reason="$1"
}

args=()
IFS=',' read -r -a ids <<<"$gpus"
for g in "${ids[@]}"; do
    args+=(--gpu "$g")
    case "$g" in MIG-*) continue ;; esac
    # A whole GPU split by MIG is other jobs' too: never freed whole here.
    if "$GPUFREE" status --json --gpu "$g" 2>/dev/null | grep -Eq '"mig_mode": ?true'; then
        echo "gpufree epilog: GPU $g is split by MIG and shared with other jobs; SLURM_JOB_GPUS numbers MIG gres, not GPUs: nothing signalled (set GPUFREE_JOB_GPUS to job ${SLURM_JOB_ID:-?}'s MIG UUIDs)" >&2
        drain "gpufree: GPU $g is split by MIG: set GPUFREE_JOB_GPUS to the job's MIG UUIDs"
        exit 1
    fi
done

if "$GPUFREE" kill "${args[@]}" --yes --grace "$GRACE" --timeout "$TIMEOUT" --quiet; then
    exit 0
fi
# The first finding of the diagnosis is the reason: in full in slurmd's
# log, cut to 100 bytes as the node's Reason.
first=$("$GPUFREE" why "${args[@]}" --no-color 2>&1 | sed -n '2{s/^ *[0-9]*\. *[a-z]* *//;p}')
echo "gpufree epilog: GPUs $gpus still busy after job ${SLURM_JOB_ID:-?}: $first" >&2
reason="gpufree: job ${SLURM_JOB_ID:-?} left GPUs $gpus busy: $first"
[ "${#reason}" -le 100 ] || reason="${reason:0:97}..."
drain "$reason"
exit 1
