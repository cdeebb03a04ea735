/* A stand-in for the CUDA driver (built as libcuda.so.1 by the tests): the calls succeed
 * without a GPU, so the success paths of the probes (allocated addresses read at return,
 * allocation/free pairing, kernel names recorded at module load, time blocked in a sync)
 * can be checked exactly. Addresses come from a bump allocator with a LIFO free list per
 * size, so freed addresses are reused as a real allocator would. Not CUDA: only the
 * functions' names and signatures. */
#include <stddef.h>
#include <string.h>
#include <time.h>

typedef unsigned long long CUdeviceptr;
#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CAPACITY (1ULL << 34) /* 16 GiB */
#define SLOTS 64

static CUdeviceptr next_addr = 0x7e0000000000ULL;
static struct {
	CUdeviceptr addr;
	size_t size;
	int live;
} blocks[SLOTS];
static size_t in_use;

int cuMemAlloc_v2(CUdeviceptr *dptr, size_t size)
{
	if (!dptr || !size)
		return CUDA_ERROR_INVALID_VALUE;
	if (in_use + size > CAPACITY)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (int i = SLOTS - 1; i >= 0; i--) { /* reuse the latest freed block of this size */
		if (blocks[i].addr && !blocks[i].live && blocks[i].size == size) {
			blocks[i].live = 1;
			in_use += size;
			*dptr = blocks[i].addr;
			return CUDA_SUCCESS;
		}
	}
	for (int i = 0; i < SLOTS; i++) {
		if (!blocks[i].addr) {
			blocks[i].addr = next_addr;
			blocks[i].size = size;
			blocks[i].live = 1;
			next_addr += (size + 0xFFFFF) & ~0xFFFFFULL;
			in_use += size;
			*dptr = blocks[i].addr;
			return CUDA_SUCCESS;
		}
	}
	return CUDA_ERROR_OUT_OF_MEMORY;
}

int cuMemFree_v2(CUdeviceptr dptr)
{
	for (int i = 0; i < SLOTS; i++) {
		if (blocks[i].addr == dptr && blocks[i].live) {
			blocks[i].live = 0;
			in_use -= blocks[i].size;
			return CUDA_SUCCESS;
		}
	}
	return CUDA_ERROR_INVALID_VALUE;
}

static void *handle_of(const char *name)
{
	unsigned long h = 5381;
	for (const char *c = name; *c; c++)
		h = h * 33 + (unsigned char)*c;
	return (void *)(0x10000000UL + (h & 0xFFFFFF) * 16);
}

int cuModuleGetFunction(void **hfunc, void *hmod, const char *name)
{
	(void)hmod;
	if (!hfunc || !name)
		return CUDA_ERROR_INVALID_VALUE;
	*hfunc = handle_of(name);
	return CUDA_SUCCESS;
}

int cuLibraryGetKernel(void **pkernel, void *library, const char *name)
{
	(void)library;
	if (!pkernel || !name)
		return CUDA_ERROR_INVALID_VALUE;
	*pkernel = (char *)handle_of(name) + 8;
	return CUDA_SUCCESS;
}

int cuKernelGetFunction(void **pfunc, void *kernel)
{
	*pfunc = (char *)kernel + 0x1000000;
	return CUDA_SUCCESS;
}

int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
		   unsigned bz, unsigned shared, void *stream, void **params, void **extra)
{
	(void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shared;
	(void)stream, (void)params, (void)extra;
	return f ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

int cuCtxSynchronize(void)
{
	struct timespec ts = {0, 2000000}; /* "waits for the GPU" 2 ms */
	nanosleep(&ts, 0);
	return CUDA_SUCCESS;
}
