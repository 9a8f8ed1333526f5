#!/bin/bash
# Slurm UnkillableStepProgram (slurm.conf:
# UnkillableStepProgram=/usr/share/gpufree/slurm/unkillable.sh, with
# UnkillableStepTimeout). slurmstepd runs it as root, with no PATH and only
# SLURM_JOB_ID and SLURM_STEP_ID set, when a step's processes outlived
# SIGKILL for UnkillableStepTimeout seconds (a process in D state in the GPU
# driver, on a hung file system); common.sh, beside it, sets a PATH and
# drains. It records gpufree's diagnosis of the node's GPUs as the drain
# Reason, and logs the full check on stderr.
#
# slurmstepd drains the node itself right after this program returns, with
# `scontrol update`'s semantics: its Reason, `Kill task failed`, replaces
# whatever Reason the node had (Slurm 22.05, `stepd_drain_node`). So this
# script drains the node with gpufree's reason, then leaves a watcher in the
# background (at most GPUFREE_UNKILLABLE_WATCH seconds, default 60) that
# puts gpufree's reason back once Slurm's `Kill task failed` has replaced it.
# A node already drained or down for another reason (an admin's) is left
# alone, and so is a Reason anyone else sets meanwhile. When gpufree finds
# nothing wrong with the GPUs, Slurm's own Reason stands.
set -u
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "$(readlink -f "$0")")/common.sh" || exit 0
WATCH=${GPUFREE_UNKILLABLE_WATCH:-60}

# The whole node: slurmstepd does not say which GPUs the step had.
out=$("$GPUFREE" check --format slurm --grace 0 2>&1)
code=$?
reason=${out%%$'\n'*}
say "job ${SLURM_JOB_ID:-?} step ${SLURM_STEP_ID:-?} on $NODE ($code): $reason"
# Nothing wrong on the GPUs, or no verdict line: Slurm's reason stands.
case "$reason" in gpufree:*) [ "$code" -ne 0 ] || exit 0 ;; *) exit 0 ;; esac

# Not drained (an admin's drain, or the node unreadable): no watcher.
drain "$reason" || exit 0

# Put gpufree's reason back once slurmstepd's own has replaced it.
(
    end=$((SECONDS + WATCH))
    while [ "$SECONDS" -lt "$end" ]; do
        now=$("$SCONTROL" show node "$NODE" 2>/dev/null | sed -n 's/^ *Reason=//p')
        case "$now" in
        "Kill task failed"*)
            "$SCONTROL" update nodename="$NODE" state=drain reason="$reason"
            exit 0
            ;;
        gpufree:*) ;;
        *) exit 0 ;; # someone else's reason, or none: not ours to set
        esac
        sleep 0.5
    done
) </dev/null >/dev/null 2>&1 &
exit 0
