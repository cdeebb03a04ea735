/* The cost of one probed CUDA runtime call: calls a libcudart function N times in a loop,
 * R rounds, and prints each round's nanoseconds per call. Used by bench_cuda_probes.py.
 *
 *   cuda_probe_loop LIBCUDART launch|sync N R
 *
 * dlopen()s the library (PyPI's libcudart; no GPU needed: the calls fail fast, the
 * probes fire), prints "ready", waits for a line on stdin (the tracer attaches meanwhile),
 * runs, prints "ns/call <x>" per round, then "done". */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
	unsigned x, y, z;
} dim3;
typedef int (*launch_fn)(const void *, dim3, dim3, void **, size_t, void *);
typedef int (*sync_fn)(void *);

static volatile int sink;

static void kernel_stub(void)
{
	sink++;
}

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc < 5) {
		fprintf(stderr, "usage: %s LIBCUDART launch|sync N ROUNDS\n", argv[0]);
		return 2;
	}
	void *lib = dlopen(argv[1], RTLD_NOW);
	if (!lib) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 2;
	}
	launch_fn launch = (launch_fn)dlsym(lib, "cudaLaunchKernel");
	sync_fn sync = (sync_fn)dlsym(lib, "cudaStreamSynchronize");
	int use_sync = strcmp(argv[2], "sync") == 0;
	long n = atol(argv[3]), rounds = atol(argv[4]);
	dim3 grid = {1, 1, 1}, block = {32, 1, 1};
	/* the first call initialises the runtime (or finds there is no driver): not measured */
	sink += use_sync ? sync(0) : launch((const void *)kernel_stub, grid, block, 0, 0, 0);
	char line[16];
	printf("ready\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 3;
	for (long r = 0; r < rounds; r++) {
		double t0 = now_ns();
		if (use_sync)
			for (long i = 0; i < n; i++)
				sink += sync(0);
		else
			for (long i = 0; i < n; i++)
				sink += launch((const void *)kernel_stub, grid, block, 0, 0, 0);
		printf("ns/call %.1f\n", (now_ns() - t0) / n);
		fflush(stdout);
	}
	printf("done\n");
	fflush(stdout);
	return 0;
}
