/* A stand-in for the NVIDIA driver's libnvidia-ml.so.1, for tests on machines without a GPU: the
 * NVML calls the collector makes, with scripted numbers. Loaded through the real dynamic-loading
 * path (LD_LIBRARY_PATH). Built by the tests with `cc -shared -fPIC`; `-DNO_V2` leaves out
 * nvmlDeviceGetMemoryInfo_v2, as older drivers do.
 *
 * Two devices, in NVML's (PCI) order:
 *   0: "Stand-in H100", 80 GiB, used = 1 GiB + 1 MiB per memory query of this device so far,
 *      reserved 512 MiB; per-process memory supported: the pid in the file named by
 *      STANDIN_NVML_PIDFILE (if the file exists) holds 768 MiB, or the bytes the file gives
 *      after the pid ("PID BYTES": a job that scripts its own use).
 *   1: "Stand-in A100", 40 GiB, used 2 GiB; per-process memory NOT_SUPPORTED; once
 *      STANDIN_NVML_LOSE_AFTER memory queries of it have been answered, it is lost
 *      (GPU_IS_LOST) for good.
 * STANDIN_NVML_LOG names a file that gets one line per call (function name). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
enum { OK = 0, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3, INSUFFICIENT_SIZE = 7, GPU_IS_LOST = 15 };
enum { MIB = 1 << 20 };

struct device {
    const char *uuid;
    const char *name;
    unsigned long long total;
    unsigned long queries;
};
typedef struct device *nvmlDevice_t;

static struct device devices[2] = {
    {"GPU-11111111-2222-3333-4444-555555555555", "Stand-in H100", 80ULL << 30, 0},
    {"GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", "Stand-in A100", 40ULL << 30, 0},
};

typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

static void logcall(const char *name) {
    const char *path = getenv("STANDIN_NVML_LOG");
    if (!path) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    fprintf(f, "%s\n", name);
    fclose(f);
}

static int index_of(nvmlDevice_t device) {
    for (int i = 0; i < 2; i++)
        if (device == &devices[i]) return i;
    return -1;
}

nvmlReturn_t nvmlInit_v2(void) { logcall("nvmlInit_v2"); return OK; }
nvmlReturn_t nvmlShutdown(void) { logcall("nvmlShutdown"); return OK; }
const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NOT_SUPPORTED: return "Not Supported";
    case GPU_IS_LOST: return "GPU is lost";
    default: return "Stand-in error";
    }
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    logcall("nvmlDeviceGetCount_v2");
    *count = 2;
    return OK;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    logcall("nvmlDeviceGetHandleByIndex_v2");
    if (index >= 2) return INVALID_ARGUMENT;
    *device = &devices[index];
    return OK;
}

static nvmlReturn_t copy(const char *text, char *out, unsigned int length) {
    if (strlen(text) + 1 > length) return INSUFFICIENT_SIZE;
    strcpy(out, text);
    return OK;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    logcall("nvmlDeviceGetUUID");
    int i = index_of(device);
    return i < 0 ? INVALID_ARGUMENT : copy(devices[i].uuid, uuid, length);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    logcall("nvmlDeviceGetName");
    int i = index_of(device);
    return i < 0 ? INVALID_ARGUMENT : copy(devices[i].name, name, length);
}

/* used and reserved of device i at this query; GPU_IS_LOST once device 1 is gone. */
static nvmlReturn_t query(int i, unsigned long long *used, unsigned long long *reserved) {
    if (i < 0) return INVALID_ARGUMENT;
    struct device *d = &devices[i];
    if (i == 1) {
        const char *after = getenv("STANDIN_NVML_LOSE_AFTER");
        if (after && d->queries >= strtoul(after, NULL, 10)) return GPU_IS_LOST;
    }
    d->queries++;
    *used = i == 0 ? (1ULL << 30) + d->queries * MIB : 2ULL << 30;
    *reserved = 512ULL * MIB;
    return OK;
}

#ifndef NO_V2
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    logcall("nvmlDeviceGetMemoryInfo_v2");
    if (memory->version != (sizeof(nvmlMemory_v2_t) | (2u << 24))) return INVALID_ARGUMENT;
    int i = index_of(device);
    unsigned long long used, reserved;
    nvmlReturn_t status = query(i, &used, &reserved);
    if (status != OK) return status;
    memory->total = devices[i].total;
    memory->used = used;
    memory->reserved = reserved;
    memory->free = memory->total - used - reserved;
    return OK;
}
#endif

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    logcall("nvmlDeviceGetMemoryInfo");
    int i = index_of(device);
    unsigned long long used, reserved;
    nvmlReturn_t status = query(i, &used, &reserved);
    if (status != OK) return status;
    memory->total = devices[i].total;
    memory->used = used;
    memory->free = memory->total - used;
    return OK;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                                      nvmlProcessInfo_t *infos) {
    logcall("nvmlDeviceGetComputeRunningProcesses_v3");
    int i = index_of(device);
    if (i < 0) return INVALID_ARGUMENT;
    if (i == 1) return NOT_SUPPORTED;
    unsigned int pid = 0;
    unsigned long long held = 768ULL * MIB;
    const char *path = getenv("STANDIN_NVML_PIDFILE");
    FILE *f = path ? fopen(path, "r") : NULL;
    if (f) {
        if (fscanf(f, "%u", &pid) != 1) pid = 0;
        else if (fscanf(f, "%llu", &held) != 1) held = 768ULL * MIB;
        fclose(f);
    }
    unsigned int have = pid ? 1 : 0;
    if (*count < have || (have && !infos)) {
        *count = have;
        return INSUFFICIENT_SIZE;
    }
    *count = have;
    if (have) {
        infos[0].pid = pid;
        infos[0].usedGpuMemory = held;
        infos[0].gpuInstanceId = 0xFFFFFFFF;
        infos[0].computeInstanceId = 0xFFFFFFFF;
    }
    return OK;
}
