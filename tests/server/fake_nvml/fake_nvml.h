// The fake libnvidia-ml the agent's tests dlopen in place of NVIDIA's (fake_nvml.cc), built as
// three shared libraries from one source:
//   fake_nvml                    — every entry point the agent looks up;
//   fake_nvml_no_memory_info     — lacks nvmlDeviceGetMemoryInfo (a required one);
//   fake_nvml_minimal            — only the required ones: no nvmlDeviceGetUUID,
//                                  nvmlDeviceGetUtilizationRates or nvmlErrorString.
// tests/CMakeLists.txt passes their paths to the tests as FRENZY_FAKE_NVML,
// FRENZY_FAKE_NVML_NO_MEMORY_INFO and FRENZY_FAKE_NVML_MINIMAL.
//
// What it reports, by index (bytes; utilization in percent):
//   0: "NVIDIA A100-SXM4-80GB", GPU-fa4e0000-0000-4000-8000-000000000000,
//      total 85899345920 (80 GiB), used 3221237817 (3 GiB + 12345), free = total - used,
//      utilization gpu 37, memory 11;
//   1: "NVIDIA A100-SXM4-80GB", GPU-fa4e0000-0000-4000-8000-000000000001,
//      total 85899345920, used 7516192768 (7 GiB), free = total - used, gpu 64, memory 5.
//
// The environment, read at each call:
//   FAKE_NVML_GPUS=N      — report the first N of those (0..2; default 2);
//   FAKE_NVML_FAIL=ENTRY  — that entry point fails: nvmlInit_v2 with NVML_ERROR_DRIVER_NOT_LOADED
//                           (9, "Driver Not Loaded"), nvmlDeviceGetUUID and
//                           nvmlDeviceGetUtilizationRates with NVML_ERROR_NOT_SUPPORTED (3), the
//                           others with NVML_ERROR_UNKNOWN (999, "Unknown Error");
//                           "ENTRY@I" fails it for device I only.
//
// Like the real library, init is reference-counted, nvmlShutdown without a live init returns
// NVML_ERROR_UNINITIALIZED, and device calls without a live init fail with it.
//
// The counters below (C linkage, for dlsym; process-wide, per library) let a test check that
// every successful init was shut down once and nothing was called outside init/shutdown. A test
// keeps its own dlopen handle so the library, and its counters, stay loaded while the agent
// opens and closes it.
#ifndef FRENZY_TESTS_SERVER_FAKE_NVML_FAKE_NVML_H_
#define FRENZY_TESTS_SERVER_FAKE_NVML_FAKE_NVML_H_

#define FAKE_NVML_MAX_GPUS 2

extern "C" {
int fake_nvml_init_calls();           // nvmlInit_v2 calls, failed ones included
int fake_nvml_shutdown_calls();       // nvmlShutdown calls
int fake_nvml_live_inits();           // successful inits not yet shut down
int fake_nvml_uninitialized_calls();  // device calls made without a live init
void fake_nvml_reset();               // all four back to 0
}

#endif  // FRENZY_TESTS_SERVER_FAKE_NVML_FAKE_NVML_H_
