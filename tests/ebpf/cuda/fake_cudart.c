/* A stand-in for the CUDA runtime (built as libcudart.so.12 by the tests, linked to the
 * stand-in driver): like the real one, its functions call the driver's, so the probes'
 * handling of nested calls (one user call, one event) is exercised. */
#include <stddef.h>
#include <stdlib.h>

typedef unsigned long long CUdeviceptr;
int cuMemAlloc_v2(CUdeviceptr *dptr, size_t size);
int cuMemFree_v2(CUdeviceptr dptr);
int cuCtxSynchronize(void);

#define cudaErrorMemoryAllocation 2
#define cudaErrorInvalidValue 1

int cudaMalloc(void **ptr, size_t size)
{
	CUdeviceptr d = 0;
	int rc = cuMemAlloc_v2(&d, size);
	if (rc)
		return rc == 2 ? cudaErrorMemoryAllocation : cudaErrorInvalidValue;
	*ptr = (void *)d;
	return 0;
}

int cudaFree(void *ptr)
{
	if (!ptr)
		return 0;
	int rc = cuMemFree_v2((CUdeviceptr)ptr);
	return rc ? cudaErrorInvalidValue : 0;
}

int cudaMallocHost(void **ptr, size_t size)
{
	*ptr = malloc(size);
	return *ptr ? 0 : cudaErrorMemoryAllocation;
}

int cudaFreeHost(void *ptr)
{
	free(ptr);
	return 0;
}

int cudaDeviceSynchronize(void)
{
	int rc = cuCtxSynchronize();
	return rc ? cudaErrorInvalidValue : 0;
}
