/* aiflame's own minimal BPF helper header: section and map macros, helper declarations
 * by their stable UAPI ids (enum bpf_func_id), and CO-RE read macros. It replaces
 * libbpf's bpf_helpers.h so the build needs only clang. */
#ifndef AIFLAME_BPF_H
#define AIFLAME_BPF_H

typedef unsigned char __u8;
typedef signed char __s8;
typedef unsigned short __u16;
typedef short __s16;
typedef unsigned int __u32;
typedef int __s32;
typedef unsigned long long __u64;
typedef long long __s64;
typedef __u32 pid_t;
typedef __u32 dev_t;

#define SEC(name) __attribute__((section(name), used))
#define __always_inline inline __attribute__((always_inline))
/* BTF-defined maps (libbpf reads these declarations from BTF) */
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name
#define NULL ((void *)0)

/* enum bpf_map_type */
#define BPF_MAP_TYPE_HASH 1
#define BPF_MAP_TYPE_ARRAY 2
#define BPF_MAP_TYPE_PERCPU_HASH 5
#define BPF_MAP_TYPE_PERCPU_ARRAY 6
#define BPF_MAP_TYPE_STACK_TRACE 7
#define BPF_MAP_TYPE_LRU_HASH 9
#define BPF_MAP_TYPE_RINGBUF 27

/* map update flags, bpf_get_stackid / bpf_get_stack flags */
#define BPF_ANY 0
#define BPF_NOEXIST 1
#define BPF_EXIST 2
#define BPF_F_USER_STACK (1ULL << 8)
#define BPF_F_FAST_STACK_CMP (1ULL << 9)
#define BPF_F_REUSE_STACKID (1ULL << 10)

#define EFAULT 14
#define EEXIST 17
#define ENOMEM 12

/* helpers: static function pointers holding the helper's id, as the BPF ABI wants */
static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_map_update_elem)(void *map, const void *key, const void *value,
                                   __u64 flags) = (void *)2;
static long (*bpf_map_delete_elem)(void *map, const void *key) = (void *)3;
static __u64 (*bpf_ktime_get_ns)(void) = (void *)5;
static __u32 (*bpf_get_smp_processor_id)(void) = (void *)8;
static __u64 (*bpf_get_current_pid_tgid)(void) = (void *)14;
static long (*bpf_get_current_comm)(void *buf, __u32 size) = (void *)16;
static long (*bpf_get_stackid)(void *ctx, void *map, __u64 flags) = (void *)27;
static __u64 (*bpf_get_current_task)(void) = (void *)35;
static long (*bpf_get_stack)(void *ctx, void *buf, __u32 size, __u64 flags) = (void *)67;
static __u64 (*bpf_get_current_cgroup_id)(void) = (void *)80;
static long (*bpf_probe_read_user)(void *dst, __u32 size, const void *src) = (void *)112;
static long (*bpf_probe_read_kernel)(void *dst, __u32 size, const void *src) = (void *)113;
static long (*bpf_probe_read_user_str)(void *dst, __u32 size, const void *src) = (void *)114;
static long (*bpf_probe_read_kernel_str)(void *dst, __u32 size, const void *src) = (void *)115;
static long (*bpf_send_signal)(__u32 sig) = (void *)109;
static long (*bpf_ringbuf_output)(void *ringbuf, void *data, __u64 size,
                                  __u64 flags) = (void *)130;
static void *(*bpf_ringbuf_reserve)(void *ringbuf, __u64 size, __u64 flags) = (void *)131;
static void (*bpf_ringbuf_submit)(void *data, __u64 flags) = (void *)132;
static void (*bpf_ringbuf_discard)(void *data, __u64 flags) = (void *)133;
static __u64 (*bpf_ringbuf_query)(void *ringbuf, __u64 flags) = (void *)134;
static long (*bpf_loop)(__u32 nr_loops, void *callback_fn, void *callback_ctx,
			__u64 flags) = (void *)181;
static void *(*bpf_get_current_task_btf)(void) = (void *)158;
static long (*bpf_find_vma)(void *task, __u64 addr, void *callback_fn, void *callback_ctx,
			    __u64 flags) = (void *)180;

/* CO-RE: read a kernel field at the offset the running kernel's BTF gives */
#define CORE_READ_INTO(dst, src_ptr, field)                                              \
	bpf_probe_read_kernel(dst, sizeof(*(dst)),                                          \
			      __builtin_preserve_access_index(&(src_ptr)->field))
#define CORE_FIELD_EXISTS(ptr, field) __builtin_preserve_field_info((ptr)->field, 2)

/* add to a counter in a per-CPU array of __u64 */
#define STAT_ADD(map, idx, n)                                                            \
	do {                                                                                 \
		__u32 __k = (idx);                                                               \
		__u64 *__v = bpf_map_lookup_elem(&(map), &__k);                                  \
		if (__v)                                                                         \
			*__v += (n);                                                                 \
	} while (0)

#endif
