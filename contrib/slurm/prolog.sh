#!/bin/bash
# Slurm Prolog (slurm.conf: Prolog=/etc/slurm/prolog.d/gpufree.sh).
#
# Runs as root on each node before a job, with no PATH. Refuses to start the
# job on GPUs that are not free: a non-zero exit drains the node and requeues
# the job (held), with the reason on stderr (slurmd's log). GPUs come from
# SLURM_JOB_GPUS (or CUDA_VISIBLE_DEVICES), global indices: the prolog runs
# outside the job's cgroup. gpufree's --gpu takes NVML indices, which match
# the /dev/nvidiaN numbering gres.conf uses on ordinary hosts. On a node
# whose GPUs are split by MIG, SLURM_JOB_GPUS numbers the MIG gres, not
# GPUs: give this script the job's MIG UUIDs instead (GPUFREE_JOB_GPUS,
# comma-separated `MIG-...`, which --gpu takes), or it waits on whole GPUs.
set -u
GPUFREE=${GPUFREE:-/usr/local/bin/gpufree}
WAIT=${GPUFREE_PROLOG_TIMEOUT:-30s}
gpus=${GPUFREE_JOB_GPUS:-${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-}}}
[ -n "$gpus" ] || exit 0 # a job without GPUs

args=()
IFS=',' read -r -a ids <<<"$gpus"
for g in "${ids[@]}"; do
    args+=(--gpu "$g")
done

if "$GPUFREE" wait "${args[@]}" --timeout "$WAIT" --quiet; then
    exit 0
fi
# The first finding of the diagnosis is the reason.
reason=$("$GPUFREE" why "${args[@]}" --no-color 2>&1 | sed -n '2{s/^ *[0-9]*\. *[a-z]* *//;p}')
echo "gpufree prolog: GPUs $gpus of job ${SLURM_JOB_ID:-?} not free after $WAIT: $reason" >&2
exit 1
