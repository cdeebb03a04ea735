/* Calls the stand-in HIP library (fake_hip.c) from known sites: 2 x hipMalloc (4 KiB, kept),
 * 1 x hipMalloc + hipFree (64 KiB), 3 x hipLaunchKernel of the stub hip_test::saxpy(float,
 * float*), 2 x hipModuleLaunchKernel of a function named at hipModuleGetFunction, one
 * hipDeviceSynchronize. Protocol as target.c: argv[1] the library, "ready", a line, "done". */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
	unsigned x, y, z;
} dim3;
static int (*p_malloc)(void **, size_t);
static int (*p_free)(void *);
static int (*p_launch)(const void *, dim3, dim3, void **, size_t, void *);
static int (*p_get_function)(void **, void *, const char *);
static int (*p_module_launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned,
			      unsigned, unsigned, void *, void **, void **);
static int (*p_sync)(void);
static volatile int sink;

void saxpy_stub(float a, float *x) __asm__("_ZN8hip_test5saxpyEfPf");
void saxpy_stub(float a, float *x)
{
	sink += (int)a + (x != 0);
}

__attribute__((noinline)) void hip_alloc_site(void)
{
	void *p = 0;
	for (int i = 0; i < 2; i++)
		sink += p_malloc(&p, 4096);
	sink += p_malloc(&p, 65536);
	sink += p_free(p);
}

__attribute__((noinline)) void hip_launch_site(void)
{
	dim3 grid = {1, 1, 1}, block = {64, 1, 1};
	void *f = 0;
	for (int i = 0; i < 3; i++)
		sink += p_launch((const void *)saxpy_stub, grid, block, 0, 0, 0);
	sink += p_get_function(&f, (void *)0x99, "_Z13module_kernelv");
	for (int i = 0; i < 2; i++)
		sink += p_module_launch(f, 1, 1, 1, 64, 1, 1, 0, 0, 0, 0);
	sink += p_sync();
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
	void *lib = argc > 1 ? dlopen(argv[1], RTLD_NOW) : 0;
	if (!lib) {
		fprintf(stderr, "usage: %s LIBAMDHIP64 (%s)\n", argv[0], dlerror());
		return 2;
	}
	p_malloc = need(lib, "hipMalloc");
	p_free = need(lib, "hipFree");
	p_launch = need(lib, "hipLaunchKernel");
	p_get_function = need(lib, "hipModuleGetFunction");
	p_module_launch = need(lib, "hipModuleLaunchKernel");
	p_sync = need(lib, "hipDeviceSynchronize");
	char line[16];
	printf("ready\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 3;
	hip_alloc_site();
	hip_launch_site();
	printf("done\n");
	fflush(stdout);
	return 0;
}
