// Batches of varying length and the caching allocator's reserve.
//
// With one sequence length every step allocates the same blocks, and after the first step the
// caching allocator's cached blocks serve them all. When the batches vary in length (a collator
// that pads each batch to its longest sample, the default of HF Trainer and most fine-tuning
// loops), a batch longer than every batch before it needs blocks larger than any the allocator
// holds: it reserves new segments, and the old ones stay cached (no empty_cache). So
// `max_memory_reserved` (and nvidia-smi) over an epoch rise above the fixed-length reading by
// an amount that depends on the order the lengths come in. It is not what decides a fit: the
// allocator frees its cached blocks and retries before it reports an out-of-memory error.
//
// The account: one epoch's sample lengths, drawn from a gamma distribution with the dataset's
// mean and standard deviation (the statistics datasets publish; a gamma's tail matches the
// stated maximum of the one published case, a log-normal's does not: bench/RESULTS.md,
// 2026-12-07), grouped into micro-batches padded to their longest sample, each batch's blocks
// (the step's account at the batch's length, its tensors in the step's order) replayed through
// the allocator model (memory/caching_allocator.h); the extra reserve is the epoch's reserve
// less a fixed-length epoch's, read over several data orders.
#ifndef FRENZY_MEMORY_VARIABLE_LENGTHS_H_
#define FRENZY_MEMORY_VARIABLE_LENGTHS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace frenzy {

// The dataset's sample lengths in tokens (TrainingSpec::lengths); inactive when mean is 0.
struct LengthSpread {
  double mean = 0;
  double sd = 0;
  int64_t min = 1;          // shortest sample
  int64_t samples = 1000;   // samples in an epoch (before longer ones are dropped)
  bool drop_long = false;   // samples over the sequence length dropped, else cut to it
  // The dataset's own sample lengths in data order (--length-file): replayed as they are, one
  // order, instead of drawn from mean and sd.
  std::vector<int64_t> order;
  bool active() const { return mean > 0 || !order.empty(); }
};

// A length file: one sample length in tokens per line, in data order; blank lines and lines
// starting with '#' are skipped. Errors name `where` and the line. At most kMaxLengthSamples
// lengths, each between 1 and 1e8.
Result<std::vector<int64_t>> ParseLengthFile(std::string_view text, const std::string& where);

// Most samples an epoch may have.
inline constexpr int64_t kMaxLengthSamples = 200000;
// Data orders the reserve is read over, and the fewest a large replay falls back to.
inline constexpr int kLengthOrders = 15;
inline constexpr int kMinLengthOrders = 3;
// Allocator events all orders together may replay (about ten seconds), and one order (its
// allocator model grows with them: about half a GiB): a larger epoch is read over fewer orders,
// then over its first batches only (a lower bound, and reported as such).
inline constexpr int64_t kLengthReplayBudget = 150'000'000;
inline constexpr int64_t kLengthOrderEvents = 10'000'000;

// One epoch's sample lengths in data order, drawn with `seed` (a gamma of the spread's mean and
// standard deviation, at least `min`; above `max_len` dropped or cut). Deterministic for a seed
// on every platform (mt19937_64 and a hand-written gamma sampler). With `order` given, those
// lengths (above `max_len` dropped or cut), whatever the seed.
std::vector<int64_t> DrawLengths(const LengthSpread& spread, int64_t max_len, uint64_t seed);

// Each micro-batch of `batch` consecutive samples padded to its longest.
std::vector<int64_t> BatchLengths(const std::vector<int64_t>& lengths, int64_t batch);

// A step's allocations and frees in order: `bytes` > 0 allocates a block, `free_of` >= 0 frees
// the block the event of that index allocated.
struct StepEvent {
  int64_t bytes = 0;
  int64_t free_of = -1;
};
// The step's events for a batch of `length` tokens a sequence.
using StepAt = std::function<std::vector<StepEvent>(int64_t length)>;

class CachingAllocatorModel;
// Replays one step's events through `a`, `handles` the caller's scratch (reused across steps);
// the most it held allocated meanwhile raises *peak.
void ReplayStep(const std::vector<StepEvent>& events, CachingAllocatorModel& a,
                std::vector<int64_t>& handles, int64_t* peak = nullptr);

// Reserved bytes after replaying the step once per batch length, through one allocator (each
// length's events built once).
int64_t ReplayEpoch(const StepAt& step, const std::vector<int64_t>& batches);

// The epoch's reserve above a fixed-length epoch's, over kLengthOrders data orders (fewer, and
// the epoch's first batches only, where the replay would exceed kLengthReplayBudget events).
struct VariableLengthReserve {
  int64_t median = 0, low = 0, high = 0;
  int orders = 0;
  int64_t batches = 0;   // micro-batches an epoch (the first order's)
  int64_t replayed = 0;  // of them, the first ones replayed (all, within the budget)
};
VariableLengthReserve ReserveOverOrders(const StepAt& step, const LengthSpread& spread,
                                        int64_t max_len, int64_t micro_batch,
                                        int64_t budget = kLengthReplayBudget);

}  // namespace frenzy

#endif  // FRENZY_MEMORY_VARIABLE_LENGTHS_H_
