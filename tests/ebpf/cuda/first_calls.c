/* CUDA runtime calls made the moment the library is loaded, for the eBPF probe tests.
 *
 * It dlopen()s the libcudart.so given as argv[1] (PyPI's nvidia-cuda-runtime wheel: no
 * GPU needed, every call fails, but the probes fire) and at once makes argv[2] cudaMalloc
 * calls from alloc_site, then argv[3] cudaLaunchKernel calls from launch_site: no pause
 * between the load and the calls for a profiler to attach in. With argv[1] "-", the
 * library is the one the program is linked with (mapped by the dynamic loader before
 * main). Built with -fno-omit-frame-pointer; the sites are noinline, so each is a frame. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	unsigned x, y, z;
} dim3;

typedef int (*malloc_fn)(void **, size_t);
typedef int (*launch_fn)(const void *, dim3, dim3, void **, size_t, void *);

static malloc_fn p_malloc;
static launch_fn p_launch;
static volatile int sink;

void first_kernel(float *x) __asm__("_ZN4test12first_kernelEPf");
void first_kernel(float *x)
{
	sink += x != 0;
}

__attribute__((noinline)) void alloc_site(int i)
{
	void *p = 0;
	sink += p_malloc(&p, 4096 * (size_t)(i + 1));
}

__attribute__((noinline)) void launch_site(void)
{
	dim3 grid = {1, 1, 1}, block = {32, 1, 1};
	float *x = 0;
	void *args[] = {&x};
	sink += p_launch((const void *)first_kernel, grid, block, args, 0, 0);
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: first_calls LIBCUDART|- MALLOCS LAUNCHES\n");
		return 2;
	}
	int linked = !strcmp(argv[1], "-");
	void *lib = linked ? RTLD_DEFAULT : dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!linked && !lib) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	p_malloc = (malloc_fn)dlsym(lib, "cudaMalloc");
	p_launch = (launch_fn)dlsym(lib, "cudaLaunchKernel");
	if (!p_malloc || !p_launch) {
		fprintf(stderr, "dlsym: %s\n", dlerror());
		return 1;
	}
	for (int i = 0; i < atoi(argv[2]); i++)
		alloc_site(i);
	for (int i = 0; i < atoi(argv[3]); i++)
		launch_site();
	return 0;
}
