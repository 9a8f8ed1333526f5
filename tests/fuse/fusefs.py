#!/usr/bin/env python3
"""A minimal FUSE file system for gpufree's tests, in the Python stdlib.

It speaks the raw /dev/fuse protocol (no libfuse, no fusermount): opens
/dev/fuse, mounts it with mount(2) (root only) and answers the kernel's
requests on one thread. It serves one regular file, `f` (4 KiB of zeros),
in its root directory. Attributes and entries are never cached
(attr_valid = entry_valid = 0), so every ordinary stat of `f` asks this
server again. The mode decides how GETATTR on `f` is answered:

    ok             normally
    block-getattr  never: the request is read and left unanswered (the
                   caller blocks until the file system goes away), while
                   every other request is still served
    eio-getattr    with -EIO
    block-all      every request but INIT is left unanswered (a stuck
                   server: whatever asks it blocks until it goes away)
    block-read     every request is served but READ, which is left
                   unanswered (a reader of `f` blocks until it goes away)

Usage: fusefs.py MOUNTPOINT MODE. Prints "ready" once the kernel's INIT is
answered; on SIGTERM, SIGINT or its parent's death it unmounts (MNT_DETACH)
and closes /dev/fuse, which fails every request still waiting.
"""

import ctypes
import errno
import os
import signal
import struct
import sys

# Opcodes (include/uapi/linux/fuse.h).
LOOKUP, FORGET, GETATTR = 1, 2, 3
OPEN, READ, STATFS, RELEASE, FLUSH, INIT = 14, 15, 17, 18, 25, 26
OPENDIR, READDIR, RELEASEDIR, ACCESS, INTERRUPT = 27, 28, 29, 34, 36
DESTROY, BATCH_FORGET = 38, 42
NO_REPLY = {FORGET, BATCH_FORGET, INTERRUPT}

ROOT, FILE = 1, 2  # node ids; 1 is the root by protocol
FILE_SIZE = 4096
MAX_WRITE = 4096
BUF_SIZE = 1 << 17  # the kernel wants room for one max_write request

IN_HEADER = struct.Struct("=IIQQIIIHH")  # len opcode unique nodeid uid gid pid extlen pad
OUT_HEADER = struct.Struct("=IiQ")  # len error unique
# fuse_attr: ino size blocks atime mtime ctime, their nsecs, mode nlink uid
# gid rdev blksize flags.
ATTR = struct.Struct("=QQQQQQIIIIIIIIII")

libc = ctypes.CDLL(None, use_errno=True)
MS_NOSUID, MS_NODEV, MNT_DETACH = 2, 4, 2
PR_SET_PDEATHSIG = 1


def attr(node):
    if node == ROOT:
        return ATTR.pack(ROOT, 0, 0, 0, 0, 0, 0, 0, 0, 0o040755, 2, 0, 0, 0, 4096, 0)
    return ATTR.pack(FILE, FILE_SIZE, 8, 0, 0, 0, 0, 0, 0, 0o100644, 1, 0, 0, 0, 4096, 0)


def entry(node):
    # nodeid generation entry_valid attr_valid (+nsecs): 0 = never cached.
    return struct.pack("=QQQQII", node, 0, 0, 0, 0, 0) + attr(node)


def attr_out(node):
    return struct.pack("=QII", 0, 0, 0) + attr(node)


def open_out():
    return struct.pack("=QII", 0, 0, 0)  # fh open_flags backing_id


def dirents(offset, size):
    """READDIR: the entries after `offset`, as many as fit in `size`."""
    out = b""
    for i, (node, name, kind) in enumerate([(ROOT, b".", 4), (ROOT, b"..", 4), (FILE, b"f", 8)]):
        if i < offset:
            continue
        ent = struct.pack("=QQII", node, i + 1, len(name), kind) + name
        ent += b"\0" * (-len(ent) % 8)
        if len(out) + len(ent) > size:
            break
        out += ent
    return out


def statfs_out():
    # blocks bfree bavail files ffree bsize namelen frsize padding spare[6]
    return struct.pack("=QQQQQIIII6I", 1, 0, 0, 2, 0, 4096, 255, 4096, 0, 0, 0, 0, 0, 0, 0)


def init_out(body):
    major, minor, readahead, _flags = struct.unpack_from("=IIII", body)
    if major != 7:
        return -errno.EPROTO, b""
    # major minor max_readahead flags max_background congestion_threshold
    # max_write time_gran max_pages map_alignment flags2 unused[7]: 64 bytes.
    return 0, struct.pack("=IIIIHHIIHHI7I", 7, min(minor, 31), readahead, 0,
                          16, 12, MAX_WRITE, 1, 0, 0, 0, *([0] * 7))


def answer(mode, opcode, node, body):
    """(errno, reply body) for one request, or None to leave it unanswered."""
    if opcode == INIT:
        return init_out(body)
    if mode == "block-all":
        return None
    if opcode == LOOKUP:
        name = body.split(b"\0", 1)[0]
        return (0, entry(FILE)) if node == ROOT and name == b"f" else (-errno.ENOENT, b"")
    if opcode == GETATTR:
        if node == FILE and mode == "block-getattr":
            return None  # the hang under test
        if node == FILE and mode == "eio-getattr":
            return -errno.EIO, b""
        return 0, attr_out(node)
    if opcode in (OPEN, OPENDIR):
        return 0, open_out()
    if opcode == READ:
        if mode == "block-read":
            return None  # the reader waits for the server
        _fh, offset, size = struct.unpack_from("=QQI", body)
        return 0, b"\0" * max(0, min(size, FILE_SIZE - offset))
    if opcode == READDIR:
        _fh, offset, size = struct.unpack_from("=QQI", body)
        return 0, dirents(offset, size)
    if opcode == STATFS:
        return 0, statfs_out()
    if opcode in (FLUSH, RELEASE, RELEASEDIR, ACCESS, DESTROY):
        return 0, b""
    return -errno.ENOSYS, b""


def serve(fd, mode):
    while True:
        try:
            req = os.read(fd, BUF_SIZE)
        except OSError as e:
            if e.errno in (errno.ENOENT, errno.EINTR, errno.EAGAIN):
                continue  # a request interrupted before we read it
            if e.errno == errno.ENODEV:
                return  # unmounted
            raise
        _len, opcode, unique, node, *_ = IN_HEADER.unpack_from(req)
        if opcode in NO_REPLY:
            continue
        reply = answer(mode, opcode, node, req[IN_HEADER.size:])
        if reply is None:
            continue
        err, body = reply
        try:
            os.write(fd, OUT_HEADER.pack(OUT_HEADER.size + len(body), err, unique) + body)
        except OSError:
            pass  # the caller gave up (interrupted, killed)
        if opcode == INIT:
            print("ready", flush=True)


def main():
    mnt, mode = sys.argv[1], sys.argv[2]
    if mode not in ("ok", "block-getattr", "eio-getattr", "block-all", "block-read"):
        sys.exit(f"fusefs.py: unknown mode {mode!r}")

    def stop(_sig, _frame):
        raise SystemExit(0)

    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, stop)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)  # never outlive the test
    fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
    opts = f"fd={fd},rootmode=40000,user_id=0,group_id=0,allow_other".encode()
    if libc.mount(b"gpufree-test", mnt.encode(), b"fuse.gpufree-test",
                  MS_NOSUID | MS_NODEV, opts) != 0:
        e = ctypes.get_errno()
        sys.exit(f"fusefs.py: mount {mnt}: {os.strerror(e)}")
    try:
        serve(fd, mode)
    finally:
        libc.umount2(mnt.encode(), MNT_DETACH)
        os.close(fd)  # aborts the connection: waiting requests fail


if __name__ == "__main__":
    main()
