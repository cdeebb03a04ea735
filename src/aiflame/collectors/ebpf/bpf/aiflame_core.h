/* The few kernel types aiflame's BPF programs use, declared by hand for CO-RE: with
 * preserve_access_index every field access is relocated by libbpf against the running
 * kernel's BTF (/sys/kernel/btf/vmlinux), so only the names and types must match, not
 * the layout. This stands in for a multi-megabyte generated vmlinux.h. */
#ifndef AIFLAME_CORE_H
#define AIFLAME_CORE_H

#include "aiflame_bpf.h"

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

#if defined(__TARGET_ARCH_x86)
struct pt_regs {
	unsigned long r15, r14, r13, r12, bp, bx, r11, r10, r9, r8;
	unsigned long ax, cx, dx, si, di, orig_ax, ip;
	unsigned long cs;
	unsigned long flags, sp, ss;
};
#define PT_REGS_PARM1(x) ((x)->di)
#define PT_REGS_PARM2(x) ((x)->si)
#define PT_REGS_PARM3(x) ((x)->dx)
#define PT_REGS_PARM4(x) ((x)->cx)
#define PT_REGS_PARM5(x) ((x)->r8)
#define PT_REGS_PARM6(x) ((x)->r9)
#define PT_REGS_RC(x) ((x)->ax)
#define PT_REGS_SP(x) ((x)->sp)
#define PT_REGS_IP(x) ((x)->ip)
typedef struct pt_regs bpf_user_pt_regs_t;
#elif defined(__TARGET_ARCH_arm64)
struct user_pt_regs {
	__u64 regs[31];
	__u64 sp;
	__u64 pc;
	__u64 pstate;
};
struct pt_regs {
	struct user_pt_regs user_regs;
};
#define PT_REGS_PARM1(x) ((x)->user_regs.regs[0])
#define PT_REGS_PARM2(x) ((x)->user_regs.regs[1])
#define PT_REGS_PARM3(x) ((x)->user_regs.regs[2])
#define PT_REGS_PARM4(x) ((x)->user_regs.regs[3])
#define PT_REGS_PARM5(x) ((x)->user_regs.regs[4])
#define PT_REGS_PARM6(x) ((x)->user_regs.regs[5])
#define PT_REGS_RC(x) ((x)->user_regs.regs[0])
#define PT_REGS_SP(x) ((x)->user_regs.sp)
#define PT_REGS_IP(x) ((x)->user_regs.pc)
typedef struct user_pt_regs bpf_user_pt_regs_t;
#else
#error "define __TARGET_ARCH_x86 or __TARGET_ARCH_arm64"
#endif

/* the context of perf_event programs (UAPI: fixed layout) */
struct bpf_perf_event_data {
	bpf_user_pt_regs_t regs;
	__u64 sample_period;
	__u64 addr;
};

struct upid {
	int nr;
	struct pid_namespace *ns;
};

struct pid {
	unsigned int level; /* of the namespace the pid was made in: numbers[level] is its id there */
	struct upid numbers[1];
};

/* the thread's TLS base: what pthread_self() is derived from */
#if defined(__TARGET_ARCH_x86)
struct thread_struct {
	unsigned long fsbase;
};
#else
struct thread_struct {
	struct {
		unsigned long tp_value;
	} uw;
};
#endif

/* files, for the name and identity of the file behind a mapping */
struct qstr {
	const unsigned char *name;
};

struct dentry {
	struct qstr d_name;
};

struct path {
	struct dentry *dentry;
};

struct super_block {
	dev_t s_dev;
};

struct inode {
	unsigned long i_ino;
	struct super_block *i_sb;
};

struct file {
	struct path f_path;
	struct inode *f_inode;
};

struct vm_area_struct {
	struct file *vm_file;
};

/* terminals and process groups: is a process a shell's foreground job */
struct tty_struct {
	struct {
		struct pid *pgrp;
	} ctrl; /* Linux 5.19+ */
};

struct tty_struct___old {
	struct pid *pgrp;
};

#define PIDTYPE_PGID 2
struct signal_struct {
	struct tty_struct *tty;
	struct pid *pids[4];
};

/* a process's memory: the auxiliary vector its program started with (AT_BASE: where the
 * dynamic loader was mapped) */
struct mm_struct {
	unsigned long saved_auxv[2];
};

struct task_struct {
	unsigned int flags;
	pid_t pid;
	pid_t tgid;
	struct task_struct *real_parent;
	struct pid *thread_pid;
	struct thread_struct thread;
	struct signal_struct *signal;
	struct mm_struct *mm;
};
#define PF_KTHREAD 0x00200000

/* the context of raw_tp programs (UAPI): the tracepoint's arguments as u64s */
struct bpf_raw_tracepoint_args {
	__u64 args[0];
};

struct trace_entry {
	unsigned short type;
	unsigned char flags;
	unsigned char preempt_count;
	int pid;
};

/* tracepoint sched:sched_process_fork */
struct trace_event_raw_sched_process_fork {
	struct trace_entry ent;
	pid_t parent_pid;
	pid_t child_pid;
};

#pragma clang attribute pop

#endif
