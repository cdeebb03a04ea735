/* Allocates and frees GPU memory in a known pattern through the stand-in runtime and
 * driver (fake_cudart.c, fake_cuda.c), for the live memory test; launches driver kernels
 * named at module load. Protocol as target.c: argv[1] the runtime library, argv[2] the
 * driver library, prints "ready", waits for a line (or, given argv[3], sleeps that many
 * milliseconds: for `aiflame record --memory`, which attaches by itself), runs, prints
 * "done".
 *
 * The pattern, in MiB of device memory (see test_cuda_probes.py for the expected profile):
 *   keep_site     3 x 1     kept to the end                      live 3
 *   temp_site     4 x 2     each freed at once (same address)    live 3, high-water 5
 *   driver_site   1 x 0.5   cuMemAlloc_v2 directly, kept         live 3.5
 *   peak_site     1 x 8     freed by release_site                live 11.5 <- the peak
 *   release_site  frees it                                       live 3.5
 *   oom_site      1 x 1 TiB fails (out of memory)                live 3.5
 *   host_site     64 KiB pinned host memory, freed               (not GPU memory)
 *   sync_site     2 x cudaDeviceSynchronize (2 ms each in the driver)
 *   launch_site   cuLaunchKernel 3 x driver::kernel_a(), 2 x kernel_b(float*)
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define MiB (1024UL * 1024UL)
typedef unsigned long long CUdeviceptr;
static int (*p_malloc)(void **, size_t);
static int (*p_free)(void *);
static int (*p_malloc_host)(void **, size_t);
static int (*p_free_host)(void *);
static int (*p_sync)(void);
static int (*p_mem_alloc)(CUdeviceptr *, size_t);
static int (*p_get_function)(void **, void *, const char *);
static int (*p_library_get_kernel)(void **, void *, const char *);
static int (*p_kernel_get_function)(void **, void *);
static int (*p_launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
		       unsigned, void *, void **, void **);
static volatile long sink;
static void *peak_block;

__attribute__((noinline)) void keep_site(void)
{
	void *p = 0;
	sink += p_malloc(&p, 1 * MiB);
}

__attribute__((noinline)) void temp_site(void)
{
	void *p = 0;
	sink += p_malloc(&p, 2 * MiB);
	sink += p_free(p);
}

__attribute__((noinline)) void driver_site(void)
{
	CUdeviceptr d = 0;
	sink += p_mem_alloc(&d, MiB / 2);
}

__attribute__((noinline)) void peak_site(void)
{
	sink += p_malloc(&peak_block, 8 * MiB);
}

__attribute__((noinline)) void release_site(void)
{
	sink += p_free(peak_block);
}

__attribute__((noinline)) void oom_site(void)
{
	void *p = 0;
	sink += p_malloc(&p, 1UL << 40);
}

__attribute__((noinline)) void host_site(void)
{
	void *p = 0;
	sink += p_malloc_host(&p, 64 * 1024);
	sink += p_free_host(p);
}

__attribute__((noinline)) void sync_site(void)
{
	sink += p_sync();
}

__attribute__((noinline)) void launch_site(void)
{
	void *fa = 0, *kb = 0, *fb = 0;
	sink += p_get_function(&fa, (void *)0x1234, "_ZN6driver8kernel_aEv");
	sink += p_library_get_kernel(&kb, (void *)0x5678, "_Z8kernel_bPf");
	sink += p_kernel_get_function(&fb, kb);
	for (int i = 0; i < 3; i++)
		sink += p_launch(fa, 1, 1, 1, 32, 1, 1, 0, 0, 0, 0);
	for (int i = 0; i < 2; i++)
		sink += p_launch(fb, 1, 1, 1, 32, 1, 1, 0, 0, 0, 0);
}

static void *need(void *lib, const char *name)
{
	void *f = dlsym(lib, name);
	if (!f) {
		fprintf(stderr, "no %s\n", name);
		exit(2);
	}
	return f;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s LIBCUDART LIBCUDA\n", argv[0]);
		return 2;
	}
	void *rt = dlopen(argv[1], RTLD_NOW), *drv = dlopen(argv[2], RTLD_NOW);
	if (!rt || !drv) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 2;
	}
	p_malloc = need(rt, "cudaMalloc");
	p_free = need(rt, "cudaFree");
	p_malloc_host = need(rt, "cudaMallocHost");
	p_free_host = need(rt, "cudaFreeHost");
	p_sync = need(rt, "cudaDeviceSynchronize");
	p_mem_alloc = need(drv, "cuMemAlloc_v2");
	p_get_function = need(drv, "cuModuleGetFunction");
	p_library_get_kernel = need(drv, "cuLibraryGetKernel");
	p_kernel_get_function = need(drv, "cuKernelGetFunction");
	p_launch = need(drv, "cuLaunchKernel");
	char line[16];
	printf("ready\n");
	fflush(stdout);
	if (argc > 3) {
		long ms = atol(argv[3]);
		struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
		nanosleep(&ts, 0);
	} else if (!fgets(line, sizeof(line), stdin)) {
		return 3;
	}
	for (int i = 0; i < 3; i++)
		keep_site();
	for (int i = 0; i < 4; i++)
		temp_site();
	driver_site();
	peak_site();
	release_site();
	oom_site();
	host_site();
	sync_site();
	sync_site();
	launch_site();
	printf("done\n");
	fflush(stdout);
	return 0;
}
