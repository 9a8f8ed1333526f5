#!/usr/bin/env python3
"""Whole-process time of `gpufree status --json` against gpustat and nvitop on
the same simulated 8-GPU incident (a benchmark, not a test).

Starts the incident (`gpufree demo --hold`), then runs each command ROUNDS
times, interleaved, through `gpufree sim exec`, and prints medians and ratios.
SPEC.md's target: gpufree at most 1/10 of each. Run from the repository root
after `cargo build --release --workspace`; needs `pip install gpustat nvitop`.
"""
import os
import re
import statistics
import subprocess
import time

ROUNDS = int(os.environ.get("ROUNDS", "15"))


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    g = os.path.join(root, "target/release/gpufree")
    demo = subprocess.Popen([g, "demo", "--hold", "--no-color"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        state = dev = None
        for line in demo.stdout:
            m = re.search(r"(/\S+/state\.json)", line)
            if m and state is None:
                state = m.group(1)
                dev = os.path.join(os.path.dirname(state), "dev")
            if line.startswith("Press Enter"):
                break
        sim = [g, "sim", "exec", "--state", state, "--"]
        cmds = {
            "gpufree status --json": sim + [g, "status", "--json", "--dev-dir", dev],
            "gpustat --json": sim + ["gpustat", "--json"],
            "nvitop -1": sim + ["nvitop", "-1"],
        }
        times = {k: [] for k in cmds}
        for _ in range(ROUNDS):
            for k, argv in cmds.items():
                t = time.perf_counter()
                subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
                times[k].append(time.perf_counter() - t)
        med = {k: statistics.median(v) * 1000 for k, v in times.items()}
        for k, v in med.items():
            print(f"{k:24} median {v:7.1f} ms")
        ours = med["gpufree status --json"]
        print(f"gpustat/gpufree {med['gpustat --json'] / ours:.1f}x, nvitop/gpufree {med['nvitop -1'] / ours:.1f}x (target >= 10x)")
    finally:
        demo.stdin.close()
        demo.wait()


if __name__ == "__main__":
    main()
