#!/bin/bash
# Slurm HealthCheckProgram (slurm.conf:
# HealthCheckProgram=/usr/share/gpufree/slurm/healthcheck.sh,
# HealthCheckInterval=300). slurmd runs it as root with no PATH (common.sh,
# beside it, sets one and drains). Slurm does not drain on a health
# check's exit code, so this script drains the node itself when `gpufree
# check` finds what would break the next job (leftover memory, a leak past
# its grace period, a stuck holder, NVML down), with gpufree's reason; and
# resumes a node it drained once the GPUs are fine again (never one
# drained by anyone else). An unknown verdict is logged, never drained on.
# Extra arguments go to `gpufree check` (e.g. --ignore leftover).
set -u
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "$(readlink -f "$0")")/common.sh" || exit 1
MARK=${GPUFREE_DRAIN_MARK:-/run/gpufree/drained}
# Without gpufree the check cannot decide: logged, like an unknown verdict.
gpufree_missing && exit 0

reason=$("$GPUFREE" check --format slurm "$@")
code=$?
case $code in
0)
    # Resume only a node this script drained, whose Reason is still the
    # one it set (the mark holds it): not one the prolog, the epilog or
    # the unkillable-step program drained since, whose reasons also start
    # `gpufree:`. Where the node cannot be read, the next run decides.
    if [ -e "$MARK" ] && current=$("$SCONTROL" show node "$NODE" 2>&1); then
        now=$(reason_of "$current")
        if [ -n "$now" ] && [ "$now" = "$(cat "$MARK")" ]; then
            "$SCONTROL" update nodename="$NODE" state=resume || exit 0
        fi
        rm -f "$MARK"
    fi
    ;;
1)
    # A node already drained or down for another reason keeps it and is
    # never resumed here: an admin's, and the prolog's, epilog's or
    # unkillable program's (their reasons start `gpufree:` too); only this
    # script's own drain, the mark's, is replaced.
    drain "$reason" "$(cat "$MARK" 2>/dev/null)" &&
        mkdir -p "$(dirname "$MARK")" && printf '%s\n' "$reason" >"$MARK"
    ;;
*)
    # 2: a warning, 3: the check could not decide; neither drains nor
    # resumes.
    say "neither drained nor resumed ($code): $reason"
    ;;
esac
exit 0
