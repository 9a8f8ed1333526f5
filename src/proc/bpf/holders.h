/* The record the holder scan writes, shared with the loader
 * (src/proc/bpf/record.rs reads it field by field: 48 bytes). */
#ifndef GPUFREE_HOLDERS_H
#define GPUFREE_HOLDERS_H

/* The most nodes the loader gives the walk (mod.rs: MAX_TARGETS). */
#define MAX_TARGETS 400

#define REC_TASK 1 /* a process: pid, its parent, start time, comm */
#define REC_FD 2   /* an open fd on a target: pid, fd, target */
#define REC_VMA 3  /* a mapping of a target: pid, target */
#define REC_UNREAD 4 /* a process the per-process walk could not read in full: pid */

struct gf_rec {
	__u32 kind;
	__u32 pid;      /* thread group id in the reader's PID namespace */
	__u32 aux;      /* REC_TASK: parent's tgid there (0: not visible); REC_FD: fd */
	__u32 target;   /* REC_FD, REC_VMA: index into the targets */
	__u64 start_ns; /* the thread group leader's start_boottime */
	__u32 tid;      /* REC_FD: the task whose table has the fd, in the reader's namespace */
	__u32 pad;
	char comm[16];  /* REC_TASK: the leader's comm */
};

/* What the loader assumes (record.rs: SIZE). */
_Static_assert(sizeof(struct gf_rec) == 48, "src/proc/bpf/record.rs reads 48-byte records");

#endif
