#!/bin/bash
# Slurm HealthCheckProgram (slurm.conf: HealthCheckProgram=/etc/slurm/gpufree-healthcheck.sh,
# HealthCheckInterval=300). Slurm does not drain on a health check's exit
# code, so this script drains the node itself when `gpufree check` finds
# what would break the next job (leftover memory, a leak past its grace
# period, a stuck holder, NVML down), with gpufree's reason; and resumes a
# node it drained once the GPUs are fine again (never one drained by
# anyone else). An unknown verdict is logged, never drained on. Extra
# arguments go to `gpufree check` (e.g. --ignore leftover).
set -u
GPUFREE=${GPUFREE:-/usr/local/bin/gpufree}
SCONTROL=${SCONTROL:-scontrol}
NODE=${GPUFREE_NODE:-$(hostname -s)}
MARK=${GPUFREE_DRAIN_MARK:-/run/gpufree/drained}

reason=$("$GPUFREE" check --format slurm "$@")
code=$?
case $code in
0)
    # Resume only a node this script drained, whose reason is still ours.
    if [ -e "$MARK" ]; then
        if "$SCONTROL" show node "$NODE" | grep -q 'Reason=gpufree:'; then
            "$SCONTROL" update nodename="$NODE" state=resume
        fi
        rm -f "$MARK"
    fi
    ;;
1)
    "$SCONTROL" update nodename="$NODE" state=drain reason="$reason" &&
        mkdir -p "$(dirname "$MARK")" && : >"$MARK"
    ;;
*)
    echo "gpufree healthcheck: not drained, the check could not decide: $reason" >&2
    ;;
esac
exit 0
