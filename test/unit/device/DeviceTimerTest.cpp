// The device timer of `moec tune --device N` on a HIP test double whose
// clock is synthetic (timing_double_hip.cpp): one median per (config, key),
// medians that do not depend on the pass order or the double's outliers,
// the cache flush between samples, well-formed tokens, fused tables placed
// one rank per device or skipped, and the refusals (the emulated device, a
// HIP library without the timing entry points, no HIP).
#include "moec/Harness/DeviceTimer.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <ctime>
#include <dlfcn.h>
#include <regex>
#include <string>
#include <vector>

using namespace moec;
using namespace moec::harness;

namespace {

/// The double's controls, through the handle the runtime's dlopen shares.
struct TimingDouble {
  TimingDouble() {
    handle = ::dlopen(MOEC_TIMING_DOUBLE_HIP, RTLD_NOW | RTLD_LOCAL);
    REQUIRE(handle);
    setJitter = reinterpret_cast<void (*)(int, double)>(
        ::dlsym(handle, "moecTimingDoubleSetJitter"));
    graphLaunches = reinterpret_cast<uint64_t (*)()>(
        ::dlsym(handle, "moecTimingDoubleGraphLaunches"));
    captures =
        reinterpret_cast<uint64_t (*)()>(::dlsym(handle, "moecTimingDoubleCaptures"));
    lastGraphColdUs = reinterpret_cast<double (*)()>(
        ::dlsym(handle, "moecTimingDoubleLastGraphColdUs"));
    lastGraphKernels = reinterpret_cast<int (*)()>(
        ::dlsym(handle, "moecTimingDoubleLastGraphKernels"));
    REQUIRE(setJitter);
    REQUIRE(graphLaunches);
    REQUIRE(captures);
    REQUIRE(lastGraphColdUs);
    REQUIRE(lastGraphKernels);
  }
  ~TimingDouble() {
    setJitter(5, 25.0);
    ::dlclose(handle);
  }
  void *handle;
  void (*setJitter)(int, double);
  uint64_t (*graphLaunches)();
  uint64_t (*captures)();
  double (*lastGraphColdUs)();
  int (*lastGraphKernels)();
};

/// Sets an environment variable for the scope.
class ScopedEnv {
public:
  ScopedEnv(const char *name, const char *value) : name_(name) {
    if (const char *old = std::getenv(name))
      old_ = old, hadOld_ = true;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (hadOld_)
      ::setenv(name_, old_.c_str(), 1);
    else
      ::unsetenv(name_);
  }

private:
  const char *name_;
  std::string old_;
  bool hadOld_ = false;
};

DeviceTimerOptions doubleOptions() {
  DeviceTimerOptions options;
  options.libraries = {MOEC_TIMING_DOUBLE_HIP};
  return options;
}

bool runTimer(int device, const DeviceTimerOptions &options,
              const std::string &bundle, const std::vector<TimedConfig> &configs,
              DeviceTimings &timings, std::string &error) {
  return makeDeviceTimer(device, options)(bundle, configs, timings, error);
}

std::string todayUtc() {
  std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[16];
  std::strftime(text, sizeof(text), "%Y-%m-%d", &utc);
  return text;
}

TimedConfig config(const char *network, uint32_t ep, uint32_t workspace,
                   std::vector<int64_t> keys) {
  TimedConfig c;
  c.network = network;
  c.ep = ep;
  c.workspace = workspace;
  c.keys = std::move(keys);
  return c;
}

} // namespace

TEST_CASE("the timer refuses the emulated device, a HIP library without "
          "timing, and no HIP",
          "[timer]") {
  const std::vector<TimedConfig> configs = {
      config("flash-tp4", 1, 1024, {1})};
  DeviceTimings timings;
  std::string error;
  DeviceTimerOptions options;
  options.libraries = {MOEC_EMULATED_HIP_LIBRARY};
  CHECK_FALSE(runTimer(0, options, MOEC_TP4_SMALL_BUNDLE, configs, timings, error));
  CHECK(error == "timings are not available on moec's emulated device");
  CHECK(timings.us.empty());

  options.libraries = {MOEC_FAKE_HIP_PATH};
  CHECK_FALSE(runTimer(0, options, MOEC_TP4_SMALL_BUNDLE, configs, timings, error));
  CHECK(error == std::string("timings are not available: ") + MOEC_FAKE_HIP_PATH +
                     ": missing symbol hipEventCreate, hipEventDestroy, "
                     "hipEventRecord, hipEventSynchronize, hipEventElapsedTime, "
                     "hipStreamCreate, hipStreamDestroy, hipStreamBeginCapture, "
                     "hipStreamEndCapture, hipGraphInstantiate, hipGraphLaunch, "
                     "hipGraphExecDestroy, hipGraphDestroy, hipDeviceGetName");

  options.libraries = {"/nonexistent/libamdhip64.so"};
  CHECK_FALSE(runTimer(0, options, MOEC_TP4_SMALL_BUNDLE, configs, timings, error));
  CHECK(error == "no HIP runtime (tried: /nonexistent/libamdhip64.so)");

  // $MOEC_HIP_LIBRARY is what an empty list means (the tuner's default).
  {
    ScopedEnv library("MOEC_HIP_LIBRARY", MOEC_EMULATED_HIP_LIBRARY);
    CHECK_FALSE(runTimer(0, DeviceTimerOptions(), MOEC_TP4_SMALL_BUNDLE,
                         configs, timings, error));
    CHECK(error == "timings are not available on moec's emulated device");
  }
  // A device the double does not have.
  CHECK_FALSE(runTimer(3, doubleOptions(), MOEC_TP4_SMALL_BUNDLE, configs,
                       timings, error));
  CHECK(error == "device 3 out of range (1 devices)");
}

TEST_CASE("tokens", "[timer]") {
  CHECK(deviceToken("AMD Instinct MI355X", 2) == "AMD-Instinct-MI355X-gpu2");
  CHECK(deviceToken("  a=b  (c) ", 0) == "a-b-c-gpu0");
  CHECK(deviceToken("", 1) == "hip-device-gpu1");
  CHECK(timingMethodToken(DeviceTimerOptions()) ==
        "hip-graph-median-flush512M-4pass-reversed-40samples");
  DeviceTimerOptions options;
  options.passes = 2;
  options.samplesPerPass = 3;
  options.flushBytes = 0;
  CHECK(timingMethodToken(options) ==
        "hip-graph-median-noflush-2pass-reversed-6samples");
}

TEST_CASE("one median per config and key, whatever the pass order and the "
          "outliers",
          "[timer]") {
  TimingDouble fake;
  const std::vector<TimedConfig> configs = {
      config("flash-tp4", 1, 1024, {1, 16, 64}),
      config("flash-tp4-draft", 1, 1024, {1, 64})};
  std::string error;

  // Reference: one sample each, no outliers: every kernel of the graph
  // cold after the flush. The last graph replayed is the last config's
  // last key: its time is the double's all-cold cost of that graph.
  fake.setJitter(0, 0.0);
  DeviceTimerOptions single = doubleOptions();
  single.passes = 1;
  single.samplesPerPass = 1;
  single.warmups = 1;
  DeviceTimings reference;
  const uint64_t capturesBefore = fake.captures();
  REQUIRE(runTimer(0, single, MOEC_TP4_SMALL_BUNDLE, configs, reference, error));
  CHECK(fake.captures() - capturesBefore == 5); // one per (config, key)
  REQUIRE(reference.us.size() == 2);
  REQUIRE(reference.us[0].size() == 3);
  REQUIRE(reference.us[1].size() == 2);
  CHECK(reference.skipped.empty());
  for (const auto &row : reference.us)
    for (double us : row)
      CHECK(us > 1.0);
  CHECK(fake.lastGraphKernels() >= 4); // quant, sort, W13, W2, (combine)
  CHECK(reference.us[1][1] == Approx(fake.lastGraphColdUs()).epsilon(1e-5));
  // More tokens, more workgroups.
  CHECK(reference.us[0][2] > reference.us[0][0]);

  // Four passes of ten samples with an outlier at every fifth event: the
  // medians are the reference.
  fake.setJitter(5, 25.0);
  DeviceTimings timings;
  const uint64_t launchesBefore = fake.graphLaunches();
  REQUIRE(runTimer(0, doubleOptions(), MOEC_TP4_SMALL_BUNDLE, configs, timings,
                   error));
  // Per pass and (config, key): ten samples and one upload replay.
  CHECK(fake.graphLaunches() - launchesBefore == 4 * 5 * 11);
  REQUIRE(timings.us.size() == 2);
  for (size_t c = 0; c < 2; ++c) {
    REQUIRE(timings.us[c].size() == configs[c].keys.size());
    for (size_t k = 0; k < configs[c].keys.size(); ++k)
      CHECK(timings.us[c][k] == Approx(reference.us[c][k]).epsilon(1e-5));
  }
  CHECK(timings.method == "hip-graph-median-flush512M-4pass-reversed-40samples");
  CHECK(timings.device == "moec-timing-test-double-gpu0");
  CHECK(std::regex_match(timings.date, std::regex("[0-9]{4}-[0-9]{2}-[0-9]{2}")));
  CHECK(timings.date == todayUtc());
  CHECK(timings.skipped.empty());

  // The configs in the other order: the same medians.
  DeviceTimings reversed;
  REQUIRE(runTimer(0, doubleOptions(), MOEC_TP4_SMALL_BUNDLE,
                   {configs[1], configs[0]}, reversed, error));
  for (size_t c = 0; c < 2; ++c)
    for (size_t k = 0; k < configs[c].keys.size(); ++k)
      CHECK(reversed.us[1 - c][k] == Approx(timings.us[c][k]).epsilon(1e-5));

  // Without the flush the kernels stay warm from the sample before: every
  // median is below the flushed one (the double's warm kernels cost 1/1.25).
  DeviceTimerOptions noFlush = doubleOptions();
  noFlush.flushBytes = 0;
  DeviceTimings warm;
  REQUIRE(runTimer(0, noFlush, MOEC_TP4_SMALL_BUNDLE, configs, warm, error));
  CHECK(warm.method == "hip-graph-median-noflush-4pass-reversed-40samples");
  for (size_t c = 0; c < 2; ++c)
    for (size_t k = 0; k < configs[c].keys.size(); ++k) {
      CHECK(warm.us[c][k] < timings.us[c][k]);
      CHECK(warm.us[c][k] == Approx(timings.us[c][k] / 1.25).epsilon(1e-5));
    }
}

TEST_CASE("configs the timer cannot time are skipped with a reason", "[timer]") {
  TimingDouble fake;
  std::string error;
  const std::vector<TimedConfig> configs = {
      config("flash", 2, 512, {1, 32}),
      config("flash-fused", 2, 16, {1, 16}),
      config("no-such-network", 1, 512, {1}),
      config("flash-tp4", 1, 1024, {1})};
  // One device: the unfused EP2 table's rank 0 is timed alone, the fused
  // one (16 tokens per rank at the small shape) needs two.
  DeviceTimings timings;
  REQUIRE(runTimer(0, doubleOptions(), MOEC_EP2_SMALL_BUNDLE, configs, timings,
                   error));
  REQUIRE(timings.us.size() == 4);
  CHECK(timings.us[0][0] > 1.0);
  CHECK(timings.us[0][1] > timings.us[0][0]);
  CHECK(timings.us[1] == std::vector<double>{-1.0, -1.0});
  CHECK(timings.us[2] == std::vector<double>{-1.0});
  CHECK(timings.us[3] == std::vector<double>{-1.0});
  REQUIRE(timings.skipped.size() == 3);
  CHECK(timings.skipped[0] ==
        "flash-fused ep2 ws16: fused ranks need a device each: 2 devices (0 "
        "to 1), the HIP library reports 1");
  CHECK(timings.skipped[1].rfind("no-such-network ep1 ws512: ", 0) == 0);
  CHECK(timings.skipped[2].rfind("flash-tp4 ep1 ws1024: ", 0) == 0);
  // Nothing fused was timed.
  CHECK(timings.method == "hip-graph-median-flush512M-4pass-reversed-40samples");

  // Two devices: the fused ranks on devices 0 and 1, each rank's forward
  // captured and replayed as an unfused one is.
  ScopedEnv devices("MOEC_TIMING_DOUBLE_DEVICES", "2");
  DeviceTimings fused;
  REQUIRE(runTimer(0, doubleOptions(), MOEC_EP2_SMALL_BUNDLE,
                   {configs[0], configs[1]}, fused, error));
  CHECK(fused.skipped.empty());
  CHECK(fused.us[0][0] == Approx(timings.us[0][0]).epsilon(1e-5));
  CHECK(fused.us[1][0] > 1.0);
  CHECK(fused.us[1][1] > 1.0);
  CHECK(fused.method == "hip-graph-median-flush512M-4pass-reversed-40samples");
  // From device 1 the second rank would be device 2.
  DeviceTimings second;
  REQUIRE(runTimer(1, doubleOptions(), MOEC_EP2_SMALL_BUNDLE,
                   {configs[1]}, second, error));
  CHECK(second.device == "moec-timing-test-double-gpu1");
  REQUIRE(second.skipped.size() == 1);
  CHECK(second.skipped[0] ==
        "flash-fused ep2 ws16: fused ranks need a device each: 2 devices (1 "
        "to 2), the HIP library reports 2");

  // A key above the layer's tokens is not timed; the others are.
  TimedConfig small = configs[0];
  small.maxTokens = 16;
  small.keys = {8, 32};
  DeviceTimings capped;
  REQUIRE(runTimer(0, doubleOptions(), MOEC_EP2_SMALL_BUNDLE, {small}, capped,
                   error));
  CHECK(capped.us[0][0] > 1.0);
  CHECK(capped.us[0][1] == -1.0);
  REQUIRE(capped.skipped.size() == 1);
  CHECK(capped.skipped[0] ==
        "flash ep2 ws512 m=32: m=32 outside the layer's 1..16 tokens");
}
