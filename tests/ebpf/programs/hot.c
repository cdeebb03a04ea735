/* Known CPU shares for the eBPF sampler: main -> hot_a / hot_b / hot_c, spinning 60 / 30 /
 * 10 % of the process's CPU time, measured with the thread CPU clock. Built with frame
 * pointers at test time. Usage: hot SECONDS */
#include <stdlib.h>
#include <time.h>

static volatile unsigned long sink;

static double cpu_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* spin for `seconds` of CPU time; noinline so each has its own frame */
__attribute__((noinline)) static void spin(double seconds)
{
	double end = cpu_now() + seconds;
	while (cpu_now() < end)
		for (int i = 0; i < 1000; i++)
			sink += i;
}

__attribute__((noinline)) void hot_a(void) { spin(0.006); }
__attribute__((noinline)) void hot_b(void) { spin(0.003); }
__attribute__((noinline)) void hot_c(void) { spin(0.001); }

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 2.0;
	double end = cpu_now() + seconds;
	while (cpu_now() < end) {
		hot_a();
		hot_b();
		hot_c();
	}
	return 0;
}
