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

struct files_struct;

struct task_struct {
	int pid;
	int tgid;
	struct task_struct *real_parent;
	struct task_struct *group_leader;
	struct pid *thread_pid;
	__u64 start_boottime;
	char comm[16];
	struct files_struct *files;
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


/* Helpers, by their numbers in the kernel's UAPI (include/uapi/linux/bpf.h). */
static long (*bpf_probe_read_kernel)(void *dst, __u32 size, const void *src) = (void *)113;
static long (*bpf_seq_write)(struct seq_file *m, const void *data, __u32 len) = (void *)127;
static struct task_struct *(*bpf_get_current_task_btf)(void) = (void *)158;

#define SEC(name) __attribute__((section(name), used))
#define __always_inline inline __attribute__((always_inline))
/* CO-RE: the running kernel's offset of a field, size of a type. */
#define core_field_offset(type, field) __builtin_preserve_field_info(((type *)0)->field, 0)
#define core_type_size(type) __builtin_preserve_type_info(*(type *)0, 1)

#endif
