#!/usr/bin/env python3
"""PID-reuse harness for gpufree: hands a GPU holder's PID to an innocent
process at the moments where a PID-based tool would attribute or signal the
wrong process, and checks that gpufree never does.

Run it as PID 1 of a PID namespace of its own, with its own /proc:

    unshare --pid --fork --mount-proc \\
        python3 tests/reuse/driver.py --gpufree BIN --lib LIB --trials N \\
        [--window scan|signal|exec|all] [--via status|why|kill|all] \\
        [--nvml yes|no|mix]

Each trial makes a temporary device directory of plain files and a simulator
state, starts a holder H (a child that opens and maps dev/nvidia0; with
--nvml it is also listed in the state with GPU memory and its start time),
runs gpufree as a child with GPUFREE_TEST_PAUSE set, waits until gpufree has
stopped itself (waitpid WUNTRACED), changes the world, continues it and
judges what it did:

  scan    gpufree (status, why or kill --pid H) stopped after reading H's fd
          table and maps. H is killed and reaped, ns_last_pid makes the next
          fork get H's PID, and an innocent I is started there. Nothing may
          list I as a holder, and kill must not signal it.
  signal  gpufree kill --yes --pid H stopped after the plan was confirmed.
          H's PID is handed to an innocent I the same way. I must not be
          signalled (not even stopped or continued); kill should report the
          PID in kill.identity_changed.
  exec    as signal, but H exec's a program that holds no GPU node (its node
          fd is O_CLOEXEC, its mapping goes with the exec). The exec'd H may
          be stopped and continued by the re-check, never signalled
          otherwise; kill should report it in kill.changed.

The innocent and the exec'd H run RECORDER: every catchable signal they get
is appended to a log. A SIGRTMAX sentinel sent after gpufree exited (real-time
signals are delivered after the standard ones) proves the log is complete and
the process not stopped.

The last line printed is the summary:
  trials=N forced=M wrong_kills=K wrong_listings=L missed_reports=R errors=E
"forced" counts trials where the PID really was handed over (scan and signal
windows) or the exec really happened (exec window). Exit 1 when any trial
killed or listed the wrong process, missed a report, or could not run.

Tests signal only their own children: H, I and gpufree are all children of
this process, signalled by PID while unreaped (so the PID cannot name anyone
else), and every orphan that reaches PID 1 is reaped.
"""

import argparse
import json
import mmap
import os
import select
import shutil
import signal
import sys
import tempfile
import time

WINDOWS = ("scan", "signal", "exec")
VIAS = ("status", "why", "kill")
NS_LAST_PID = "/proc/sys/kernel/ns_last_pid"
SENTINEL = signal.SIGRTMAX
STOP_TIMEOUT_S = 20.0
EXIT_TIMEOUT_S = 60.0
READY_TIMEOUT_S = 10.0
SENTINEL_TIMEOUT_S = 30.0  # generous: a loaded 2-core machine can be slow

# The program of the innocent process and of the exec'd holder: it records
# every catchable signal to argv[1], says it is ready on fd argv[2], then
# sleeps. It starts with every signal blocked (the mask survives fork and
# exec), so a signal sent before its handlers exist is delivered, and
# recorded, once they do.
RECORDER = r"""
import os, signal, sys
log = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
with open("/proc/self/comm", "w") as comm:
    comm.write(sys.argv[3])
def note(signum, frame):
    os.write(log, b"%d\n" % signum)
for s in signal.valid_signals():
    if s not in (signal.SIGKILL, signal.SIGSTOP):
        try:
            signal.signal(s, note)
        except (OSError, ValueError):
            pass
signal.pthread_sigmask(signal.SIG_SETMASK, [])
ready = int(sys.argv[2])
os.write(ready, b"r")
os.close(ready)
while True:
    signal.pause()
"""


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gpufree", required=True, help="the gpufree binary")
    p.add_argument("--lib", required=True, help="the simulated libnvidia-ml.so.1")
    p.add_argument("--trials", type=int, default=30)
    p.add_argument("--window", choices=WINDOWS + ("all",), default="all")
    p.add_argument(
        "--via",
        choices=VIAS + ("all",),
        default="all",
        help="the command whose scan the scan window interrupts (default: each in turn)",
    )
    p.add_argument(
        "--nvml",
        choices=("yes", "no", "mix"),
        default="mix",
        help="list H in the simulator state with memory and its start time (default: every other trial)",
    )
    p.add_argument("--verbose", action="store_true", help="one line per trial on stderr")
    return p.parse_args(argv)


class Trial:
    """One trial's setting, children and outcome."""

    def __init__(self, n, window, via, nvml):
        self.n = n
        self.window = window
        self.via = via
        self.nvml = nvml
        self.tmp = tempfile.mkdtemp(prefix="gpufree-reuse-")
        self.children = []  # PIDs of our unreaped children
        self.holder = None
        self.exec_ready = None  # read end of the exec'd holder's ready pipe
        self.innocent = None
        self.forced = False
        self.same_tick = False
        self.wrong_kill = []
        self.wrong_listing = []
        self.missed_report = []
        self.error = None

    def path(self, name):
        return os.path.join(self.tmp, name)

    def describe(self):
        return f"trial {self.n} window={self.window} via={self.via} nvml={self.nvml} holder={self.holder}"


# --- processes -------------------------------------------------------------


def start_time(pid):
    """Field 22 of /proc/PID/stat (clock ticks after boot)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    return int(stat[stat.rindex(b")") + 2 :].split()[19])


def state_of(pid):
    """The state letter of PID, or None when it does not exist."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return None
    return chr(stat[stat.rindex(b")") + 2])


def cmdline(pid):
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read()


def read_ready(fd, what, timeout=READY_TIMEOUT_S):
    """Waits for one byte on `fd` (a child saying it is ready)."""
    ready, _, _ = select.select([fd], [], [], timeout)
    if not ready or os.read(fd, 1) != b"r":
        raise RuntimeError(f"{what} never said it was ready")
    os.close(fd)


def recorder_argv(log, ready_fd, name):
    return [sys.executable, "-I", "-S", "-c", RECORDER, log, str(ready_fd), name]


def spawn_holder(t, node):
    """H: a child that opens and maps `node`, says so, and waits. On SIGUSR1
    it exec's RECORDER (logging to h.log, ready on a pipe of its own), which
    holds no GPU node."""
    r, w = os.pipe()
    exec_r, exec_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.close(exec_r)
            with open("/proc/self/comm", "w") as comm:
                comm.write("reuse-holder")
            fd = os.open(node, os.O_RDWR)  # O_CLOEXEC: Python fds are not inheritable
            mapping = mmap.mmap(fd, 4096)  # MAP_SHARED; gone with the exec

            def become_recorder(signum, frame):
                os.set_inheritable(exec_w, True)
                signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
                os.execv(sys.executable, recorder_argv(t.path("h.log"), exec_w, "reuse-execd"))

            signal.signal(signal.SIGUSR1, become_recorder)
            os.write(w, b"r")
            while mapping:
                signal.pause()
        finally:
            os._exit(127)
    os.close(w)
    os.close(exec_w)
    t.children.append(pid)
    t.holder = pid
    t.exec_ready = exec_r
    read_ready(r, "the holder")
    return pid


def spawn_innocent(t, want_pid):
    """I: RECORDER (logging to i.log) forked right after ns_last_pid was set
    to want_pid - 1, so that it gets want_pid if that PID is free."""
    r, w = os.pipe()
    os.set_inheritable(w, True)
    old = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    try:
        with open(NS_LAST_PID, "w") as f:
            f.write(str(want_pid - 1))
        pid = os.fork()
        if pid == 0:
            try:
                os.close(r)
                os.execv(sys.executable, recorder_argv(t.path("i.log"), w, "reuse-innocent"))
            finally:
                os._exit(127)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    os.close(w)
    t.children.append(pid)
    t.innocent = pid
    read_ready(r, "the innocent")
    return pid


def spawn_gpufree(t, argv, env):
    """gpufree as our child: stdout to out.json, stderr to err.txt."""
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        actions = [
            (os.POSIX_SPAWN_DUP2, null, 0),
            (os.POSIX_SPAWN_OPEN, 1, t.path("out.json"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
            (os.POSIX_SPAWN_OPEN, 2, t.path("err.txt"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
        ]
        pid = os.posix_spawn(argv[0], argv, env, file_actions=actions)
    finally:
        os.close(null)
    t.children.append(pid)
    return pid


def reap(t, pid, status):
    t.children.remove(pid)
    return status


def wait_stopped(t, pid):
    """Waits until gpufree stops itself; False when it exited instead."""
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline:
        got, status = os.waitpid(pid, os.WNOHANG | os.WUNTRACED)
        if got == pid:
            if os.WIFSTOPPED(status):
                return True
            reap(t, pid, status)
            return False
        time.sleep(0.001)
    raise RuntimeError("gpufree never stopped at the pause point")


def wait_exited(t, pid):
    """Continues gpufree (again whenever it stops itself again) until it exits."""
    deadline = time.monotonic() + EXIT_TIMEOUT_S
    os.kill(pid, signal.SIGCONT)
    while time.monotonic() < deadline:
        got, status = os.waitpid(pid, os.WNOHANG | os.WUNTRACED)
        if got == pid:
            if os.WIFSTOPPED(status):
                os.kill(pid, signal.SIGCONT)
                continue
            return reap(t, pid, status)
        time.sleep(0.002)
    raise RuntimeError("gpufree did not exit")


def kill_and_reap(t, pid):
    os.kill(pid, signal.SIGKILL)  # our unreaped child: the PID is still its own
    os.waitpid(pid, 0)
    t.children.remove(pid)


def cleanup(t):
    for pid in list(t.children):
        try:
            kill_and_reap(t, pid)
        except ChildProcessError:
            t.children.remove(pid)
    if t.exec_ready is not None:
        os.close(t.exec_ready)
    reap_orphans()
    shutil.rmtree(t.tmp, ignore_errors=True)


def reap_orphans():
    """As PID 1 of the namespace, reap whatever was left to us."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def signals_received(t, pid, log):
    """The catchable signals `pid` (running RECORDER) received, or a string
    saying why that cannot be known (dead, stopped)."""
    def logged():
        try:
            with open(log) as f:
                return [int(x) for x in f.read().split()]
        except FileNotFoundError:
            return []

    st = state_of(pid)
    if st is None or st in "ZX":
        return f"dead (after {signal_names(logged()) or 'no catchable signal'})"
    if st in "Tt":
        return "stopped"
    os.kill(pid, SENTINEL)  # our unreaped child
    deadline = time.monotonic() + SENTINEL_TIMEOUT_S
    while time.monotonic() < deadline:
        got = logged()
        if SENTINEL in got:
            return [s for s in got if s != SENTINEL]
        time.sleep(0.001)
    st = state_of(pid)
    return "stopped" if st in "Tt" else f"unresponsive (state {st})"


def signal_names(sigs):
    def name(s):
        try:
            return signal.Signals(s).name
        except ValueError:
            return str(s)

    return ",".join(name(s) for s in sigs)


# --- one trial -------------------------------------------------------------


def setup_world(t):
    dev = t.path("dev")
    os.mkdir(dev)
    for name in ("nvidia0", "nvidiactl", "nvidia-uvm"):
        with open(os.path.join(dev, name), "wb") as f:
            f.write(b"\0" * 4096)
    h = spawn_holder(t, os.path.join(dev, "nvidia0"))
    procs = []
    if t.nvml:
        procs.append(
            {
                "pid": h,
                "used_bytes": 1 << 30,
                "type": "compute",
                "visible": "while-alive",
                "start_time_ticks": start_time(h),
            }
        )
    state = {
        "driver_version": "580.95.05",
        "cuda_driver_version": 13000,
        "devices": [
            {
                "name": "NVIDIA H200",
                "uuid": "GPU-aa00bb00-1111-2222-3333-444455556666",
                "pci_bus_id": "00000000:18:00.0",
                "minor_number": 0,
                "memory_total_bytes": 150754820096,
                "memory_baseline_bytes": 0,
                "release_delay_ms": 0,
                "processes": procs,
            }
        ],
    }
    with open(t.path("state.json"), "w") as f:
        json.dump(state, f)
    return dev


def gpufree_argv(t, binary, lib, dev):
    common = ["--json", "--dev-dir", dev, "--nvml-lib", lib]
    if t.window == "scan" and t.via in ("status", "why"):
        return [binary, t.via] + common
    return [binary, "kill", "--yes", "--pid", str(t.holder), "--grace", "1s", "--timeout", "10s", "--settle", "0"] + common


def ticks_now():
    """Clock ticks since boot, as start times count them."""
    with open("/proc/uptime") as f:
        return int(float(f.read().split()[0]) * os.sysconf("SC_CLK_TCK"))


def hand_pid_over(t):
    """Kills and reaps H, then forks the innocent onto its PID, at least two
    clock ticks after H started: the simulated driver tells processes apart
    by start time, which has the resolution of a tick (the real driver
    tracks the process itself), so a same-tick innocent would be a lie of
    the simulator, not a test of gpufree."""
    h = t.holder
    h_start = start_time(h)
    while ticks_now() < h_start + 2:
        time.sleep(0.002)
    kill_and_reap(t, h)
    i = spawn_innocent(t, h)
    t.forced = i == h
    t.same_tick = t.forced and start_time(i) == h_start


def make_holder_exec(t):
    """Makes H exec RECORDER and waits until it runs there, handlers set."""
    h = t.holder
    before = cmdline(h)
    os.kill(h, signal.SIGUSR1)  # our unreaped child
    read_ready(t.exec_ready, "the exec'd holder")
    t.exec_ready = None
    t.forced = cmdline(h) != before


def judge(t, out, status_code):
    h = t.holder
    doc = None
    if out.strip():
        try:
            doc = json.loads(out)
        except ValueError as e:
            t.error = f"stdout is not JSON ({e}): {out[:200]!r}"
            return
    if doc is None:
        t.error = f"gpufree printed nothing (exit {status_code})"
        return
    # Asked for a walk (GPUFREE_SCAN), the trial must have used it: a run
    # that fell back would test the other walk.
    want = os.environ.get("GPUFREE_SCAN")
    got = (doc.get("visibility") or {}).get("scan")
    if want in ("bpf", "procfs") and got is not None and got != want:
        t.error = f"asked for --scan {want}, ran {got}: {(doc.get('visibility') or {}).get('scan_reason')}"
        return
    if t.window != "exec" and t.forced:
        # H is gone and its PID names the innocent, which holds nothing.
        listed = [p for p in doc.get("processes") or [] if p.get("pid") == h]
        listed += [f for f in doc.get("findings") or [] if h in (f.get("pids") or [])]
        if listed:
            t.wrong_listing.append(f"PID {h} (now the innocent) is listed: {json.dumps(listed)[:300]}")
    if t.window == "scan" and t.via != "kill":
        got = signals_received(t, t.innocent, t.path("i.log"))
        if got:
            t.wrong_kill.append(f"{t.via} touched the innocent: {got if isinstance(got, str) else signal_names(got)}")
        return
    k = doc.get("kill")
    if not isinstance(k, dict):
        t.error = f"no kill object (exit {status_code})"
        return
    targets = k.get("targets") or []
    if t.window == "exec":
        victim, log, allowed = h, t.path("h.log"), {signal.SIGCONT}
    else:
        victim, log, allowed = t.innocent, t.path("i.log"), set()
    who = "the exec'd holder" if t.window == "exec" else "the innocent"
    got = signals_received(t, victim, log)
    if isinstance(got, str):
        t.wrong_kill.append(f"{who} is {got}")
    elif set(got) - allowed:
        t.wrong_kill.append(f"{who} received {signal_names(got)}")
    if victim in targets:
        t.wrong_kill.append(f"{who} ({victim}) is in kill.targets {targets}")
    if t.window == "exec":
        changed = [c.get("pid") for c in k.get("changed") or []]
        if h not in changed:
            t.missed_report.append(f"the exec'd holder {h} is not in kill.changed: {json.dumps(k)[:400]}")
    elif t.window == "signal" and t.forced:
        if h not in (k.get("identity_changed") or []):
            t.missed_report.append(f"PID {h} is not in kill.identity_changed: {json.dumps(k)[:400]}")


def run_trial(t, args):
    dev = setup_world(t)
    env = dict(os.environ)
    for name in ("GPUFREE_DEV_DIR", "GPUFREE_NVML_LIB", "GPUFREE_PROC_ROOT", "NO_COLOR"):
        env.pop(name, None)
    env["GPUFREE_SIM_STATE"] = t.path("state.json")
    env["GPUFREE_TEST_PAUSE"] = f"scan:{t.holder}" if t.window == "scan" else "signal"
    g = spawn_gpufree(t, gpufree_argv(t, args.gpufree, args.lib, dev), env)
    if not wait_stopped(t, g):
        t.error = "gpufree exited before its pause point: " + read(t.path("err.txt"))[-400:]
        return
    if t.window == "exec":
        make_holder_exec(t)
    else:
        hand_pid_over(t)
    status = wait_exited(t, g)
    code = os.waitstatus_to_exitcode(status)
    judge(t, read(t.path("out.json")), code)
    if t.error:
        t.error += " | stderr: " + read(t.path("err.txt"))[-400:]


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


# --- the run ---------------------------------------------------------------


def plan(args):
    windows = WINDOWS if args.window == "all" else (args.window,)
    vias = VIAS if args.via == "all" else (args.via,)
    for n in range(args.trials):
        window = windows[n % len(windows)]
        rnd = n // len(windows)
        via = vias[rnd % len(vias)] if window == "scan" else "kill"
        nvml = {"yes": True, "no": False}.get(args.nvml, (rnd // len(vias)) % 2 == 0)
        yield Trial(n, window, via, nvml)


def check_namespace():
    if os.getpid() != 1 or os.readlink("/proc/self") != "1":
        sys.exit(
            "driver.py must run as PID 1 of its own PID namespace with its own /proc:\n"
            "  unshare --pid --fork --mount-proc python3 tests/reuse/driver.py ..."
        )
    if not os.access(NS_LAST_PID, os.W_OK):
        sys.exit(f"{NS_LAST_PID} is not writable (run as root)")


def main(argv):
    args = parse_args(argv)
    check_namespace()
    # PID 1 ignores signals it has no handler for; make Ctrl-C and TERM end the run.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    counts = dict(trials=0, forced=0, wrong_kills=0, wrong_listings=0, missed_reports=0, errors=0, same_tick=0)
    per = {}
    started = time.monotonic()
    shown = 0
    for t in plan(args):
        try:
            run_trial(t, args)
        except RuntimeError as e:
            t.error = str(e)
        finally:
            cleanup(t)
        key = (t.window, t.via)
        row = per.setdefault(key, dict(trials=0, forced=0, wrong=0))
        row["trials"] += 1
        row["forced"] += t.forced
        row["wrong"] += bool(t.wrong_kill or t.wrong_listing)
        counts["trials"] += 1
        counts["forced"] += t.forced
        counts["same_tick"] += t.same_tick
        counts["wrong_kills"] += bool(t.wrong_kill)
        counts["wrong_listings"] += bool(t.wrong_listing)
        counts["missed_reports"] += bool(t.missed_report)
        counts["errors"] += t.error is not None
        problems = t.wrong_kill + t.wrong_listing + t.missed_report + ([t.error] if t.error else [])
        if problems and shown < 10:
            shown += 1
            print(f"{t.describe()}: " + "; ".join(problems), file=sys.stderr)
        elif args.verbose:
            print(f"{t.describe()}: ok forced={t.forced}", file=sys.stderr)
    for (window, via), row in sorted(per.items()):
        print(f"window={window} via={via} " + " ".join(f"{k}={v}" for k, v in row.items()))
    counts["seconds"] = f"{time.monotonic() - started:.1f}"
    print(" ".join(f"{k}={v}" for k, v in counts.items()), flush=True)
    bad = counts["wrong_kills"] + counts["wrong_listings"] + counts["missed_reports"] + counts["errors"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
