#!/bin/bash
# Slurm HealthCheckProgram (slurm.conf: HealthCheckProgram=/etc/slurm/gpufree-healthcheck.sh,
# HealthCheckInterval=300). slurmd runs it as root with no PATH: it sets
# its own, /usr/local's and the system's bin directories, where gpufree and
# scontrol are found unless GPUFREE and SCONTROL name them. Slurm does not
# drain on a health check's exit code, so this script drains the node itself when `gpufree check` finds
# what would break the next job (leftover memory, a leak past its grace
# period, a stuck holder, NVML down), with gpufree's reason; and resumes a
# node it drained once the GPUs are fine again (never one drained by
# anyone else). An unknown verdict is logged, never drained on. Extra
# arguments go to `gpufree check` (e.g. --ignore leftover).
set -u
# slurmd gives it no PATH, and bash's own default ends in `.`: a fixed one.
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
GPUFREE=${GPUFREE:-gpufree}
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
    # A node already drained or down for another reason stays the
    # admin's: gpufree neither takes it over nor later resumes it.
    current=$("$SCONTROL" show node "$NODE")
    if echo "$current" | grep -Eq 'State=[^ ]*(DRAIN|DOWN|FAIL)' &&
        ! echo "$current" | grep -q 'Reason=gpufree:'; then
        echo "gpufree healthcheck: $NODE is already drained or down for another reason; not taking it over: $reason" >&2
    else
        "$SCONTROL" update nodename="$NODE" state=drain reason="$reason" &&
            mkdir -p "$(dirname "$MARK")" && : >"$MARK"
    fi
    ;;
*)
    # 2: a warning, 3: the check could not decide; neither drains nor
    # resumes.
    echo "gpufree healthcheck: neither drained nor resumed ($code): $reason" >&2
    ;;
esac
exit 0
