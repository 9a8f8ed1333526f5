#!/usr/bin/env python3
"""`gpufree serve` under abuse, on loopback (a benchmark, not a test).

Starts the simulated 8-GPU incident (`gpufree demo --hold`) and a
`gpufree serve` on 127.0.0.1 against it (`gpufree sim exec`), then measures:

1. single scrapes: one client, one kept-alive connection, a scrape every
   10 ms for SECONDS (10), latency p50/p99;
2. 50 concurrent scrapers: 50 kept-alive connections, each scraping once
   every PERIOD (100 ms: 500 scrapes a second) at its own phase for
   SECONDS, as 50 Prometheus servers would; latency p50/p99 against 1.
   Then the same 50 in lockstep (all requests sent at once, ROUNDS
   times): shown, not budgeted, since the last of 50 requests sent at once
   waits for the 49 before it on 2 cores whatever the server;
3. abuse (serve runs with 300 s head and idle deadlines, so that it holds
   every connection of the attacker): 2,000 idle connections held open (half silent, half stopped in
   the middle of a request head) plus a 64 MiB header flood (several
   connections sending header bytes without end, reconnecting when the
   server cuts them off); meanwhile a fresh scrape every 100 ms, its
   latency, and serve's VmRSS sampled from /proc; VmHWM (peak) at the end;
4. after the abuse, a scrape still answers.

Budget (SPEC.md): RSS under 64 MiB and a scrape within 1 s under the abuse;
p99 of 50 concurrent scrapers within 2x a single scrape's p99. Prints the
figures, exits 1 when the budget fails. Every loop is bounded in count and
time; every connection goes to 127.0.0.1; everything started is stopped.

Run from the repository root after `cargo build --release --workspace`
(GPUFREE_BIN overrides the binary). Knobs: IDLE (2000), FLOOD_MIB (64),
FLOODERS (8), HEAD_FILL (0: header bytes each half-sent head carries), CONCURRENT (50), PERIOD (0.1), SECONDS (10), ROUNDS (40).
"""
import os
import random
import re
import resource
import selectors
import socket
import subprocess
import sys
import threading
import time

IDLE = int(os.environ.get("IDLE", "2000"))
FLOOD_MIB = int(os.environ.get("FLOOD_MIB", "64"))
FLOODERS = int(os.environ.get("FLOODERS", "8"))
# Bytes of header each idle connection stopped mid-head has sent (16000:
# the most a head may hold, the worst case for serve's memory).
HEAD_FILL = int(os.environ.get("HEAD_FILL", "0"))
CONCURRENT = int(os.environ.get("CONCURRENT", "50"))
ROUNDS = int(os.environ.get("ROUNDS", "40"))
PERIOD = float(os.environ.get("PERIOD", "0.1"))
SINGLE_PERIOD = 0.01
SECONDS = float(os.environ.get("SECONDS", "10"))
BUDGET_RSS_MIB = 64
BUDGET_SCRAPE_S = 1.0
BUDGET_P99_RATIO = 2.0
DEADLINE = time.monotonic() + 600  # the whole run, whatever happens

REQUEST = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def pct(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]


def read_response(sock, buf=b""):
    """Reads one HTTP/1.1 response with a content-length; returns
    (status, body, rest of the buffer)."""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before the response head")
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    m = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    length = int(m.group(1)) if m else 0
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed in the middle of the body")
        rest += chunk
    return status, rest[:length], rest[length:]


def scrape_fresh(addr, timeout=5.0):
    """One scrape on a new connection: (ok, seconds)."""
    t = time.perf_counter()
    try:
        with socket.create_connection(addr, timeout=timeout) as s:
            s.sendall(REQUEST)
            status, body, _ = read_response(s)
        ok = status == 200 and b"gpufree_gpu_memory_used_bytes" in body and body.endswith(b"# EOF\n")
    except OSError:
        ok = False
    return ok, time.perf_counter() - t


def concurrent_rounds(addr, n, rounds):
    """`rounds` rounds over `n` kept-alive connections; in each round all n
    requests are sent at once. Returns every request's latency (s) and the
    number of failed ones."""
    socks = [socket.create_connection(addr, timeout=10) for _ in range(n)]
    for s in socks:
        s.setblocking(False)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sel = selectors.DefaultSelector()
    latencies, failed = [], 0
    try:
        for _ in range(rounds):
            if time.monotonic() > DEADLINE:
                break
            state = {}
            for s in socks:
                state[s] = [time.perf_counter(), b""]
                s.send(REQUEST)
                sel.register(s, selectors.EVENT_READ)
            left = n
            round_deadline = time.monotonic() + 10
            while left and time.monotonic() < round_deadline:
                for key, _ in sel.select(timeout=1):
                    s = key.fileobj
                    chunk = s.recv(1 << 20)
                    st = state[s]
                    st[1] += chunk
                    done = parse_complete(st[1])
                    if not chunk or done is not None:
                        sel.unregister(s)
                        left -= 1
                        if done and done[0] == 200:
                            latencies.append(time.perf_counter() - st[0])
                        else:
                            failed += 1
            failed += left
            for s in list(sel.get_map().values()):
                sel.unregister(s.fileobj)
    finally:
        for s in socks:
            s.close()
    return latencies, failed


def staggered(addr, n, period, seconds):
    """`n` scrapers on kept-alive connections, each scraping once every
    `period` seconds at its own (random, seeded) phase, for `seconds`, as n
    Prometheus servers would. Returns every request's latency (s) and the
    number of failed ones."""
    rng = random.Random(7)
    socks = [socket.create_connection(addr, timeout=10) for _ in range(n)]
    for s in socks:
        s.setblocking(False)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sel = selectors.DefaultSelector()
    start = time.perf_counter()
    end = start + seconds
    due = {s: start + rng.uniform(0, period) for s in socks}
    flight = {}
    latencies, failed = [], 0
    try:
        while time.monotonic() < DEADLINE:
            now = time.perf_counter()
            if now >= end and not flight:
                break
            for s, t in due.items():
                if s not in flight and t <= now < end:
                    flight[s] = [now, b""]
                    s.send(REQUEST)
                    sel.register(s, selectors.EVENT_READ)
            waiting = [t for s, t in due.items() if s not in flight and t < end]
            timeout = max(0.0, min(waiting) - time.perf_counter()) if waiting else 0.5
            for key, _ in sel.select(timeout=min(timeout, 0.5)):
                s = key.fileobj
                chunk = s.recv(1 << 20)
                st = flight[s]
                st[1] += chunk
                done = parse_complete(st[1])
                if not chunk or done is not None:
                    sel.unregister(s)
                    del flight[s]
                    if done and done[0] == 200:
                        latencies.append(time.perf_counter() - st[0])
                    else:
                        failed += 1
                    due[s] += period
            if time.perf_counter() > end + 10:
                failed += len(flight)
                break
    finally:
        for s in socks:
            s.close()
    return latencies, failed


def parse_complete(buf):
    """(status, body) once `buf` holds a whole response, else None."""
    if b"\r\n\r\n" not in buf:
        return None
    head, _, rest = buf.partition(b"\r\n\r\n")
    m = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    length = int(m.group(1)) if m else 0
    if len(rest) < length:
        return None
    return int(head.split(b" ", 2)[1]), rest[:length]


class Flood:
    """Sends header bytes without end over FLOODERS connections until
    `total` bytes were accepted by the kernel, reconnecting whenever the
    server cuts a connection off."""

    def __init__(self, addr, total):
        self.addr, self.total = addr, total
        self.sent, self.connections, self.answers = 0, 0, {}
        self.lock = threading.Lock()

    def done(self):
        with self.lock:
            return self.sent >= self.total

    def run(self, k):
        line = b"X-Flood-%d: " % k + b"a" * 1000 + b"\r\n"
        endless = b"a" * 65536
        while time.monotonic() < DEADLINE and not self.done():
            try:
                with socket.socket() as s:
                    # Small kernel buffers: the flood's bytes reach the
                    # server instead of waiting in the kernel.
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 32768)
                    s.settimeout(5)
                    s.connect(self.addr)
                    with self.lock:
                        self.connections += 1
                    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                    if k % 2 == 0:
                        s.sendall(b"X-Endless: ")
                    chunk = endless if k % 2 == 0 else line * 64
                    while not self.done():
                        n = s.send(chunk)
                        with self.lock:
                            self.sent += n
                    s.settimeout(1)
                    try:
                        answer = s.recv(64).split(b"\r\n", 1)[0].decode(errors="replace")
                    except OSError:
                        answer = "reset"
                    self.note(answer or "closed")
            except OSError:
                self.note("cut off")

    def note(self, answer):
        with self.lock:
            self.answers[answer] = self.answers.get(answer, 0) + 1


def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = IDLE + CONCURRENT + FLOODERS + 256
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(need, soft)), hard))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    g = os.environ.get("GPUFREE_BIN", os.path.join(root, "target/release/gpufree"))
    demo = subprocess.Popen([g, "demo", "--hold", "--no-color"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    serve = None
    held = []
    failures = []
    try:
        state = None
        for line in demo.stdout:
            m = re.search(r"(/\S+/state\.json)", line)
            if m and state is None:
                state = m.group(1)
            if line.startswith("Press Enter"):
                break
        if state is None:
            sys.exit("the demo printed no state file")
        dev = os.path.join(os.path.dirname(state), "dev")
        # The attacker's connections are held for the whole run (deadlines
        # far away): the worst case for memory.
        serve = subprocess.Popen(
            [g, "sim", "exec", "--state", state, "--", g, "serve", "--listen", "127.0.0.1:0",
             "--interval", "2s", "--dev-dir", dev, "--header-timeout", "300s", "--idle-timeout", "300s"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        line = serve.stderr.readline()
        m = re.search(r"http://([\d.]+):(\d+)/", line)
        if not m:
            sys.exit(f"serve did not start: {line}")
        threading.Thread(target=lambda: [None for _ in serve.stderr], daemon=True).start()
        addr = (m.group(1), int(m.group(2)))
        pid = serve.pid  # sim exec execs serve: the same process
        size = len(read_body(addr))
        print(f"serve pid {pid} on {addr[0]}:{addr[1]}, /metrics of the incident: {size} bytes, "
              f"VmRSS {status_kib(pid, 'VmRSS') / 1024:.1f} MiB at rest")

        # 1. One scraper, every 10 ms for as long as the 50 below run, so
        # that both see the collector's scans (every 2 s) alike.
        single, failed = staggered(addr, 1, SINGLE_PERIOD, SECONDS)
        s50, s99 = pct(single, 50) * 1e3, pct(single, 99) * 1e3
        print(f"single scraper, every {SINGLE_PERIOD * 1e3:.0f} ms: {len(single)} scrapes, p50 {s50:.2f} ms, "
              f"p99 {s99:.2f} ms, failed {failed}")
        if failed:
            failures.append(f"{failed} single scrapes failed")

        # 2. 50 scrapers, as 50 Prometheus servers would scrape: each at its
        # own phase, once every PERIOD.
        many, failed = staggered(addr, CONCURRENT, PERIOD, SECONDS)
        c50, c99 = pct(many, 50) * 1e3, pct(many, 99) * 1e3
        ratio = c99 / s99
        print(f"{CONCURRENT} scrapers, each every {PERIOD * 1e3:.0f} ms: {len(many)} scrapes, p50 {c50:.2f} ms, "
              f"p99 {c99:.2f} ms, failed {failed}; p99 {ratio:.2f}x the single scraper's (budget <= {BUDGET_P99_RATIO}x)")
        if failed:
            failures.append(f"{failed} concurrent scrapes failed")
        if ratio > BUDGET_P99_RATIO:
            failures.append(f"p99 of {CONCURRENT} concurrent scrapers is {ratio:.2f}x a single one's")
        # The same 50 all at once, every request queued behind the others
        # (one thread answers them in turn): shown, not budgeted.
        burst, failed = concurrent_rounds(addr, CONCURRENT, ROUNDS)
        b50, b99 = pct(burst, 50) * 1e3, pct(burst, 99) * 1e3
        print(f"{CONCURRENT} scrapers in lockstep: {len(burst)} scrapes, p50 {b50:.2f} ms, p99 {b99:.2f} ms, "
              f"failed {failed} ({b99 / s99:.1f}x; all sent at once, the last waits for the others)")
        if failed:
            failures.append(f"{failed} lockstep scrapes failed")
        time.sleep(0.5)  # the scrapers' connections are closed on both sides

        # 3. Abuse.
        fds_before = fds(pid)
        t0 = time.monotonic()
        for i in range(IDLE):
            s = socket.create_connection(addr, timeout=5)
            if i % 2:
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * HEAD_FILL)
            held.append(s)
        time.sleep(0.5)
        print(f"idle connections:      {len(held)} opened in {time.monotonic() - t0:.1f} s; "
              f"serve holds {fds(pid) - fds_before} more fds")
        probes = []
        stop = threading.Event()

        def probe():
            while not stop.is_set() and time.monotonic() < DEADLINE:
                probes.append(scrape_fresh(addr))
                stop.wait(0.1)

        prober = threading.Thread(target=probe)
        prober.start()
        flood = Flood(addr, FLOOD_MIB << 20)
        flooders = [threading.Thread(target=flood.run, args=(k,)) for k in range(FLOODERS)]
        t0 = time.monotonic()
        for t in flooders:
            t.start()
        rss_max = 0
        while any(t.is_alive() for t in flooders) and time.monotonic() < DEADLINE:
            rss_max = max(rss_max, status_kib(pid, "VmRSS"))
            time.sleep(0.05)
        for t in flooders:
            t.join()
        flood_s = time.monotonic() - t0
        still_held = fds(pid) - fds_before
        time.sleep(2)  # probes with the idle connections still held
        rss_max = max(rss_max, status_kib(pid, "VmRSS"))
        stop.set()
        prober.join()
        hwm = status_kib(pid, "VmHWM")
        print(f"header flood:          {flood.sent / (1 << 20):.0f} MiB over {flood.connections} connections "
              f"in {flood_s:.1f} s; answers {dict(sorted(flood.answers.items()))}")
        print(f"                       serve still holds {still_held} more fds than at rest")
        ok = [t for good, t in probes if good]
        bad = len(probes) - len(ok)
        worst = max((t for _, t in probes), default=float("nan"))
        print(f"scrapes under abuse:   {len(probes)}, failed {bad}, p50 {pct(ok, 50) * 1e3 if ok else float('nan'):.1f} ms, "
              f"max {worst * 1e3:.1f} ms (budget < {BUDGET_SCRAPE_S * 1e3:.0f} ms)")
        print(f"serve memory:          VmRSS max {rss_max / 1024:.1f} MiB during the abuse, "
              f"VmHWM {hwm / 1024:.1f} MiB (budget < {BUDGET_RSS_MIB} MiB)")
        if not probes or bad:
            failures.append(f"{bad} of {len(probes)} scrapes under abuse failed")
        if worst >= BUDGET_SCRAPE_S:
            failures.append(f"a scrape under abuse took {worst:.2f} s")
        if hwm >= BUDGET_RSS_MIB * 1024:
            failures.append(f"VmHWM {hwm / 1024:.1f} MiB")

        # 4. After.
        for s in held:
            s.close()
        held.clear()
        good, t = scrape_fresh(addr)
        print(f"after the abuse:       scrape {'answered' if good else 'FAILED'} in {t * 1e3:.1f} ms")
        if not good or t >= BUDGET_SCRAPE_S:
            failures.append("no scrape after the abuse")
    finally:
        for s in held:
            s.close()
        if serve is not None:
            serve.terminate()
            serve.wait()
        demo.stdin.close()
        demo.wait()
    if failures:
        print("BUDGET FAILED: " + "; ".join(failures))
        sys.exit(1)
    print("budget held")


def read_body(addr):
    with socket.create_connection(addr, timeout=5) as s:
        s.sendall(REQUEST)
        return read_response(s)[1]


if __name__ == "__main__":
    main()
