// SPDX-License-Identifier: GPL-2.0
/* gpufree's in-kernel holder scan. Two sets of programs, of which the loader
 * takes the first the kernel accepts:
 *
 * - The per-process walk (kernel 6.7 and later): one iter/task program,
 *   read by two walkers at once, that writes each process's record and
 *   walks its fd table itself (bpf_loop over the open-fd bitmap) and its
 *   mappings with the open-coded mapping iterator. It neither takes a
 *   reference on each file nor looks each mapping up again, as the
 *   kernel's file and mapping iterators do: the walk costs half as much.
 * - The iterator walk: three BPF iterators walk, in the reader's PID
 *   namespace, every process (iter/task), every open file of every task
 *   (iter/task_file) and every mapping (iter/task_vma).
 *
 * A process record is
 * written for each thread group leader (the process tree); a holder record
 * only for an fd or a mapping whose file is a target: the same inode (the
 * superblock's dev and the inode number) or, for a character or block
 * device, the same device number (another mount's node of the same device:
 * a container's /dev). Every record carries the thread group leader's start
 * time, read in the same pass, so that the loader pins exactly the process
 * that matched.
 *
 * Regenerate the committed object with scripts/build-bpf.sh (clang only). */
#include "kernel.h"
#include "holders.h"

char LICENSE[] SEC("license") = "GPL"; /* bpf_seq_write is GPL-only */

#define PF_EXITING 0x00000004 /* include/linux/sched.h */
#define PF_KTHREAD 0x00200000
#define EEXIST 17
#define BPF_MAP_TYPE_HASH 1

/* The targets' prefilter, written by the loader after the load (.bss: the
 * verifier takes it as unknown, so one verified program serves any set of
 * targets, and `gpufree prepare` can keep one loaded for later commands).
 * A cheap test that spares most files the map lookups: a bit per target's
 * inode (inode number % 64), per target's superblock (dev_slot), and per
 * major of the target device numbers. A bit set by another target only
 * costs a lookup: the maps decide. */
struct prefilter {
	__u64 ino_bits;
	__u64 dev_bits;
	__u64 major_bits[64]; /* bit m % 64 of word m / 64: major m (12 bits) */
};
volatile struct prefilter prefilter = {};
_Static_assert(sizeof(struct prefilter) == 528, "src/proc/bpf/targets.rs writes 528 bytes (PREFILTER)");
/* Test-only: makes the holder programs fail the verifier (the loader's
 * fallback is tested with a real refusal). */
const volatile __u32 break_verifier = 0;
/* Test-only: the per-process walk reads no process's fds or mappings and
 * reports each unread, as it reports a task whose memory map's lock was
 * taken (the loader reads each again through /proc). */
const volatile __u32 report_unread = 0;
/* Whether the per-process walk keeps each process's mapping result for
 * the next walk of the same programs (kept_maps, below). The loader sets it
 * where gpufree is built for x86-64 only: there the CPU does not reorder
 * one load with another, so the program's loads of a memory map's write
 * count, in program order (barrier(), below), bracket the walk of the map,
 * and its loads of a kept result bracket the result. */
const volatile __u32 keep_maps = 0;

struct ident {
	__u64 dev;
	__u64 ino;
};

/* (superblock dev, inode) -> target; device number -> target. Filled by
 * the loader after the load. */
struct {
	int (*type)[BPF_MAP_TYPE_HASH];
	int (*max_entries)[4096];
	struct ident *key;
	__u32 *value;
} by_ident SEC(".maps");

struct {
	int (*type)[BPF_MAP_TYPE_HASH];
	int (*max_entries)[4096];
	__u32 *key;
	__u32 *value;
} by_rdev SEC(".maps");

#define BPF_MAP_TYPE_ARRAY 2

/* The per-process walk runs as two walkers at once (one program, read
 * through two iterators), which share the work: each claims a process's
 * record, fd table or memory map before it writes or walks it, and leaves
 * what the other has claimed in this walk (the walk's number, from the
 * loader). A claim is one 8-byte slot, by a hash of the task, written
 * whole: the walk's number (32 bits), the task id (22), the part (2) and
 * the claimant (8: its iterator session's low bits). A collision, a race
 * or two sessions with the same low bits only make both walk the same part
 * (the loader merges the records); a walker walks a part it claimed itself
 * again when the kernel shows it the task again (its records were dropped
 * when the buffer filled), so nothing claimed is left unwritten. */
#define CLAIM_SLOTS 16384
struct {
	int (*type)[BPF_MAP_TYPE_ARRAY];
	int (*max_entries)[CLAIM_SLOTS];
	__u32 *key;
	__u64 *value;
} claims SEC(".maps");

/* [0]: the walk's number; [1]: the targets' epoch, which the loader bumps
 * whenever it gives the maps other targets (a kept mapping result names
 * targets by their index). */
struct {
	int (*type)[BPF_MAP_TYPE_ARRAY];
	int (*max_entries)[2];
	__u32 *key;
	__u64 *value;
} walk_number SEC(".maps");

/* The mapping walk's result kept with each process (its leader's task-local
 * storage, which goes with the task): the targets its memory map maps,
 * under the map's write count. The kernel bumps that count whenever a
 * writer takes the map's lock, and no mapping is added, removed or given
 * another file without it (the kernel's uprobes read a mapping's file
 * without the lock and trust it where the count stands:
 * find_active_uprobe_speculative). A walk of the same programs that
 * finds the same count, the same map and the same program (exec count),
 * within KEPT_FOR_NS of the walk kept, writes the kept targets instead of
 * walking the map again. The count is 32 bits: 2^31 lock cycles bring it
 * back, and no writer makes them in 60 s (one cycle is a system call of
 * 100 ns or more, and a map's writers take its lock in turn).
 *
 * `state` says whose the rest is: 0 nothing kept; odd, kept (the count
 * << 32, the epoch << 1, 1); even, a walker's token (its session << 1)
 * while it writes the rest. A walker takes it by compare-and-swap, so two
 * never write one at once. `gen` is odd while a walker writes and bumped
 * again when it is done: a reader that finds `state` and `gen` the same,
 * and `gen` even, after reading the rest read one walk's whole result,
 * even where another walk kept the same word meanwhile. Each entry is
 * about 100 bytes of kernel memory per process walked, gone with it. */
#define BPF_MAP_TYPE_TASK_STORAGE 29
#define BPF_F_NO_PREALLOC 1
#define BPF_LOCAL_STORAGE_GET_F_CREATE 1
/* Keeps the compiler from moving a load or store across it. */
#define barrier() asm volatile("" ::: "memory")
#define KEPT_TARGETS 6
#define KEPT_FOR_NS (60ULL * 1000000000ULL)
struct kept_maps {
	__u64 state;
	__u64 gen;
	__u64 mm;      /* the memory map walked (its address) */
	__u64 exec_id; /* the task's exec count then */
	__u64 at;      /* when it was walked */
	__u32 n;       /* targets mapped (more than KEPT_TARGETS: not kept) */
	__u32 targets[KEPT_TARGETS];
};

struct {
	int (*type)[BPF_MAP_TYPE_TASK_STORAGE];
	int (*map_flags)[BPF_F_NO_PREALLOC];
	int *key;
	struct kept_maps *value;
} kept_maps SEC(".maps");

/* The targets the per-process walk has written a mapping record of, per
 * showing of a task: (iterator session, when it was shown, target). Old
 * entries go as new ones come (LRU); one lost early only repeats a
 * record. */
#define BPF_MAP_TYPE_LRU_HASH 9
#define BPF_NOEXIST 1
struct shown {
	__u64 session;
	__u64 at;
	__u32 target;
	__u32 pad;
};

struct {
	int (*type)[BPF_MAP_TYPE_LRU_HASH];
	int (*max_entries)[8192];
	struct shown *key;
	__u32 *value;
} vmas_shown SEC(".maps");

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_map_update_elem)(void *map, const void *key, const void *value,
				   __u64 flags) = (void *)2;

#define PART_RECORD 0
#define PART_FDS 1
#define PART_MAPS 2

/* Whether `walker` is to do `part` of task `tid` in walk `walk`: not when
 * another walker claimed it; else it claims it. */
static __always_inline int claim(__u64 walk, __u32 tid, __u32 part, __u32 walker)
{
	__u32 slot = ((tid * 2654435761u) ^ part) % CLAIM_SLOTS;
	__u64 this = (walk << 32) | ((__u64)(tid & 0x3fffff) << 10) | (part << 8);
	__u64 *v = bpf_map_lookup_elem(&claims, &slot);

	if (!v)
		return 1;
	__u64 seen = *v;
	if ((seen & ~0xffULL) == this && (seen & 0xff) != walker)
		return 0;
	*v = this | walker;
	return 1;
}

/* Which bit of `prefilter.dev_bits` is a superblock's (targets.rs:
 * dev_bit). */
static __always_inline __u32 dev_slot(__u32 dev)
{
	return (dev ^ (dev >> 20) ^ (dev >> 8)) & 63;
}

/* 1 where the prefilter passes an inode by its number `ino` and its
 * superblock `dev`, else 0; without a branch (the BPF instruction set has
 * no conditional move: each comparison would be one). */
static __always_inline __u64 passes_ident(__u64 ino, __u32 dev)
{
	return (prefilter.ino_bits >> (ino & 63)) & (prefilter.dev_bits >> dev_slot(dev)) & 1;
}

/* 1 where the prefilter passes an inode of mode `mode` by its device
 * number `rdev`, else 0; without a branch. A device's mode has bit 13 set
 * and bit 15 clear (S_IFCHR, S_IFBLK; no other file type). */
static __always_inline __u64 passes_rdev(__u32 mode, __u32 rdev)
{
	__u32 major = (rdev >> 20) & 4095;

	return (prefilter.major_bits[major >> 6] >> (major & 63)) & (mode >> 13) & ~(mode >> 15) & 1;
}

/* The target this inode is, or -1. Every field is read before the first
 * branch: the verifier then checks each read once, not once per path (a
 * check of a kernel pointer's read searches the kernel's BTF). */
static __always_inline int match(struct inode *inode)
{
	__u32 dev = inode->i_sb->s_dev;
	__u64 ino = inode->i_ino;
	__u32 mode = inode->i_mode;
	__u32 rdev = inode->i_rdev;
	__u32 *idx;

	if (passes_ident(ino, dev)) {
		struct ident key = { .dev = dev, .ino = ino };
		idx = bpf_map_lookup_elem(&by_ident, &key);
		if (idx)
			return *idx;
	}
	if (passes_rdev(mode, rdev)) {
		idx = bpf_map_lookup_elem(&by_rdev, &rdev);
		if (idx)
			return *idx;
	}
	return -1;
}

/* A struct pid's number in the reader's PID namespace, 0 where it has none
 * there (the kernel's pid_nr_ns). */
static __always_inline __u32 nr_here(struct pid *pid, struct pid *mine)
{
	unsigned int level = mine->level;
	unsigned long numbers = core_field_offset(struct pid, numbers);
	unsigned long upid_size = core_type_size(struct upid);
	struct upid me = {}, up = {};

	if (!pid || pid->level < level)
		return 0;
	bpf_probe_read_kernel(&me, sizeof(me), (char *)mine + numbers + level * upid_size);
	bpf_probe_read_kernel(&up, sizeof(up), (char *)pid + numbers + level * upid_size);
	return up.ns == me.ns ? up.nr : 0;
}

/* Writes a record; `comm`, where not NULL, is the kernel's comm to copy. */
static __always_inline void write_rec(struct seq_file *seq, __u32 kind, __u32 pid, __u32 aux,
				      int target, __u64 start_ns, __u32 tid, const char *comm)
{
	struct gf_rec r = {};

	r.kind = kind;
	r.pid = pid;
	r.aux = aux;
	r.target = target;
	r.start_ns = start_ns;
	r.tid = tid;
	if (comm)
		bpf_probe_read_kernel(r.comm, sizeof(r.comm), comm);
	bpf_seq_write(seq, &r, sizeof(r));
}

/* Reports the process `pid` that started at `start_ns` unread: it is read
 * again through /proc. */
static __always_inline void write_unread(struct seq_file *seq, __u32 pid, __u64 start_ns)
{
	write_rec(seq, REC_UNREAD, pid, 0, 0, start_ns, 0, 0);
}

/* Writes a record of `task`'s process (the iterator walk's, and a process
 * record of the per-process walk). */
static __always_inline void emit(struct seq_file *seq, struct pid *mine, struct task_struct *task,
				 __u32 kind, __u32 aux, int target)
{
	struct task_struct *leader = task->group_leader;

	write_rec(seq, kind, nr_here(leader->thread_pid, mine), aux, target, leader->start_boottime,
		  kind == REC_FD ? nr_here(task->thread_pid, mine) : 0,
		  kind == REC_TASK ? leader->comm : 0);
}

/* The per-process walk. */

/* The fd records one process may write. The kernel shows a task's records
 * whole, from a buffer of 32 KiB (682 records): the task's record, its fds,
 * one mapping record per target (the loader takes at most MAX_TARGETS) and
 * two REC_UNREAD stay within it. A process with more fds on targets stops
 * there and is reported unread (read again through /proc). */
#define FD_RECORDS 255
_Static_assert((1 + FD_RECORDS + MAX_TARGETS + 2) * sizeof(struct gf_rec) <= 32768,
	       "one task's records fit the kernel's buffer");

/* What the steps of one fd table's walk share. */
struct fd_walk {
	struct seq_file *seq;
	__u64 fd;       /* the table's array of struct file pointers */
	__u64 open_fds; /* its bitmap of open fds */
	__u64 word;     /* the bitmap's word of the current 64 fds */
	__u32 base;     /* the first fd of that word */
	__u64 passed;   /* the word's fds the prefilter passed (fd_group) */
	__u64 start_ns;
	__u32 max_fds;
	__u32 pid;
	__u32 tid;
	__u32 written;
	__u32 unread;
};

/* One fd of the current word that passed the prefilter, read again and
 * looked up in the maps (bpf_loop's step). A read that fails (a
 * table freed under an exiting task) marks the process unread: it is read
 * again through /proc, never taken as holding nothing. */
static int fd_step(__u32 bit, struct fd_walk *w)
{
	__u64 slot = 0;
	__u32 fd = w->base + bit;

	if (!(w->passed >> bit) || fd >= w->max_fds)
		return 1; /* no fd left that passed */
	if (!(w->passed & (1ULL << bit)))
		return 0;
	if (bpf_probe_read_kernel(&slot, sizeof(slot), (void *)(w->fd + fd * 8ULL))) {
		w->unread = 1;
		return 1;
	}
	if (!slot)
		return 0;
	struct file *file = bpf_rdonly_cast((void *)slot, core_type_id(struct file));
	struct inode *inode = file->f_inode;
	if (!inode)
		return 0;
	int target = match(inode);
	if (target < 0)
		return 0;
	if (w->written++ == FD_RECORDS) {
		w->unread = 1;
		return 1;
	}
	write_rec(w->seq, REC_FD, w->pid, fd, target, w->start_ns, w->tid, 0);
	return 0;
}

/* 1 where `inode` (untrusted: a NULL one reads as zeros, and fd_step drops
 * it) may be a target: match's prefilter, without a branch. */
static __always_inline __u64 may_match(struct inode *inode)
{
	return passes_ident(inode->i_ino, inode->i_sb->s_dev) |
	       passes_rdev(inode->i_mode, inode->i_rdev);
}

/* The fds one step of the walk reads at once: a quarter of the open-fd
 * bitmap's word. */
#define FD_GROUP 16
#define GROUP_MASK ((1ULL << FD_GROUP) - 1)
/* fd_gather's answer where the group's slots could not be read. */
#define GROUP_UNREAD (1ULL << 32)

/* The fds of a group of FD_GROUP, whose slots begin at `slots`, that are
 * `open` (a bit each) and pass the prefilter (a bit each); GROUP_UNREAD
 * where the slots could not be read. Reads the slots at once, then each
 * slot's file and then each file's inode, each level in a row without a
 * branch, so that the CPU fetches the group's files (and then their
 * inodes) from memory at once instead of one after the other: two cache
 * misses an fd were 90 % of the fd walk's time. A slot whose fd is not
 * open (a slot filled after the bitmap's word was read) is read as empty,
 * as fd_step would skip it. A global function: the verifier checks it
 * once, not on each of its passes over the loops it is called from (as a
 * static function, a group of 16 made each load of the walk 4 ms slower).
 * Its frame (160 bytes, the group's slots) is the deepest of the walk's
 * chain of calls, 480 of the kernel's 512 bytes (scripts/bpf-stack.py). */
__attribute__((noinline)) __u64 fd_gather(__u64 slots, __u64 open)
{
	__u64 slot[FD_GROUP]; /* then each slot's inode */
	__u64 passed = 0;

	if (bpf_probe_read_kernel(slot, sizeof(slot), (void *)slots))
		return GROUP_UNREAD;
#pragma unroll
	for (int i = 0; i < FD_GROUP; i++)
		slot[i] = (__u64)untrusted((void *)(slot[i] & -((open >> i) & 1)), struct file)->f_inode;
#pragma unroll
	for (int i = 0; i < FD_GROUP; i++)
		passed |= may_match((struct inode *)slot[i]) << i;
	return passed & open & GROUP_MASK;
}

/* One group of FD_GROUP fds of the current word (bpf_loop's step over
 * the word's groups): marks those the prefilter passes for fd_step. */
static int fd_group(__u32 j, struct fd_walk *w)
{
	__u64 open = w->word >> (j * FD_GROUP);
	__u32 first = w->base + j * FD_GROUP;

	if (!open || first >= w->max_fds)
		return 1; /* no open fd left in this word */
	if (!(open & GROUP_MASK))
		return 0;
	__u64 passed = first + FD_GROUP > w->max_fds ? GROUP_UNREAD
						     : fd_gather(w->fd + first * 8ULL, open);
	if (passed == GROUP_UNREAD) {
		w->unread = 1;
		return 1;
	}
	w->passed |= passed << (j * FD_GROUP);
	return 0;
}

/* One word of the open-fd bitmap (bpf_loop's outer step): 64 fds, walked
 * only when one is open (a step per slot made a table of a million closed
 * fds cost each walk a million steps), in groups; then the fds the
 * prefilter passed, each on its own. fd_step runs from this step, not
 * from fd_group's, so that no chain of calls holds both frames (the
 * kernel's stack for a program's calls is 512 bytes). */
static int fd_word(__u32 i, struct fd_walk *w)
{
	w->base = i * 64;
	w->passed = 0;
	if (bpf_probe_read_kernel(&w->word, sizeof(w->word), (void *)(w->open_fds + i * 8ULL))) {
		w->unread = 1;
		return 1;
	}
	if (w->word && bpf_loop(64 / FD_GROUP, fd_group, w, 0) < 0)
		w->unread = 1;
	if (!w->unread && w->passed && bpf_loop(64, fd_step, w, 0) < 0)
		w->unread = 1;
	/* 0 or 1 as the verifier sees it, whatever it knows of the field. */
	return w->unread ? 1 : 0;
}

/* Walks the fd table `files` of the thread group leader `leader`
 * (untrusted) for its process `pid`: every fd on a target. 1 where the
 * process is unread: a table that reads as empty or odd, or that the
 * leader changed during the walk (an exiting task's table is freed at
 * once, not after the walk). The caller writes that record after the
 * walk, so that its 48 bytes share the walk state's stack slots: the
 * program's frame is below fd_gather's on the kernel's 512-byte stack. */
static __always_inline int walk_fds(struct seq_file *seq, struct task_struct *leader,
				    struct files_struct *files, __u32 pid)
{
	struct fd_walk w = {};
	struct fdtable *fdt = files->fdt;

	w.seq = seq;
	w.pid = pid;
	w.tid = pid;
	w.start_ns = leader->start_boottime;
	return bpf_probe_read_kernel(&w.fd, sizeof(w.fd), &fdt->fd) ||
	       bpf_probe_read_kernel(&w.open_fds, sizeof(w.open_fds), &fdt->open_fds) ||
	       bpf_probe_read_kernel(&w.max_fds, sizeof(w.max_fds), &fdt->max_fds) || !w.fd ||
	       !w.open_fds || !w.max_fds || report_unread ||
	       bpf_loop((w.max_fds + 63) / 64, fd_word, &w, 0) < 0 || w.unread ||
	       leader->files != files;
}

/* No write count: the kernel has none (before 6.14, or without
 * CONFIG_PER_VMA_LOCK; its int of that name is not one). */
#define NO_COUNT (1ULL << 32)

/* The write count of the memory map `mm` (odd while a writer holds its
 * lock), read here in program order; NO_COUNT where there is none. */
static __always_inline __u64 write_count(struct mm_struct *mm)
{
	if (!mm || !core_field_exists(struct mm_struct, mm_lock_seq.sequence))
		return NO_COUNT;
	barrier();
	__u64 count = *(volatile unsigned int *)&mm->mm_lock_seq.sequence;
	barrier();
	return count;
}

/* The word a mapping result of `task_u`'s memory map is kept under at
 * write count `count` for targets of `epoch` (kept_maps); 0 where none is
 * kept: not on this kernel or machine, a kernel thread (it borrows maps),
 * or a writer holds the map. */
static __always_inline __u64 kept_word(struct task_struct *task_u, __u64 count, __u64 epoch)
{
	if (!keep_maps || report_unread || count == NO_COUNT || (count & 1) ||
	    (task_u->flags & PF_KTHREAD))
		return 0;
	return (count << 32) | ((epoch & 0x7fffffff) << 1) | 1;
}

/* Writes the targets `k` keeps, where it keeps a result under `word` of
 * the map `mm` of this program (`exec_id`) walked less than KEPT_FOR_NS
 * before `now`; 1 where it did. Each record says it was kept (aux 1). */
static __always_inline int write_kept(struct seq_file *seq, struct kept_maps *k, __u64 word,
				      __u64 mm, __u64 exec_id, __u64 now, __u32 pid,
				      __u64 start_ns)
{
	__u32 t[KEPT_TARGETS];
	__u64 state = *(volatile __u64 *)&k->state;
	__u64 gen = *(volatile __u64 *)&k->gen;

	barrier();
	if (state != word || (gen & 1) || k->mm != mm || k->exec_id != exec_id ||
	    now - k->at > KEPT_FOR_NS)
		return 0;
	__u32 n = k->n;
	for (int i = 0; i < KEPT_TARGETS; i++)
		t[i] = k->targets[i];
	barrier();
	if (n > KEPT_TARGETS || *(volatile __u64 *)&k->gen != gen ||
	    *(volatile __u64 *)&k->state != state)
		return 0;
	for (int i = 0; i < KEPT_TARGETS; i++)
		if (i < n)
			write_rec(seq, REC_VMA, pid, 1, t[i], start_ns, 0, 0);
	return 1;
}

/* Takes `k` to write the result of this walk (begun at `now`) in (`gen`
 * made odd): NULL where another walker writes it. Every path of the caller
 * then reaches give_kept: a token left would keep nothing for that process
 * again. */
static __always_inline struct kept_maps *take_kept(struct kept_maps *k, __u64 token, __u64 mm,
						   __u64 exec_id, __u64 now)
{
	__u64 was = *(volatile __u64 *)&k->state;

	if ((was && !(was & 1)) || __sync_val_compare_and_swap(&k->state, was, token) != was)
		return 0;
	*(volatile __u64 *)&k->gen = k->gen + 1;
	barrier();
	k->n = 0;
	k->mm = mm;
	k->exec_id = exec_id;
	k->at = now;
	return k;
}

/* Gives `k` back (`gen` even again), keeping `word` or nothing (0). */
static __always_inline void give_kept(struct kept_maps *k, __u64 token, __u64 word)
{
	barrier();
	*(volatile __u64 *)&k->gen = k->gen + 1;
	__sync_val_compare_and_swap(&k->state, token, word);
}

/* Walks the memory map of `task` (trusted) for `pid`: one record per target
 * it maps in this showing of the task (as many mappings of one as a CUDA
 * process has say no more, and would overflow the kernel's buffer). The
 * targets written are kept in a map, not in the loop: state carried
 * through the loop made the verifier walk it 256 times (0.38 s). A
 * map the open-coded iterator could not start on (it only tries the map's
 * lock, which a writer may hold; or the map went away under an exiting
 * task) makes the process unread, and so does a map whose write count
 * says a writer held it or took it during the walk: this kernel's iterator
 * steps from mapping to mapping without the map's lock, and can step over
 * one a writer moves meanwhile (a process calling mprotect on a GPU
 * mapping in a loop was missed in 5 of 40 walks on 6.18). Where this map's
 * result is kept from an earlier walk (kept_maps), that is written
 * instead; a whole walk of a map no writer changed meanwhile is kept. */
static __always_inline void walk_maps(struct bpf_iter_meta *meta, struct task_struct *task,
				      struct task_struct *leader, __u32 pid, __u64 epoch)
{
	struct bpf_iter_task_vma it;
	struct vm_area_struct *vma;
	struct seq_file *seq = meta->seq;
	/* This showing of the task: a showing whose records the kernel dropped
	 * (its buffer full) is followed by another, of the same object number,
	 * which must write them again. */
	__u64 session = meta->session_id, shown_at = bpf_ktime_get_ns();
	__u64 start_ns = leader->start_boottime;
	__u32 zero = 0;
	struct task_struct *task_u = untrusted(task, struct task_struct);
	struct mm_struct *mm = task_u->mm;
	__u64 exec_id = task_u->self_exec_id, token = session << 1;
	__u64 count = write_count(mm);
	__u64 word = kept_word(task_u, count, epoch);
	struct kept_maps *k = 0;

	if (word)
		k = bpf_task_storage_get(&kept_maps, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (k && write_kept(seq, k, word, (__u64)mm, exec_id, shown_at, pid, start_ns))
		return;
	if (k)
		k = take_kept(k, token, (__u64)mm, exec_id, shown_at);
	int err = bpf_iter_task_vma_new(&it, task, 0);

	if (report_unread)
		err = -16; /* EBUSY */
	while (!err && (vma = bpf_iter_task_vma_next(&it))) {
		struct file *file = untrusted(vma, struct vm_area_struct)->vm_file;
		if (!file)
			continue;
		struct inode *inode = file->f_inode;
		if (!inode)
			continue;
		int target = match(inode);
		if (target < 0)
			continue;
		struct shown key = { .session = session, .at = shown_at, .target = target };
		/* Written already in this showing; any other failure writes it. */
		if (bpf_map_update_elem(&vmas_shown, &key, &zero, BPF_NOEXIST) == -EEXIST)
			continue;
		write_rec(seq, REC_VMA, pid, 0, target, start_ns, 0, 0);
		if (k) {
			__u32 n = k->n;
			if (n < KEPT_TARGETS)
				k->targets[n] = target;
			k->n = n + 1;
		}
	}
	bpf_iter_task_vma_destroy(&it);
	__u64 after = write_count(mm);
	if (!err && count != NO_COUNT && ((count & 1) || after != count))
		err = -11; /* EAGAIN: a writer held or took the map */
	if (err)
		write_unread(seq, pid, start_ns);
	if (k)
		/* Kept where the walk was whole and no writer took the map. */
		give_kept(k, token, err || k->n > KEPT_TARGETS ? 0 : word);
}

/* Whether `leader` (untrusted) is exiting, or has exited, while threads
 * of its process live on. A thread the walk saw before it, while it lived,
 * left the table and map to it, which it may no longer have: the process
 * is then read through /proc. */
static __always_inline int orphaned(struct task_struct *leader)
{
	return (leader->flags & PF_EXITING) && leader->signal->live.counter > 0;
}

/* Whether `leader` (untrusted), of a process of more than one thread, has
 * an fd table whose first 64 fds are closed: its threads may have a table
 * of their own, which /proc reads when the leader's is empty. The process
 * is then read through /proc (rare: a process keeps its fds 0 to 2). */
static __always_inline int empty_table(struct task_struct *leader)
{
	struct files_struct *files = leader->files;
	__u64 open_fds = 0, word = 0;

	if (!files || leader->signal->nr_threads < 2)
		return 0;
	struct fdtable *fdt = files->fdt;
	if (bpf_probe_read_kernel(&open_fds, sizeof(open_fds), &fdt->open_fds) || !open_fds ||
	    bpf_probe_read_kernel(&word, sizeof(word), (void *)open_fds))
		return 1;
	return word == 0;
}

/* Whether the process of `leader` (untrusted) is read through /proc: its
 * leader has left what it holds to its threads. */
static __always_inline int left_to_threads(struct task_struct *leader)
{
	return orphaned(leader) || empty_table(leader);
}

/* One task, for one of the two walkers: its process record (a leader's),
 * and what it holds, each part the walker claims (both go through the
 * parts in one order: one that finds a part claimed goes on to the next,
 * so they run apart). The fds and the mappings are the leader's; once it
 * has exited, the process is reported unread. */
SEC("iter/task")
int gpufree_walk(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	__u32 zero = 0;

	if (break_verifier)
		return *(volatile int *)((char *)ctx + 4096);
	if (!task)
		return 0;
	__u32 one = 1;
	__u64 *walk = bpf_map_lookup_elem(&walk_number, &zero);
	__u64 *epoch = bpf_map_lookup_elem(&walk_number, &one);
	if (!walk || !epoch)
		return 0;
	__u32 walker = ctx->meta->session_id & 0xff;
	struct seq_file *seq = ctx->meta->seq;
	struct task_struct *task_u = untrusted(task, struct task_struct);
	struct pid *mine = untrusted(bpf_get_current_task_btf(), struct task_struct)->thread_pid;
	struct task_struct *leader = task_u->group_leader;
	struct files_struct *files = task_u->files;
	int fds = files && (task_u == leader || !leader->files);
	int maps = task_u->mm && (task_u == leader || !leader->mm);
	__u32 tid = task_u->pid;
	if (task_u == leader && claim(*walk, tid, PART_RECORD, walker))
		emit(seq, mine, task_u, REC_TASK,
		     nr_here(task_u->real_parent->group_leader->thread_pid, mine), 0);
	int threads_hold = task_u == leader && left_to_threads(task_u);
	if (!fds && !maps && !threads_hold)
		return 0;
	__u32 pid = nr_here(leader->thread_pid, mine);
	/* A thread that holds the table or map of a leader that has exited:
	 * every live thread would walk the one memory map again (a process of
	 * 2,000 threads and 4,000 mappings made each walk a second). The
	 * process is read through /proc instead, which reads its map once. */
	if (threads_hold || task_u != leader) {
		if (claim(*walk, tid, PART_FDS, walker))
			write_unread(seq, pid, leader->start_boottime);
		return 0;
	}
	if (fds && claim(*walk, tid, PART_FDS, walker) && walk_fds(seq, task_u, files, pid))
		write_unread(seq, pid, task_u->start_boottime);
	if (maps && claim(*walk, tid, PART_MAPS, walker))
		walk_maps(ctx->meta, task, leader, pid, *epoch);
	return 0;
}

/* The iterator walk. */

SEC("iter/task")
int gpufree_tasks(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;

	if (!task || task->pid != task->tgid)
		return 0;
	struct pid *mine = bpf_get_current_task_btf()->thread_pid;

	emit(ctx->meta->seq, mine, task, REC_TASK,
	     nr_here(task->real_parent->group_leader->thread_pid, mine), 0);
	if (left_to_threads(untrusted(task, struct task_struct)))
		write_unread(ctx->meta->seq, nr_here(task->thread_pid, mine), task->start_boottime);
	return 0;
}

SEC("iter/task_file")
int gpufree_fds(struct bpf_iter__task_file *ctx)
{
	struct task_struct *task = ctx->task;
	struct file *file = ctx->file;

	if (break_verifier)
		return *(volatile int *)((char *)ctx + 4096);
	if (!task || !file || !file->f_inode)
		return 0;
	/* The process's fd table is its leader's; a thread with a table of
	 * its own (unshare(CLONE_FILES)) counts only once the leader has
	 * exited, as in /proc, whose PID/fd is the leader's table and where
	 * the check before a signal reads it. */
	struct task_struct *leader = task->group_leader;
	if (task != leader && leader->files)
		return 0;
	int target = match(file->f_inode);
	if (target >= 0)
		emit(ctx->meta->seq, bpf_get_current_task_btf()->thread_pid, task, REC_FD, ctx->fd,
		     target);
	return 0;
}

SEC("iter/task_vma")
int gpufree_vmas(struct bpf_iter__task_vma *ctx)
{
	struct task_struct *task = ctx->task;
	struct vm_area_struct *vma = ctx->vma;

	if (break_verifier)
		return *(volatile int *)((char *)ctx + 4096);
	if (!task || !vma || !vma->vm_file || !vma->vm_file->f_inode)
		return 0;
	int target = match(vma->vm_file->f_inode);
	if (target >= 0)
		emit(ctx->meta->seq, bpf_get_current_task_btf()->thread_pid, task, REC_VMA, 0, target);
	return 0;
}
