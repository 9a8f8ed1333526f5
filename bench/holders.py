#!/usr/bin/env python3
"""The holder-scaling benchmark: gpufree against fuser -v and lsof as the holders grow (issue 30).

Starts bench/population.py (the host: 700 processes x 90 fds, 20 of them
holding nodes of a temporary device directory; `n=..` and the like on the
command line override it) and then, at each point, H more small holders
(env HOLDERS, default 0,30,300,3000,10000): processes forked by
bench/holders.c (compiled with cc into the bench's temporary directory; a C
fork costs a few pages where a Python one costs about 1 MB), each holding
one GPU node (nvidia0..7 in turn) and nvidia-uvm by fd and by mmap. At each
point, ROUNDS (default 5) interleaved rounds, each run after the host has
settled from the one before (scan.settle()), time the whole process (wall,
user+sys CPU from wait4) of:

  status procfs   gpufree status --json --scan procfs (no NVML)
  status bpf      gpufree status --json --scan bpf (this boot's relocation
                  of the walk kept by the warm-up run, as every command
                  after a boot's first)
  why bpf         gpufree why --json --scan bpf
  fuser -v        fuser -v on every node of the directory
  lsof            lsof -n -P -w on every node

and their peak RSS (one more run each under GNU time). Every run must find
all the holders (the population's and the H), or the bench stops with an
error. Prints a table with medians and the ratios fuser/gpufree and
lsof/gpufree per point, and least-squares lines (ms + µs per holder) per
series; with --write-docs also writes docs/holders.md and docs/holders.svg
(the plot code is bench/scan.py's).

--mig: the simulator with 8 GPUs in MIG mode, 7 instances each (56 MIG
devices), one holder process per instance (holding its GPU's node, listed
on its instance by the simulator); times `gpufree status --json` with the
simulated NVML library (--nvml-lib, as the tests run it) and through
`gpufree sim exec`, ROUNDS runs each (default 9 here); checks that it lists
the 56 MIG devices and their holders.

--serve: the host population plus SERVE_HOLDERS (default 3000) holders,
each listed by the simulator with 1 GiB on its GPU; `gpufree serve` on
127.0.0.1 (an ephemeral port, --interval SERVE_INTERVAL, default its own
10s) with the simulated NVML; after its first collection has every holder,
SCRAPES (default 20) GETs of /metrics, 100 ms apart, each a new connection:
median ms per scrape, the holder series (gpufree_process_gpu_memory_bytes)
counted in each (must be at least the holders), serve's VmRSS and VmHWM.

With --write-docs, --mig and --serve each write their own section of
docs/holders.md (between marker comments), leaving the others as they are.

Run from the repository root after `cargo build --release --workspace &&
cargo build --release --examples`. GPUFREE_BIN_DIR=DIR takes gpufree from DIR
instead of target/release (bench/scan.py's rule), to time another build.
Not a test: numbers vary with the machine and its load. Everything the bench
starts it ends: the population (it kills its own processes when its stdin
closes), the spawner (it kills and reaps its own children on EOF; they also
die with it; the bench kills the spawner's own process group only if it does
not exit), and serve (by its PID).
"""
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scan  # noqa: E402  (bench/scan.py: run, settle, peak_rss, fit, svg_plot)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOLDERS = [int(x) for x in os.environ.get("HOLDERS", "0,30,300,3000,10000").split(",")]
NO_NVML = "/nonexistent/libnvidia-ml.so.1"
GPU_NODES = [f"nvidia{i}" for i in range(8)]
SERIES = ["status procfs", "status bpf", "status pinned", "why bpf", "fuser -v", "lsof"]
COLORS = {"status procfs": "#d62728", "status bpf": "#1f77b4", "status pinned": "#17becf",
          "why bpf": "#9467bd", "fuser -v": "#2ca02c", "lsof": "#ff7f0e"}
DASHES = {"status procfs": "", "status bpf": "", "status pinned": "", "why bpf": "2,3", "fuser -v": "6,4",
          "lsof": "6,4"}
# Before each point, wait (at most this many seconds) for other work on the
# host to calm down (scan.wait_quiet).
scan.SCALING_QUIET_WAIT = float(os.environ.get("HOLDERS_QUIET_WAIT", "60"))


def env_prefix(keys):
    """`K=V ` for each of keys set in the environment (the command line the docs show)."""
    return "".join(f"{k}={os.environ[k]} " for k in keys if k in os.environ)


def gpufree_bin():
    b = scan.binary(ROOT, "gpufree")
    if not os.path.exists(b):
        sys.exit(f"{b} missing: cargo build --release --workspace && cargo build --release --examples")
    return b


def make_dev(dev):
    """A device directory as population.py makes it: nvidia0..7, nvidiactl, nvidia-uvm."""
    os.makedirs(dev, exist_ok=True)
    for n in GPU_NODES + ["nvidiactl", "nvidia-uvm"]:
        with open(os.path.join(dev, n), "wb") as f:
            f.write(b"\0" * 4096)


def build_spawner(work):
    """Compiles bench/holders.c into work; its path."""
    exe = os.path.join(work, "holders")
    subprocess.run(["cc", "-O2", "-o", exe, os.path.join(ROOT, "bench/holders.c")], check=True)
    return exe


class Holders:
    """n holders from the spawner: child i holds GPU node i % 8 and nvidia-uvm.
    .gpu_of maps each holder's PID to its GPU index. close() ends them all."""

    def __init__(self, exe, n, dev):
        nodes = [os.path.join(dev, "nvidia-uvm")] + [os.path.join(dev, g) for g in GPU_NODES]
        t0 = time.perf_counter()
        # Its own process group, so that the bench can end exactly it.
        self.proc = subprocess.Popen([exe, str(n)] + nodes, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, process_group=0)
        self.gpu_of = {}
        for line in self.proc.stdout:
            if line.startswith("ready"):
                break
            if line.startswith("failed"):
                self.close()
                raise RuntimeError(f"holder spawner: not all {n} holders could be set up")
            pid, gpu = line.split()
            self.gpu_of[int(pid)] = int(gpu)
        else:
            self.close()
            raise RuntimeError("holder spawner exited before it was ready")
        self.start_s = time.perf_counter() - t0

    def close(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            # Not reaped yet, so its group id is still its own.
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Population:
    """bench/population.py on dev with the given k=v arguments; close() ends it."""

    def __init__(self, dev, args):
        self.proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "bench/population.py"), dev] + args,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            self.close()
            raise RuntimeError(f"population did not start: {line!r}")
        self.holders = 20
        for a in args:
            k, v = a.split("=")
            if k == "holders":
                self.holders = int(v)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def pids_in(out, tool):
    """The holders a tool's output names: gpufree's JSON processes, fuser's
    PIDs (stdout; -v's table goes to stderr), lsof's PID column."""
    if tool == "fuser -v":
        return len({w for w in out.split() if w.isdigit()})
    if tool == "lsof":
        return len({l.split()[1] for l in out.splitlines()[1:] if l.split()})
    return len(json.loads(out)["processes"])


def check(tool, out, scan_name, want):
    """Fails loudly when a tool did not find every holder (or gpufree not with the walk asked)."""
    if tool in ("fuser -v", "lsof"):
        got = pids_in(out, tool)
        if got != want:
            raise RuntimeError(f"{tool} found {got} holders, expected {want}")
    else:
        try:
            scan.check_oneshot(out, "bpf" if scan_name == "pinned" else scan_name, want)
        except RuntimeError as e:
            raise RuntimeError(f"{tool}: {e}") from None
        if scan_name == "pinned":
            scan.check_pinned(out)


def tools(gpufree, dev, work):
    """name: (argv, env, scan) for the six series ("status pinned" takes the
    walk `gpufree prepare` pinned in work's BPF file system: prepare_pins)."""
    nodes = sorted(os.path.join(dev, n) for n in os.listdir(dev))
    cache = {"GPUFREE_BPF_CACHE": os.path.join(work, "bpf-cache")}
    flags = ["--json", "--dev-dir", dev, "--nvml-lib", NO_NVML]
    return {
        "status procfs": ([gpufree, "status", "--scan", "procfs"] + flags, cache, "procfs"),
        "status bpf": ([gpufree, "status", "--scan", "bpf"] + flags, cache, "bpf"),
        "status pinned": ([gpufree, "status", "--scan", "bpf"] + flags,
                          {**cache, "GPUFREE_BPF_PIN": pins_dir(work)}, "pinned"),
        "why bpf": ([gpufree, "why", "--scan", "bpf"] + flags, cache, "bpf"),
        "fuser -v": (["fuser", "-v"] + nodes, {}, None),
        "lsof": (["lsof", "-n", "-P", "-w"] + nodes, {}, None),
    }


def pins_dir(work):
    """Where prepare_pins has `gpufree prepare` pin the walk."""
    return os.path.join(work, "bpffs", "gpufree")


def prepare_pins(gpufree, work):
    """Mounts a BPF file system of the bench's own under work and has
    `gpufree prepare` pin the walk there; every other run takes no pins
    (not the machine's either)."""
    os.environ["GPUFREE_BPF_PIN"] = "off"
    if not scan.mount_pins(work):
        sys.exit("the bench needs root: no BPF file system could be mounted")
    env = {**os.environ, "GPUFREE_BPF_CACHE": os.path.join(work, "bpf-cache"),
           "GPUFREE_BPF_PIN": pins_dir(work)}
    subprocess.run([gpufree, "prepare"], env=env, check=True, stdout=subprocess.DEVNULL)


def point(gpufree, spawner, dev, work, pop, extra, rounds):
    """Starts `extra` holders, times the five series `rounds` times
    interleaved, ends the holders; the point's medians."""
    with Holders(spawner, extra, dev) as h:
        want = pop.holders + extra
        ts = tools(gpufree, dev, work)
        procs = len([p for p in os.listdir("/proc") if p.isdigit()])
        for name, (argv, env, sc) in ts.items():  # warm-up, checked like the rest
            check(name, scan.run(argv, env)[3], sc, want)
        t0, busy0, own0 = time.perf_counter(), scan.cpu_busy_s(), scan.own_cpu_s()
        res = {k: [] for k in ts}
        for _ in range(rounds):
            for name, (argv, env, sc) in ts.items():
                scan.settle()
                wall, cpu, _, out = scan.run(argv, env)
                check(name, out, sc, want)
                res[name].append((wall * 1000, cpu * 1000))
        others = ((scan.cpu_busy_s() - busy0) - (scan.own_cpu_s() - own0)) / (time.perf_counter() - t0)
        rss = {k: scan.peak_rss(argv, env) / 1024 for k, (argv, env, _) in ts.items()}
        p = {"extra": extra, "holders": want, "procs": procs, "others": others, "spawn_s": h.start_s}
        for k, v in res.items():
            p[k] = (statistics.median(w for w, _ in v), statistics.median(c for _, c in v), rss[k])
        return p


def tables(points):
    """The results table, the RSS table and the fits table, as Markdown."""
    rows = ["| extra holders | holders | processes | " + " | ".join(f"{k} wall / cpu ms" for k in SERIES)
            + " | fuser/procfs | fuser/bpf | fuser/pinned | fuser/why | lsof/procfs | lsof/bpf | lsof/pinned"
            + " | fuser/bpf cpu | lsof/bpf cpu | other work, cores |",
            "|" + "---:|" * (3 + len(SERIES) + 10)]
    for p in points:
        f, lo = p["fuser -v"][0], p["lsof"][0]
        g, b, w = p["status procfs"][0], p["status bpf"][0], p["why bpf"][0]
        n = p["status pinned"][0]
        rows.append(f"| {p['extra']:,} | {p['holders']:,} | {p['procs']:,} | "
                    + " | ".join(f"{p[k][0]:.1f} / {p[k][1]:.1f}" for k in SERIES)
                    + f" | {f / g:.2f}x | {f / b:.2f}x | {f / n:.2f}x | {f / w:.2f}x | {lo / g:.2f}x"
                    + f" | {lo / b:.2f}x | {lo / n:.2f}x"
                    + f" | {p['fuser -v'][1] / p['status bpf'][1]:.2f}x | {p['lsof'][1] / p['status bpf'][1]:.2f}x"
                    + f" | {p['others']:.2f} |")
    rss = ["| holders | " + " | ".join(f"{k} peak RSS MiB" for k in SERIES) + " |",
           "|---:|" + "---:|" * len(SERIES)]
    for p in points:
        rss.append(f"| {p['holders']:,} | " + " | ".join(f"{p[k][2]:.1f}" for k in SERIES) + " |")
    xs = [p["holders"] for p in points]
    fits = ["| series | wall: ms + µs/holder | cpu: ms + µs/holder |", "|---|---:|---:|"]
    for k in SERIES:
        aw, bw = scan.fit(xs, [p[k][0] for p in points])
        ac, bc = scan.fit(xs, [p[k][1] for p in points])
        fits.append(f"| {k} | {aw:.1f} + {bw * 1000:.1f} | {ac:.1f} + {bc * 1000:.1f} |")
    return "\n".join(rows), "\n".join(rss), "\n".join(fits)


def targets(points):
    """Issue 30's targets on the measured points, one line each."""
    out = []
    for p in points:
        if p["extra"] in (300, 3000, 10000):
            f, b, g = p["fuser -v"], p["status bpf"], p["status procfs"]
            n = p["status pinned"]
            out.append(f"- {p['extra']:,} extra holders: fuser/status pinned {f[0] / n[0]:.2f}x wall, "
                       f"{f[1] / n[1]:.2f}x cpu; fuser/status bpf {f[0] / b[0]:.2f}x wall, "
                       f"{f[1] / b[1]:.2f}x cpu; fuser/status procfs {f[0] / g[0]:.2f}x wall, "
                       f"{f[1] / g[1]:.2f}x cpu (target: at least 2x)")
        if p["extra"] == 3000:
            r = max(p[k][2] for k in ("status procfs", "status bpf", "status pinned", "why bpf"))
            out.append(f"- {p['extra']:,} extra holders: largest gpufree peak RSS {r:.1f} MiB (target: within 50 MiB)")
    return "\n".join(out)


def write_docs(points, argv, rounds):
    """docs/holders.svg and docs/holders.md from the points."""
    with open(os.path.join(ROOT, "docs/holders.svg"), "w") as f:
        f.write(scan.svg_plot(points, series=SERIES, x="holders", colors=COLORS, dashes=DASHES,
                              title="holder scan: wall time vs holders on the host",
                              xlabel="processes holding a GPU node (log scale)"))
    table, rss, fits = tables(points)
    cmd = env_prefix(("GPUFREE_BIN_DIR", "ROUNDS", "HOLDERS", "HOLDERS_QUIET_WAIT")) + " ".join(
        ["python3", "bench/holders.py", "--write-docs"] + argv)
    with open("/proc/cpuinfo") as f:
        model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "unknown CPU")
    pop = points[0]["holders"] - points[0]["extra"]
    write_section("holders", f"""Produced by `{cmd}` on a {os.cpu_count()}-core machine
({model}, Linux {os.uname().release}), shared with other work, so the numbers carry its noise.
The host is bench/population.py's population ({pop} of its processes holding a
temporary device directory by fd and mmap) plus, at each point,
{', '.join(f'{p["extra"]:,}' for p in points)} small holders (bench/holders.c: forked C processes,
each holding one of nvidia0..7 in turn and nvidia-uvm by fd and by mmap). At each point
`gpufree status --json --scan procfs`, `status --json --scan bpf` (this boot's relocation of
the in-kernel walk kept by a warm-up run), `why --json --scan bpf` (all without NVML),
`fuser -v` and `lsof -n -P -w` on every node of the directory ran interleaved, {rounds} rounds,
each run after the host had settled from the one before; the table gives medians of the whole
process, wall and user+sys CPU (wait4), and every run found every holder. "other work" is the
CPU the rest of the host used during the point, in cores. The ratios are of wall time, but
for the last two, of user+sys CPU time (which other work on a busy host inflates less).

![wall ms vs holders](holders.svg)

{table}

Peak RSS (GNU time, one run each):

{rss}

Least-squares lines (ms at zero holders + µs per holder; the points are spread
over three decades, so the large ones dominate the fit):

{fits}

Issue 30's targets on these points:

{targets(points)}
""")
    print("wrote docs/holders.svg and docs/holders.md")


def write_section(name, text):
    """Puts text as the section of docs/holders.md that `--name` of this
    bench writes (between its two marker comments), replacing the one there
    or appending it; the other modes' sections stay as they are."""
    path = os.path.join(ROOT, "docs/holders.md")
    try:
        with open(path) as f:
            doc = f.read()
    except FileNotFoundError:
        doc = "# Holder scan cost vs holders\n"
    begin, end = f"<!-- bench/holders.py {name}: begin -->\n", f"<!-- bench/holders.py {name}: end -->\n"
    block = begin + "\n" + text.strip("\n") + "\n\n" + end
    if begin in doc and end in doc:
        doc = doc[:doc.index(begin)] + block + doc[doc.index(end) + len(end):]
    elif name == "holders":  # the main table goes first, under the title
        title, _, rest = doc.partition("\n")
        doc = title + "\n\n" + block + ("\n" + rest.lstrip("\n") if rest.strip() else "")
    else:
        doc = doc.rstrip("\n") + "\n\n" + block
    with open(path, "w") as f:
        f.write(doc)


def holders_main(argv, docs):
    gpufree = gpufree_bin()
    rounds = int(os.environ.get("ROUNDS", "5"))
    work = tempfile.mkdtemp(prefix="gpufree-holders-")
    dev = os.path.join(work, "dev")
    try:
        spawner = build_spawner(work)
        prepare_pins(gpufree, work)
        with Population(dev, argv) as pop:
            points = []
            for extra in HOLDERS:
                scan.wait_quiet()
                p = point(gpufree, spawner, dev, work, pop, extra, rounds)
                print(f"{extra:>6,} extra holders ({p['holders']:,} in all, {p['procs']:,} processes, "
                      f"started in {p['spawn_s']:.1f} s), other work {p['others']:.2f} cores", flush=True)
                for k in SERIES:
                    w, c, r = p[k]
                    print(f"    {k:14} wall {w:9.1f} ms  cpu {c:9.1f} ms  rss {r:6.1f} MiB", flush=True)
                points.append(p)
        table, rss, fits = tables(points)
        print(f"\n{rounds} rounds, medians; {os.cpu_count()} CPUs\n\n{table}\n\n{rss}\n\n{fits}\n\n{targets(points)}")
        if docs:
            write_docs(points, argv, rounds)
    finally:
        subprocess.run(["umount", "-l", os.path.join(work, "bpffs")], stderr=subprocess.DEVNULL)
        subprocess.run(["rm", "-rf", work])


def sim_lib(gpufree):
    """The simulated NVML library beside (or carried by) gpufree."""
    out = subprocess.run([gpufree, "sim", "lib"], capture_output=True, text=True, check=True).stdout
    return os.path.join(out.strip(), "libnvidia-ml.so.1")


def sim_gpu(i, procs):
    """A simulated H200 (index i) whole, with procs [(pid, bytes)] while alive."""
    return {"name": "NVIDIA H200", "uuid": f"GPU-aa{i:02}bb00-1111-2222-3333-444455556666",
            "pci_bus_id": f"00000000:{0x18 + i:02X}:00.0", "minor_number": i,
            "memory_total_bytes": 150_754_820_096, "memory_baseline_bytes": 0, "release_delay_ms": 0,
            "processes": [{"pid": p, "used_bytes": b, "type": "compute", "visible": "while-alive"}
                          for p, b in procs]}


def sim_state(path, gpus):
    with open(path, "w") as f:
        json.dump({"driver_version": "580.95.05", "cuda_driver_version": 13000, "devices": gpus}, f)


def mig_state(path, gpu_of):
    """8 GPUs in MIG mode, 7 instances of 1g.18gb each; holder k of a GPU
    listed with 1 GiB on its instance k."""
    per_gpu = {g: [p for p, pg in gpu_of.items() if pg == g] for g in range(8)}
    gpus = []
    for g in range(8):
        gpu = sim_gpu(g, [])
        gpu["mig_mode"] = True
        gpu["mig"] = [{"uuid": f"MIG-{g:02}{j:06}-7a1b-5c2d-8e3f-0123456789ab", "gpu_instance_id": j + 1,
                       "compute_instance_id": 0, "profile": "1g.18gb", "memory_total_bytes": 18 << 30,
                       "processes": [{"pid": per_gpu[g][j], "used_bytes": 1 << 30, "type": "compute",
                                      "visible": "while-alive"}]}
                      for j in range(7)]
        gpus.append(gpu)
    sim_state(path, gpus)
    return per_gpu


def check_mig(out, per_gpu):
    """status --json must list 8 GPUs in MIG mode, 56 MIG devices, each with its holder."""
    d = json.loads(out)
    migs = [(g["index"], j, m) for g in d["gpus"] for j, m in enumerate(g.get("mig_devices") or [])]
    if len(d["gpus"]) != 8 or len(migs) != 56 or not all(g["mig_mode"] for g in d["gpus"]):
        raise RuntimeError(f"status: {len(d['gpus'])} GPUs, {len(migs)} MIG devices; expected 8 and 56")
    for g, j, m in migs:
        pids = [p["pid"] for p in m.get("nvml_processes") or []]
        if pids != [per_gpu[g][j]]:
            raise RuntimeError(f"MIG device {g}:{j} lists {pids}, expected [{per_gpu[g][j]}]")
    if len(d["processes"]) != 56:
        raise RuntimeError(f"status found {len(d['processes'])} holders, expected 56")
    return d["visibility"]["scan"]


def mig_main(docs):
    gpufree = gpufree_bin()
    rounds = int(os.environ.get("ROUNDS", "9"))
    work = tempfile.mkdtemp(prefix="gpufree-mig-")
    dev, state = os.path.join(work, "dev"), os.path.join(work, "state.json")
    os.environ["GPUFREE_BPF_CACHE"] = os.path.join(work, "bpf-cache")
    try:
        make_dev(dev)
        with Holders(build_spawner(work), 56, dev) as h:
            per_gpu = mig_state(state, h.gpu_of)
            lib = sim_lib(gpufree)
            series = {
                "status --nvml-lib SIM": ([gpufree, "status", "--json", "--dev-dir", dev, "--nvml-lib", lib],
                                          {"GPUFREE_SIM_STATE": state}),
                "sim exec -- status": ([gpufree, "sim", "exec", "--state", state, "--", gpufree, "status",
                                        "--json", "--dev-dir", dev], {}),
            }
            walks = {k: check_mig(scan.run(argv, env)[3], per_gpu) for k, (argv, env) in series.items()}
            res = {k: [] for k in series}
            for _ in range(rounds):
                for k, (argv, env) in series.items():
                    scan.settle()
                    wall, cpu, _, out = scan.run(argv, env)
                    check_mig(out, per_gpu)
                    res[k].append((wall * 1000, cpu * 1000))
            rows = ["| command | wall ms | cpu ms | peak RSS MiB | walk |", "|---|---:|---:|---:|---|"]
            for k, v in res.items():
                rss = scan.peak_rss(*series[k]) / 1024
                rows.append(f"| `{k}` | {statistics.median(w for w, _ in v):.1f} | "
                            f"{statistics.median(c for _, c in v):.1f} | {rss:.1f} | {walks[k]} |")
        text = f"""## 8 GPUs x 7 MIG instances on the simulator

`{env_prefix(("GPUFREE_BIN_DIR", "ROUNDS"))}python3 bench/holders.py --mig{' --write-docs' if docs else ''}`: 8 simulated H200s in MIG
mode, 7 instances of 1g.18gb each (56 MIG devices), one holder process per instance (holding its
GPU's node and nvidia-uvm by fd and mmap, listed with 1 GiB on its instance by the simulator),
no other population. `gpufree status --json` (the whole process) with the simulated NVML library
given by `--nvml-lib`, and through `gpufree sim exec`; {rounds} rounds interleaved, medians; every
run listed the 8 GPUs, the 56 MIG devices each with its holder, and the 56 holders.

""" + "\n".join(rows) + "\n"
        print(text)
        if docs:
            write_section("mig", text)
    finally:
        subprocess.run(["rm", "-rf", work])


def scrape(url):
    """One GET on a new connection: (seconds, status, body)."""
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            body = r.read().decode(errors="replace")
            status = r.status
    except urllib.error.HTTPError as e:
        body, status = "", e.code
    return time.perf_counter() - t0, status, body


def holder_series(body):
    return sum(1 for l in body.splitlines() if l.startswith("gpufree_process_gpu_memory_bytes{"))


def status_kib(pid, key):
    with open(f"/proc/{pid}/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith(key + ":"))


def start_serve(gpufree, dev, lib, state):
    """gpufree serve on 127.0.0.1 (an ephemeral port); (process, /metrics URL)."""
    argv = [gpufree, "serve", "--listen", "127.0.0.1:0", "--dev-dir", dev, "--nvml-lib", lib]
    if "SERVE_INTERVAL" in os.environ:
        argv += ["--interval", os.environ["SERVE_INTERVAL"]]
    srv = subprocess.Popen(argv, env={**os.environ, "GPUFREE_SIM_STATE": state},
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    line = srv.stderr.readline()
    url = next((w for w in line.split() if w.startswith("http://")), None)
    if url is None:
        srv.kill()
        srv.wait()
        raise RuntimeError(f"serve did not start: {line!r}")
    # Drain its stderr, so it never blocks on it.
    threading.Thread(target=lambda: [None for _ in srv.stderr], daemon=True).start()
    return srv, url if url.endswith("/metrics") else url.rstrip("/") + "/metrics"


def first_collection(url, want, limit_s=300):
    """Waits until /metrics has every holder's series; seconds waited."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < limit_s:
        _, status, body = scrape(url)
        if status == 200 and holder_series(body) >= want:
            return time.perf_counter() - t0
        time.sleep(0.1)
    raise RuntimeError(f"serve had not served {want} holder series after {limit_s} s")


def serve_main(argv, docs):
    gpufree = gpufree_bin()
    n, scrapes = int(os.environ.get("SERVE_HOLDERS", "3000")), int(os.environ.get("SCRAPES", "20"))
    work = tempfile.mkdtemp(prefix="gpufree-serve-")
    dev, state = os.path.join(work, "dev"), os.path.join(work, "state.json")
    os.environ["GPUFREE_BPF_CACHE"] = os.path.join(work, "bpf-cache")
    srv = None
    try:
        spawner = build_spawner(work)
        with Population(dev, argv) as pop, Holders(spawner, n, dev) as h:
            sim_state(state, [sim_gpu(g, [(p, 1 << 30) for p, pg in h.gpu_of.items() if pg == g])
                              for g in range(8)])
            srv, url = start_serve(gpufree, dev, sim_lib(gpufree), state)
            first = first_collection(url, n)
            times, counts = [], []
            for _ in range(scrapes):
                time.sleep(0.1)
                s, status, body = scrape(url)
                if status != 200 or holder_series(body) < n:
                    raise RuntimeError(f"scrape: HTTP {status}, {holder_series(body)} holder series, expected {n}")
                times.append(s * 1000)
                counts.append(holder_series(body))
            rss, hwm = status_kib(srv.pid, "VmRSS") / 1024, status_kib(srv.pid, "VmHWM") / 1024
            procs = len([p for p in os.listdir("/proc") if p.isdigit()])
        text = f"""## A `serve` scrape with {n:,} holder series

`{env_prefix(("GPUFREE_BIN_DIR", "SERVE_HOLDERS", "SERVE_INTERVAL", "SCRAPES"))}python3 bench/holders.py --serve{' --write-docs' if docs else ''}`
on the same kind of host ({procs:,} processes: the population, {pop.holders} of it holding nodes, and {n:,}
small holders, each listed by the simulator with 1 GiB on its GPU of 8): `gpufree serve` on
127.0.0.1 with the simulated NVML library, interval {os.environ.get('SERVE_INTERVAL', '10s (its default)')};
its first answer with every holder came {first:.1f} s after it gave its address. Then {scrapes} GETs of
/metrics, 100 ms apart, each on a new connection (urllib), each with every holder's series:

| scrape, median | min | max | holder series (`gpufree_process_gpu_memory_bytes`) | body | serve VmRSS | serve VmHWM |
|---:|---:|---:|---:|---:|---:|---:|
| {statistics.median(times):.1f} ms | {min(times):.1f} ms | {max(times):.1f} ms | {min(counts):,} | {len(body) / 1024:.0f} KiB | {rss:.1f} MiB | {hwm:.1f} MiB |
"""
        print(text)
        if docs:
            write_section("serve", text)
    finally:
        if srv is not None:
            srv.terminate()
            try:
                srv.wait(timeout=10)
            except subprocess.TimeoutExpired:
                srv.kill()
                srv.wait()
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    args = sys.argv[1:]
    rest = [a for a in args if not a.startswith("--")]
    docs = "--write-docs" in args
    if "--mig" in args:
        mig_main(docs)
    elif "--serve" in args:
        serve_main(rest, docs)
    else:
        holders_main(rest, docs)
