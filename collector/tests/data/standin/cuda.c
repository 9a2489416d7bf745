/* A stand-in for the CUDA driver's libcuda.so.1, for tests on machines without a GPU: the calls
 * the collector makes through cudarc (cuInit, cuDeviceGetCount, cuDeviceGet, cuDeviceGetUuid),
 * never a context. It lists the stand-in NVML's two devices in the order STANDIN_CUDA_ORDER gives
 * as NVML indices ("1,0": CUDA numbers them the other way round, as it does by default when the
 * fastest device is not the first on the bus; default "0,1"), then applies CUDA_VISIBLE_DEVICES
 * (indices in that order) as the real driver does. */
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef struct { char bytes[16]; } CUuuid;
enum { OK = 0, INVALID_VALUE = 1, NOT_INITIALIZED = 3, INVALID_DEVICE = 101 };

static const unsigned char uuids[2][16] = {
    {0x11, 0x11, 0x11, 0x11, 0x22, 0x22, 0x33, 0x33, 0x44, 0x44, 0x55, 0x55, 0x55, 0x55, 0x55, 0x55},
    {0xaa, 0xaa, 0xaa, 0xaa, 0xbb, 0xbb, 0xcc, 0xcc, 0xdd, 0xdd, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee},
};
static int initialised = 0;
static int visible[2];
static int count = 0;

CUresult cuInit(unsigned int flags) {
    if (flags != 0) return INVALID_VALUE;
    int order[2] = {0, 1};
    const char *given = getenv("STANDIN_CUDA_ORDER");
    if (given && strcmp(given, "1,0") == 0) {
        order[0] = 1;
        order[1] = 0;
    }
    count = 0;
    const char *list = getenv("CUDA_VISIBLE_DEVICES");
    if (!list) {
        visible[0] = order[0];
        visible[1] = order[1];
        count = 2;
    } else {
        /* Indices only; like CUDA, stop at the first entry that names no device. */
        char copy[64];
        strncpy(copy, list, sizeof copy - 1);
        copy[sizeof copy - 1] = 0;
        for (char *entry = strtok(copy, ","); entry && count < 2; entry = strtok(NULL, ",")) {
            char *end;
            long i = strtol(entry, &end, 10);
            if (end == entry || *end || i < 0 || i > 1) break;
            visible[count++] = order[i];
        }
    }
    initialised = 1;
    return OK;
}

CUresult cuDeviceGetCount(int *out) {
    if (!initialised) return NOT_INITIALIZED;
    *out = count;
    return OK;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    if (!initialised) return NOT_INITIALIZED;
    if (ordinal < 0 || ordinal >= count) return INVALID_DEVICE;
    *device = ordinal;
    return OK;
}

CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice device) {
    if (!initialised) return NOT_INITIALIZED;
    if (device < 0 || device >= count) return INVALID_DEVICE;
    memcpy(uuid->bytes, uuids[visible[device]], 16);
    return OK;
}
