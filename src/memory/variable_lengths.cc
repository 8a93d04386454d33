#include "memory/variable_lengths.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <random>

#include "common/strings.h"
#include "memory/caching_allocator.h"

namespace frenzy {
namespace {

// A uniform in (0, 1] from the generator's top 53 bits.
double Uniform(std::mt19937_64& rng) {
  return (static_cast<double>(rng() >> 11) + 1.0) * 0x1.0p-53;
}

// Standard normal (Box-Muller; the second value is not kept, for simplicity).
double Normal(std::mt19937_64& rng) {
  const double u1 = Uniform(rng), u2 = Uniform(rng);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

// Gamma(shape, 1) by Marsaglia and Tsang's method (ACM TOMS 26(3), 2000); a shape under 1 by
// boosting: Gamma(shape + 1) x U^(1 / shape).
double Gamma(double shape, std::mt19937_64& rng) {
  if (shape < 1.0) return Gamma(shape + 1.0, rng) * std::pow(Uniform(rng), 1.0 / shape);
  const double d = shape - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    const double x = Normal(rng);
    const double v = std::pow(1.0 + c * x, 3);
    if (v <= 0) continue;
    if (std::log(Uniform(rng)) < 0.5 * x * x + d - d * v + d * std::log(v)) return d * v;
  }
}

// Each batch length's step events, built once for every epoch of a reading.
class StepCache {
 public:
  explicit StepCache(const StepAt& step) : step_(step) {}
  const std::vector<StepEvent>& At(int64_t length) {
    auto it = at_.find(length);
    if (it == at_.end()) it = at_.emplace(length, step_(length)).first;
    return it->second;
  }

 private:
  const StepAt& step_;
  std::map<int64_t, std::vector<StepEvent>> at_;
};

int64_t Replay(StepCache& steps, const std::vector<int64_t>& batches) {
  CachingAllocatorModel a;
  std::vector<int64_t> handles;
  for (int64_t length : batches) ReplayStep(steps.At(length), a, handles);
  return a.reserved();
}

}  // namespace

void ReplayStep(const std::vector<StepEvent>& events, CachingAllocatorModel& a,
                std::vector<int64_t>& handles, int64_t* peak) {
  handles.assign(events.size(), -1);
  for (size_t i = 0; i < events.size(); ++i) {
    const StepEvent& e = events[i];
    if (e.free_of >= 0 && static_cast<size_t>(e.free_of) < i) {
      a.Free(handles[static_cast<size_t>(e.free_of)]);
    } else if (e.bytes > 0) {
      handles[i] = a.Malloc(e.bytes);
      if (peak != nullptr) *peak = std::max(*peak, a.allocated());
    }
  }
}

Result<std::vector<int64_t>> ParseLengthFile(std::string_view text, const std::string& where) {
  std::vector<int64_t> out;
  int64_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = std::min(text.find('\n', pos), text.size());
    const std::string_view line = Trim(text.substr(pos, end - pos));
    pos = end + 1;
    ++line_no;
    if (line.empty() || line.front() == '#') continue;
    int64_t value = 0;
    const auto [ptr, ec] = std::from_chars(line.data(), line.data() + line.size(), value);
    const std::string at = where + ":" + std::to_string(line_no);
    if (ec != std::errc() || ptr != line.data() + line.size()) {
      return InvalidArgument("expected a sample length in tokens, found '" +
                                 std::string(line.substr(0, 40)) + "'", at);
    }
    if (value < 1 || value > 100'000'000) {
      return InvalidArgument("a sample length must be between 1 and 100000000 tokens", at);
    }
    if (static_cast<int64_t>(out.size()) >= kMaxLengthSamples) {
      return InvalidArgument("more than " + std::to_string(kMaxLengthSamples) + " lengths", at);
    }
    out.push_back(value);
  }
  if (out.empty()) return InvalidArgument("no sample length in the file", where);
  return out;
}

std::vector<int64_t> DrawLengths(const LengthSpread& spread, int64_t max_len, uint64_t seed) {
  std::vector<int64_t> out;
  auto keep = [&](int64_t length) {  // longer than max_len: dropped or cut
    if (length <= max_len) {
      out.push_back(length);
    } else if (!spread.drop_long) {
      out.push_back(max_len);
    }
  };
  if (!spread.order.empty()) {
    for (int64_t length : spread.order) keep(length);
    return out;
  }
  if (!spread.active() || spread.sd <= 0 || max_len <= 0) return out;
  std::mt19937_64 rng(seed);
  const double shape = (spread.mean / spread.sd) * (spread.mean / spread.sd);
  const double scale = spread.sd * spread.sd / spread.mean;
  out.reserve(static_cast<size_t>(spread.samples));
  for (int64_t i = 0; i < spread.samples; ++i) {
    const double drawn = std::min(Gamma(shape, rng) * scale, 1e12);
    keep(std::max(spread.min, static_cast<int64_t>(drawn)));
  }
  return out;
}

std::vector<int64_t> BatchLengths(const std::vector<int64_t>& lengths, int64_t batch) {
  std::vector<int64_t> out;
  batch = std::max<int64_t>(1, batch);
  for (size_t i = 0; i < lengths.size(); i += static_cast<size_t>(batch)) {
    const auto end = lengths.begin() + static_cast<std::ptrdiff_t>(
                                           std::min(lengths.size(), i + static_cast<size_t>(batch)));
    out.push_back(*std::max_element(lengths.begin() + static_cast<std::ptrdiff_t>(i), end));
  }
  return out;
}

int64_t ReplayEpoch(const StepAt& step, const std::vector<int64_t>& batches) {
  StepCache steps(step);
  return Replay(steps, batches);
}

VariableLengthReserve ReserveOverOrders(const StepAt& step, const LengthSpread& spread,
                                        int64_t max_len, int64_t micro_batch, int64_t budget) {
  VariableLengthReserve r;
  if (!spread.active()) return r;
  StepCache steps(step);
  const int64_t fixed = Replay(steps, {max_len, max_len});
  // Cost: the longest batch's events (every batch has as many) times the batches and orders.
  const int64_t events = std::max<int64_t>(1, static_cast<int64_t>(steps.At(max_len).size()));
  const int64_t samples =
      spread.order.empty() ? spread.samples : static_cast<int64_t>(spread.order.size());
  const int64_t most_batches =
      std::max<int64_t>(1, (samples + micro_batch - 1) / std::max<int64_t>(1, micro_batch));
  // A dataset's own order is one order; drawn lengths are read over several.
  r.orders = spread.order.empty() ? static_cast<int>(std::clamp<int64_t>(
                                        budget / (events * most_batches), kMinLengthOrders,
                                        kLengthOrders))
                                  : 1;
  const int64_t prefix = std::max<int64_t>(
      1, std::min(budget / (events * r.orders), kLengthOrderEvents / events));
  std::vector<int64_t> extra;
  for (int order = 1; order <= r.orders; ++order) {
    std::vector<int64_t> batches =
        BatchLengths(DrawLengths(spread, max_len, static_cast<uint64_t>(order)), micro_batch);
    if (batches.empty()) return VariableLengthReserve{};
    if (order == 1) r.batches = static_cast<int64_t>(batches.size());
    if (static_cast<int64_t>(batches.size()) > prefix) batches.resize(static_cast<size_t>(prefix));
    if (order == 1) r.replayed = static_cast<int64_t>(batches.size());
    extra.push_back(std::max<int64_t>(0, Replay(steps, batches) - fixed));
  }
  std::sort(extra.begin(), extra.end());
  r.low = extra.front();
  r.high = extra.back();
  r.median = extra[extra.size() / 2];
  return r;
}

}  // namespace frenzy
