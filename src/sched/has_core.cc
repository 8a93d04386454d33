#include "sched/has_core.h"

#include <algorithm>
#include <queue>

namespace frenzy {
namespace {

constexpr double kMinTimeS = 1;  // a job about to finish still counts as a finite T

struct Step {
  double key = 0;
  size_t job = 0;
  int option = -1;
  int64_t version = 0;
  bool operator<(const Step& o) const {  // max-heap: higher key first, then lower job index
    if (key != o.key) return key < o.key;
    return job > o.job;
  }
};

class Greedy {
 public:
  Greedy(std::span<const CoreJob> jobs, std::vector<int64_t> capacity, const CoreKnobs& k)
      : jobs_(jobs),
        cap_(std::move(capacity)),
        k_(k),
        choice_(jobs.size(), -1),
        version_(jobs.size(), 0),
        smallest_(jobs.size() * cap_.size(), 0) {}

  std::vector<int> Run() {
    Seed();
    while (!heap_.empty()) {
      const Step s = heap_.top();
      heap_.pop();
      if (s.version != version_[s.job]) continue;  // superseded by a later proposal
      const RunOption& o = Opt(jobs_[s.job], s.option);
      if (Need(s.job, s.option) <= cap_[static_cast<size_t>(o.type)]) Grant(s.job, s.option);
      // Granted: its next step. Not: what it wanted went to others; its best step against what
      // is left.
      Propose(s.job);
    }
    if (k_.swap_types) SwapTypes();
    return choice_;
  }

 private:
  static const RunOption& Opt(const CoreJob& j, int i) {
    return j.options->options[static_cast<size_t>(i)];
  }

  // Predicted remaining time of job `i` on option `o`.
  double T(size_t i, int o) const {
    const CoreJob& j = jobs_[i];
    double t = j.remaining_tokens / j.speed[static_cast<size_t>(o)];
    t += o == j.current ? j.current_extra_s : j.restart_s;
    return std::max(t, kMinTimeS);
  }

  // GPUs of its type that option `o` takes from the pool, given what job `i` holds.
  int64_t Need(size_t i, int o) const {
    const CoreJob& j = jobs_[i];
    const int c = choice_[i];
    if (c >= 0 && Opt(j, c).type == Opt(j, o).type) return Opt(j, o).gpus - Opt(j, c).gpus;
    return Opt(j, o).gpus;
  }

  void Seed() {
    const size_t types = cap_.size();
    for (size_t i = 0; i < jobs_.size(); ++i) {
      const CoreJob& j = jobs_[i];
      if (j.pinned) {
        choice_[i] = j.current;
        continue;
      }
      // Options are sorted by (type, GPUs): the first usable one of a type is its smallest.
      for (size_t o = j.speed.size(); o-- > 0;) {
        const RunOption& r = j.options->options[o];
        if (j.speed[o] > 0) smallest_[i * types + static_cast<size_t>(r.type)] = r.gpus;
      }
      // Without preemption a running job keeps at least what it holds.
      if (j.current >= 0 && !k_.preempt) Grant(i, j.current);
      Propose(i);
    }
  }

  // Whether job i may step to option o from what it holds now.
  bool Allowed(size_t i, int o) const {
    const CoreJob& j = jobs_[i];
    if (j.speed[static_cast<size_t>(o)] <= 0) return false;
    const RunOption& r = Opt(j, o);
    const int c = choice_[i];
    if (c >= 0 && Opt(j, c).type == r.type && r.gpus <= Opt(j, c).gpus) return false;  // only adds
    if (o == j.current) return true;
    if (j.current >= 0 && !k_.move) return false;
    return k_.elastic || r.gpus <= smallest_[i * cap_.size() + static_cast<size_t>(r.type)];
  }

  // Pushes job i's best next step (if any) against the capacity left now.
  void Propose(size_t i) {
    ++version_[i];
    const CoreJob& j = jobs_[i];
    const int c = choice_[i];
    const double have = c >= 0 ? 1.0 / T(i, c) : 0.0;
    Step best{-1, i, -1, version_[i]};
    for (size_t o = 0; o < j.speed.size(); ++o) {
      const int oi = static_cast<int>(o);
      if (oi == c || !Allowed(i, oi)) continue;
      const int64_t need = Need(i, oi);
      if (need > cap_[static_cast<size_t>(Opt(j, oi).type)]) continue;
      const double gain = 1.0 / T(i, oi) - have;
      if (gain <= 0) continue;
      const double key = gain / static_cast<double>(std::max<int64_t>(need, 1));
      if (key > best.key) {
        best.key = key;
        best.option = oi;
      }
    }
    if (best.option < 0) return;
    // First come, first served: every start outranks every growth (whose keys are gains in 1/s
    // per GPU, below 1), in arrival order; the job's option still by its own gain per GPU.
    if (!k_.shortest_first && c < 0) best.key = 1e12 - static_cast<double>(j.order);
    heap_.push(best);
  }

  // The option of job i on `type` with exactly `gpus` GPUs that it may run, or -1.
  int Same(size_t i, int type, int64_t gpus) const {
    const CoreJob& j = jobs_[i];
    const RunOption* r = j.options->Find(type, gpus);
    if (r == nullptr) return -1;
    const int o = static_cast<int>(r - j.options->options.data());
    return j.speed[static_cast<size_t>(o)] > 0 && (j.current < 0 || k_.move || o == j.current)
               ? o
               : -1;
  }

  // Comparative advantage: the greedy serves the best gain per GPU first, so of two jobs that
  // gain alike from a fast type, the one that would lose little on a slower type may take it
  // before the one that would lose much. One pass repairs that: every job that holds GPUs of one
  // type but would run faster on the same count of another type trades places with the job there
  // whose trade raises the objective most (the two 1 / T sums; restarts priced as everywhere).
  // O(D P) for D such jobs and P jobs holding GPUs.
  void SwapTypes() {
    std::vector<size_t> holders;
    for (size_t i = 0; i < jobs_.size(); ++i) {
      if (choice_[i] >= 0 && !jobs_[i].pinned) holders.push_back(i);
    }
    for (size_t a : holders) {
      const RunOption& ra = Opt(jobs_[a], choice_[a]);
      const double ta_now = 1.0 / T(a, choice_[a]);
      for (int type = 0; type < static_cast<int>(cap_.size()); ++type) {
        const int oa = type == ra.type ? -1 : Same(a, type, ra.gpus);
        if (oa < 0 || 1.0 / T(a, oa) <= ta_now) continue;
        size_t partner = a;
        int partner_option = -1;
        double best = 0;
        for (size_t b : holders) {
          const RunOption& rb = Opt(jobs_[b], choice_[b]);
          if (b == a || rb.type != type || rb.gpus != ra.gpus) continue;
          const int ob = Same(b, ra.type, ra.gpus);
          if (ob < 0) continue;
          const double delta =
              1.0 / T(a, oa) + 1.0 / T(b, ob) - ta_now - 1.0 / T(b, choice_[b]);
          if (delta > best) {
            best = delta;
            partner = b;
            partner_option = ob;
          }
        }
        if (partner_option < 0) continue;
        choice_[partner] = partner_option;  // same GPU counts: the capacity is unchanged
        choice_[a] = oa;
        break;
      }
    }
  }

  void Grant(size_t i, int o) {
    const CoreJob& j = jobs_[i];
    const int c = choice_[i];
    if (c >= 0) cap_[static_cast<size_t>(Opt(j, c).type)] += Opt(j, c).gpus;
    cap_[static_cast<size_t>(Opt(j, o).type)] -= Opt(j, o).gpus;
    choice_[i] = o;
  }

  std::span<const CoreJob> jobs_;
  std::vector<int64_t> cap_;
  const CoreKnobs& k_;
  std::vector<int> choice_;
  std::vector<int64_t> version_;
  std::vector<int64_t> smallest_;  // per (job, type): GPUs of its smallest usable option
  std::priority_queue<Step> heap_;
};

}  // namespace

std::vector<int> AllocateGpus(std::span<const CoreJob> jobs, std::vector<int64_t> capacity,
                              const CoreKnobs& knobs) {
  return Greedy(jobs, std::move(capacity), knobs).Run();
}

}  // namespace frenzy
