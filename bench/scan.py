#!/usr/bin/env python3
"""The scan benchmark: gpufree against fuser -v, lsof and a minimal loop, in one run.

Starts bench/population.py (700 processes, ~64k fds, ~10k extra mappings, 20
holding a test device directory by fd and mmap), then times, interleaved,
ROUNDS runs of each on the same nodes:

  gpufree   gpufree status --json --dev-dir DEV (no NVML): the whole command,
            with the /proc walk (--scan procfs)
  bpf       the same with the in-kernel walk (--scan bpf): load, verify, walk
  floor     target/release/examples/floor DEV: the minimal single-threaded scan
  fuser     fuser -v DEV/*
  lsof      lsof -n -P -w DEV/*

and prints median wall time, median CPU time (user+sys), peak RSS and the
holders each found, with ratios; then the refresh of a long-running command
(watch, serve, wait) with each walk: target/release/examples/refresh, one
collector collecting ROUNDS times after its first collection. Run it from the repository root after
`cargo build --release --workspace && cargo build --release --examples`. Not a test: numbers vary with
the machine and its load.
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROUNDS = int(os.environ.get("ROUNDS", "9"))


def run(argv):
    t0 = time.perf_counter()
    out_r, out_w = os.pipe()
    pid = os.posix_spawnp(argv[0], argv, os.environ, file_actions=[
        (os.POSIX_SPAWN_DUP2, out_w, 1),
        (os.POSIX_SPAWN_OPEN, 2, "/dev/null", os.O_WRONLY, 0),
    ])
    os.close(out_w)
    chunks = []
    while True:
        b = os.read(out_r, 1 << 16)
        if not b:
            break
        chunks.append(b)
    os.close(out_r)
    _, status, ru = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss, b"".join(chunks).decode(errors="replace")


def peak_rss(argv):
    """Peak RSS in KiB, by GNU time (wait4 after posix_spawn would count the
    parent's pages: vfork shares its memory until exec)."""
    with tempfile.NamedTemporaryFile("r") as f:
        subprocess.run(["/usr/bin/time", "-f", "%M", "-o", f.name] + argv,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return int(f.read().split()[-1])


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    gpufree = os.path.join(root, "target/release/gpufree")
    floor = os.path.join(root, "target/release/examples/floor")
    for b in (gpufree, floor):
        if not os.path.exists(b):
            sys.exit(f"{b} missing: cargo build --release --workspace && cargo build --release --examples")
    work = tempfile.mkdtemp(prefix="gpufree-bench-")
    dev = os.path.join(work, "dev")
    pop = subprocess.Popen([sys.executable, os.path.join(root, "bench/population.py"), dev] + sys.argv[1:],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert pop.stdout.readline().strip() == "ready"
        nodes = sorted(os.path.join(dev, n) for n in os.listdir(dev))
        nprocs = len([p for p in os.listdir("/proc") if p.isdigit()])
        nfds = 0
        for p in os.listdir("/proc"):
            if p.isdigit():
                try:
                    nfds += len(os.listdir(f"/proc/{p}/fd"))
                except OSError:
                    pass
        tools = {
            "gpufree": [gpufree, "status", "--json", "--scan", "procfs", "--dev-dir", dev,
                        "--nvml-lib", "/nonexistent/libnvidia-ml.so.1"],
            "floor": [floor, dev],
            "fuser": ["fuser", "-v"] + nodes,
            "lsof": ["lsof", "-n", "-P", "-w"] + nodes,
        }
        # Another build of gpufree (e.g. main before a redesign) timed in the
        # same rounds, so the two compare under the same load.
        baseline = os.environ.get("GPUFREE_BENCH_BASELINE")
        if baseline:
            tools["baseline"] = [baseline] + tools["gpufree"][1:]
        tools["bpf"] = [gpufree, "status", "--json", "--scan", "bpf", "--dev-dir", dev,
                        "--nvml-lib", "/nonexistent/libnvidia-ml.so.1"]
        found = {
            "gpufree": lambda o: len(__import__("json").loads(o)["processes"]),
            "floor": lambda o: int(o.strip()),
            "fuser": lambda o: len({w for w in o.split() if w.isdigit()}),
            "lsof": lambda o: len({l.split()[1] for l in o.splitlines()[1:] if l.split()}),
        }
        found["baseline"] = found["gpufree"]
        found["bpf"] = found["gpufree"]
        res = {k: [] for k in tools}
        for k, argv in tools.items():  # warm-up
            run(argv)
        for _ in range(ROUNDS):
            for k, argv in tools.items():
                res[k].append(run(argv))
        rss = {k: peak_rss(argv) for k, argv in tools.items()}
        med = {k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v),
                   rss[k], found[k](v[-1][3])) for k, v in res.items()}
        print(f"population: {nprocs} processes, {nfds} open fds; {len(nodes)} nodes; "
              f"{ROUNDS} rounds, medians; {os.cpu_count()} CPUs")
        print(f"{'tool':8} {'wall ms':>8} {'cpu ms':>8} {'rss MiB':>8} {'holders':>8}")
        for k, (w, c, rss, n) in med.items():
            print(f"{k:8} {w*1000:8.1f} {c*1000:8.1f} {rss/1024:8.1f} {n:8}")
        g, f = med["gpufree"], med["floor"]
        print(f"gpufree wall vs floor {g[0]/f[0]:.2f}x, cpu vs floor {g[1]/f[1]:.2f}x; "
              f"fuser/gpufree {med['fuser'][0]/g[0]:.2f}x; lsof/gpufree {med['lsof'][0]/g[0]:.2f}x")
        bp = med["bpf"]
        print(f"bpf one-shot: fuser/bpf {med['fuser'][0]/bp[0]:.2f}x; lsof/bpf {med['lsof'][0]/bp[0]:.2f}x; "
              f"procfs/bpf {g[0]/bp[0]:.2f}x")
        refresh = os.path.join(root, "target/release/examples/refresh")
        if os.path.exists(refresh):
            for scan in ("procfs", "bpf"):
                out = subprocess.run([refresh, dev, scan, str(ROUNDS)], capture_output=True,
                                     text=True).stdout.strip()
                kv = dict(w.split("=", 1) for w in out.split() if "=" in w)
                r = float(kv["refresh_wall_ms"])
                print(f"refresh {scan:6}: {out}")
                print(f"refresh {scan:6}: fuser/refresh {med['fuser'][0]*1000/r:.1f}x; "
                      f"lsof/refresh {med['lsof'][0]*1000/r:.1f}x")
        if "baseline" in med:
            b = med["baseline"]
            print(f"baseline wall vs floor {b[0]/f[0]:.2f}x, cpu vs floor {b[1]/f[1]:.2f}x; "
                  f"fuser/baseline {med['fuser'][0]/b[0]:.2f}x; lsof/baseline {med['lsof'][0]/b[0]:.2f}x")
    finally:
        pop.stdin.close()
        pop.wait()
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
