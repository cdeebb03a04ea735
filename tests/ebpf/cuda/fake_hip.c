/* A stand-in for HIP (built as libamdhip64.so.6 by the tests): the calls succeed without a
 * GPU so that the HIP side of the probes (library found by name, allocations paired, kernels
 * named from the host stub and from hipModuleGetFunction, time in a sync) is checked. Only
 * the functions' names and signatures are HIP's. */
#include <stddef.h>
#include <time.h>

typedef struct {
	unsigned x, y, z;
} dim3;

static unsigned long long next_addr = 0x7d0000000000ULL;

int hipMalloc(void **ptr, size_t size)
{
	if (!ptr || !size)
		return 1; /* hipErrorInvalidValue */
	*ptr = (void *)next_addr;
	next_addr += (size + 0xFFFF) & ~0xFFFFULL;
	return 0;
}

int hipFree(void *ptr)
{
	return ptr ? 0 : 0;
}

int hipLaunchKernel(const void *f, dim3 grid, dim3 block, void **args, size_t shared,
		    void *stream)
{
	(void)grid, (void)block, (void)args, (void)shared, (void)stream;
	return f ? 0 : 1;
}

int hipModuleGetFunction(void **f, void *module, const char *name)
{
	(void)module;
	*f = (void *)(0x20000000UL + (unsigned long)(name[0]) * 16);
	return 0;
}

int hipModuleLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
			  unsigned by, unsigned bz, unsigned shared, void *stream, void **params,
			  void **extra)
{
	(void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shared;
	(void)stream, (void)params, (void)extra;
	return f ? 0 : 1;
}

int hipDeviceSynchronize(void)
{
	struct timespec ts = {0, 1000000}; /* 1 ms */
	nanosleep(&ts, 0);
	return 0;
}
