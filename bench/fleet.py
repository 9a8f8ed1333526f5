#!/usr/bin/env python3
"""`gpufree fleet` on a 1,000-node fleet in a real Prometheus (a benchmark,
not a test).

Writes NODES (1000) nodes x GPUS (8) GPUs of the series `gpufree serve`
exports as OpenMetrics text, loads them into a fresh Prometheus storage
with `promtool tsdb create-blocks-from openmetrics`, starts `prometheus`
on that storage on 127.0.0.1 (no scrape jobs: the data is all
backfilled), and runs `gpufree fleet` against it RUNS (5) times under
`/usr/bin/time -v`: its wall time and its peak RSS (the command's own,
not Prometheus's).

The fleet is the view's worst case: every GPU held (one job's holder per
GPU, owned by a Slurm job), so every node is listed; LEFTOVERS (50) nodes
also have a leftover holder on GPU 0 (owner none, orphaned). Holders
started at staggered times over the last HISTORY_MIN (360) minutes, so
the look back (`--history 6h`) reads up to six hours of each holder's
series; the per-GPU and per-node series cover the last 15 minutes. One
sample a minute (STEP_S 60); the data runs LEAD_MIN (20) minutes past the
start, so that whatever the load took, the newest sample at the query's
"now" is under a minute old.

Budget (SPEC.md): wall <= 2 s and peak RSS < 50 MiB for the whole view.
Prints the figures, exits 1 when the budget fails. Everything runs on
127.0.0.1 in a temporary directory, and what it starts it stops.

Run from the repository root after `cargo build --release --bin gpufree`
(GPUFREE_BIN overrides the binary). Knobs: NODES, GPUS, LEFTOVERS,
HISTORY_MIN, STEP_S, LEAD_MIN, RUNS.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

NODES = int(os.environ.get("NODES", "1000"))
GPUS = int(os.environ.get("GPUS", "8"))
LEFTOVERS = int(os.environ.get("LEFTOVERS", "50"))
HISTORY_MIN = int(os.environ.get("HISTORY_MIN", "360"))
STEP_S = int(os.environ.get("STEP_S", "60"))
LEAD_MIN = int(os.environ.get("LEAD_MIN", "20"))
RUNS = int(os.environ.get("RUNS", "5"))
RECENT_MIN = 15
BUDGET_WALL_S = 2.0
BUDGET_RSS_MIB = 50
GIB80 = 80 * 1024**3


def instance(n):
    return f"gpu-{n:04d}.cluster.example:9835"


def labels(d):
    return ",".join(f'{k}="{v}"' for k, v in d.items())


def write_openmetrics(path, now):
    """The fleet's series, family by family, each series' samples in time
    order; returns the number of samples."""
    end = now + LEAD_MIN * 60
    recent = range(int(now - RECENT_MIN * 60), int(end), STEP_S)
    count = 0
    with open(path, "w") as f:

        def family(name, rows):
            nonlocal count
            f.write(f"# TYPE {name} gauge\n")
            for lab, value, times in rows:
                head = f"{name}{{{labels(lab)}}} {value} "
                f.write("".join(f"{head}{t}\n" for t in times))
                count += len(times)

        def base(n):
            return {"job": "gpufree", "instance": instance(n)}

        def gpu(n, g):
            return dict(base(n), gpu=str(g), uuid=f"GPU-{n:04x}{g:04x}-0000-0000-0000-000000000000")

        def per_gpu(extra):
            for n in range(NODES):
                for g in range(GPUS):
                    yield from extra(n, g)

        family("up", ((base(n), 1, recent) for n in range(NODES)))
        family("gpufree_snapshot_age_seconds", ((base(n), 3.5, recent) for n in range(NODES)))
        family("gpufree_nvml_up", ((base(n), 1, recent) for n in range(NODES)))
        family("gpufree_processes_scanned", ((base(n), 812, recent) for n in range(NODES)))
        family("gpufree_processes_unreadable", ((base(n), 0, recent) for n in range(NODES)))
        family("gpufree_snapshot_duration_seconds", ((base(n), 0.04, recent) for n in range(NODES)))
        family("gpufree_gpu_verdict", per_gpu(lambda n, g: (
            (dict(gpu(n, g), state=s), int(s == "busy"), recent) for s in ("free", "busy", "unknown"))))
        total = 150_754_820_096
        for name, value in (("total", total), ("used", GIB80), ("accounted", GIB80), ("unaccounted", 0)):
            family(f"gpufree_gpu_memory_{name}_bytes",
                   per_gpu(lambda n, g, v=value: [(dict(gpu(n, g), name="NVIDIA H200"), v, recent)]))
        family("gpufree_gpu_holders", per_gpu(lambda n, g: (
            (dict(gpu(n, g), kind=k), int(k == "memory"), recent) for k in ("memory", "node"))))

        def holders(n, g):
            start = job_start(now, n, g)
            times = range(start, int(end), STEP_S)
            job = dict(gpu(n, g), pid=str(10000 + g), comm="python3", user="alice",
                       owner_kind="slurm-job", owner=f"job_{n * 10 + 1}", orphaned="false", renamed="false")
            yield job, GIB80 - (1 << 30), times
            every = max(1, NODES // max(1, LEFTOVERS))
            if LEFTOVERS and g == 0 and n % every == 0 and n // every < LEFTOVERS:
                left = dict(gpu(n, g), pid=str(20000 + n), comm="VLLM::Worker_TP", user="bob",
                            owner_kind="none", owner="", orphaned="true", renamed="true")
                yield left, 1 << 30, times

        family("gpufree_process_gpu_memory_bytes", per_gpu(holders))
        f.write("# EOF\n")
    return count


def job_start(now, n, g):
    """When the job's holder on node n, GPU g began: staggered over the
    history, on a sample's time."""
    start = int(now - (n * 7 + g) % HISTORY_MIN * 60)
    return start - start % STEP_S


def held_error(doc, now, asked_at):
    """The largest error of the jobs' holders' time held, in seconds, and
    how many holders were checked."""
    worst, checked = 0.0, 0
    for node in doc["nodes"]:
        n = int(node["node"].split(".")[0].split("-")[1])
        for h in node["holders"]:
            if h["pid"] >= 20000 or h["held_seconds"] is None:
                continue
            truth = asked_at - job_start(now, n, h["gpu"])
            worst = max(worst, abs(h["held_seconds"] - truth))
            checked += 1
    return worst, checked


def cpu_seconds(pid):
    """User and system CPU time of a process so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def timed(argv):
    """Runs argv under /usr/bin/time -v; returns (exit code, wall s, peak
    RSS KiB, stdout)."""
    r = subprocess.run(["/usr/bin/time", "-v"] + argv, capture_output=True, text=True, timeout=120)
    wall = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", r.stderr)
    h, m, s = wall.groups()
    secs = int(h or 0) * 3600 + int(m) * 60 + float(s)
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr).group(1))
    return r.returncode, secs, rss, r.stdout, r.stderr


def load_blocks(tmp, now):
    """Writes the fleet's series and makes Prometheus blocks of them; the
    storage directory."""
    om = os.path.join(tmp, "fleet.om")
    t0 = time.monotonic()
    samples = write_openmetrics(om, now)
    print(f"wrote {samples:,} samples ({os.path.getsize(om) / 2**20:.0f} MiB of OpenMetrics) "
          f"in {time.monotonic() - t0:.0f} s")
    data = os.path.join(tmp, "data")
    t0 = time.monotonic()
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", om, data],
                   check=True, stdout=subprocess.DEVNULL, timeout=3600)
    os.unlink(om)
    print(f"promtool made the blocks in {time.monotonic() - t0:.0f} s")
    if time.time() > now + LEAD_MIN * 60 - 90:
        sys.exit("the load took longer than LEAD_MIN: raise it")
    return data


def start_prometheus(tmp, data):
    """Prometheus on `data`, on 127.0.0.1:0 (no port guessed free: the
    address it took is read from its log); (process, base URL, log)."""
    cfg = os.path.join(tmp, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write("global:\n  scrape_interval: 1m\n")
    log = os.path.join(tmp, "prometheus.log")
    with open(log, "w") as out:
        prom = subprocess.Popen(["prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={data}",
                                 "--web.listen-address=127.0.0.1:0"],
                                stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while True:
        with open(log) as f:
            found = re.search(r'msg="Listening on" address=(\S+)', f.read())
        if found:
            return prom, f"http://{found.group(1)}", log
        if prom.poll() is not None or time.monotonic() > deadline:
            with open(log) as f:
                sys.exit("Prometheus did not say where it listens:\n" + f.read()[-2000:])
        time.sleep(0.2)


def wait_loaded(url, log):
    """Waits until Prometheus answers with every GPU of the blocks (300 s at
    most); on failure says why its last answer would not do."""
    deadline = time.monotonic() + 300
    query = urllib.parse.quote('count(gpufree_gpu_verdict{state="busy"} == 1)')
    why = "no answer yet"
    while True:
        try:
            doc = json.loads(get(f"{url}/api/v1/query?query={query}"))
            got = doc["data"]["result"][0]["value"][1] if doc["data"]["result"] else "0"
            if int(got) == NODES * GPUS:
                return
            why = f"{got} of {NODES * GPUS} GPUs loaded"
        except (OSError, ValueError, KeyError, IndexError) as e:
            # Not listening or not ready yet: asked again until the deadline.
            why = f"{type(e).__name__}: {e}"
        if time.monotonic() > deadline:
            with open(log) as f:
                tail = f.read()[-2000:]
            sys.exit(f"Prometheus did not load the blocks in 300 s ({why}); its log ends:\n{tail}")
        time.sleep(0.5)


def measure(argv, prom):
    """RUNS views as JSON, checked; (walls, peak RSSs, the last document,
    when it was asked, Prometheus's CPU per view)."""
    walls, rsss = [], []
    prom_cpu = cpu_seconds(prom.pid)
    for _ in range(RUNS):
        asked_at = time.time()
        code, wall, rss, out, err = timed(argv + ["--json"])
        if code != 1:
            sys.exit(f"fleet exited {code}, not 1: {err.strip()}")
        walls.append(wall)
        rsss.append(rss)
    prom_cpu = (cpu_seconds(prom.pid) - prom_cpu) / RUNS
    return walls, rsss, json.loads(out), asked_at, prom_cpu


def check_view(doc, now, asked_at):
    """Exits unless the view lists every node, the leftovers and no stale
    node, each holder's time held within a step; (holders, leftovers,
    longest held, worst error)."""
    listed = len(doc["nodes"])
    holders = sum(len(n["holders"]) for n in doc["nodes"])
    leftover = sum(1 for n in doc["nodes"] if n["leftover"])
    oldest = max(n["held_seconds"] or 0 for n in doc["nodes"])
    if listed != NODES or leftover != LEFTOVERS or doc["stale"]:
        sys.exit(f"wrong view: {listed} nodes, {leftover} with leftovers, {len(doc['stale'])} stale")
    error, checked = held_error(doc, now, asked_at)
    coarse = max(HISTORY_MIN * 60 // 24, 1)
    if checked != NODES * GPUS or error > coarse + STEP_S + 5:
        sys.exit(f"time held wrong: {checked} holders checked, off by up to {error:.0f} s")
    return holders, leftover, oldest, error


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    g = os.environ.get("GPUFREE_BIN", os.path.join(root, "target/release/gpufree"))
    for tool in ("prometheus", "promtool", "/usr/bin/time"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is needed (Debian: prometheus, time)")
    tmp = tempfile.mkdtemp(prefix="gpufree-fleet-bench-")
    prom = None
    try:
        now = time.time()
        data = load_blocks(tmp, now)
        prom, url, log = start_prometheus(tmp, data)
        wait_loaded(url, log)
        argv = [g, "fleet", "--prometheus", url, "--history", f"{HISTORY_MIN}m", "--timeout", "30s"]
        walls, rsss, doc, asked_at, prom_cpu = measure(argv, prom)
        holders, leftover, oldest, error = check_view(doc, now, asked_at)
        _, twall, trss, text, _ = timed(argv)
        walls.sort()
        worst_rss = max(rsss + [trss]) / 1024
        print(f"fleet --json: {len(doc['nodes'])} nodes listed, {holders} holders, "
              f"{leftover} with a leftover, longest held {oldest / 3600:.1f} h "
              f"(each off by at most {error / 60:.1f} min); {doc['queries']} queries")
        print(f"wall: median {walls[len(walls) // 2]:.2f} s, max {walls[-1]:.2f} s over {RUNS} runs "
              f"(text: {twall:.2f} s, {len(text.splitlines())} lines) (budget <= {BUDGET_WALL_S} s)")
        print("the text view begins:\n  " + "\n  ".join(text.splitlines()[:9]))
        print(f"peak RSS: {worst_rss:.1f} MiB (budget < {BUDGET_RSS_MIB} MiB); "
              f"Prometheus's CPU per view: {prom_cpu:.2f} s; load average {os.getloadavg()[0]:.1f}")
        ok = max(walls[-1], twall) <= BUDGET_WALL_S and worst_rss < BUDGET_RSS_MIB
        print("budget met" if ok else "BUDGET FAILED")
        sys.exit(0 if ok else 1)
    finally:
        if prom is not None:
            prom.kill()
            prom.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
