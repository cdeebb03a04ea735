// SPDX-License-Identifier: (BSD-2-Clause OR GPL-2.0-only)
/* A tiny program exercising every loader feature: read-only config, array, hash and
 * ring-buffer maps, uprobes/uretprobes, a perf-event program and a tracepoint. Used by
 * the loader's tests and by aiflame to check that eBPF works on this machine. */
#include "aiflame_core.h"

const volatile __u32 target_tgid = 0; /* 0: every process */
const volatile __u64 magic = 0;       /* echoed in every event */

struct event {
	__u64 magic;
	__u64 arg1;
	__u32 tgid;
	__u32 tid;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u64);
} hits SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u64);
} calls_by_tid SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} ticks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16384);
} events SEC(".maps");

static __always_inline int mine(void)
{
	return !target_tgid || (bpf_get_current_pid_tgid() >> 32) == target_tgid;
}

static __always_inline void hit(__u32 i)
{
	__u64 *v = bpf_map_lookup_elem(&hits, &i);
	if (v)
		__sync_fetch_and_add(v, 1);
}

SEC("uprobe")
int on_call(struct pt_regs *ctx)
{
	if (!mine())
		return 0;
	hit(0);
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	__u64 one = 1, *n = bpf_map_lookup_elem(&calls_by_tid, &tid);
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		bpf_map_update_elem(&calls_by_tid, &tid, &one, BPF_NOEXIST);
	struct event e = {magic, PT_REGS_PARM1(ctx), id >> 32, tid};
	bpf_ringbuf_output(&events, &e, sizeof(e), 0);
	return 0;
}

SEC("uretprobe")
int on_return(struct pt_regs *ctx)
{
	if (mine())
		hit(1);
	return 0;
}

SEC("perf_event")
int on_tick(struct bpf_perf_event_data *ctx)
{
	if (!mine())
		return 0;
	__u32 zero = 0;
	__u64 *v = bpf_map_lookup_elem(&ticks, &zero);
	if (v)
		*v += 1;
	return 0;
}

SEC("raw_tp/sched_process_fork")
int on_fork(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *child = (struct task_struct *)ctx->args[1];
	pid_t child_tgid = 0;
	CORE_READ_INTO(&child_tgid, child, tgid); /* CO-RE: the kernel's task_struct layout */
	if (mine() && child_tgid)
		hit(3);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
