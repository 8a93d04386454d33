// fifo-static: the traditional way. Each job runs on the GPU type and count its user asked for,
// with the layout the user tuned by hand (the kHand option table: the fastest layout whose
// predicted memory just fits, or plain data parallelism where nothing does), strictly first come
// first served: the head of the queue waits for its GPUs and blocks everyone behind it (no
// backfilling), as in a plain FIFO batch queue.
//
// No memory awareness: a request whose real peak exceeds the GPU crashes out of memory. After a
// crash the user edits the request by hand the way people do: the same GPU type with twice the
// GPUs (the next larger count in the table that has not crashed yet).
#include <algorithm>

#include "sched/baselines.h"
#include "sched/placement.h"

namespace frenzy {
namespace {

// The option a user would run: the request, or after crashes the next larger count of the same
// type. Without a request: the smallest count of the largest-memory type whose predicted memory
// fits. -1 if none is left.
int UserChoice(const JobView& j, const ClusterView& c) {
  const auto& opts = j.options->options;
  if (j.requested_option >= 0) {
    const RunOption& req = opts[static_cast<size_t>(j.requested_option)];
    for (size_t i = 0; i < opts.size(); ++i) {
      const RunOption& o = opts[i];
      if (o.type == req.type && o.gpus >= req.gpus && !j.Failed(static_cast<int>(i))) {
        return static_cast<int>(i);
      }
    }
    return -1;
  }
  int biggest = 0;
  for (size_t t = 0; t < c.gpu_memory_bytes.size(); ++t) {
    if (c.gpu_memory_bytes[t] > c.gpu_memory_bytes[static_cast<size_t>(biggest)]) {
      biggest = static_cast<int>(t);
    }
  }
  for (size_t i = 0; i < opts.size(); ++i) {
    if (opts[i].type == biggest && opts[i].fits_prediction && !j.Failed(static_cast<int>(i))) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

class FifoStatic final : public Policy {
 public:
  std::string_view name() const override { return "fifo-static"; }
  OptionKind options_kind() const override { return OptionKind::kHand; }

  Decisions Schedule(const Snapshot& s) override {
    Decisions d;
    FreeMap free(*s.cluster);
    for (const JobView& j : s.jobs) {
      if (j.running) continue;
      int choice = UserChoice(j, *s.cluster);
      if (choice < 0) continue;  // nothing left to try; the engine gives the job up
      const RunOption& o = j.option(choice);
      auto placement = free.Place(o.type, o.gpus, o.plan.tp);
      if (!placement) break;  // head-of-line blocking
      d.start.push_back({j.key, Allocation{choice, std::move(*placement)}});
    }
    return d;
  }
};

}  // namespace

std::unique_ptr<Policy> MakeFifoStaticPolicy() { return std::make_unique<FifoStatic>(); }

}  // namespace frenzy
