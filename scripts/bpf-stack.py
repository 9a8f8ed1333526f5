#!/usr/bin/env python3
"""Checks that every program of a BPF object fits the kernel's stack.

The kernel gives a program and the functions it calls 512 bytes of stack
in all, counting each function's frame along the deepest chain of calls
(bpf_loop's steps are calls too), each frame rounded up to 32 bytes on
kernels 6.7 and 6.8 (to 16 later, with the JIT). A chain past 512 bytes is
refused by the verifier there, and gpufree falls back to its slower walk:
this check fails instead, on any kernel, when an edit grows a frame past
the budget.

Reads `llvm-objdump -dr` of OBJECT: each function's frame is the deepest
stack offset it uses (`r10 - N`); a call of a function is a relocation
naming it, or naming `.text` with the function's offset as the
instruction's immediate (a bpf_loop step's address). Prints each
program's deepest chain; exits 1 where one passes 512 bytes.

    scripts/bpf-stack.py OBJECT [LLVM_OBJDUMP]
"""
import re
import subprocess
import sys

LIMIT = 512


def frame(depth):
    """A frame as kernels 6.7 and 6.8 count it: at least 1 byte, rounded
    up to 32."""
    return (max(depth, 1) + 31) // 32 * 32


def parse(text):
    """(section of each function, its frame, the functions it calls)."""
    section, func, last_imm = None, None, None
    where, depth, calls, at = {}, {}, {}, {}
    for line in text.splitlines():
        if m := re.match(r"Disassembly of section (\S+):", line):
            section = m.group(1)
        elif m := re.match(r"([0-9a-f]+) <([^>]+)>:", line):
            if not m.group(2).startswith("LBB"):
                func = m.group(2)
                where[func], depth[func], calls[func] = section, 0, set()
                if section == ".text":
                    at[int(m.group(1), 16)] = func
        elif func and (m := re.search(r"R_BPF_64_(?:64|32)\s+(\S+)", line)):
            calls[func].add((m.group(1), last_imm))
        elif func:
            for n in re.findall(r"\(r10 - (\d+)\)", line):
                depth[func] = max(depth[func], int(n))
            imm = re.search(r"= (-?\d+) ll$", line)
            last_imm = int(imm.group(1)) if imm else None
    edges = {}
    for f, targets in calls.items():
        edges[f] = set()
        for name, imm in targets:
            if name == ".text" and imm in at:
                edges[f].add(at[imm])
            elif name in where:
                edges[f].add(name)
    return where, {f: frame(d) for f, d in depth.items()}, edges


def deepest(f, frames, edges, seen=()):
    """The deepest chain of calls from `f`: (bytes, names)."""
    if f in seen:
        sys.exit(f"bpf-stack: {f} calls itself (recursion the verifier refuses)")
    below = [deepest(g, frames, edges, seen + (f,)) for g in edges[f]]
    size, names = max(below, default=(0, []))
    return frames[f] + size, [f] + names


def main():
    obj = sys.argv[1]
    objdump = sys.argv[2] if len(sys.argv) > 2 else "llvm-objdump"
    out = subprocess.run([objdump, "-dr", "--no-show-raw-insn", obj], check=True,
                         capture_output=True, text=True).stdout
    where, frames, edges = parse(out)
    over = False
    for prog in sorted(f for f, s in where.items() if s != ".text"):
        size, chain = deepest(prog, frames, edges)
        print(f"{prog}: {size} of {LIMIT} bytes of stack: " +
              " -> ".join(f"{f} ({frames[f]})" for f in chain))
        over |= size > LIMIT
    if over:
        sys.exit(f"bpf-stack: a program of {obj} needs more than {LIMIT} bytes of stack "
                 "on kernels 6.7 and 6.8, whose verifier refuses it")


if __name__ == "__main__":
    main()
