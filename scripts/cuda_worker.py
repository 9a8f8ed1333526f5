#!/usr/bin/env python3
"""A real CUDA process that behaves like a vLLM worker, for the real-GPU check.

Creates a CUDA context on GPU INDEX through the driver API (libcuda.so.1, no
framework needed), allocates MIB MiB, then renames itself as setproctitle
does: prctl(PR_SET_NAME) for comm and the title written over the argv area
for /proc/PID/cmdline. Prints "ready PID" and sleeps until killed.

Usage: cuda_worker.py INDEX MIB TITLE [--fork-child]
       cuda_worker.py --hold FILE TITLE   (no GPU: open and map FILE instead;
                                           the tests use it for a real renamed
                                           Python holder)
       cuda_worker.py --launch INDEX MIB TITLE
           the incident's shape: a launcher that holds /dev/nvidia-uvm, a
           resource tracker forked from it (inherits the fd, no context) and
           a worker renamed TITLE whose DataLoader-like child is forked after
           the allocation (inherits the device fds and mappings, no context).
           Prints "launcher PID", then the worker's lines; sleeps until killed.

--fork-child: after the allocation, fork a child that only sleeps, as a
DataLoader worker does; prints "child PID".
"""
import subprocess
import mmap
import ctypes
import os
import sys
import time


def check(rc, what):
    if rc != 0:
        sys.exit(f"cuda_worker: {what} failed with CUresult {rc}")


def set_title(title):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(15, ctypes.c_char_p(title.encode()[:15]), 0, 0, 0)  # PR_SET_NAME
    with open("/proc/self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    start, end = int(fields[45]), int(fields[46])  # stat fields 48, 49: arg_start, arg_end
    data = title.encode()[: end - start - 1]
    ctypes.memmove(start, data + b"\0" * (end - start - len(data)), end - start)


def main():
    if sys.argv[1] == "--launch":
        launch()
    if sys.argv[1] == "--hold":
        fd = os.open(sys.argv[2], os.O_RDONLY)
        keep = mmap.mmap(fd, 4096, mmap.MAP_SHARED, mmap.PROT_READ)
        set_title(sys.argv[3])
        print(f"ready {os.getpid()}", flush=True)
        while keep:
            time.sleep(3600)
    index, mib, title = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    cuda = ctypes.CDLL("libcuda.so.1")
    check(cuda.cuInit(0), "cuInit")
    dev = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(dev), index), "cuDeviceGet")
    # The primary context: the same ABI from CUDA 7 to 13 (cuCtxCreate's
    # signature changed in 13).
    ctx = ctypes.c_void_p()
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    check(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    ptr = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(mib << 20)), "cuMemAlloc")
    if "--fork-child" in sys.argv[4:]:
        child = os.fork()
        if child == 0:
            while True:
                time.sleep(3600)
        print(f"child {child}", flush=True)
    set_title(title)
    print(f"ready {os.getpid()}", flush=True)
    while True:
        time.sleep(3600)


def launch():
    index, mib, title = sys.argv[2], sys.argv[3], sys.argv[4]
    uvm = os.open("/dev/nvidia-uvm", os.O_RDWR)
    tracker = os.fork()
    if tracker == 0:
        while uvm:
            time.sleep(3600)
    print(f"launcher {os.getpid()} tracker {tracker}", flush=True)
    subprocess.Popen([sys.executable, sys.argv[0], index, mib, title, "--fork-child"])
    while uvm:
        time.sleep(3600)


if __name__ == "__main__":
    main()
