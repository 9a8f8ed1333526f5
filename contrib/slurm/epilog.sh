#!/bin/bash
# Slurm Epilog (slurm.conf: Epilog=/etc/slurm/epilog.d/gpufree.sh).
#
# Runs as root on each node after a job, with no PATH. Frees the job's GPUs of
# what the job left behind (processes that escaped its cgroup, renamed
# workers, DataLoader children), by identity, and confirms the memory came
# back. When the GPUs stay busy (a process stuck in the driver, memory that
# is not released), it exits non-zero so that Slurm drains the node, with the
# reason on stderr, instead of giving the next job a full GPU.
set -u
GPUFREE=${GPUFREE:-/usr/local/bin/gpufree}
GRACE=${GPUFREE_EPILOG_GRACE:-10s}
TIMEOUT=${GPUFREE_EPILOG_TIMEOUT:-60s}
gpus=${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-}}
[ -n "$gpus" ] || exit 0

args=()
IFS=',' read -r -a ids <<<"$gpus"
for g in "${ids[@]}"; do
    args+=(--gpu "$g")
done

if "$GPUFREE" kill "${args[@]}" --yes --grace "$GRACE" --timeout "$TIMEOUT" --quiet; then
    exit 0
fi
reason=$("$GPUFREE" why "${args[@]}" --no-color 2>&1 | sed -n '2{s/^ *[0-9]*\. *[a-z]* *//;p}')
echo "gpufree epilog: GPUs $gpus still busy after job ${SLURM_JOB_ID:-?}: $reason" >&2
exit 1
