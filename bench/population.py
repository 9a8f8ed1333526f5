#!/usr/bin/env python3
"""Starts the benchmark's process population and holds it until stdin closes.

N processes (default 700), each with about F open fds (default 90: /dev/null
and pipes) and M extra file mappings (default 14), of which H (default 20)
also hold GPU nodes of DEVDIR by fd and by mmap. With dups=D (default 0)
each process also opens /dev/null once more and os.dup()s it to D extra fds
(cheap for the kernel: one open file, D table slots), raising its own
RLIMIT_NOFILE as needed, up to /proc/sys/fs/nr_open (or, without
CAP_SYS_RESOURCE, its hard limit); bench/scan.py --scaling uses it. Prints "ready" when all are set up, exits with an error
if one could not. On EOF of stdin it SIGKILLs and reaps exactly the
processes it started, nothing else.
"""
import mmap
import os
import resource
import signal
import sys


def raise_nofile(need):
    """Raises this process's fd limit to at least need (capped at nr_open).
    Raising the hard limit needs CAP_SYS_RESOURCE; without it, the soft limit
    goes up to the hard one, and a need beyond that is an error."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= need:
        return
    with open("/proc/sys/fs/nr_open") as f:
        nr_open = int(f.read())
    want = min(need, nr_open)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, max(hard, want)))
    except (ValueError, OSError):
        if want > hard:
            raise RuntimeError(f"needs {need} fds, hard limit {hard} and no privilege to raise it: "
                               f"spread them over more processes (n=)")
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def child(i, args, devnodes, mapfiles, ready_w):
    keep = []
    for _ in range(args["fds"] // 3):
        keep.append(os.open("/dev/null", os.O_RDONLY))
        keep.extend(os.pipe())
    for f in mapfiles[: args["maps"]]:
        fd = os.open(f, os.O_RDONLY)
        keep.append(mmap.mmap(fd, 4096, mmap.MAP_SHARED, mmap.PROT_READ))
        os.close(fd)
    if i < args["holders"]:
        for node in (devnodes[i % (len(devnodes) - 1)], devnodes[-1]):
            fd = os.open(node, os.O_RDONLY)
            keep.append(fd)
            keep.append(mmap.mmap(fd, 4096, mmap.MAP_SHARED, mmap.PROT_READ))
    if args["dups"] > 0:
        # The fds so far, the dups, and some slack.
        raise_nofile(len(os.listdir("/proc/self/fd")) + args["dups"] + 16)
        fd = os.open("/dev/null", os.O_RDONLY)
        keep.append(fd)
        keep.extend(os.dup(fd) for _ in range(args["dups"] - 1))
    os.write(ready_w, b".")
    while True:
        signal.pause()


def main():
    dev = sys.argv[1]
    args = {"n": 700, "fds": 90, "maps": 14, "holders": 20, "dups": 0}
    for a in sys.argv[2:]:
        k, v = a.split("=")
        args[k] = int(v)
    os.makedirs(dev, exist_ok=True)
    names = [f"nvidia{i}" for i in range(8)] + ["nvidiactl", "nvidia-uvm"]
    for n in names:
        with open(os.path.join(dev, n), "wb") as f:
            f.write(b"\0" * 4096)
    devnodes = [os.path.join(dev, n) for n in names[:8]] + [os.path.join(dev, "nvidia-uvm")]
    mapdir = os.path.join(os.path.dirname(os.path.abspath(dev)), "maps")
    os.makedirs(mapdir, exist_ok=True)
    mapfiles = []
    for j in range(args["maps"]):
        p = os.path.join(mapdir, f"lib{j}.so")
        with open(p, "wb") as f:
            f.write(b"\0" * 4096)
        mapfiles.append(p)
    ready_r, ready_w = os.pipe()
    pids = []
    for i in range(args["n"]):
        pid = os.fork()
        if pid == 0:
            os.close(ready_r)
            try:
                child(i, args, devnodes, mapfiles, ready_w)
            except BaseException as e:
                # Tell the parent instead of leaving it waiting for our ".".
                os.write(ready_w, b"!")
                print(f"population child {i}: {e!r}", file=sys.stderr, flush=True)
            finally:
                os._exit(1)
        pids.append(pid)
    got = 0
    failed = False
    while got < len(pids):
        b = os.read(ready_r, 4096)
        got += len(b)
        failed = failed or b"!" in b
    if failed:
        print("failed", flush=True)
    else:
        print("ready", flush=True)
        sys.stdin.read()
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    for pid in pids:
        os.waitpid(pid, 0)
    if failed:
        sys.exit("population: a process could not be set up")


if __name__ == "__main__":
    main()
