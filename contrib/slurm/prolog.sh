#!/bin/bash
# Slurm Prolog (slurm.conf: Prolog=/usr/share/gpufree/slurm/prolog.sh).
#
# Runs as root on each node before a job, with no PATH (common.sh, beside
# it, sets one and drains). Waits (up to GPUFREE_PROLOG_TIMEOUT) for the
# job's GPUs to be free and lets the job start once they are. Past the
# timeout it refuses to start the job on GPUs that are not free: it drains
# the node itself with `gpufree why --format slurm`'s one-line reason
# (`scontrol update ... state=drain reason="gpufree: ..."`, as NHC does;
# the job and its wait go to slurmd's log) and exits non-zero, on which
# Slurm requeues the job held.
# slurmctld's own Reason, `Prolog error`, is set only on a node not
# draining yet (Slurm 22.05), so the Reason an operator reads (`sinfo -R`)
# is gpufree's; a node already drained or down for another reason keeps
# that reason (an admin's is never replaced). GPUs come from
# SLURM_JOB_GPUS (or CUDA_VISIBLE_DEVICES), global indices: the prolog
# runs outside the job's cgroup. gpufree's --gpu takes NVML indices, which
# match the /dev/nvidiaN numbering gres.conf uses on ordinary hosts. On a
# node whose GPUs are split by MIG, SLURM_JOB_GPUS numbers the MIG gres,
# not GPUs: give this script the job's MIG UUIDs instead
# (GPUFREE_JOB_GPUS, comma-separated `MIG-...`, which --gpu takes), or it
# waits on whole GPUs.
set -u
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "$(readlink -f "$0")")/common.sh" || exit 1
WAIT=${GPUFREE_PROLOG_TIMEOUT:-30s}
if gpufree_missing; then
    drain "$MISSING"
    exit 1
fi
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
# The node's Reason is gpufree's line on the first finding (at most 100
# bytes, what `sinfo -R` shows whole); slurmd's log has it with the job.
reason=$("$GPUFREE" why --format slurm "${args[@]}")
say "GPUs $gpus of job ${SLURM_JOB_ID:-?} not free after $WAIT: $reason"
drain "${reason:-gpufree: GPUs not free after $WAIT}"
exit 1
