/* A program calling the CUDA runtime from known call sites, for the eBPF probe tests.
 *
 * It dlopen()s the libcudart.so given as argv[1] (PyPI's nvidia-cuda-runtime wheel: no
 * CUDA headers or driver needed; without a GPU every call fails and returns an error,
 * but the probes fire), prints "ready", waits for a line on stdin (the test attaches its
 * probes meanwhile), then makes the calls of the pattern in argv[2] (default
 * "m5,l7,f3,d2,s4"): m = cudaMalloc from alloc_site_a, l = cudaLaunchKernel from
 * launch_site_b, f = cudaFree from free_site_c, d = cudaDeviceSynchronize and
 * s = cudaStreamSynchronize from sync_site_d, c = cudaMemcpy of 4096 bytes HtoD from
 * copy_site_e, k = cudaMemcpy2D of 16 x 8 bytes DtoH from copy2d_site_f (its 7th argument,
 * the direction, is passed on the stack); each letter followed by a count. Built with -fno-omit-frame-pointer so the
 * kernel can walk its stack; the sites are noinline so each is a frame. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	unsigned x, y, z;
} dim3;

typedef int (*malloc_fn)(void **, size_t);
typedef int (*free_fn)(void *);
typedef int (*launch_fn)(const void *, dim3, dim3, void **, size_t, void *);
typedef int (*sync_fn)(void);
typedef int (*stream_sync_fn)(void *);
typedef int (*memcpy_fn)(void *, const void *, size_t, int);
typedef int (*memcpy2d_fn)(void *, size_t, const void *, size_t, size_t, size_t, int);

static malloc_fn p_malloc;
static free_fn p_free;
static launch_fn p_launch;
static sync_fn p_device_sync;
static stream_sync_fn p_stream_sync;
static memcpy_fn p_memcpy;
static memcpy2d_fn p_memcpy2d;
static volatile int sink;

/* The "host stub" of a kernel: its address is what cudaLaunchKernel receives. The name
 * is the mangled C++ name of test::fake_kernel(float*, int). */
void fake_kernel(float *x, int n) __asm__("_ZN4test11fake_kernelEPfi");
void fake_kernel(float *x, int n)
{
	sink += n + (x != 0);
}

__attribute__((noinline)) void alloc_site_a(int i)
{
	void *p = 0;
	sink += p_malloc(&p, 1024 * (size_t)(i + 1));
}

__attribute__((noinline)) void launch_site_b(void)
{
	dim3 grid = {4, 2, 1}, block = {128, 1, 1};
	float *x = 0;
	int n = 3;
	void *args[] = {&x, &n};
	sink += p_launch((const void *)fake_kernel, grid, block, args, 0, 0);
}

__attribute__((noinline)) void free_site_c(void)
{
	sink += p_free((void *)0x7f0000001000ULL);
}

__attribute__((noinline)) void sync_site_d(int stream)
{
	sink += stream ? p_stream_sync(0) : p_device_sync();
}

__attribute__((noinline)) void copy_site_e(void)
{
	static char host[4096];
	sink += p_memcpy((void *)0x7f0000002000ULL, host, sizeof(host), 1);
}

__attribute__((noinline)) void copy2d_site_f(void)
{
	static char host[64 * 8];
	sink += p_memcpy2d(host, 64, (void *)0x7f0000003000ULL, 64, 16, 8, 2);
}

static void *need(void *lib, const char *name)
{
	void *f = dlsym(lib, name);
	if (!f) {
		fprintf(stderr, "no %s in the library\n", name);
		exit(2);
	}
	return f;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s LIBCUDART [PATTERN]\n", argv[0]);
		return 2;
	}
	void *lib = dlopen(argv[1], RTLD_NOW);
	if (!lib) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 2;
	}
	p_malloc = (malloc_fn)need(lib, "cudaMalloc");
	p_free = (free_fn)need(lib, "cudaFree");
	p_launch = (launch_fn)need(lib, "cudaLaunchKernel");
	p_device_sync = (sync_fn)need(lib, "cudaDeviceSynchronize");
	p_stream_sync = (stream_sync_fn)need(lib, "cudaStreamSynchronize");
	p_memcpy = (memcpy_fn)need(lib, "cudaMemcpy");
	p_memcpy2d = (memcpy2d_fn)need(lib, "cudaMemcpy2D");
	char line[16];
	printf("ready\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 3;
	const char *pattern = argc > 2 ? argv[2] : "m5,l7,f3,d2,s4";
	for (const char *p = pattern; *p;) {
		char what = *p++;
		long n = strtol(p, (char **)&p, 10);
		for (long i = 0; i < n; i++) {
			switch (what) {
			case 'm': alloc_site_a((int)i); break;
			case 'l': launch_site_b(); break;
			case 'f': free_site_c(); break;
			case 'd': sync_site_d(0); break;
			case 's': sync_site_d(1); break;
			case 'c': copy_site_e(); break;
			case 'k': copy2d_site_f(); break;
			default: fprintf(stderr, "bad pattern %s\n", pattern); return 2;
			}
		}
		if (*p == ',')
			p++;
	}
	printf("done\n");
	fflush(stdout);
	return 0;
}
