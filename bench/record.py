#!/usr/bin/env python3
"""Cost of `gpufree record` at 1 Hz on an idle host (a benchmark, not a test).

Starts bench/population.py with N processes (default 2000, 20 fds and 4 extra
mappings each, 20 holding a test device directory), runs `gpufree record
--interval 1s` on the simulator (8 GPUs) for SECONDS_ (default 180), and
reads, after a 5 s warm-up, the recorder's CPU time (utime+stime from
/proc/PID/stat) and how many bytes its file grew over that window, scaled to
an hour. Issue 31's budget: at most 1 % of one core and 10 MiB of file per
hour while nothing changes. Run from the repository root after `cargo build
--release --workspace` (or GPUFREE_BIN_DIR=target/debug for a debug build).
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

N = int(os.environ.get("N", "2000"))
SECONDS = int(os.environ.get("SECONDS_", "180"))


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bindir = os.environ.get("GPUFREE_BIN_DIR")
    gpufree = os.path.join(bindir, "gpufree") if bindir else os.path.join(root, "target/release/gpufree")
    lib = subprocess.run([gpufree, "sim", "lib"], capture_output=True, text=True, check=True).stdout.strip()
    work = tempfile.mkdtemp(prefix="gpufree-recordbench-")
    dev = os.path.join(work, "dev")
    out = os.path.join(work, "timeline.jsonl")
    pop = subprocess.Popen([sys.executable, os.path.join(root, "bench/population.py"), dev,
                            f"n={N}", "fds=20", "maps=4", "holders=20"],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    rec = None
    try:
        assert pop.stdout.readline().strip() == "ready"
        state = os.path.join(work, "state.json")
        with open(state, "w") as f:
            json.dump({"devices": [{"name": "sim", "uuid": f"GPU-{i}", "pci_bus_id": f"00000000:{i + 1:02X}:00.0",
                                    "minor_number": i, "memory_total_bytes": 80 << 30} for i in range(8)]}, f)
        opts = ["--interval", "1s"] + os.environ.get("RECORD_ARGS", "").split()
        env = dict(os.environ, GPUFREE_SIM_STATE=state, GPUFREE_KMSG="off")
        rec = subprocess.Popen([gpufree, "record", "--out", out, "--dev-dir", dev,
                                "--nvml-lib", f"{lib}/libnvidia-ml.so.1"] + opts, env=env)
        time.sleep(5)
        nprocs = len([p for p in os.listdir("/proc") if p.isdigit()])
        t0, c0, b0 = time.time(), cpu_ticks(rec.pid), os.path.getsize(out)
        time.sleep(SECONDS)
        t1, c1, b1 = time.time(), cpu_ticks(rec.pid), os.path.getsize(out)
        hz = os.sysconf("SC_CLK_TCK")
        cpu = (c1 - c0) / hz
        per_hour = (b1 - b0) * 3600 / (t1 - t0)
        with open(out) as f:
            lines = f.read().splitlines()
        full = len(lines[0]) if lines else 0
        # The full snapshots of every --full-every (default 10m) come on
        # top of what a window shorter than it sees.
        full_every_s = float(os.environ.get("FULL_EVERY_S", "600"))
        fulls = full * 3600 / full_every_s
        print(f"{nprocs} processes; record {' '.join(opts)} for {t1 - t0:.0f} s used {cpu * 1000:.0f} ms CPU "
              f"= {100 * cpu / (t1 - t0):.2f} % of one core (target <= 1 %); "
              f"file grew {b1 - b0} bytes = {per_hour / 1024:.1f} KiB/hour of changes, plus "
              f"{fulls / 1024:.1f} KiB/hour of full snapshots ({full} bytes each) (target <= 10 MiB); "
              f"{len(lines)} lines in all")
    finally:
        if rec is not None:
            rec.send_signal(signal.SIGTERM)
            rec.wait()
        pop.stdin.close()
        pop.wait()
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
