// SPDX-License-Identifier: (BSD-2-Clause OR GPL-2.0-only)
/* Walking a CPython thread's Python stack from a BPF program (3.8-3.15).
 *
 * User space describes each CPython process in `py_procs` (where _PyRuntime is, and the
 * offsets of the few fields read, which change between minor versions). walk_python()
 * then finds the current thread's PyThreadState (the interpreter's list of thread states,
 * matched on the thread's id, cached per thread) and follows its chain of frames with
 * bpf_loop (Linux 5.17+), keeping each frame's code object address in `py_scratch`,
 * innermost first. Two frame models share the walk:
 *
 * - 3.8-3.10: PyFrameObject, linked by f_back; each frame is its own call of the eval
 *   loop (all are entries from C). Thread states know their thread by pthread_self(),
 *   which is derived from the thread's TLS base (x86-64: the FS base itself).
 * - 3.11+: _PyInterpreterFrame, linked by `previous`; frames owned by the interpreter or
 *   the C stack (3.12+: the shim of an entry into the eval loop) are no Python code.
 *   Thread states know their thread by its OS id in the process's PID namespace. From
 *   3.14 the code object is a tagged stack reference (low bits cleared here).
 *
 * Included by profile.bpf.c (CPU samples) and cuda.bpf.c (CUDA/HIP call sites). */
#ifndef AIFLAME_PYSTACK_H
#define AIFLAME_PYSTACK_H

#define MAX_PY_DEPTH 127   /* Python frames kept per stack (the outermost are cut) */
#define MAX_PY_THREADS 128 /* thread states searched for the sampled thread */
#define PY_ENTRY 1ULL      /* low bit of a code address: its frame was entered from C */
#define PY_TAG_BITS 7ULL   /* stack reference tags (3.14+); objects are 8-byte aligned */
#define PY_NO_OFFSET 0xffffffffU
#define PY_OWNED_BY_INTERPRETER 3 /* 3.12+: owners from here on hold no Python code */
#define PY_NO_THREAD (-1)  /* python_error: no thread state (not a Python thread) */
#define PY_NOT_PYTHON (-2) /* python_error: not a described Python process */

/* struct py_proc flags */
#define PYF_THREAD_BY_TLS 1 /* thread states hold pthread_self(), not the OS thread id */
#define PYF_ALL_ENTRIES 2   /* every frame is an entry from C (PyFrameObject, 3.8-3.10) */

#define PY_FRAME_BYTES 80 /* read of each frame: every field used lies in them (3.8-3.15) */

struct py_codes {
	__u64 code[MAX_PY_DEPTH]; /* innermost first; zero after the frames kept */
	__u8 frame[PY_FRAME_BYTES]; /* the frame being read */
};

/* Where CPython keeps what the walk reads, for one process (offsets in bytes). */
struct py_proc {
	__u64 runtime;           /* address of _PyRuntime in the process */
	__u32 interpreters_head; /* in _PyRuntimeState: the first interpreter */
	__u32 threads_head;      /* in PyInterpreterState: its first thread state */
	__u32 tstate_next;       /* in PyThreadState */
	__u32 thread_id;         /* in PyThreadState: native_thread_id (3.11+: the OS thread id)
				  * or thread_id (3.8-3.10: pthread_self(), PYF_THREAD_BY_TLS) */
	__u32 tstate_frame;      /* in PyThreadState: frame (3.8-3.10), cframe (3.11, 3.12) or
				  * current_frame (3.13+) */
	__u32 cframe_frame;      /* in _PyCFrame: current_frame; PY_NO_OFFSET from 3.13 */
	__u32 frame_code;        /* in the frame: f_code / f_executable */
	__u32 frame_previous;    /* in the frame: f_back / previous */
	__u32 frame_owner;       /* in _PyInterpreterFrame (a char); PY_NO_OFFSET before 3.11 */
	__u32 frame_is_entry;    /* in _PyInterpreterFrame (3.11 only); else PY_NO_OFFSET */
	__u32 gil_locked;        /* the GIL's `locked` (an int) and `last_holder` (a thread */
	__u32 gil_holder;        /* state), in _PyRuntimeState (3.11) or the interpreter */
	__u32 gil_in_runtime;    /* 1: those offsets are in _PyRuntimeState */
	__u32 flags;             /* PYF_* */
	__s64 tls_delta;         /* PYF_THREAD_BY_TLS: pthread_self() - the TLS base */
};

enum gil_state {
	GIL_UNKNOWN,  /* not a Python thread, or unreadable */
	GIL_HELD,     /* the sampled thread holds the GIL */
	GIL_RELEASED, /* it runs without the GIL (native code that released it, or waiting) */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY); /* Python stacks: entries past MAX_PY_DEPTH stay 0 */
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct py_codes);
} py_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct py_proc);
} py_procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH); /* pid << 32 | thread id -> its PyThreadState */
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, __u64);
} py_threads SEC(".maps");

static __always_inline long read_u64(__u64 *dst, __u64 addr)
{
	return bpf_probe_read_user(dst, sizeof(*dst), (const void *)addr);
}

/* The current thread's id as its own process sees it (in a container: the id in the
 * container's PID namespace), which is what CPython records in native_thread_id. */
static __always_inline __u32 namespace_tid(__u32 tid)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct pid *pid = 0;
	unsigned int level = 0;
	int nr = 0;
	if (CORE_READ_INTO(&pid, task, thread_pid) || !pid || CORE_READ_INTO(&level, pid, level))
		return tid;
	if (level > 31) /* the kernel nests PID namespaces 32 deep at most */
		return tid;
	struct upid *up = (struct upid *)__builtin_preserve_access_index(&pid->numbers[0]);
	if (bpf_probe_read_kernel(&nr, sizeof(nr), (void *)((char *)up + level * sizeof(*up))))
		return tid;
	return nr ? (__u32)nr : tid;
}

/* What the current thread's PyThreadState knows it by: pthread_self() (3.8-3.10), else
 * its id in its own PID namespace. */
static __always_inline __u64 python_thread_key(const struct py_proc *py, __u32 tid)
{
	if (!(py->flags & PYF_THREAD_BY_TLS))
		return namespace_tid(tid);
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	unsigned long base = 0;
#if defined(__TARGET_ARCH_x86)
	if (CORE_READ_INTO(&base, task, thread.fsbase))
		return 0;
#else
	if (CORE_READ_INTO(&base, task, thread.uw.tp_value))
		return 0;
#endif
	return base ? base + py->tls_delta : 0;
}

/* The PyThreadState of the current thread (`id`: pid_tgid; `tid`: what its thread state
 * knows it by): cached, else found in the interpreter's list. */
static __always_inline __u64 python_thread(const struct py_proc *py, __u64 id, __u64 tid)
{
	__u64 ts = 0, native = 0;
	__u64 *cached = bpf_map_lookup_elem(&py_threads, &id);
	if (cached) {
		ts = *cached;
		if (read_u64(&native, ts + py->thread_id) == 0 && native == tid)
			return ts; /* still this thread's (a freed state is reused by others) */
		bpf_map_delete_elem(&py_threads, &id);
	}
	__u64 interp = 0;
	if (read_u64(&interp, py->runtime + py->interpreters_head) || !interp)
		return 0;
	if (read_u64(&ts, interp + py->threads_head))
		return 0;
	for (__u32 i = 0; i < MAX_PY_THREADS; i++) {
		if (!ts)
			break;
		if (read_u64(&native, ts + py->thread_id))
			return 0;
		if (native == tid) {
			bpf_map_update_elem(&py_threads, &id, &ts, BPF_ANY);
			return ts;
		}
		if (read_u64(&ts, ts + py->tstate_next))
			return 0;
	}
	return 0;
}

struct py_walk {
	struct py_proc py; /* a copy: bpf_loop's callbacks see plain values */
	__u64 frame;       /* the next frame to read; 0 at the end of the chain */
	__u32 n;           /* frames kept */
	__s32 err;
};

static long py_scratch_index(struct py_walk *w, struct py_codes **buf)
{
	__u32 zero = 0;
	*buf = bpf_map_lookup_elem(&py_scratch, &zero);
	return *buf ? 0 : -ENOMEM;
}

/* bpf_loop callback: keep one frame's code object and step to its caller. */
static long py_walk_step(__u64 index, struct py_walk *w)
{
	if (!w->frame)
		return 1;
	struct py_codes *buf;
	if (py_scratch_index(w, &buf)) {
		w->err = -ENOMEM;
		return 1;
	}
	/* one read per frame: the fields are picked out of it (user space checked that they
	 * all lie in the first PY_FRAME_BYTES) */
	__u32 code_at = w->py.frame_code, owner_at = w->py.frame_owner;
	__u32 entry_at = w->py.frame_is_entry, previous_at = w->py.frame_previous;
	if (bpf_probe_read_user(buf->frame, PY_FRAME_BYTES, (const void *)w->frame) ||
	    code_at > PY_FRAME_BYTES - 8 || previous_at > PY_FRAME_BYTES - 8) {
		w->err = -EFAULT;
		return 1;
	}
	__u64 code = *(__u64 *)(buf->frame + code_at) & ~PY_TAG_BITS;
	__u64 previous = *(__u64 *)(buf->frame + previous_at);
	__u8 owner = 0, entry = (w->py.flags & PYF_ALL_ENTRIES) != 0;
	if (owner_at < PY_FRAME_BYTES)
		owner = buf->frame[owner_at];
	if (entry_at < PY_FRAME_BYTES)
		entry = buf->frame[entry_at];
	__u32 n = w->n;
	if (owner >= PY_OWNED_BY_INTERPRETER) {
		/* 3.12+: the shim of an entry into the eval loop (or another frame of the
		 * interpreter's own) sits below the frame it entered */
		if (n > 0 && n <= MAX_PY_DEPTH)
			buf->code[n - 1] |= PY_ENTRY;
	} else if (code && n < MAX_PY_DEPTH) {
		buf->code[n] = code | (entry ? PY_ENTRY : 0);
		w->n = n + 1;
	}
	w->frame = previous;
	return 0;
}

/* bpf_loop callback: zero what an earlier, deeper stack left after the frames kept. */
static long py_zero_step(__u64 index, struct py_walk *w)
{
	struct py_codes *buf;
	if (py_scratch_index(w, &buf))
		return 1;
	__u64 i = w->n + index;
	if (i >= MAX_PY_DEPTH)
		return 1;
	buf->code[i] = 0;
	return 0;
}

/* Whether thread state `ts` holds the GIL. */
static __always_inline __u32 gil_state(const struct py_proc *py, __u64 ts)
{
	__u64 base = py->runtime, holder = 0;
	__s32 locked = 0;
	if (!py->gil_in_runtime && (read_u64(&base, py->runtime + py->interpreters_head) || !base))
		return GIL_UNKNOWN;
	if (bpf_probe_read_user(&locked, sizeof(locked), (const void *)(base + py->gil_locked)) ||
	    read_u64(&holder, base + py->gil_holder))
		return GIL_UNKNOWN;
	return locked && holder == ts ? GIL_HELD : GIL_RELEASED;
}

/* Walk the current thread's Python stack into `py_scratch` (zero after the frames kept):
 * the number of frames kept (> 0), PY_NO_THREAD, or -errno; *gil: its GIL state; *cut: 1
 * when frames beyond MAX_PY_DEPTH were left out. */
static __always_inline long walk_python(const struct py_proc *py, __u32 *gil, int *cut)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u64 key = python_thread_key(py, (__u32)id);
	if (!key)
		return -EFAULT;
	__u64 ts = python_thread(py, id, key);
	if (!ts)
		return PY_NO_THREAD;
	*gil = gil_state(py, ts);
	struct py_walk w = {};
	w.py = *py;
	if (read_u64(&w.frame, ts + py->tstate_frame))
		return -EFAULT;
	if (py->cframe_frame != PY_NO_OFFSET && w.frame &&
	    read_u64(&w.frame, w.frame + py->cframe_frame))
		return -EFAULT;
	if (!w.frame)
		return PY_NO_THREAD; /* a thread state with no Python running */
	bpf_loop(MAX_PY_DEPTH, py_walk_step, &w, 0);
	if (w.err)
		return w.err;
	*cut = w.frame != 0;
	if (!w.n)
		return PY_NO_THREAD;
	bpf_loop(MAX_PY_DEPTH, py_zero_step, &w, 0);
	return w.n;
}

#endif
