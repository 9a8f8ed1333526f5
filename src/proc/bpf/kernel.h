/* The kernel types the holder scan reads: only the fields it touches,
 * marked preserve_access_index so that the loader relocates every access
 * to the running kernel's layout from its BTF (CO-RE). Written by hand
 * instead of a 3 MB vmlinux.h dump: regenerating the object then needs
 * clang alone, not bpftool or a kernel's BTF. */
#ifndef GPUFREE_KERNEL_H
#define GPUFREE_KERNEL_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef int __s32;
typedef unsigned long long __u64;
typedef __u32 dev_t;
typedef __u16 umode_t;

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

struct pid_namespace;

struct upid {
	int nr;
	struct pid_namespace *ns;
};

struct pid {
	unsigned int level;
	struct upid numbers[1];
};

struct fdtable {
	unsigned int max_fds;
	struct file **fd;
	unsigned long *open_fds;
};

struct files_struct {
	struct fdtable *fdt;
};

/* The memory map's write sequence count (CONFIG_PER_VMA_LOCK, and a
 * seqcount_t from kernel 6.14: odd while a writer holds the map's lock,
 * and bumped again when it lets go). An older kernel's int is not this
 * field: the walk then keeps no mapping results (holders.bpf.c). */
struct mm_struct {
	struct {
		unsigned int sequence;
	} mm_lock_seq;
};

struct task_struct {
	int pid;
	int tgid;
	struct task_struct *real_parent;
	struct task_struct *group_leader;
	struct pid *thread_pid;
	__u64 start_boottime;
	char comm[16];
	struct files_struct *files;
	struct mm_struct *mm;
	unsigned int flags;
	struct signal_struct *signal;
	__u64 self_exec_id;
};

/* The kernel's atomic_t. */
struct signal_struct {
	int nr_threads;
	struct {
		int counter;
	} live;
};

struct super_block {
	dev_t s_dev;
};

struct inode {
	umode_t i_mode;
	struct super_block *i_sb;
	unsigned long i_ino;
	dev_t i_rdev;
};

struct file {
	struct inode *f_inode;
};

struct vm_area_struct {
	unsigned long vm_start;
	unsigned long vm_end;
	struct file *vm_file;
};

#pragma clang attribute pop

/* The iterators' contexts: not relocated. Their layout is the iterator
 * ABI (one 8-byte slot per argument of the kernel's bpf_iter_* function;
 * the meta's seq first), and every relocated type costs the loader a
 * search through the kernel's whole BTF. */
struct seq_file;

struct bpf_iter_meta {
	struct seq_file *seq;
	__u64 session_id;
	__u64 seq_num;
};

struct bpf_iter__task {
	struct bpf_iter_meta *meta;
	struct task_struct *task;
};

struct bpf_iter__task_file {
	struct bpf_iter_meta *meta;
	struct task_struct *task;
	__u32 fd;
	struct file *file;
};

struct bpf_iter__task_vma {
	struct bpf_iter_meta *meta;
	struct task_struct *task;
	struct vm_area_struct *vma;
};

/* The open-coded mapping iterator's state (the kernel's type of the same
 * name: its size is the ABI, the verifier checks it). */
struct bpf_iter_task_vma {
	__u64 __opaque[1];
} __attribute__((aligned(8)));

/* Helpers, by their numbers in the kernel's UAPI (include/uapi/linux/bpf.h). */
static __u64 (*bpf_ktime_get_ns)(void) = (void *)5;
static long (*bpf_probe_read_kernel)(void *dst, __u32 size, const void *src) = (void *)113;
static long (*bpf_seq_write)(struct seq_file *m, const void *data, __u32 len) = (void *)127;
static struct task_struct *(*bpf_get_current_task_btf)(void) = (void *)158;
static long (*bpf_loop)(__u32 nr_loops, void *callback, void *ctx, __u64 flags) = (void *)181;
static void *(*bpf_task_storage_get)(void *map, struct task_struct *task, void *value,
				     __u64 flags) = (void *)156;

/* Kernel functions (kfuncs; kernel 6.7 and later) of the per-process walk.
 * aya 0.14 cannot link a call to a kfunc, so each is written as a call to
 * a helper with a placeholder number, which the loader turns into a call of
 * the kfunc by its id in the running kernel's BTF before the load
 * (src/proc/bpf/kfunc.rs; the numbers are KFUNCS there). */
#define KFUNC(n) ((void *)(0x7ff00000 + (n)))
static int (*bpf_iter_task_vma_new)(struct bpf_iter_task_vma *it, struct task_struct *task,
				    __u64 addr) = KFUNC(1);
static struct vm_area_struct *(*bpf_iter_task_vma_next)(struct bpf_iter_task_vma *it) = KFUNC(2);
static void (*bpf_iter_task_vma_destroy)(struct bpf_iter_task_vma *it) = KFUNC(3);
static void *(*bpf_rdonly_cast)(const void *obj, __u32 btf_id) = KFUNC(4);
/* The pointer p to a `type`, as one the verifier does not trust: reading
 * through it costs the verifier no search of the kernel's BTF for whether
 * the field read is trusted (a linear search per read, tens of ms per
 * program), and each read is still one guarded load. */
#define untrusted(p, type) ((type *)bpf_rdonly_cast((p), core_type_id(type)))

#define SEC(name) __attribute__((section(name), used))
#define __always_inline inline __attribute__((always_inline))
/* CO-RE: the running kernel's offset of a field, size of a type. */
#define core_field_offset(type, field) __builtin_preserve_field_info(((type *)0)->field, 0)
#define core_type_size(type) __builtin_preserve_type_info(*(type *)0, 1)
/* CO-RE: whether the running kernel has the field (0: the read of it is
 * never reached). */
#define core_field_exists(type, field) __builtin_preserve_field_info(((type *)0)->field, 2)
/* CO-RE: the running kernel's BTF id of a type. */
#define core_type_id(type) __builtin_btf_type_id(*(type *)0, 1)

#endif
