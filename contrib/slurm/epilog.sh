#!/bin/bash
# Slurm Epilog (slurm.conf: Epilog=/etc/slurm/epilog.d/gpufree.sh).
#
# Runs as root on each node after a job, with no PATH. Frees the job's GPUs of
# what the job left behind (processes that escaped its cgroup, renamed
# workers, DataLoader children), by identity, and confirms the memory came
# back. When the GPUs stay busy (a process stuck in the driver, memory that
# is not released), it exits non-zero so that Slurm drains the node, with the
# reason on stderr, instead of giving the next job a full GPU.
#
# On a node whose GPUs are split by MIG, other jobs run on the same GPU and
# SLURM_JOB_GPUS numbers the MIG gres, not GPUs: give the job's MIG UUIDs
# in GPUFREE_JOB_GPUS (comma-separated `MIG-...`). Without them the epilog
# signals nothing on such a GPU and drains the node, saying why.
set -u
GPUFREE=${GPUFREE:-/usr/local/bin/gpufree}
GRACE=${GPUFREE_EPILOG_GRACE:-10s}
TIMEOUT=${GPUFREE_EPILOG_TIMEOUT:-60s}
gpus=${GPUFREE_JOB_GPUS:-${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-}}}
[ -n "$gpus" ] || exit 0

args=()
IFS=',' read -r -a ids <<<"$gpus"
for g in "${ids[@]}"; do
    args+=(--gpu "$g")
    case "$g" in MIG-*) continue ;; esac
    # A whole GPU split by MIG is other jobs' too: never freed whole here.
    if "$GPUFREE" status --json --gpu "$g" 2>/dev/null | grep -Eq '"mig_mode": ?true'; then
        echo "gpufree epilog: GPU $g is split by MIG and shared with other jobs; SLURM_JOB_GPUS numbers MIG gres, not GPUs: nothing signalled (set GPUFREE_JOB_GPUS to job ${SLURM_JOB_ID:-?}'s MIG UUIDs)" >&2
        exit 1
    fi
done

if "$GPUFREE" kill "${args[@]}" --yes --grace "$GRACE" --timeout "$TIMEOUT" --quiet; then
    exit 0
fi
reason=$("$GPUFREE" why "${args[@]}" --no-color 2>&1 | sed -n '2{s/^ *[0-9]*\. *[a-z]* *//;p}')
echo "gpufree epilog: GPUs $gpus still busy after job ${SLURM_JOB_ID:-?}: $reason" >&2
exit 1
