#!/usr/bin/env python3
"""CPU cost of `gpufree watch` at 1 Hz on a busy host (a benchmark, not a test).

Starts bench/population.py with N processes (default 2000, 20 fds and 4 extra
mappings each, 20 holding a test device directory), runs `gpufree watch
--interval 1s` in a tmux pseudo-terminal on the simulator for SECONDS
(default 60), and reads the watch process's own CPU time (utime+stime from
/proc/PID/stat) over that window, after a 5 s warm-up. SPEC.md's target: at
most 1 % of one core. Run from the repository root after `cargo build
--release --workspace`; needs tmux.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

N = int(os.environ.get("N", "2000"))
SECONDS = int(os.environ.get("SECONDS_", "60"))


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)


def mem_kib(pid):
    """VmRSS and VmHWM (peak RSS) of pid, in KiB."""
    got = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                got[k] = int(v.split()[0])
    return got["VmRSS"], got["VmHWM"]


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bindir = os.environ.get("GPUFREE_BIN_DIR")
    gpufree = os.path.join(bindir, "gpufree") if bindir else os.path.join(root, "target/release/gpufree")
    lib = subprocess.run([gpufree, "sim", "lib"], capture_output=True, text=True, check=True).stdout.strip()
    work = tempfile.mkdtemp(prefix="gpufree-watchbench-")
    dev = os.path.join(work, "dev")
    pop = subprocess.Popen([sys.executable, os.path.join(root, "bench/population.py"), dev,
                            f"n={N}", "fds=20", "maps=4", "holders=20"],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    sock = f"gpufree-bench-{os.getpid()}"
    try:
        assert pop.stdout.readline().strip() == "ready"
        state = os.path.join(work, "state.json")
        with open(state, "w") as f:
            json.dump({"devices": [{"name": "sim", "uuid": f"GPU-{i}", "pci_bus_id": f"00000000:{i + 1:02X}:00.0",
                                    "minor_number": i, "memory_total_bytes": 80 << 30} for i in range(8)]}, f)
        opts = "--interval 1s"
        if os.environ.get("SCAN"):
            opts += f" --scan {os.environ['SCAN']}"
        if os.environ.get("WATCH_ARGS"):
            opts += f" {os.environ['WATCH_ARGS']}"
        cmd = (f"exec env GPUFREE_SIM_STATE={state} {gpufree} watch {opts} --dev-dir {dev} "
               f"--nvml-lib {lib}/libnvidia-ml.so.1")
        subprocess.run(["tmux", "-L", sock, "new-session", "-d", "-x", "160", "-y", "50", cmd], check=True)
        pid = int(subprocess.run(["tmux", "-L", sock, "display", "-p", "#{pane_pid}"],
                                 capture_output=True, text=True, check=True).stdout)
        time.sleep(5)
        nprocs = len([p for p in os.listdir("/proc") if p.isdigit()])
        t0, c0 = time.time(), cpu_ticks(pid)
        time.sleep(SECONDS)
        t1, c1 = time.time(), cpu_ticks(pid)
        rss, hwm = mem_kib(pid)
        # The screen's title line says the holders and processes it saw.
        screen = subprocess.run(["tmux", "-L", sock, "capture-pane", "-p"], capture_output=True, text=True).stdout
        title = next((l.strip("┌─┐ ") for l in screen.splitlines() if "gpufree watch" in l), "(no title)")
        hz = os.sysconf("SC_CLK_TCK")
        cpu = (c1 - c0) / hz
        print(f"{nprocs} processes; watch {opts} at 1 Hz for {t1 - t0:.0f} s used {cpu * 1000:.0f} ms CPU "
              f"= {100 * cpu / (t1 - t0):.2f} % of one core (target <= 1 %); "
              f"RSS {rss / 1024:.1f} MiB, peak {hwm / 1024:.1f} MiB")
        print(f"screen: {title}")
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], stderr=subprocess.DEVNULL)
        pop.stdin.close()
        pop.wait()
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
