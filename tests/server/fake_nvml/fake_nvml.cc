// A fake libnvidia-ml for the agent's tests: the NVML entry points the agent dlsym's, with the
// C ABI of NVIDIA's nvml.h, answering from a fixed table of GPUs. See fake_nvml.h for what it
// reports, how the environment configures it and the counters a test reads.
//
// It behaves like the real library where the agent could get it wrong: init is counted and
// shutdown without init fails; device calls before init or after the last shutdown fail
// (NVML_ERROR_UNINITIALIZED) and are counted; handles are checked; a name buffer that is too
// small is refused; total, free and used are all different, so a field read in the wrong order
// shows.
#include "fake_nvml.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace {

// nvmlReturn_t values (nvml.h).
constexpr int kSuccess = 0;
constexpr int kUninitialized = 1;
constexpr int kInvalidArgument = 2;
[[maybe_unused]] constexpr int kNotSupported = 3;  // unused without the optional entry points
constexpr int kInsufficientSize = 7;
constexpr int kDriverNotLoaded = 9;
constexpr int kUnknown = 999;

struct Memory {  // nvmlMemory_t (version 1)
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct Utilization {  // nvmlUtilization_t
  unsigned int gpu;
  unsigned int memory;
};

struct Device {
  const char* name;
  const char* uuid;
  unsigned long long total;
  unsigned long long used;
  unsigned int gpu_pct;
  unsigned int memory_pct;
};

// The values fake_nvml.h documents; the tests write them out again rather than read them here.
constexpr Device kDevices[FAKE_NVML_MAX_GPUS] = {
    {"NVIDIA A100-SXM4-80GB", "GPU-fa4e0000-0000-4000-8000-000000000000", 85899345920ULL,
     3221237817ULL, 37, 11},
    {"NVIDIA A100-SXM4-80GB", "GPU-fa4e0000-0000-4000-8000-000000000001", 85899345920ULL,
     7516192768ULL, 64, 5},
};

std::atomic<int> g_init_calls{0};
std::atomic<int> g_shutdown_calls{0};
std::atomic<int> g_live{0};
std::atomic<int> g_uninitialized_calls{0};

int GpuCount() {
  const char* v = std::getenv("FAKE_NVML_GPUS");
  if (v == nullptr || *v == '\0') return FAKE_NVML_MAX_GPUS;
  int n = std::atoi(v);
  if (n < 0) return 0;
  return n > FAKE_NVML_MAX_GPUS ? FAKE_NVML_MAX_GPUS : n;
}

// Whether FAKE_NVML_FAIL ("entry" or "entry@index") names this call.
bool Fails(const char* entry, int index = -1) {
  const char* v = std::getenv("FAKE_NVML_FAIL");
  if (v == nullptr) return false;
  const size_t n = std::strlen(entry);
  if (std::strncmp(v, entry, n) != 0) return false;
  if (v[n] == '\0') return true;
  return v[n] == '@' && index >= 0 && std::atoi(v + n + 1) == index;
}

bool Initialized() {
  if (g_live.load() > 0) return true;
  g_uninitialized_calls.fetch_add(1);
  return false;
}

// The table index of a handle this library gave out, or -1.
int DeviceIndex(void* device) {
  for (int i = 0; i < GpuCount(); ++i) {
    if (device == static_cast<const void*>(&kDevices[i])) return i;
  }
  return -1;
}

int CopyString(const char* text, char* buffer, unsigned int length) {
  if (buffer == nullptr) return kInvalidArgument;
  if (std::strlen(text) + 1 > length) return kInsufficientSize;
  std::memcpy(buffer, text, std::strlen(text) + 1);
  return kSuccess;
}

}  // namespace

extern "C" {

// ---- NVML ----------------------------------------------------------------------------------

int nvmlInit_v2() {
  g_init_calls.fetch_add(1);
  if (Fails("nvmlInit_v2")) return kDriverNotLoaded;
  g_live.fetch_add(1);
  return kSuccess;
}

int nvmlShutdown() {
  g_shutdown_calls.fetch_add(1);
  int live = g_live.load();
  while (live > 0 && !g_live.compare_exchange_weak(live, live - 1)) {
  }
  return live > 0 ? kSuccess : kUninitialized;
}

int nvmlDeviceGetCount_v2(unsigned int* count) {
  if (!Initialized()) return kUninitialized;
  if (Fails("nvmlDeviceGetCount_v2")) return kUnknown;
  if (count == nullptr) return kInvalidArgument;
  *count = static_cast<unsigned int>(GpuCount());
  return kSuccess;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  if (!Initialized()) return kUninitialized;
  if (Fails("nvmlDeviceGetHandleByIndex_v2", static_cast<int>(index))) return kUnknown;
  if (device == nullptr || index >= static_cast<unsigned int>(GpuCount())) {
    return kInvalidArgument;
  }
  *device = const_cast<Device*>(&kDevices[index]);
  return kSuccess;
}

int nvmlDeviceGetName(void* device, char* name, unsigned int length) {
  if (!Initialized()) return kUninitialized;
  const int i = DeviceIndex(device);
  if (i < 0) return kInvalidArgument;
  if (Fails("nvmlDeviceGetName", i)) return kUnknown;
  return CopyString(kDevices[i].name, name, length);
}

#ifndef FAKE_NVML_WITHOUT_MEMORY_INFO
int nvmlDeviceGetMemoryInfo(void* device, Memory* memory) {
  if (!Initialized()) return kUninitialized;
  const int i = DeviceIndex(device);
  if (i < 0 || memory == nullptr) return kInvalidArgument;
  if (Fails("nvmlDeviceGetMemoryInfo", i)) return kUnknown;
  memory->total = kDevices[i].total;
  memory->used = kDevices[i].used;
  memory->free = kDevices[i].total - kDevices[i].used;
  return kSuccess;
}
#endif

#ifndef FAKE_NVML_WITHOUT_OPTIONAL
int nvmlDeviceGetUUID(void* device, char* uuid, unsigned int length) {
  if (!Initialized()) return kUninitialized;
  const int i = DeviceIndex(device);
  if (i < 0) return kInvalidArgument;
  if (Fails("nvmlDeviceGetUUID", i)) return kNotSupported;
  return CopyString(kDevices[i].uuid, uuid, length);
}

int nvmlDeviceGetUtilizationRates(void* device, Utilization* utilization) {
  if (!Initialized()) return kUninitialized;
  const int i = DeviceIndex(device);
  if (i < 0 || utilization == nullptr) return kInvalidArgument;
  if (Fails("nvmlDeviceGetUtilizationRates", i)) return kNotSupported;
  utilization->gpu = kDevices[i].gpu_pct;
  utilization->memory = kDevices[i].memory_pct;
  return kSuccess;
}

// The real library's texts for the codes used here.
const char* nvmlErrorString(int code) {
  switch (code) {
    case kSuccess:
      return "Success";
    case kUninitialized:
      return "Uninitialized";
    case kInvalidArgument:
      return "Invalid Argument";
    case kNotSupported:
      return "Not Supported";
    case kInsufficientSize:
      return "Insufficient Size";
    case kDriverNotLoaded:
      return "Driver Not Loaded";
    default:
      return "Unknown Error";
  }
}
#endif

// ---- the test's view -----------------------------------------------------------------------

int fake_nvml_init_calls() { return g_init_calls.load(); }
int fake_nvml_shutdown_calls() { return g_shutdown_calls.load(); }
int fake_nvml_live_inits() { return g_live.load(); }
int fake_nvml_uninitialized_calls() { return g_uninitialized_calls.load(); }
void fake_nvml_reset() {
  g_init_calls = 0;
  g_shutdown_calls = 0;
  g_live = 0;
  g_uninitialized_calls = 0;
}

}  // extern "C"
