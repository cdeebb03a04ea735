// SPDX-License-Identifier: (BSD-2-Clause OR GPL-2.0-only)
/* CPU stack sampling: a perf-event timer on every CPU runs on_sample, which counts
 * (process, thread, cgroup, comm, user stack, kernel stack) in a hash map. Each distinct
 * stack is stored once, under a 64-bit hash of its addresses (a stack-trace map would
 * drop stacks whose 14-bit bucket collides), so user space reads aggregates, not samples.
 * The first sample of each process (and the first after it execs) is announced on a ring
 * buffer, so user space can snapshot its memory mappings while it still runs.
 *
 * In CPython processes that user space has described in `py_procs` (3.11+), each sample
 * also walks the sampled thread's Python frames: the chain of _PyInterpreterFrame from the
 * thread state to the outermost call, kept as the addresses of their code objects (a Python
 * stack, stored like the others). Each new Python stack is announced on the ring buffer so
 * user space reads the code objects' names while the process still runs. No frame pointers
 * are needed in the interpreter for this, unlike its native stack. */
#include "aiflame_core.h"
#include "pystack.h"

#define MAX_STACK_DEPTH 127 /* the kernel's default perf_event_max_stack */
#define COMM_LEN 16
_Static_assert(MAX_STACK_DEPTH == MAX_PY_DEPTH, "Python stacks are stored as stacks");

/* read-only configuration, set by the loader before load */
const volatile __u8 filter_pids = 0;     /* 1: only processes in `targets` */
const volatile __u8 follow_children = 0; /* 1: processes forked by targets become targets */
const volatile __u8 include_idle = 0;    /* 1: count the idle task (pid 0) too */

enum stat {
	ST_SAMPLES,          /* samples counted */
	ST_IDLE,             /* idle-task samples skipped */
	ST_COUNTS_FULL,      /* samples lost: the counts map was full */
	ST_USER_EMPTY,       /* user stack unreadable (a user task, -EFAULT) */
	ST_STACKS_FULL,      /* stack lost: the stack map was full */
	ST_KERNEL_FAILED,    /* kernel stack failed for another reason */
	ST_EVENTS_LOST,      /* ring buffer full: a process announcement was dropped */
	ST_PY_STACKS,        /* samples with a Python stack */
	ST_PY_FAILED,        /* Python frames unreadable (memory not paged in, torn update) */
	ST_PY_DEPTH,         /* Python stacks cut at MAX_PY_DEPTH */
	ST_N,
};

struct sample_key {
	__u32 pid; /* tgid */
	__u32 tid;
	__u64 cgroup;
	__u64 user_stack;   /* key in `stacks` when user_error is 0 */
	__u64 kernel_stack; /* key in `stacks` when kernel_error is 0 */
	__u64 python_stack; /* key in `stacks` (code object addresses) when python_error is 0 */
	__s32 user_error;   /* -errno, or -1 for a kernel thread (no user stack) */
	__s32 kernel_error; /* -errno; -EFAULT: the sample hit user mode */
	__s32 python_error; /* PY_NO_THREAD, PY_NOT_PYTHON, or -errno */
	__u32 python_gil;   /* enum gil_state */
	char comm[COMM_LEN];
};

struct stack {
	__u64 ips[MAX_STACK_DEPTH]; /* innermost first, zero-filled */
};

enum event_kind {
	EV_PROCESS,      /* a process was sampled first: snapshot its mappings */
	EV_PYTHON_STACK, /* a new Python stack: read its code objects */
};

struct pid_event {
	__u32 pid;
	__u32 kind;
	__u64 stack; /* EV_PYTHON_STACK: its key in `stacks` */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct stack);
} stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY); /* room for one stack (too big for BPF's stack) */
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stack);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct sample_key);
	__type(value, __u64);
} counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, __u8);
} targets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 32768);
	__type(key, __u32);
	__type(value, __u8);
} seen SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 65536);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, ST_N);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

static __always_inline void stat_add(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &idx);
	if (v)
		*v += 1;
}

/* Store the first `depth` entries of buf (zero after them) under their hash in *id;
 * 0 when it was stored before, 1 when it is new, or -ENOMEM. */
static __always_inline long store_stack(struct stack *buf, __u32 depth, __u64 *id)
{
	__u64 h = 0xcbf29ce484222325ULL; /* FNV-1a over the addresses */
	for (__u32 i = 0; i < MAX_STACK_DEPTH; i++) {
		if (i >= depth)
			break;
		h = (h ^ buf->ips[i]) * 0x100000001b3ULL;
	}
	*id = h;
	if (bpf_map_lookup_elem(&stacks, &h))
		return 0; /* stored before, as most are: no bucket lock, no copy */
	long err = bpf_map_update_elem(&stacks, &h, buf, BPF_NOEXIST);
	if (err == -EEXIST) /* another CPU stored it meanwhile */
		return 0;
	if (err) {
		stat_add(ST_STACKS_FULL);
		return -ENOMEM;
	}
	return 1;
}

/* Store the current user or kernel stack under its hash in *id; 0 or -errno. */
static __always_inline long record_stack(void *ctx, __u64 flags, __u64 *id)
{
	__u32 zero = 0;
	struct stack *buf = bpf_map_lookup_elem(&scratch, &zero);
	if (!buf)
		return -ENOMEM;
	long n = bpf_get_stack(ctx, buf->ips, sizeof(buf->ips), flags); /* zero-fills the rest */
	if (n <= 0)
		return n ? n : -EFAULT;
	long err = store_stack(buf, n / sizeof(__u64), id);
	return err < 0 ? err : 0;
}

/* Store the thread's Python stack (code object addresses, innermost first, PY_ENTRY on
 * frames a C call entered) in *id and its GIL state in *gil; 0, 1 when new, or a
 * python_error. */
static __always_inline long python_stack(const struct py_proc *py, __u64 *id, __u32 *gil)
{
	int cut = 0;
	long n = walk_python(py, gil, &cut);
	if (cut)
		stat_add(ST_PY_DEPTH);
	if (n <= 0)
		return n;
	__u32 zero = 0;
	struct stack *buf = bpf_map_lookup_elem(&py_scratch, &zero); /* the same layout */
	if (!buf)
		return -ENOMEM;
	return store_stack(buf, n, id);
}

static __always_inline void announce(__u32 pid)
{
	__u8 one = 1;
	if (bpf_map_lookup_elem(&seen, &pid))
		return; /* announced already (an LRU update would take a free node first) */
	if (bpf_map_update_elem(&seen, &pid, &one, BPF_NOEXIST) != 0)
		return;
	struct pid_event e = {pid, EV_PROCESS, 0};
	if (bpf_ringbuf_output(&events, &e, sizeof(e), 0) != 0) {
		stat_add(ST_EVENTS_LOST);
		bpf_map_delete_elem(&seen, &pid); /* try again on its next sample */
	}
}

/* One sample; `python`: walk the Python stack of described processes (a compile-time
 * constant: on_sample_python needs bpf_loop, Linux 5.17+, and on_sample does not). */
static __always_inline int sample(struct bpf_perf_event_data *ctx, const int python)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 pid = id >> 32, tid = (__u32)id;

	if (tid == 0 && !include_idle) {
		stat_add(ST_IDLE);
		return 0;
	}
	if (filter_pids && !bpf_map_lookup_elem(&targets, &pid))
		return 0;

	struct sample_key key = {};
	key.pid = pid;
	key.tid = tid;
	key.cgroup = bpf_get_current_cgroup_id();
	bpf_get_current_comm(&key.comm, sizeof(key.comm));

	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	unsigned int flags = 0;
	CORE_READ_INTO(&flags, task, flags);
	if (flags & PF_KTHREAD) {
		key.user_error = -1; /* kernel threads have no user stack: not an error */
	} else {
		key.user_error = record_stack(ctx, BPF_F_USER_STACK, &key.user_stack);
		if (key.user_error == -EFAULT)
			stat_add(ST_USER_EMPTY);
		if (pid)
			announce(pid);
	}
	key.python_error = PY_NOT_PYTHON;
	const struct py_proc *py = python && pid ? bpf_map_lookup_elem(&py_procs, &pid) : 0;
	if (py) {
		long got = python_stack(py, &key.python_stack, &key.python_gil);
		key.python_error = got > 0 ? 0 : got;
		if (got >= 0)
			stat_add(ST_PY_STACKS);
		else if (got != PY_NO_THREAD)
			stat_add(ST_PY_FAILED);
		if (got > 0) { /* a new stack: its code objects are to be named */
			struct pid_event e = {pid, EV_PYTHON_STACK, key.python_stack};
			if (bpf_ringbuf_output(&events, &e, sizeof(e), 0) != 0)
				stat_add(ST_EVENTS_LOST);
		}
	}
	key.kernel_error = record_stack(ctx, 0, &key.kernel_stack);
	if (key.kernel_error && key.kernel_error != -EFAULT && key.kernel_error != -ENOMEM)
		stat_add(ST_KERNEL_FAILED);

	__u64 *count = bpf_map_lookup_elem(&counts, &key);
	if (count) {
		__sync_fetch_and_add(count, 1);
	} else {
		__u64 one = 1;
		long err = bpf_map_update_elem(&counts, &key, &one, BPF_NOEXIST);
		if (err == -EEXIST) { /* another CPU added it meanwhile */
			count = bpf_map_lookup_elem(&counts, &key);
			if (count)
				__sync_fetch_and_add(count, 1);
		} else if (err) {
			stat_add(ST_COUNTS_FULL);
			return 0;
		}
	}
	stat_add(ST_SAMPLES);
	return 0;
}

SEC("perf_event")
int on_sample_python(struct bpf_perf_event_data *ctx)
{
	return sample(ctx, 1);
}

SEC("perf_event")
int on_sample(struct bpf_perf_event_data *ctx)
{
	return sample(ctx, 0);
}

/* sched_process_fork(struct task_struct *parent, struct task_struct *child) */
SEC("raw_tp/sched_process_fork")
int on_fork(struct bpf_raw_tracepoint_args *ctx)
{
	if (!filter_pids || !follow_children)
		return 0;
	__u32 parent = bpf_get_current_pid_tgid() >> 32;
	if (!bpf_map_lookup_elem(&targets, &parent))
		return 0;
	struct task_struct *child = (struct task_struct *)ctx->args[1];
	pid_t child_tgid = 0;
	CORE_READ_INTO(&child_tgid, child, tgid);
	if (child_tgid && child_tgid != parent) { /* a new process, not a thread */
		__u8 one = 1;
		bpf_map_update_elem(&targets, &child_tgid, &one, BPF_ANY);
	}
	return 0;
}

/* sched_process_exec(struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm):
 * the process gets new mappings; its next sample announces it again (by then the dynamic
 * loader has usually mapped its libraries). */
SEC("raw_tp/sched_process_exec")
int on_exec(struct bpf_raw_tracepoint_args *ctx)
{
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	bpf_map_delete_elem(&seen, &pid);
	bpf_map_delete_elem(&py_procs, &pid); /* another program now, maybe not Python */
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
