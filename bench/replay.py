#!/usr/bin/env python3
"""Opening a day's recording in `gpufree watch --replay` (a benchmark, not a test).

Records the bench population (bench/population.py, N processes, default 2000,
HOLDERS of them, default 20, holding a test device directory; 8 simulated GPUs) for a few
seconds with `gpufree record`, takes its first full snapshot, and makes a
day's recording of it at a 1 s interval: a full snapshot every 10 minutes
(record's default --full-every) and a change line every second between (a
GPU's memory moving: more than an idle host writes). Then it times opening
it: `watch --replay FILE` with stdin not a terminal reads, indexes and builds
the first moment, then stops with "not a terminal" before drawing, so its
wall time is the open. Issue 31's budget: <= 1 s. Run from the repository
root after `cargo build --release` (or GPUFREE_BIN_DIR=target/debug).
"""
import json
import os
import subprocess
import sys
import tempfile
import time

N = int(os.environ.get("N", "2000"))
HOLDERS = int(os.environ.get("HOLDERS", "20"))
RUNS = int(os.environ.get("RUNS", "5"))
DAY_S = 86_400
FULL_EVERY_S = 600


def first_full(gpufree, lib, work):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    dev = os.path.join(work, "dev")
    out = os.path.join(work, "timeline.jsonl")
    pop = subprocess.Popen([sys.executable, os.path.join(root, "bench/population.py"), dev,
                            f"n={N}", "fds=20", "maps=4", f"holders={HOLDERS}"],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert pop.stdout.readline().strip() == "ready"
        state = os.path.join(work, "state.json")
        with open(state, "w") as f:
            json.dump({"devices": [{"name": "sim", "uuid": f"GPU-{i}", "pci_bus_id": f"00000000:{i + 1:02X}:00.0",
                                    "minor_number": i, "memory_total_bytes": 80 << 30} for i in range(8)]}, f)
        env = dict(os.environ, GPUFREE_SIM_STATE=state, GPUFREE_KMSG="off")
        rec = subprocess.Popen([gpufree, "record", "--out", out, "--dev-dir", dev, "--interval", "1s",
                                "--nvml-lib", f"{lib}/libnvidia-ml.so.1"], env=env)
        deadline = time.time() + 60
        while time.time() < deadline and not (os.path.exists(out) and os.path.getsize(out) > 0):
            time.sleep(0.2)
        time.sleep(1)
        rec.terminate()
        rec.wait()
        with open(out) as f:
            return json.loads(f.readline())["full"]
    finally:
        pop.stdin.close()
        pop.wait()


def day(full, path):
    start = 1_780_000_000_000
    full_line = lambda t: json.dumps({"record": 1, "t": t, "full": full}, separators=(",", ":"))
    with open(path, "w") as f:
        for s in range(DAY_S):
            t = start + s * 1000
            if s % FULL_EVERY_S == 0:
                f.write(full_line(t) + "\n")
                continue
            used = (s % 97) << 20
            f.write(json.dumps({"record": 1, "t": t, "change": {
                "events": [{"event": "gpu-memory", "gpu": 0, "used_bytes": used}],
                "patch": {"object": {"fields": {"dev_dir": {"set": f"/dev/{s % 7}"}}}}}},
                separators=(",", ":")) + "\n")
        f.write(json.dumps({"record": 1, "t": start + DAY_S * 1000, "end": "stopped"}) + "\n")


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bindir = os.environ.get("GPUFREE_BIN_DIR")
    gpufree = os.path.join(bindir, "gpufree") if bindir else os.path.join(root, "target/release/gpufree")
    lib = subprocess.run([gpufree, "sim", "lib"], capture_output=True, text=True, check=True).stdout.strip()
    work = tempfile.mkdtemp(prefix="gpufree-replaybench-")
    try:
        full = first_full(gpufree, lib, work)
        path = os.path.join(work, "day.jsonl")
        day(full, path)
        size = os.path.getsize(path)
        times = []
        for _ in range(RUNS):
            t0 = time.monotonic()
            p = subprocess.run([gpufree, "watch", "--replay", path], stdin=subprocess.DEVNULL,
                               capture_output=True, text=True)
            times.append(time.monotonic() - t0)
            assert "terminal" in p.stderr, p.stderr
        times.sort()
        print(f"a day at 1 s: {DAY_S + 1} records, {DAY_S // FULL_EVERY_S} full snapshots of "
              f"{len(json.dumps(full))} bytes ({len(full['processes'])} holders), {size / 2**20:.1f} MiB; "
              f"watch --replay opened it in {times[len(times) // 2]:.3f} s (median of {RUNS}; "
              f"min {times[0]:.3f}, max {times[-1]:.3f}) (target <= 1 s)")
    finally:
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
