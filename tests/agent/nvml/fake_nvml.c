/* A stand-in libnvidia-ml.so.1 for the agent's tests: the functions of NVML that
 * nvidia-ml-py calls for aiflame's telemetry, answering with values a test writes into the
 * file named by $AIFLAME_FAKE_NVML (re-read whenever it changes), so the real binding and
 * the agent's whole NVML path run without a GPU. Only the structures' layouts and the
 * return codes are NVML's; what a real driver measures is not imitated.
 *
 * The file holds KEY=VALUE lines:
 *   devices=N                      number of GPUs (default 0)
 *   accounting_buffer=N            (default 16)
 *   D.name= D.uuid= D.pci=         strings of device D
 *   D.util= D.mem_util=            utilization.gpu / .memory, percent
 *   D.mem_used= D.mem_total=       bytes
 *   D.power_mw= D.sm_clock= D.temp= D.arch=
 *   D.gpm=0|1                      GPM supported (with an arch of 9 = Hopper or newer)
 *   D.gpm.ID=VALUE                 the value of NVML_GPM_METRIC ID (percent)
 *   D.procs=PID:BYTES,...          compute processes and their memory
 *   D.proc_util=PID:SM,...         one SM utilization sample per process per call
 *   D.accounting=0|1
 *   D.acct=PID:UTIL:TIME_MS:RUNNING,...   accounting stats
 *   D.ecc.sbe_vol= D.ecc.dbe_vol= D.ecc.sbe_agg= D.ecc.dbe_agg=   ECC error counts
 *   D.retired_sbe=N D.retired_dbe=N D.retired_pending=0|1          retired pages
 *   D.remap=CORR:UNC:PENDING:FAILURE                               row remapping
 *   D.throttle=MASK                clock event (throttle) reasons, a bit mask
 *   D.energy_mj=N                  total energy since the driver loaded, mJ
 *   D.pcie_tx= D.pcie_rx=          PCIe throughput, KB/s; D.pcie_replay=N
 *   D.field.ID=VALUE               nvmlDeviceGetFieldValues' field ID (NVLink counters)
 *   D.xids=XID,...                 XID errors that occurred since the file last changed:
 *                                  queued for nvmlEventSetWait_v2 when it is read
 *   D.mig=0|1                      MIG mode; its instances:
 *   D.mig.I.name= D.mig.I.uuid= D.mig.I.gi= D.mig.I.ci= D.mig.I.mem_used= D.mig.I.mem_total=
 *   D.proc_gi=PID:GI,...           the GPU instance a compute process runs in
 * Unset counters answer NVML_ERROR_NOT_SUPPORTED, as on a GPU that lacks them.
 */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>

typedef int nvmlReturn_t;
enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_UNINITIALIZED = 1,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_NOT_SUPPORTED = 3,
	NVML_ERROR_NOT_FOUND = 6,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
	NVML_ERROR_TIMEOUT = 10,
};

#define MAX_DEV 8
#define MAX_PROC 32
#define MAX_METRIC 512
#define MAX_FIELD 256
#define MAX_MIG 7
#define MAX_EVENTS 64

struct proc {
	unsigned pid;
	unsigned long long mem;
	unsigned sm;
	int has_sm;
	unsigned acct_util;
	unsigned long long acct_ms;
	unsigned running;
	int has_acct;
	unsigned gi;
	int has_gi;
};

struct device {
	char name[96], uuid[96], pci[32];
	unsigned util, mem_util, power_mw, sm_clock, temp, arch, gpm, accounting;
	unsigned long long mem_used, mem_total;
	int have_util, have_power;
	double metric[MAX_METRIC];
	unsigned char has_metric[MAX_METRIC];
	struct proc procs[MAX_PROC];
	int nprocs;
	/* health counters: has_* says the GPU reports them */
	unsigned long long ecc[4]; /* sbe_vol, dbe_vol, sbe_agg, dbe_agg */
	int has_ecc;
	unsigned retired[2], retired_pending;
	int has_retired;
	unsigned remap[4];
	int has_remap;
	unsigned long long throttle, energy_mj;
	int has_throttle, has_energy;
	unsigned pcie[2], pcie_replay;
	int has_pcie;
	unsigned long long field[MAX_FIELD];
	unsigned char has_field[MAX_FIELD];
	/* MIG: the instances of a GPU are devices of their own (handles), with a parent */
	unsigned mig_mode;
	int is_mig, nmig;
	unsigned gi, ci;
	struct device *parent;
};

static struct device devs[MAX_DEV];
static struct device migs[MAX_DEV][MAX_MIG];
static int ndev, initialised, acct_buffer = 16;
/* XID events waiting for nvmlEventSetWait_v2 (a ring) */
static struct { int dev; unsigned long long xid; } events[MAX_EVENTS];
static int ev_head, ev_tail;
static time_t loaded_mtime;
static long loaded_mtime_ns;
static off_t loaded_size;

static struct proc *find_proc(struct device *d, unsigned pid)
{
	for (int i = 0; i < d->nprocs; i++)
		if (d->procs[i].pid == pid)
			return &d->procs[i];
	if (d->nprocs == MAX_PROC)
		return NULL;
	struct proc *p = &d->procs[d->nprocs++];
	memset(p, 0, sizeof(*p));
	p->pid = pid;
	return p;
}

static void set_value(const char *key, const char *value)
{
	if (!strcmp(key, "devices")) {
		ndev = atoi(value) > MAX_DEV ? MAX_DEV : atoi(value);
		return;
	}
	if (!strcmp(key, "accounting_buffer")) {
		acct_buffer = atoi(value);
		return;
	}
	if (!isdigit((unsigned char)key[0]))
		return;
	int i = atoi(key);
	const char *field = strchr(key, '.');
	if (i < 0 || i >= MAX_DEV || !field)
		return;
	field++;
	struct device *d = &devs[i];
	if (!strncmp(field, "mig.", 4) && isdigit((unsigned char)field[4])) {
		int m = atoi(field + 4);
		const char *sub = strchr(field + 4, '.');
		if (m < 0 || m >= MAX_MIG || !sub)
			return;
		struct device *g = &migs[i][m];
		g->is_mig = 1;
		g->parent = d;
		if (m + 1 > d->nmig)
			d->nmig = m + 1;
		sub++;
		if (!strcmp(sub, "name"))
			snprintf(g->name, sizeof(g->name), "%s", value);
		else if (!strcmp(sub, "uuid"))
			snprintf(g->uuid, sizeof(g->uuid), "%s", value);
		else if (!strcmp(sub, "gi"))
			g->gi = atoi(value);
		else if (!strcmp(sub, "ci"))
			g->ci = atoi(value);
		else if (!strcmp(sub, "mem_used"))
			g->mem_used = strtoull(value, NULL, 10);
		else if (!strcmp(sub, "mem_total"))
			g->mem_total = strtoull(value, NULL, 10);
		return;
	}
	if (!strncmp(field, "ecc.", 4)) {
		static const char *names[4] = {"sbe_vol", "dbe_vol", "sbe_agg", "dbe_agg"};
		for (int k = 0; k < 4; k++)
			if (!strcmp(field + 4, names[k]))
				d->ecc[k] = strtoull(value, NULL, 10), d->has_ecc = 1;
		return;
	}
	if (!strncmp(field, "field.", 6)) {
		int id = atoi(field + 6);
		if (id > 0 && id < MAX_FIELD)
			d->field[id] = strtoull(value, NULL, 10), d->has_field[id] = 1;
		return;
	}
	if (!strcmp(field, "xids")) {
		char buf[512];
		snprintf(buf, sizeof(buf), "%s", value);
		for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
			if ((ev_tail + 1) % MAX_EVENTS == ev_head)
				break;
			events[ev_tail].dev = i;
			events[ev_tail].xid = strtoull(tok, NULL, 10);
			ev_tail = (ev_tail + 1) % MAX_EVENTS;
		}
		return;
	}
	if (!strcmp(field, "remap")) {
		sscanf(value, "%u:%u:%u:%u", &d->remap[0], &d->remap[1], &d->remap[2], &d->remap[3]);
		d->has_remap = 1;
		return;
	}
	if (!strcmp(field, "name"))
		snprintf(d->name, sizeof(d->name), "%s", value);
	else if (!strcmp(field, "uuid"))
		snprintf(d->uuid, sizeof(d->uuid), "%s", value);
	else if (!strcmp(field, "pci"))
		snprintf(d->pci, sizeof(d->pci), "%s", value);
	else if (!strcmp(field, "util"))
		d->util = atoi(value), d->have_util = 1;
	else if (!strcmp(field, "mem_util"))
		d->mem_util = atoi(value);
	else if (!strcmp(field, "mem_used"))
		d->mem_used = strtoull(value, NULL, 10);
	else if (!strcmp(field, "mem_total"))
		d->mem_total = strtoull(value, NULL, 10);
	else if (!strcmp(field, "power_mw"))
		d->power_mw = atoi(value), d->have_power = 1;
	else if (!strcmp(field, "sm_clock"))
		d->sm_clock = atoi(value);
	else if (!strcmp(field, "temp"))
		d->temp = atoi(value);
	else if (!strcmp(field, "arch"))
		d->arch = atoi(value);
	else if (!strcmp(field, "gpm"))
		d->gpm = atoi(value);
	else if (!strcmp(field, "accounting"))
		d->accounting = atoi(value);
	else if (!strcmp(field, "retired_sbe"))
		d->retired[0] = atoi(value), d->has_retired = 1;
	else if (!strcmp(field, "retired_dbe"))
		d->retired[1] = atoi(value), d->has_retired = 1;
	else if (!strcmp(field, "retired_pending"))
		d->retired_pending = atoi(value), d->has_retired = 1;
	else if (!strcmp(field, "throttle"))
		d->throttle = strtoull(value, NULL, 0), d->has_throttle = 1;
	else if (!strcmp(field, "energy_mj"))
		d->energy_mj = strtoull(value, NULL, 10), d->has_energy = 1;
	else if (!strcmp(field, "pcie_tx"))
		d->pcie[0] = atoi(value), d->has_pcie = 1;
	else if (!strcmp(field, "pcie_rx"))
		d->pcie[1] = atoi(value), d->has_pcie = 1;
	else if (!strcmp(field, "pcie_replay"))
		d->pcie_replay = atoi(value), d->has_pcie = 1;
	else if (!strcmp(field, "mig"))
		d->mig_mode = atoi(value);
	else if (!strncmp(field, "gpm.", 4)) {
		int id = atoi(field + 4);
		if (id > 0 && id < MAX_METRIC)
			d->metric[id] = strtod(value, NULL), d->has_metric[id] = 1;
	} else if (!strcmp(field, "procs") || !strcmp(field, "proc_util") ||
		   !strcmp(field, "acct") || !strcmp(field, "proc_gi")) {
		char buf[2048];
		snprintf(buf, sizeof(buf), "%s", value);
		for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
			unsigned pid = strtoul(tok, &tok, 10);
			struct proc *p = find_proc(d, pid);
			if (!p || *tok != ':')
				continue;
			if (!strcmp(field, "procs")) {
				p->mem = strtoull(tok + 1, NULL, 10);
			} else if (!strcmp(field, "proc_util")) {
				p->sm = strtoul(tok + 1, NULL, 10);
				p->has_sm = 1;
			} else if (!strcmp(field, "proc_gi")) {
				p->gi = strtoul(tok + 1, NULL, 10);
				p->has_gi = 1;
			} else {
				char *rest = tok + 1;
				p->acct_util = strtoul(rest, &rest, 10);
				if (*rest == ':')
					p->acct_ms = strtoull(rest + 1, &rest, 10);
				if (*rest == ':')
					p->running = strtoul(rest + 1, &rest, 10);
				p->has_acct = 1;
			}
		}
	}
}

/* Re-read the file when it changed (a test sets new values while the agent polls). */
static void load(void)
{
	const char *path = getenv("AIFLAME_FAKE_NVML");
	struct stat st;
	if (!path || stat(path, &st) != 0)
		return;
	if (st.st_mtim.tv_sec == loaded_mtime && st.st_mtim.tv_nsec == loaded_mtime_ns &&
	    st.st_size == loaded_size)
		return;
	FILE *f = fopen(path, "r");
	if (!f)
		return;
	memset(devs, 0, sizeof(devs));
	memset(migs, 0, sizeof(migs));
	ndev = 0;
	char line[4096];
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\r\n")] = 0;
		char *eq = strchr(line, '=');
		if (!eq || line[0] == '#')
			continue;
		*eq = 0;
		set_value(line, eq + 1);
	}
	fclose(f);
	loaded_mtime = st.st_mtim.tv_sec;
	loaded_mtime_ns = st.st_mtim.tv_nsec;
	loaded_size = st.st_size;
}

typedef struct device *nvmlDevice_t;

static nvmlReturn_t dev_ok(nvmlDevice_t d)
{
	if (!initialised)
		return NVML_ERROR_UNINITIALIZED;
	load();
	if (d >= &migs[0][0] && d < &migs[0][0] + MAX_DEV * MAX_MIG && d->is_mig)
		return NVML_SUCCESS; /* a MIG instance's handle */
	if (!d || d < devs || d >= devs + ndev)
		return NVML_ERROR_INVALID_ARGUMENT;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlInitWithFlags(unsigned flags)
{
	(void)flags;
	initialised = 1;
	load();
	return NVML_SUCCESS;
}
nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlShutdown(void)
{
	initialised = 0;
	return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t r)
{
	switch (r) {
	case NVML_SUCCESS: return "Success";
	case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
	case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
	case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
	case NVML_ERROR_NOT_FOUND: return "Not Found";
	case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
	case NVML_ERROR_TIMEOUT: return "Timeout";
	default: return "Unknown Error";
	}
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned length)
{
	snprintf(version, length, "%s", "999.99-aiflame-stand-in");
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *count)
{
	if (!initialised)
		return NVML_ERROR_UNINITIALIZED;
	load();
	*count = ndev;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t *device)
{
	if (!initialised)
		return NVML_ERROR_UNINITIALIZED;
	load();
	if (index >= (unsigned)ndev)
		return NVML_ERROR_INVALID_ARGUMENT;
	*device = &devs[index];
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned length)
{
	nvmlReturn_t r = dev_ok(d);
	if (!r)
		snprintf(name, length, "%s", d->name);
	return r;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned length)
{
	nvmlReturn_t r = dev_ok(d);
	if (!r)
		snprintf(uuid, length, "%s", d->uuid);
	return r;
}

/* nvmlPciInfo_t: busIdLegacy[16], domain, bus, device, pciDeviceId, pciSubSystemId, busId[32] */
typedef struct {
	char busIdLegacy[16];
	unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
	char busId[32];
} nvmlPciInfo_t;

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *pci)
{
	nvmlReturn_t r = dev_ok(d);
	if (r)
		return r;
	memset(pci, 0, sizeof(*pci));
	snprintf(pci->busId, sizeof(pci->busId), "%s", d->pci);
	snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%.15s", d->pci);
	return NVML_SUCCESS;
}

typedef struct { unsigned gpu, memory; } nvmlUtilization_t;

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u)
{
	nvmlReturn_t r = dev_ok(d);
	if (r)
		return r;
	if (!d->have_util)
		return NVML_ERROR_NOT_SUPPORTED;
	u->gpu = d->util;
	u->memory = d->mem_util;
	return NVML_SUCCESS;
}

typedef struct { unsigned long long total, free, used; } nvmlMemory_t;

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
	nvmlReturn_t r = dev_ok(d);
	if (r)
		return r;
	m->total = d->mem_total;
	m->used = d->mem_used;
	m->free = d->mem_total > d->mem_used ? d->mem_total - d->mem_used : 0;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned *mw)
{
	nvmlReturn_t r = dev_ok(d);
	if (r)
		return r;
	if (!d->have_power)
		return NVML_ERROR_NOT_SUPPORTED;
	*mw = d->power_mw;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned *clock)
{
	nvmlReturn_t r = dev_ok(d);
	if (r)
		return r;
	if (type != 1) /* NVML_CLOCK_SM */
		return NVML_ERROR_NOT_SUPPORTED;
	*clock = d->sm_clock;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned *temp)
{
	nvmlReturn_t r = dev_ok(d);
	if (r)
		return r;
	if (sensor != 0) /* NVML_TEMPERATURE_GPU */
		return NVML_ERROR_NOT_SUPPORTED;
	*temp = d->temp;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t d, unsigned *arch)
{
	nvmlReturn_t r = dev_ok(d);
	if (!r)
		*arch = d->arch;
	return r;
}

/* nvmlProcessInfo_v2_t: pid, usedGpuMemory, gpuInstanceId, computeInstanceId */
typedef struct {
	unsigned pid;
	unsigned long long usedGpuMemory;
	unsigned gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned *count,
						     nvmlProcessInfo_t *infos)
{
	nvmlReturn_t r = dev_ok(d);
	if (r)
		return r;
	int n = 0;
	for (int i = 0; i < d->nprocs; i++)
		n += d->procs[i].mem > 0;
	if (*count < (unsigned)n || !infos) {
		int had = *count;
		*count = n;
		return n == 0 && had == 0 ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
	}
	int k = 0;
	for (int i = 0; i < d->nprocs; i++) {
		if (!d->procs[i].mem)
			continue;
		infos[k].pid = d->procs[i].pid;
		infos[k].usedGpuMemory = d->procs[i].mem;
		infos[k].gpuInstanceId = infos[k].computeInstanceId = 0xFFFFFFFF;
		if (d->procs[i].has_gi)
			infos[k].gpuInstanceId = d->procs[i].gi, infos[k].computeInstanceId = 0;
		k++;
	}
	*count = k;
	return NVML_SUCCESS;
}

/* nvmlProcessUtilizationSample_t: pid, timeStamp, smUtil, memUtil, encUtil, decUtil */
typedef struct {
	unsigned pid;
	unsigned long long timeStamp;
	unsigned smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t d,
					      nvmlProcessUtilizationSample_t *samples,
					      unsigned *count, unsigned long long last_seen)
{
	nvmlReturn_t r = dev_ok(d);
	if (r)
		return r;
	struct timeval tv;
	gettimeofday(&tv, NULL);
	unsigned long long now = (unsigned long long)tv.tv_sec * 1000000ULL + tv.tv_usec;
	int n = 0;
	for (int i = 0; i < d->nprocs; i++)
		n += d->procs[i].has_sm;
	if (n == 0)
		return NVML_ERROR_NOT_FOUND;
	if (!samples || *count < (unsigned)n) {
		*count = n;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	int k = 0;
	for (int i = 0; i < d->nprocs; i++) {
		if (!d->procs[i].has_sm)
			continue;
		samples[k].pid = d->procs[i].pid;
		samples[k].timeStamp = now > last_seen ? now : last_seen + 1;
		samples[k].smUtil = d->procs[i].sm;
		samples[k].memUtil = samples[k].encUtil = samples[k].decUtil = 0;
		k++;
	}
	*count = k;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetAccountingMode(nvmlDevice_t d, int *mode)
{
	nvmlReturn_t r = dev_ok(d);
	if (!r)
		*mode = d->accounting ? 1 : 0;
	return r;
}

nvmlReturn_t nvmlDeviceGetAccountingBufferSize(nvmlDevice_t d, unsigned *size)
{
	nvmlReturn_t r = dev_ok(d);
	if (!r)
		*size = acct_buffer;
	return r;
}

nvmlReturn_t nvmlDeviceGetAccountingPids(nvmlDevice_t d, unsigned *count, unsigned *pids)
{
	nvmlReturn_t r = dev_ok(d);
	if (r)
		return r;
	if (!d->accounting)
		return NVML_ERROR_NOT_SUPPORTED;
	unsigned k = 0;
	for (int i = 0; i < d->nprocs && k < *count; i++)
		if (d->procs[i].has_acct)
			pids[k++] = d->procs[i].pid;
	*count = k;
	return NVML_SUCCESS;
}

/* nvmlAccountingStats_t: gpuUtilization, memoryUtilization, maxMemoryUsage, time,
 * startTime, isRunning, reserved[5] */
typedef struct {
	unsigned gpuUtilization, memoryUtilization;
	unsigned long long maxMemoryUsage, time, startTime;
	unsigned isRunning;
	unsigned reserved[5];
} nvmlAccountingStats_t;

nvmlReturn_t nvmlDeviceGetAccountingStats(nvmlDevice_t d, unsigned pid, nvmlAccountingStats_t *s)
{
	nvmlReturn_t r = dev_ok(d);
	if (r)
		return r;
	for (int i = 0; i < d->nprocs; i++) {
		struct proc *p = &d->procs[i];
		if (p->pid != pid || !p->has_acct)
			continue;
		memset(s, 0, sizeof(*s));
		s->gpuUtilization = p->acct_util;
		s->time = p->acct_ms;
		s->maxMemoryUsage = p->mem;
		s->isRunning = p->running;
		return NVML_SUCCESS;
	}
	return NVML_ERROR_NOT_FOUND;
}

/* GPM: a sample remembers its device; metrics are the values set for that device. */
typedef struct { unsigned version, isSupportedDevice; } nvmlGpmSupport_t;
struct gpm_sample { struct device *dev; int taken; };
typedef struct gpm_sample *nvmlGpmSample_t;
typedef struct {
	unsigned metricId;
	nvmlReturn_t nvmlReturn;
	double value;
	struct { char *shortName, *longName, *unit; } metricInfo;
} nvmlGpmMetric_t;
typedef struct {
	unsigned version, numMetrics;
	nvmlGpmSample_t sample1, sample2;
	nvmlGpmMetric_t metrics[]; /* NVML_GPM_METRIC_MAX of them */
} nvmlGpmMetricsGet_t;

nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t d, nvmlGpmSupport_t *support)
{
	nvmlReturn_t r = dev_ok(d);
	if (!r)
		support->isSupportedDevice = d->gpm && d->arch >= 9;
	return r;
}

nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *sample)
{
	*sample = calloc(1, sizeof(struct gpm_sample));
	return *sample ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t sample)
{
	free(sample);
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t d, nvmlGpmSample_t sample)
{
	nvmlReturn_t r = dev_ok(d);
	if (r)
		return r;
	if (!d->gpm)
		return NVML_ERROR_NOT_SUPPORTED;
	sample->dev = d;
	sample->taken = 1;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *req)
{
	if (!initialised)
		return NVML_ERROR_UNINITIALIZED;
	load();
	if (!req->sample1 || !req->sample2 || !req->sample1->taken || !req->sample2->taken ||
	    req->sample1->dev != req->sample2->dev)
		return NVML_ERROR_INVALID_ARGUMENT;
	struct device *d = req->sample2->dev;
	for (unsigned i = 0; i < req->numMetrics; i++) {
		nvmlGpmMetric_t *m = &req->metrics[i];
		unsigned id = m->metricId;
		if (id < MAX_METRIC && d->has_metric[id]) {
			m->value = d->metric[id];
			m->nvmlReturn = NVML_SUCCESS;
		} else {
			m->value = 0;
			m->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
		}
	}
	return NVML_SUCCESS;
}

/* Health: ECC, retired pages, row remapping, clock event reasons, energy, PCIe, fields. */
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, int errorType, int counterType,
					 unsigned long long *count)
{
	nvmlReturn_t r = dev_ok(d);
	if (r)
		return r;
	if (!d->has_ecc || errorType < 0 || errorType > 1 || counterType < 0 || counterType > 1)
		return NVML_ERROR_NOT_SUPPORTED;
	*count = d->ecc[counterType * 2 + errorType];
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t d, int cause, unsigned *count,
				       unsigned long long *addresses)
{
	nvmlReturn_t r = dev_ok(d);
	if (r)
		return r;
	if (!d->has_retired || cause < 0 || cause > 1)
		return NVML_ERROR_NOT_SUPPORTED;
	unsigned n = d->retired[cause];
	if (!addresses || *count < n) {
		*count = n;
		return n ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
	}
	for (unsigned k = 0; k < n; k++)
		addresses[k] = 0x1000ULL * (k + 1) + cause;
	*count = n;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t d, int *pending)
{
	nvmlReturn_t r = dev_ok(d);
	if (r)
		return r;
	if (!d->has_retired)
		return NVML_ERROR_NOT_SUPPORTED;
	*pending = d->retired_pending;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t d, unsigned *corr, unsigned *unc,
				       unsigned *pending, unsigned *failure)
{
	nvmlReturn_t r = dev_ok(d);
	if (r)
		return r;
	if (!d->has_remap)
		return NVML_ERROR_NOT_SUPPORTED;
	*corr = d->remap[0], *unc = d->remap[1], *pending = d->remap[2], *failure = d->remap[3];
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long *reasons)
{
	nvmlReturn_t r = dev_ok(d);
	if (r)
		return r;
	if (!d->has_throttle)
		return NVML_ERROR_NOT_SUPPORTED;
	*reasons = d->throttle;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d,
						       unsigned long long *reasons)
{
	return nvmlDeviceGetCurrentClocksEventReasons(d, reasons);
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t d, unsigned long long *mj)
{
	nvmlReturn_t r = dev_ok(d);
	if (r)
		return r;
	if (!d->has_energy)
		return NVML_ERROR_NOT_SUPPORTED;
	*mj = d->energy_mj;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t d, int counter, unsigned *kbs)
{
	nvmlReturn_t r = dev_ok(d);
	if (r)
		return r;
	if (!d->has_pcie || counter < 0 || counter > 1)
		return NVML_ERROR_NOT_SUPPORTED;
	*kbs = d->pcie[counter];
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t d, unsigned *value)
{
	nvmlReturn_t r = dev_ok(d);
	if (r)
		return r;
	if (!d->has_pcie)
		return NVML_ERROR_NOT_SUPPORTED;
	*value = d->pcie_replay;
	return NVML_SUCCESS;
}

/* nvmlFieldValue_t: fieldId, scopeId, timestamp, latencyUsec, valueType, nvmlReturn, value */
typedef struct {
	unsigned fieldId, scopeId;
	long long timestamp, latencyUsec;
	int valueType;
	nvmlReturn_t nvmlReturn;
	union { double d; unsigned long long ull; } value;
} nvmlFieldValue_t;

nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t d, int count, nvmlFieldValue_t *values)
{
	nvmlReturn_t r = dev_ok(d);
	if (r)
		return r;
	struct timeval tv;
	gettimeofday(&tv, NULL);
	for (int i = 0; i < count; i++) {
		unsigned id = values[i].fieldId;
		values[i].timestamp = (long long)tv.tv_sec * 1000000LL + tv.tv_usec;
		values[i].latencyUsec = 0;
		values[i].valueType = 3; /* NVML_VALUE_TYPE_UNSIGNED_LONG_LONG */
		if (id < MAX_FIELD && d->has_field[id]) {
			values[i].value.ull = d->field[id];
			values[i].nvmlReturn = NVML_SUCCESS;
		} else {
			values[i].value.ull = 0;
			values[i].nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
		}
	}
	return NVML_SUCCESS;
}

/* XID events: one event set, the devices registered with it, the queue read at load(). */
#define XID_CRITICAL 0x8ULL
struct event_set { unsigned long long registered[MAX_DEV]; };
typedef struct event_set *nvmlEventSet_t;
/* nvmlEventData_t: device, eventType, eventData, gpuInstanceId, computeInstanceId */
typedef struct {
	nvmlDevice_t device;
	unsigned long long eventType, eventData;
	unsigned gpuInstanceId, computeInstanceId;
} nvmlEventData_t;

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
	if (!initialised)
		return NVML_ERROR_UNINITIALIZED;
	*set = calloc(1, sizeof(struct event_set));
	return *set ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
	free(set);
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t d, unsigned long long *types)
{
	nvmlReturn_t r = dev_ok(d);
	if (!r)
		*types = XID_CRITICAL;
	return r;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types,
				      nvmlEventSet_t set)
{
	nvmlReturn_t r = dev_ok(d);
	if (r)
		return r;
	if (!set || d < devs || d >= devs + MAX_DEV)
		return NVML_ERROR_INVALID_ARGUMENT;
	set->registered[d - devs] |= types;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned timeout_ms)
{
	(void)timeout_ms; /* never blocks: events are queued when the file is read */
	if (!initialised)
		return NVML_ERROR_UNINITIALIZED;
	load();
	while (ev_head != ev_tail) {
		int dev = events[ev_head].dev;
		unsigned long long xid = events[ev_head].xid;
		ev_head = (ev_head + 1) % MAX_EVENTS;
		if (!(set->registered[dev] & XID_CRITICAL))
			continue;
		memset(data, 0, sizeof(*data));
		data->device = &devs[dev];
		data->eventType = XID_CRITICAL;
		data->eventData = xid;
		data->gpuInstanceId = data->computeInstanceId = 0xFFFFFFFF;
		return NVML_SUCCESS;
	}
	return NVML_ERROR_TIMEOUT;
}

/* MIG */
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned *current, unsigned *pending)
{
	nvmlReturn_t r = dev_ok(d);
	if (r)
		return r;
	if (d->is_mig)
		return NVML_ERROR_INVALID_ARGUMENT;
	*current = *pending = d->mig_mode;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned *count)
{
	nvmlReturn_t r = dev_ok(d);
	if (!r)
		*count = d->mig_mode ? MAX_MIG : 0;
	return r;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned index,
						 nvmlDevice_t *mig)
{
	nvmlReturn_t r = dev_ok(d);
	if (r)
		return r;
	if (!d->mig_mode || d->is_mig || index >= MAX_MIG)
		return NVML_ERROR_INVALID_ARGUMENT;
	struct device *g = &migs[d - devs][index];
	if (!g->is_mig)
		return NVML_ERROR_NOT_FOUND;
	*mig = g;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t d, unsigned *is_mig)
{
	nvmlReturn_t r = dev_ok(d);
	if (!r)
		*is_mig = d->is_mig;
	return r;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t d, unsigned *id)
{
	nvmlReturn_t r = dev_ok(d);
	if (r)
		return r;
	if (!d->is_mig)
		return NVML_ERROR_INVALID_ARGUMENT;
	*id = d->gi;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t d, unsigned *id)
{
	nvmlReturn_t r = dev_ok(d);
	if (r)
		return r;
	if (!d->is_mig)
		return NVML_ERROR_INVALID_ARGUMENT;
	*id = d->ci;
	return NVML_SUCCESS;
}
