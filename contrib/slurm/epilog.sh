#!/bin/bash
# Slurm Epilog (slurm.conf: Epilog=/usr/share/gpufree/slurm/epilog.sh).
#
# Runs as root on each node after a job, with no PATH (common.sh, beside
# it, sets one and drains). Frees the job's GPUs of what the job left
# behind (processes that escaped its cgroup, renamed workers, DataLoader
# children), by identity, and confirms the memory came back. When the GPUs
# stay busy (a process stuck in the driver, memory that is not released),
# it drains the node itself with `gpufree why --format slurm`'s one-line
# reason (`scontrol update ... state=drain reason="gpufree: ..."`, as NHC
# does; the job and its GPUs go to slurmd's log) and exits non-zero, instead of giving the next job a full GPU. slurmctld
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
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "$(readlink -f "$0")")/common.sh" || exit 1
GRACE=${GPUFREE_EPILOG_GRACE:-10s}
TIMEOUT=${GPUFREE_EPILOG_TIMEOUT:-60s}
if gpufree_missing; then
    drain "$MISSING"
    exit 1
fi
gpus=${GPUFREE_JOB_GPUS:-${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-}}}
[ -n "$gpus" ] || exit 0

args=()
IFS=',' read -r -a ids <<<"$gpus"
for g in "${ids[@]}"; do
    args+=(--gpu "$g")
    case "$g" in MIG-*) continue ;; esac
    # A whole GPU split by MIG is other jobs' too: never freed whole here.
    if "$GPUFREE" status --json --gpu "$g" 2>/dev/null | grep -Eq '"mig_mode": ?true'; then
        say "GPU $g is split by MIG and shared with other jobs; SLURM_JOB_GPUS numbers MIG gres, not GPUs: nothing signalled (set GPUFREE_JOB_GPUS to job ${SLURM_JOB_ID:-?}'s MIG UUIDs)"
        drain "gpufree: GPU $g is split by MIG: set GPUFREE_JOB_GPUS to the job's MIG UUIDs"
        exit 1
    fi
done

if "$GPUFREE" kill "${args[@]}" --yes --grace "$GRACE" --timeout "$TIMEOUT" --quiet; then
    exit 0
fi
# The node's Reason is gpufree's line on the first finding (at most 100
# bytes, what `sinfo -R` shows whole); slurmd's log has it with the job.
reason=$("$GPUFREE" why --format slurm "${args[@]}")
say "GPUs $gpus still busy after job ${SLURM_JOB_ID:-?}: $reason"
drain "${reason:-gpufree: GPUs still busy after a job}"
exit 1
