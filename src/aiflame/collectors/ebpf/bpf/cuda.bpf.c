// SPDX-License-Identifier: (BSD-2-Clause OR GPL-2.0-only)
/* CUDA runtime/driver and HIP API calls: launches, allocations and frees, copies,
 * synchronisation, and kernel names at module load.
 *
 * One generic pair of programs serves every probed function; the probe's BPF cookie says
 * which function it is (see collectors/ebpf/cuda_apis.py: cookie()). At entry the first
 * seven integer arguments and the caller's return address are taken. Functions without
 * a return probe are handled at once, with the user stack; the others store the call per
 * thread and are handled at return, with the time spent, the return value, the word an
 * out-parameter points to (the allocated address, the new handle) and the user stack of
 * the call site (at return the instruction pointer is back in the caller).
 *
 * Launches, copies and syncs, which can come by the million, are summed in the kernel by
 * (process, thread, function, stack, kernel or copy kind, caller, error) in `calls`, with
 * each distinct stack stored once under a 64-bit hash in `stacks`: user space reads the
 * sums at the end, nothing per call. Allocations, frees and kernel names go one by one
 * through the `events` ring buffer: pairing frees with allocations needs each of them.
 *
 * Overhead is bounded by a per-second budget of events per class (launch, memory, copy,
 * sync); calls over the budget are counted, never silently lost. Calls made from inside a
 * probed library (cudaMalloc calling cuMemAlloc_v2) are counted as nested and skipped, so
 * one user call is one event.
 *
 * Probes are attached to the library files, not to processes: they fire in every process
 * that maps the file, from its first instruction, and the programs keep the calls of the
 * recorded processes (`targets`, which follows forks, or every process). The dynamic
 * loader tells debuggers of each change to the libraries loaded by calling
 * _dl_debug_state(), with the list in _r_debug consistent again once new libraries are
 * mapped and relocated, before their constructors and before dlopen() returns (and before
 * main for those the program is linked with): a probe there (on_loader_state) stops
 * (SIGSTOP) a recorded process that has just loaded a CUDA/HIP library it is not set up
 * for (a file not probed yet, or a process user space has not described), until user
 * space has attached the file's probes, described the process and continued it: calls
 * made right after dlopen() are all seen. A program started with a dynamic loader not
 * probed yet (another container's) is stopped at its exec (on_exec) until it is. A shell's
 * foreground job is not stopped (the shell would take the terminal back); its library is
 * probed as soon as user space sees it.
 *
 * In CPython processes user space has described in `py_procs`, the *_python programs
 * also walk the calling thread's Python stack (pystack.h) and append it to the native one
 * after a PY_MARK word: code object addresses, innermost first. A new summed stack with
 * Python frames is announced (EV_STACK) so user space names its code objects while the
 * process runs. */
#include "aiflame_core.h"
#include "pystack.h"

static __u64 (*bpf_get_attach_cookie)(void *ctx) = (void *)174;

#define BPF_F_NO_PREALLOC 1
#define N_CLASSES 5
#define CLASS_NAMING 4
#define N_ARGS 7
#define NO_ARG 15
#define MAX_FRAMES 127 /* the kernel's default perf_event_max_stack */
#define NAME_BYTES 1024
#define MAX_LIB_RANGES 8
#define MAX_APIS 1024

/* stats: per-CPU counters read by user space */
#define STAT_EMITTED 0
#define STAT_LOST 1     /* ring buffer full */
#define STAT_NESTED 2   /* called from inside a probed library */
#define STAT_INFLIGHT 3 /* no room to remember a call until its return */
#define STAT_STACK 4    /* bpf_get_stack failed */
#define STAT_CALLS_FULL 5  /* a call not summed: the `calls` table was full */
#define STAT_STACKS_FULL 6 /* a stack not stored: the `stacks` table was full */
#define STAT_CAPPED 8   /* + class: over the per-second budget */
#define N_STATS 16

/* per-second budget of events per class; 0: unlimited */
const volatile __u64 caps[N_CLASSES] = {};
const volatile __u8 every_process = 0;   /* 1: every process is recorded */
const volatile __u8 follow_children = 0; /* 1: processes forked by targets become targets */
const volatile __u8 hold = 0;            /* 1: stop a process until it is set up */

#define SIGSTOP 19
#define NAME_PREFIX 16 /* bytes of a file name compared */

struct call {
	__u64 ts;       /* entry, ns (CLOCK_MONOTONIC) */
	__u64 duration; /* ns from entry to return; 0 without a return probe */
	__u64 args[N_ARGS];
	__u64 caller; /* return address at entry */
	__u64 result; /* the word the out-parameter points to, at return */
	__s64 ret;    /* return value (cudaError_t, CUresult, hipError_t) */
	__u32 pid;
	__u32 tid;
	__u16 api;
	__u8 type; /* EV_CALL or EV_NAME */
	__u8 flags;
	__u32 payload; /* bytes that follow: the stack (EV_CALL), a name (EV_NAME) */
};
#define EV_CALL 0
#define EV_NAME 1
#define EV_STACK 2 /* a summed stack seen first, with Python frames: the stack follows */
#define PY_MARK 0xffffffffffffffffULL /* native frames before it, Python code objects after */
#define F_RETURNED 1 /* emitted at return: duration, ret and result are valid */
#define F_NAME_FAULT 2

struct record {
	struct call hdr;
	union {
		__u64 stack[MAX_FRAMES];
		char name[NAME_BYTES];
	};
};

/* what the kernel needs to sum a function's calls (filled by user space from cuda_apis) */
struct api_info {
	__u8 size_arg;   /* bytes copied: args[size_arg] (* args[size_arg2]); NO_ARG: none */
	__u8 size_arg2;
	__u8 target_arg; /* the kernel (launches) or the copy kind; NO_ARG: none */
	__u8 aggregate;  /* 1: summed in `calls`; 0: one event per call */
};

struct call_key {
	__u32 pid;
	__u32 tid;
	__u64 stack; /* key in `stacks`; 0: none could be read */
	__u64 target;
	__u64 caller;
	__u16 api;
	__u16 pad;
	__s32 error; /* the return value when it is known and not 0 */
};

struct call_sum {
	__u64 count;
	__u64 duration;
	__u64 bytes;
	__u64 ok; /* calls known to have succeeded */
};

struct stack {
	__u64 ips[MAX_FRAMES]; /* innermost first, zero-filled */
};

struct entry {
	__u64 ts;
	__u64 args[N_ARGS];
	__u64 caller;
};

struct inflight_key {
	__u64 pid_tgid;
	__u32 api;
	__u32 pad;
};

struct rate {
	__u64 second;
	__u64 count;
};

struct lib_ranges {
	__u64 lo[MAX_LIB_RANGES];
	__u64 hi[MAX_LIB_RANGES];
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH); /* full (returns that never came): counted, see stats */
	__uint(max_entries, 16384);
	__type(key, struct inflight_key);
	__type(value, struct entry);
} inflight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct record);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, N_CLASSES);
	__type(key, __u32);
	__type(value, struct rate);
} rates SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, N_STATS);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_APIS);
	__type(key, __u32);
	__type(value, struct api_info);
} apis SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct call_key);
	__type(value, struct call_sum);
} calls SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* memory for the stacks there are, not 16 MB */
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct stack);
} stacks SEC(".maps");

/* tgid -> executable ranges of the probed libraries in that process */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct lib_ranges);
} libs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH); /* tgid -> 1: the processes recorded */
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, __u8);
} targets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH); /* tgid -> 1: described by user space since its exec */
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, __u8);
} known SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH); /* tgid -> 1: announced, not handled yet */
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u8);
} pending SEC(".maps");

struct file_key {
	__u64 dev; /* the file's super block's dev_t, as the kernel keeps it */
	__u64 ino;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH); /* files whose probes are attached */
	__uint(max_entries, 1024);
	__type(key, struct file_key);
	__type(value, __u8);
} probed_files SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH); /* dynamic loader files whose _dl_debug_state is probed */
	__uint(max_entries, 256);
	__type(key, struct file_key);
	__type(value, __u8);
} probed_loaders SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH); /* tgid -> libraries of its list looked at already */
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u32);
} loaded SEC(".maps");

#define EV_LOADED_LIBRARY 0 /* it loaded a CUDA/HIP library it is not set up for */
#define EV_NEW_LOADER 1     /* it was started with a dynamic loader not probed yet */

struct library_event {
	__u32 pid;
	__u32 tid;
	struct file_key file; /* the library, or the dynamic loader */
	__u64 base;           /* EV_NEW_LOADER: where the loader is mapped (AT_BASE) */
	__u32 kind;
	__u32 held; /* 1: stopped (SIGSTOP) until user space continues it */
	char name[NAME_PREFIX];
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 65536);
} library_events SEC(".maps");

static __always_inline int recorded(__u32 tgid)
{
	return every_process || bpf_map_lookup_elem(&targets, &tgid) != 0;
}

/* Whether a file name is one of a CUDA/HIP library (as cuda_libs.py's names):
 * libcudart*, libcuda.so*, libamdhip64*. */
static __always_inline int gpu_library_name(const char *n)
{
	static const char cudart[] = "libcudart", cuda[] = "libcuda.so", hip[] = "libamdhip64";
	__u8 a = 0, b = 0, c = 0; /* the bits that differ: no branch per character */
#pragma unroll
	for (int i = 0; i < sizeof(hip) - 1; i++) {
		if (i < sizeof(cudart) - 1)
			a |= n[i] ^ cudart[i];
		if (i < sizeof(cuda) - 1)
			b |= n[i] ^ cuda[i];
		c |= n[i] ^ hip[i];
	}
	return !a || !b || !c;
}

static __always_inline int file_name(struct file *f, char *name)
{
	const unsigned char *at = 0;
	if (!f || CORE_READ_INTO(&at, f, f_path.dentry) || !at)
		return -1;
	struct dentry *d = (struct dentry *)at;
	if (CORE_READ_INTO(&at, d, d_name.name) || !at)
		return -1;
	return bpf_probe_read_kernel_str(name, NAME_PREFIX, at) < 0 ? -1 : 0;
}

static __always_inline void stat(__u32 i)
{
	STAT_ADD(stats, i, 1);
}

static __always_inline int over_budget(__u32 cls)
{
	if (cls >= N_CLASSES || cls == CLASS_NAMING)
		return 0;
	__u64 cap = caps[cls];
	if (!cap)
		return 0;
	struct rate *r = bpf_map_lookup_elem(&rates, &cls);
	if (!r)
		return 0;
	__u64 second = bpf_ktime_get_ns() / 1000000000ULL;
	if (r->second != second) { /* a racing CPU may reset it too: the cap is approximate */
		r->second = second;
		r->count = 0;
	}
	return __sync_fetch_and_add(&r->count, 1) >= cap;
}

/* bpf_find_vma callback: whether the mapping holds a CUDA/HIP library's code */
static long vma_of_gpu_library(struct task_struct *task, struct vm_area_struct *vma, int *inside)
{
	struct file *f = 0;
	char name[NAME_PREFIX] = {};
	if (!CORE_READ_INTO(&f, vma, vm_file) && file_name(f, name) == 0)
		*inside = gpu_library_name(name);
	return 0;
}

/* Whether `caller` lies in a probed library: the ranges user space set, else (a library
 * mapped since: `modern` programs, Linux 5.17+) the mapping that holds it. */
static __always_inline int from_probed_library(__u32 tgid, __u64 caller, const int modern)
{
	struct lib_ranges *l = bpf_map_lookup_elem(&libs, &tgid);
	if (l) {
#pragma unroll
		for (int i = 0; i < MAX_LIB_RANGES; i++) {
			if (caller >= l->lo[i] && caller < l->hi[i])
				return 1;
		}
	}
	int inside = 0;
	if (modern)
		bpf_find_vma(bpf_get_current_task_btf(), caller, vma_of_gpu_library, &inside, 0);
	return inside;
}

static __always_inline void read_args(struct pt_regs *ctx, __u64 *args, __u64 *caller,
				      int stack_arg)
{
	args[0] = PT_REGS_PARM1(ctx);
	args[1] = PT_REGS_PARM2(ctx);
	args[2] = PT_REGS_PARM3(ctx);
	args[3] = PT_REGS_PARM4(ctx);
	args[4] = PT_REGS_PARM5(ctx);
	args[5] = PT_REGS_PARM6(ctx);
	args[6] = 0;
#if defined(__TARGET_ARCH_x86)
	/* at entry [sp] is the return address and [sp + 8] the 7th integer argument */
	bpf_probe_read_user(caller, sizeof(*caller), (void *)PT_REGS_SP(ctx));
	if (stack_arg)
		bpf_probe_read_user(&args[6], sizeof(args[6]), (void *)(PT_REGS_SP(ctx) + 8));
#else
	*caller = ctx->user_regs.regs[30]; /* the link register */
	args[6] = ctx->user_regs.regs[6];
#endif
}

static __always_inline struct record *scratch_record(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&scratch, &zero);
}

struct py_copy {
	__u32 at; /* where the first code address goes in the record's stack */
	__u32 n;  /* code addresses to copy */
};

/* bpf_loop callback: one code address from py_scratch into the record's stack. */
static long py_copy_step(__u64 i, struct py_copy *c)
{
	__u32 zero = 0;
	struct py_codes *codes = bpf_map_lookup_elem(&py_scratch, &zero);
	struct record *r = bpf_map_lookup_elem(&scratch, &zero);
	__u64 to = c->at + i;
	if (!codes || !r || i >= c->n || i >= MAX_PY_DEPTH || to >= MAX_FRAMES)
		return 1;
	r->stack[to] = codes->code[i];
	return 0;
}

/* After the n bytes of native stack in r, PY_MARK and the thread's Python stack if its
 * process is a described CPython; the new length in bytes. */
static __always_inline long append_python(struct record *r, long n)
{
	__u32 pid = r->hdr.pid, gil = 0;
	const struct py_proc *py = bpf_map_lookup_elem(&py_procs, &pid);
	if (!py || n < 0)
		return n;
	int cut = 0;
	long got = walk_python(py, &gil, &cut);
	__u32 at = n / sizeof(__u64);
	if (got <= 0 || at >= MAX_FRAMES - 1)
		return n;
	r->stack[at] = PY_MARK;
	struct py_copy c = {at + 1, got};
	bpf_loop(MAX_PY_DEPTH, py_copy_step, &c, 0);
	__u32 end = at + 1 + got;
	return (end < MAX_FRAMES ? end : MAX_FRAMES) * sizeof(__u64);
}

static __always_inline void emit_stack(void *ctx, struct record *r, __u64 skip,
				       const int python)
{
	long n = bpf_get_stack(ctx, r->stack, sizeof(r->stack), BPF_F_USER_STACK | skip);
	if (n < 0) {
		stat(STAT_STACK);
		n = 0;
	}
	if (n > (long)sizeof(r->stack))
		n = sizeof(r->stack);
	if (python)
		n = append_python(r, n);
	if (n > (long)sizeof(r->stack))
		n = sizeof(r->stack);
	r->hdr.payload = n;
	if (bpf_ringbuf_output(&events, r, sizeof(r->hdr) + n, 0))
		stat(STAT_LOST);
	else
		stat(STAT_EMITTED);
}

/* Sum the call in `calls` (the header of r is filled); skip: frames to skip in the stack */
static __always_inline void aggregate(void *ctx, struct record *r, struct api_info *info,
				      __u64 skip, int returned, const int python)
{
	struct call_key k = {};
	k.pid = r->hdr.pid;
	k.tid = r->hdr.tid;
	k.api = r->hdr.api;
	k.caller = r->hdr.caller;
	k.error = returned ? (__s32)r->hdr.ret : 0;
	long n = bpf_get_stack(ctx, r->stack, sizeof(r->stack), BPF_F_USER_STACK | skip);
	long native = n;
	if (python && n > 0)
		n = append_python(r, n);
	if (n > (long)sizeof(r->stack))
		n = sizeof(r->stack);
	if (n > 0) {
		__u32 depth = n / sizeof(__u64);
		__u64 h = 0xcbf29ce484222325ULL; /* FNV-1a over the addresses */
		for (__u32 i = 0; i < MAX_FRAMES; i++) {
			if (i >= depth)
				break;
			h = (h ^ r->stack[i]) * 0x100000001b3ULL;
		}
		k.stack = h;
		if (!bpf_map_lookup_elem(&stacks, &h)) { /* most are stored already: no lock */
			long err = bpf_map_update_elem(&stacks, &h, r->stack, BPF_NOEXIST);
			if (err && err != -EEXIST)
				stat(STAT_STACKS_FULL);
			if (!err && n > native) { /* new, with Python frames: to be named now */
				__u8 type = r->hdr.type;
				r->hdr.type = EV_STACK;
				r->hdr.payload = n;
				if (bpf_ringbuf_output(&events, r, sizeof(r->hdr) + n, 0))
					stat(STAT_LOST);
				r->hdr.type = type;
			}
		}
	} else {
		stat(STAT_STACK);
	}
	__u32 t = info->target_arg;
	if (t < N_ARGS)
		k.target = r->hdr.args[t];
	__u64 bytes = 0;
	__u32 a = info->size_arg, b = info->size_arg2;
	if (a < N_ARGS) {
		bytes = r->hdr.args[a];
		if (b < N_ARGS)
			bytes *= r->hdr.args[b];
	}
	__u64 ok = returned && r->hdr.ret == 0;
	struct call_sum *v = bpf_map_lookup_elem(&calls, &k);
	if (!v) {
		struct call_sum zero = {};
		long err = bpf_map_update_elem(&calls, &k, &zero, BPF_NOEXIST);
		if (err && err != -EEXIST) {
			stat(STAT_CALLS_FULL);
			return;
		}
		v = bpf_map_lookup_elem(&calls, &k);
		if (!v)
			return;
	}
	__sync_fetch_and_add(&v->count, 1);
	__sync_fetch_and_add(&v->duration, r->hdr.duration);
	__sync_fetch_and_add(&v->bytes, bytes);
	__sync_fetch_and_add(&v->ok, ok);
	stat(STAT_EMITTED);
}

static __always_inline struct api_info *api_info(__u32 api)
{
	return bpf_map_lookup_elem(&apis, &api);
}

/* cookie: bits 0-15 api, 16-19 class, 20-23 out arg, 24-27 name arg, 28 has return
 * probe, 29 reads the 7th argument */
static __always_inline int entry(struct pt_regs *ctx, const int python)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!recorded(id >> 32))
		return 0; /* another process using the probed file */
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 cls = (cookie >> 16) & 0xF;
	struct entry e = {};
	read_args(ctx, e.args, &e.caller, (cookie >> 29) & 1);
	if (cls != CLASS_NAMING && from_probed_library(id >> 32, e.caller, python)) {
		stat(STAT_NESTED);
		return 0;
	}
	if (over_budget(cls)) {
		stat(STAT_CAPPED + cls);
		return 0;
	}
	e.ts = bpf_ktime_get_ns();
	if ((cookie >> 28) & 1) {
		struct inflight_key k = {id, cookie & 0xFFFF, 0};
		if (bpf_map_update_elem(&inflight, &k, &e, BPF_ANY))
			stat(STAT_INFLIGHT);
		return 0;
	}
	struct record *r = scratch_record();
	if (!r)
		return 0;
	r->hdr.ts = e.ts;
	r->hdr.duration = 0;
	__builtin_memcpy(r->hdr.args, e.args, sizeof(e.args));
	r->hdr.caller = e.caller;
	r->hdr.result = 0;
	r->hdr.ret = 0;
	r->hdr.pid = id >> 32;
	r->hdr.tid = (__u32)id;
	r->hdr.api = cookie & 0xFFFF;
	r->hdr.type = EV_CALL;
	r->hdr.flags = 0;
	struct api_info *info = api_info(r->hdr.api);
	if (info && info->aggregate)
		aggregate(ctx, r, info, 1, 0, python);
	else
		emit_stack(ctx, r, 1, python); /* skip the probed function's own address */
	return 0;
}

static __always_inline int on_return(struct pt_regs *ctx, const int python)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 id = bpf_get_current_pid_tgid();
	if (!recorded(id >> 32))
		return 0;
	__u64 cookie = bpf_get_attach_cookie(ctx);
	struct inflight_key k = {id, cookie & 0xFFFF, 0};
	struct entry *e = bpf_map_lookup_elem(&inflight, &k);
	if (!e)
		return 0; /* nested, over budget, or attached while the call was running */
	struct record *r = scratch_record();
	if (!r) {
		bpf_map_delete_elem(&inflight, &k);
		return 0;
	}
	r->hdr.ts = e->ts;
	r->hdr.duration = now - e->ts;
	__builtin_memcpy(r->hdr.args, e->args, sizeof(e->args));
	r->hdr.caller = e->caller;
	bpf_map_delete_elem(&inflight, &k);
	r->hdr.ret = (__s32)PT_REGS_RC(ctx);
	r->hdr.result = 0;
	r->hdr.pid = id >> 32;
	r->hdr.tid = (__u32)id;
	r->hdr.api = cookie & 0xFFFF;
	r->hdr.flags = F_RETURNED;
	__u32 out = (cookie >> 20) & 0xF;
	if (out < N_ARGS && r->hdr.ret == 0)
		bpf_probe_read_user(&r->hdr.result, sizeof(r->hdr.result), (void *)r->hdr.args[out]);
	__u32 name = (cookie >> 24) & 0xF;
	if (name < N_ARGS) {
		r->hdr.type = EV_NAME;
		long n = 0;
		if (r->hdr.ret == 0)
			n = bpf_probe_read_user_str(r->name, sizeof(r->name), (void *)r->hdr.args[name]);
		if (n < 0) {
			r->hdr.flags |= F_NAME_FAULT;
			n = 0;
		}
		if (n > (long)sizeof(r->name))
			n = sizeof(r->name);
		r->hdr.payload = n;
		if (bpf_ringbuf_output(&events, r, sizeof(r->hdr) + n, 0))
			stat(STAT_LOST);
		else
			stat(STAT_EMITTED);
		return 0;
	}
	r->hdr.type = EV_CALL;
	struct api_info *info = api_info(r->hdr.api);
	if (info && info->aggregate)
		aggregate(ctx, r, info, 0, 1, python);
	else
		emit_stack(ctx, r, 0, python); /* at return the stack starts at the call site */
	return 0;
}

/* The *_python programs walk Python stacks too (bpf_loop: Linux 5.17+); user space loads
 * one pair or the other. */
SEC("uprobe")
int cuda_entry_python(struct pt_regs *ctx)
{
	return entry(ctx, 1);
}

SEC("uretprobe")
int cuda_return_python(struct pt_regs *ctx)
{
	return on_return(ctx, 1);
}

SEC("uprobe")
int cuda_entry(struct pt_regs *ctx)
{
	return entry(ctx, 0);
}

SEC("uretprobe")
int cuda_return(struct pt_regs *ctx)
{
	return on_return(ctx, 0);
}

/* Whether the current process is a shell's foreground job in a terminal: the terminal's
 * foreground process group is its own, and its parent put it in that group (job
 * control). A stop would hand the terminal back to the shell. */
static __always_inline int foreground_job(struct task_struct *task)
{
	struct signal_struct *sig = 0;
	struct tty_struct *tty = 0;
	struct pid *fg = 0, *group = 0, *parent_group = 0;
	if (CORE_READ_INTO(&sig, task, signal) || !sig || CORE_READ_INTO(&tty, sig, tty) || !tty)
		return 0;
	if (CORE_FIELD_EXISTS(tty, ctrl))
		CORE_READ_INTO(&fg, tty, ctrl.pgrp);
	else
		CORE_READ_INTO(&fg, (struct tty_struct___old *)tty, pgrp);
	if (CORE_READ_INTO(&group, sig, pids[PIDTYPE_PGID]) || fg != group)
		return 0;
	struct task_struct *parent = 0;
	if (CORE_READ_INTO(&parent, task, real_parent) || !parent ||
	    CORE_READ_INTO(&sig, parent, signal) || !sig ||
	    CORE_READ_INTO(&parent_group, sig, pids[PIDTYPE_PGID]))
		return 0;
	return parent_group != group;
}

/* Announce a recorded process to user space, stopped unless it is a shell's foreground
 * job (once at a time: until user space has handled it). */
static __always_inline void announce_library(__u32 kind, struct file_key *key, __u64 base,
					     const char *name)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	__u8 one = 1;
	if (bpf_map_update_elem(&pending, &tgid, &one, BPF_NOEXIST))
		return; /* announced already, user space is on it */
	struct library_event *e = bpf_ringbuf_reserve(&library_events, sizeof(*e), 0);
	if (!e) {
		bpf_map_delete_elem(&pending, &tgid); /* the scan of its maps will find it */
		return;
	}
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	e->pid = tgid;
	e->tid = (__u32)id;
	e->file = *key;
	e->base = base;
	e->kind = kind;
	e->held = hold && !foreground_job(task) && bpf_send_signal(SIGSTOP) == 0;
	__builtin_memcpy(e->name, name, NAME_PREFIX);
	bpf_ringbuf_submit(e, 0);
}

struct mapped_file {
	struct file_key key;
	char name[NAME_PREFIX];
	int found;
};

/* bpf_find_vma callback: the file a mapping maps, its identity and name */
static long file_of_vma(struct task_struct *task, struct vm_area_struct *vma,
			struct mapped_file *out)
{
	struct file *f = 0;
	struct inode *inode = 0;
	struct super_block *sb = 0;
	unsigned long ino = 0;
	dev_t dev = 0;
	if (CORE_READ_INTO(&f, vma, vm_file) || !f || file_name(f, out->name) ||
	    CORE_READ_INTO(&inode, f, f_inode) || !inode || CORE_READ_INTO(&ino, inode, i_ino) ||
	    CORE_READ_INTO(&sb, inode, i_sb) || !sb || CORE_READ_INTO(&dev, sb, s_dev))
		return 0;
	out->key.dev = dev;
	out->key.ino = ino;
	out->found = 1;
	return 0;
}

#define MAX_LINK_MAPS 4096
#define RT_CONSISTENT 0
#define RT_DELETE 2

struct loader_walk {
	__u64 entry;   /* the next struct link_map to look at */
	__u32 index;   /* its place in the list */
	__u32 skip;    /* entries looked at before: followed only */
	__u32 known;   /* the process was described by user space */
	__u32 new_gpu; /* a CUDA/HIP library to set up was found: in `lib` */
	struct mapped_file lib;
};

/* bpf_loop callback: one entry of the loader's list of loaded objects (struct link_map:
 * l_addr, l_name, l_ld at +16, l_next at +24) */
static long loader_step(__u64 i, struct loader_walk *w)
{
	if (!w->entry)
		return 1;
	if (w->index >= w->skip) {
		__u64 dynamic = 0;
		struct mapped_file m = {};
		if (!read_u64(&dynamic, w->entry + 16) && dynamic)
			bpf_find_vma(bpf_get_current_task_btf(), dynamic, file_of_vma, &m, 0);
		if (m.found && gpu_library_name(m.name) &&
		    (!w->known || !bpf_map_lookup_elem(&probed_files, &m.key))) {
			w->new_gpu = 1;
			w->lib = m;
			return 1; /* looked at again once it is set up */
		}
	}
	w->index++;
	if (read_u64(&w->entry, w->entry + 24))
		w->entry = 0;
	return 0;
}

/* _dl_debug_state() of a dynamic loader; the cookie: &_r_debug - &_dl_debug_state */
SEC("uprobe")
int on_loader_state(struct pt_regs *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (!recorded(tgid))
		return 0;
	__u64 r_debug = PT_REGS_IP(ctx) + (__s64)bpf_get_attach_cookie(ctx);
	__s32 state = -1;
	if (bpf_probe_read_user(&state, sizeof(state), (void *)(r_debug + 24)))
		return 0;
	__u32 zero = 0;
	if (state == RT_DELETE) { /* objects leave the list: look at all of it next time */
		bpf_map_update_elem(&loaded, &tgid, &zero, BPF_ANY);
		return 0;
	}
	if (state != RT_CONSISTENT)
		return 0;
	struct loader_walk w = {};
	if (read_u64(&w.entry, r_debug + 8))
		return 0;
	__u32 *seen = bpf_map_lookup_elem(&loaded, &tgid);
	w.skip = seen ? *seen : 0;
	w.known = bpf_map_lookup_elem(&known, &tgid) != 0;
	bpf_loop(MAX_LINK_MAPS, loader_step, &w, 0);
	bpf_map_update_elem(&loaded, &tgid, &w.index, BPF_ANY);
	if (w.new_gpu)
		announce_library(EV_LOADED_LIBRARY, &w.lib.key, 0, w.lib.name);
	return 0;
}

#define AT_NULL 0
#define AT_BASE 7
#define AUXV_PAIRS 32

/* Where the current process's dynamic loader is mapped (0: a static program). */
static __always_inline __u64 loader_base(struct task_struct *task)
{
	struct mm_struct *mm = 0;
	if (CORE_READ_INTO(&mm, task, mm) || !mm)
		return 0;
	const unsigned long *auxv = __builtin_preserve_access_index(&mm->saved_auxv[0]);
#pragma unroll
	for (int i = 0; i < AUXV_PAIRS; i++) {
		unsigned long pair[2] = {};
		if (bpf_probe_read_kernel(pair, sizeof(pair), auxv + 2 * i) || pair[0] == AT_NULL)
			return 0;
		if (pair[0] == AT_BASE)
			return pair[1];
	}
	return 0;
}

/* sched_process_fork(parent, child): a child of a target is a target, with its parent's
 * memory (its Python and libraries as they were described) */
SEC("raw_tp/sched_process_fork")
int on_fork(struct bpf_raw_tracepoint_args *ctx)
{
	__u32 parent = bpf_get_current_pid_tgid() >> 32;
	struct task_struct *child = (struct task_struct *)ctx->args[1];
	pid_t child_tgid = 0;
	CORE_READ_INTO(&child_tgid, child, tgid);
	if (!child_tgid || (__u32)child_tgid == parent)
		return 0; /* a thread, not a process */
	__u32 c = child_tgid;
	__u8 one = 1;
	if (follow_children && bpf_map_lookup_elem(&targets, &parent))
		bpf_map_update_elem(&targets, &c, &one, BPF_ANY);
	if (!recorded(c))
		return 0;
	struct py_proc *py = bpf_map_lookup_elem(&py_procs, &parent);
	if (py)
		bpf_map_update_elem(&py_procs, &c, py, BPF_ANY);
	struct lib_ranges *l = bpf_map_lookup_elem(&libs, &parent);
	if (l)
		bpf_map_update_elem(&libs, &c, l, BPF_ANY);
	if (bpf_map_lookup_elem(&known, &parent))
		bpf_map_update_elem(&known, &c, &one, BPF_ANY);
	__u32 *seen = bpf_map_lookup_elem(&loaded, &parent);
	if (seen)
		bpf_map_update_elem(&loaded, &c, seen, BPF_ANY);
	return 0;
}

/* sched_process_exec: another program, to be described again; one started with a dynamic
 * loader not probed yet waits for it to be (before the libraries it links load) */
SEC("raw_tp/sched_process_exec")
int on_exec(struct bpf_raw_tracepoint_args *ctx)
{
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	bpf_map_delete_elem(&known, &pid);
	bpf_map_delete_elem(&py_procs, &pid);
	bpf_map_delete_elem(&libs, &pid);
	bpf_map_delete_elem(&loaded, &pid);
	if (!recorded(pid))
		return 0;
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	__u64 base = loader_base(task);
	if (!base)
		return 0;
	struct mapped_file m = {};
	bpf_find_vma(bpf_get_current_task_btf(), base, file_of_vma, &m, 0);
	if (m.found && !bpf_map_lookup_elem(&probed_loaders, &m.key))
		announce_library(EV_NEW_LOADER, &m.key, base, m.name);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
