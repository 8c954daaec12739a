/*
 * Simulated libnvidia-ml.so.1 for the cdriver simulation kit.
 *
 * It answers the NVML calls a ComputeDomain node needs (init, system versions, device
 * enumeration, UUID/name/minor/PCI, GPU fabric info v1 and versioned v2/v3) from a small
 * per-node text file rendered by `cdriver sim driver-root` from a topology and a GPU profile.
 *
 * The file is read on the first successful nvmlInit* of a process (again after a full
 * nvmlShutdown), so re-rendering it and restarting the reader changes the node's identity
 * without rebuilding this library. Location, first match wins:
 *   1. $CDRIVER_SIM_NVML_CONFIG
 *   2. nvml-sim.conf next to this library (the driver root's lib dir)
 *
 * File format: one `key = value` per line, `#` starts a comment line.
 *   format = 1
 *   driver_version = 580.65.06          nvml_version = 13.580.65.06
 *   cuda_driver_version = 13000         gpu_count = N
 *   gpu.<i>.uuid / .name / .minor / .pci_bus_id (dddd:bb:dd.f) / .pci_device_id / .pci_subsystem_id
 *   gpu.<i>.fabric = supported | not_supported
 *   gpu.<i>.fabric.cluster_uuid (32 hex digits, dashes allowed) / .clique_id / .state (0..3)
 *   gpu.<i>.fabric.status (nvmlReturn_t) / .health_mask / .health_summary (0..3)
 */
#define _GNU_SOURCE
#include "nvml_sim.h"

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define SIM_MAX_GPUS 64
#define SIM_TEXT 96
#define SIM_CONFIG_ENV "CDRIVER_SIM_NVML_CONFIG"
#define SIM_CONFIG_NAME "nvml-sim.conf"
#define SIM_LOG_PREFIX "libnvidia-ml.so.1 (cdriver simulation)"

struct nvmlDevice_st {
    unsigned int index;
    int has_uuid;
    char uuid[SIM_TEXT];
    char name[SIM_TEXT];
    unsigned int minor;
    unsigned int pci_domain, pci_bus, pci_device, pci_function;
    unsigned int pci_device_id, pci_subsystem_id;
    int fabric_supported;
    unsigned char cluster_uuid[NVML_GPU_FABRIC_UUID_LEN];
    unsigned int clique_id;
    unsigned int fabric_state;
    int fabric_status;
    unsigned int health_mask;
    unsigned int health_summary;
};

static struct {
    char driver_version[SIM_TEXT];
    char nvml_version[SIM_TEXT];
    int cuda_driver_version;
    unsigned int gpu_count;
    struct nvmlDevice_st gpus[SIM_MAX_GPUS];
} sim;

static pthread_mutex_t sim_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned int sim_refcount;

/* ---------------------------------------------------------------------------------------- */
/* Configuration file                                                                        */
/* ---------------------------------------------------------------------------------------- */

static void sim_log(const char *path, int line, const char *fmt, const char *detail) {
    if (line > 0)
        fprintf(stderr, "%s: %s:%d: ", SIM_LOG_PREFIX, path, line);
    else
        fprintf(stderr, "%s: %s: ", SIM_LOG_PREFIX, path);
    fprintf(stderr, fmt, detail);
    fputc('\n', stderr);
}

static char *trim(char *s) {
    while (isspace((unsigned char)*s))
        s++;
    char *end = s + strlen(s);
    while (end > s && isspace((unsigned char)end[-1]))
        *--end = '\0';
    return s;
}

static int parse_uint(const char *text, unsigned int *out) {
    char *end;
    errno = 0;
    if (*text == '-' || *text == '\0')
        return -1;
    unsigned long value = strtoul(text, &end, 0);
    if (errno != 0 || *end != '\0' || value > UINT_MAX)
        return -1;
    *out = (unsigned int)value;
    return 0;
}

static int parse_int(const char *text, int *out) {
    char *end;
    errno = 0;
    if (*text == '\0')
        return -1;
    long value = strtol(text, &end, 0);
    if (errno != 0 || *end != '\0' || value > INT_MAX || value < INT_MIN)
        return -1;
    *out = (int)value;
    return 0;
}

static int copy_text(char *dst, const char *src) {
    if (strlen(src) >= SIM_TEXT || *src == '\0')
        return -1;
    strcpy(dst, src);
    return 0;
}

/* 32 hex digits, dashes allowed anywhere (8-4-4-4-12 form or bare). */
static int parse_cluster_uuid(const char *text, unsigned char out[NVML_GPU_FABRIC_UUID_LEN]) {
    int digits = 0;
    memset(out, 0, NVML_GPU_FABRIC_UUID_LEN);
    for (const char *p = text; *p; p++) {
        if (*p == '-')
            continue;
        if (!isxdigit((unsigned char)*p) || digits >= 2 * NVML_GPU_FABRIC_UUID_LEN)
            return -1;
        int nibble = isdigit((unsigned char)*p) ? *p - '0' : (tolower((unsigned char)*p) - 'a' + 10);
        out[digits / 2] |= (unsigned char)(digits % 2 == 0 ? nibble << 4 : nibble);
        digits++;
    }
    return digits == 2 * NVML_GPU_FABRIC_UUID_LEN ? 0 : -1;
}

static int parse_pci_bus_id(const char *text, struct nvmlDevice_st *gpu) {
    char tail;
    if (sscanf(text, "%x:%x:%x.%x%c", &gpu->pci_domain, &gpu->pci_bus, &gpu->pci_device,
               &gpu->pci_function, &tail) != 4)
        return -1;
    return (gpu->pci_bus > 0xff || gpu->pci_device > 0x1f || gpu->pci_function > 7) ? -1 : 0;
}

/* Apply one `gpu.<i>.<field>` setting; returns NULL on success or the problem. */
static const char *set_gpu_field(struct nvmlDevice_st *gpu, const char *field, const char *value) {
    if (strcmp(field, "uuid") == 0) {
        if (copy_text(gpu->uuid, value) != 0)
            return "uuid must be 1..95 characters";
        gpu->has_uuid = 1;
    } else if (strcmp(field, "name") == 0) {
        if (copy_text(gpu->name, value) != 0)
            return "name must be 1..95 characters";
    } else if (strcmp(field, "minor") == 0) {
        if (parse_uint(value, &gpu->minor) != 0)
            return "minor must be an unsigned integer";
    } else if (strcmp(field, "pci_bus_id") == 0) {
        if (parse_pci_bus_id(value, gpu) != 0)
            return "pci_bus_id must look like 0000:0A:00.0";
    } else if (strcmp(field, "pci_device_id") == 0) {
        if (parse_uint(value, &gpu->pci_device_id) != 0)
            return "pci_device_id must be an unsigned integer (e.g. 0x294110DE)";
    } else if (strcmp(field, "pci_subsystem_id") == 0) {
        if (parse_uint(value, &gpu->pci_subsystem_id) != 0)
            return "pci_subsystem_id must be an unsigned integer";
    } else if (strcmp(field, "fabric") == 0) {
        if (strcmp(value, "supported") == 0)
            gpu->fabric_supported = 1;
        else if (strcmp(value, "not_supported") == 0)
            gpu->fabric_supported = 0;
        else
            return "fabric must be 'supported' or 'not_supported'";
    } else if (strcmp(field, "fabric.cluster_uuid") == 0) {
        if (parse_cluster_uuid(value, gpu->cluster_uuid) != 0)
            return "fabric.cluster_uuid must be 32 hex digits (dashes allowed)";
    } else if (strcmp(field, "fabric.clique_id") == 0) {
        if (parse_uint(value, &gpu->clique_id) != 0)
            return "fabric.clique_id must be an unsigned 32-bit integer";
    } else if (strcmp(field, "fabric.state") == 0) {
        if (parse_uint(value, &gpu->fabric_state) != 0 || gpu->fabric_state > 3)
            return "fabric.state must be 0 (not supported), 1 (not started), 2 (in progress) or 3 (completed)";
    } else if (strcmp(field, "fabric.status") == 0) {
        if (parse_int(value, &gpu->fabric_status) != 0)
            return "fabric.status must be an NVML return code";
    } else if (strcmp(field, "fabric.health_mask") == 0) {
        if (parse_uint(value, &gpu->health_mask) != 0)
            return "fabric.health_mask must be an unsigned 32-bit integer";
    } else if (strcmp(field, "fabric.health_summary") == 0) {
        if (parse_uint(value, &gpu->health_summary) != 0 || gpu->health_summary > 3)
            return "fabric.health_summary must be 0..3";
    } else {
        return "unknown GPU field";
    }
    return NULL;
}

static const char *set_key(const char *key, const char *value) {
    if (strcmp(key, "format") == 0) {
        return strcmp(value, "1") == 0 ? NULL : "unsupported format (this library reads format 1)";
    } else if (strcmp(key, "node") == 0) {
        return NULL; /* informational */
    } else if (strcmp(key, "driver_version") == 0) {
        return copy_text(sim.driver_version, value) == 0 ? NULL : "driver_version must be 1..95 characters";
    } else if (strcmp(key, "nvml_version") == 0) {
        return copy_text(sim.nvml_version, value) == 0 ? NULL : "nvml_version must be 1..95 characters";
    } else if (strcmp(key, "cuda_driver_version") == 0) {
        return parse_int(value, &sim.cuda_driver_version) == 0 ? NULL
                                                                : "cuda_driver_version must be an integer (e.g. 13000)";
    } else if (strcmp(key, "gpu_count") == 0) {
        if (parse_uint(value, &sim.gpu_count) != 0 || sim.gpu_count > SIM_MAX_GPUS)
            return "gpu_count must be 0..64";
        return NULL;
    } else if (strncmp(key, "gpu.", 4) == 0) {
        char *end;
        errno = 0;
        if (!isdigit((unsigned char)key[4]))
            return "expected gpu.<index>.<field>";
        unsigned long index = strtoul(key + 4, &end, 10);
        if (errno != 0 || *end != '.')
            return "expected gpu.<index>.<field>";
        if (index >= sim.gpu_count)
            return "GPU index not below gpu_count (gpu_count must come first)";
        return set_gpu_field(&sim.gpus[index], end + 1, value);
    }
    return "unknown key";
}

/* Any function of this library: dladdr() on it names the file this copy was loaded from. */
static void self_marker(void) {}

static int config_path(char *out, size_t size) {
    const char *env = getenv(SIM_CONFIG_ENV);
    if (env != NULL && *env != '\0') {
        if (strlen(env) >= size)
            return -1;
        strcpy(out, env);
        return 0;
    }
    Dl_info info;
    if (dladdr((void *)&self_marker, &info) == 0 || info.dli_fname == NULL)
        return -1;
    const char *slash = strrchr(info.dli_fname, '/');
    size_t dir_len = slash ? (size_t)(slash - info.dli_fname) : 1;
    const char *dir = slash ? info.dli_fname : ".";
    if (dir_len + 1 + strlen(SIM_CONFIG_NAME) + 1 > size)
        return -1;
    snprintf(out, size, "%.*s/%s", (int)dir_len, dir, SIM_CONFIG_NAME);
    return 0;
}

static nvmlReturn_t load_config(void) {
    char path[PATH_MAX];
    if (config_path(path, sizeof(path)) != 0) {
        sim_log("config", 0, "cannot locate the configuration file; set %s", SIM_CONFIG_ENV);
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    FILE *file = fopen(path, "r");
    if (file == NULL) {
        sim_log(path, 0, "%s; render it with `cdriver sim driver-root` or point CDRIVER_SIM_NVML_CONFIG at it",
                strerror(errno));
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    memset(&sim, 0, sizeof(sim));
    char line[512];
    int lineno = 0;
    nvmlReturn_t ret = NVML_SUCCESS;
    while (fgets(line, sizeof(line), file) != NULL) {
        lineno++;
        if (strchr(line, '\n') == NULL && !feof(file)) {
            sim_log(path, lineno, "%s", "line longer than 510 characters");
            ret = NVML_ERROR_UNKNOWN;
            break;
        }
        char *text = trim(line);
        if (*text == '\0' || *text == '#')
            continue;
        char *eq = strchr(text, '=');
        if (eq == NULL) {
            sim_log(path, lineno, "expected `key = value`, got `%s`", text);
            ret = NVML_ERROR_UNKNOWN;
            break;
        }
        *eq = '\0';
        char *key = trim(text);
        char *value = trim(eq + 1);
        const char *problem = set_key(key, value);
        if (problem != NULL) {
            fprintf(stderr, "%s: %s:%d: %s: %s\n", SIM_LOG_PREFIX, path, lineno, key, problem);
            ret = NVML_ERROR_UNKNOWN;
            break;
        }
    }
    fclose(file);
    if (ret != NVML_SUCCESS)
        return ret;
    if (sim.driver_version[0] == '\0') {
        sim_log(path, 0, "%s", "missing driver_version");
        return NVML_ERROR_UNKNOWN;
    }
    for (unsigned int i = 0; i < sim.gpu_count; i++) {
        sim.gpus[i].index = i;
        if (!sim.gpus[i].has_uuid) {
            fprintf(stderr, "%s: %s: gpu.%u.uuid is missing\n", SIM_LOG_PREFIX, path, i);
            return NVML_ERROR_UNKNOWN;
        }
    }
    return NVML_SUCCESS;
}

/* ---------------------------------------------------------------------------------------- */
/* API                                                                                       */
/* ---------------------------------------------------------------------------------------- */

static int initialized(void) {
    pthread_mutex_lock(&sim_lock);
    int ok = sim_refcount > 0;
    pthread_mutex_unlock(&sim_lock);
    return ok;
}

static nvmlReturn_t check_device(nvmlDevice_t device) {
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (device == NULL || device < &sim.gpus[0] || device >= &sim.gpus[sim.gpu_count])
        return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

static nvmlReturn_t copy_out(char *dst, unsigned int length, const char *src) {
    if (dst == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags; /* NO_GPUS / NO_ATTACH change nothing for a simulated node */
    nvmlReturn_t ret = NVML_SUCCESS;
    pthread_mutex_lock(&sim_lock);
    if (sim_refcount == 0)
        ret = load_config();
    if (ret == NVML_SUCCESS)
        sim_refcount++;
    pthread_mutex_unlock(&sim_lock);
    return ret;
}

nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void) {
    nvmlReturn_t ret = NVML_SUCCESS;
    pthread_mutex_lock(&sim_lock);
    if (sim_refcount == 0)
        ret = NVML_ERROR_UNINITIALIZED;
    else
        sim_refcount--;
    pthread_mutex_unlock(&sim_lock);
    return ret;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    case NVML_ERROR_DEPRECATED: return "Deprecated";
    case NVML_ERROR_NOT_READY: return "Not Ready";
    case NVML_ERROR_GPU_NOT_FOUND: return "GPU not found";
    case NVML_ERROR_INVALID_STATE: return "Invalid state";
    case NVML_ERROR_UNKNOWN: return "Unknown Error";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    return copy_out(version, length, sim.driver_version);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    return copy_out(version, length, sim.nvml_version[0] ? sim.nvml_version : sim.driver_version);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion) {
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (cudaDriverVersion == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *cudaDriverVersion = sim.cuda_driver_version;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion) {
    return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount) {
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (deviceCount == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = sim.gpu_count;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount) { return nvmlDeviceGetCount_v2(deviceCount); }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (device == NULL || index >= sim.gpu_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &sim.gpus[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (uuid == NULL || device == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < sim.gpu_count; i++) {
        if (strcmp(sim.gpus[i].uuid, uuid) == 0) {
            *device = &sim.gpus[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

static void format_bus_ids(const struct nvmlDevice_st *gpu, char *legacy, size_t legacy_size, char *full,
                           size_t full_size) {
    snprintf(legacy, legacy_size, "%04X:%02X:%02X.%X", gpu->pci_domain & 0xffff, gpu->pci_bus, gpu->pci_device,
             gpu->pci_function);
    snprintf(full, full_size, "%08X:%02X:%02X.%X", gpu->pci_domain, gpu->pci_bus, gpu->pci_device,
             gpu->pci_function);
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device) {
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (pciBusId == NULL || device == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < sim.gpu_count; i++) {
        char legacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE], full[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
        format_bus_ids(&sim.gpus[i], legacy, sizeof(legacy), full, sizeof(full));
        if (strcasecmp(pciBusId, legacy) == 0 || strcasecmp(pciBusId, full) == 0) {
            *device = &sim.gpus[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device) {
    return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    nvmlReturn_t ret = check_device(device);
    if (ret != NVML_SUCCESS)
        return ret;
    if (index == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *index = device->index;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    nvmlReturn_t ret = check_device(device);
    return ret != NVML_SUCCESS ? ret : copy_out(uuid, length, device->uuid);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    nvmlReturn_t ret = check_device(device);
    return ret != NVML_SUCCESS ? ret : copy_out(name, length, device->name[0] ? device->name : "NVIDIA GPU");
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber) {
    nvmlReturn_t ret = check_device(device);
    if (ret != NVML_SUCCESS)
        return ret;
    if (minorNumber == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *minorNumber = device->minor;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    nvmlReturn_t ret = check_device(device);
    if (ret != NVML_SUCCESS)
        return ret;
    if (pci == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof(*pci));
    format_bus_ids(device, pci->busIdLegacy, sizeof(pci->busIdLegacy), pci->busId, sizeof(pci->busId));
    pci->domain = device->pci_domain;
    pci->bus = device->pci_bus;
    pci->device = device->pci_device;
    pci->pciDeviceId = device->pci_device_id;
    pci->pciSubSystemId = device->pci_subsystem_id;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    return nvmlDeviceGetPciInfo_v3(device, pci);
}

nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    return nvmlDeviceGetPciInfo_v3(device, pci);
}

/* Common checks of both fabric calls: NULL output, foreign handle, non-fabric GPU. */
static nvmlReturn_t check_fabric(nvmlDevice_t device, const void *out) {
    nvmlReturn_t ret = check_device(device);
    if (ret != NVML_SUCCESS)
        return ret;
    if (out == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    return device->fabric_supported ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *gpuFabricInfo) {
    nvmlReturn_t ret = check_fabric(device, gpuFabricInfo);
    if (ret != NVML_SUCCESS)
        return ret;
    memset(gpuFabricInfo, 0, sizeof(*gpuFabricInfo));
    memcpy(gpuFabricInfo->clusterUuid, device->cluster_uuid, NVML_GPU_FABRIC_UUID_LEN);
    gpuFabricInfo->status = (nvmlReturn_t)device->fabric_status;
    gpuFabricInfo->cliqueId = device->clique_id;
    gpuFabricInfo->state = (nvmlGpuFabricState_t)device->fabric_state;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfoV_t *gpuFabricInfo) {
    nvmlReturn_t ret = check_fabric(device, gpuFabricInfo);
    if (ret != NVML_SUCCESS)
        return ret;
    unsigned int version = gpuFabricInfo->version;
    if (version != nvmlGpuFabricInfo_v2 && version != nvmlGpuFabricInfo_v3)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    /* A v2 caller's buffer ends after healthMask: never write past it. */
    size_t size = version == nvmlGpuFabricInfo_v3 ? sizeof(nvmlGpuFabricInfo_v3_t) : sizeof(nvmlGpuFabricInfo_v2_t);
    nvmlGpuFabricInfo_v3_t info;
    memset(&info, 0, sizeof(info));
    info.version = version;
    memcpy(info.clusterUuid, device->cluster_uuid, NVML_GPU_FABRIC_UUID_LEN);
    info.status = (nvmlReturn_t)device->fabric_status;
    info.cliqueId = device->clique_id;
    info.state = (nvmlGpuFabricState_t)device->fabric_state;
    info.healthMask = device->health_mask;
    info.healthSummary = (unsigned char)device->health_summary;
    memcpy(gpuFabricInfo, &info, size);
    return NVML_SUCCESS;
}
