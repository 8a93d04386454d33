#include "sched/has_core.h"

#include <algorithm>

namespace frenzy {
namespace {

constexpr double kMinTimeS = 1;  // a job about to finish still counts as a finite T

const RunOption& Opt(const CoreJob& j, int i) { return j.options->options[static_cast<size_t>(i)]; }

}  // namespace

bool AllocationCore::Step::operator<(const Step& o) const {
  if (key != o.key) return key < o.key;
  return job > o.job;
}

const std::vector<int>& AllocationCore::Allocate(std::span<const CoreJob> jobs,
                                                 std::span<const int64_t> capacity,
                                                 const CoreKnobs& knobs) {
  jobs_ = jobs;
  k_ = &knobs;
  cap_.assign(capacity.begin(), capacity.end());
  choice_.assign(jobs.size(), -1);
  version_.assign(jobs.size(), 0);
  smallest_.assign(jobs.size() * cap_.size(), 0);
  heap_.clear();
  first_step_.clear();
  // Flat per-(job, option) tables: T never changes during a decision, so 1 / T is computed
  // once; GPUs and type sit beside it for the proposals' scans.
  first_.assign(jobs.size() + 1, 0);
  for (size_t i = 0; i < jobs.size(); ++i) first_[i + 1] = first_[i] + jobs[i].speed.size();
  inv_t_.resize(first_.back());
  gpus_.resize(first_.back());
  type_.resize(first_.back());
  for (size_t i = 0; i < jobs.size(); ++i) {
    const CoreJob& j = jobs[i];
    for (size_t o = 0; o < j.speed.size(); ++o) {
      const RunOption& r = j.options->options[o];
      inv_t_[first_[i] + o] = j.speed[o] > 0 ? 1.0 / T(i, static_cast<int>(o)) : 0.0;
      gpus_[first_[i] + o] = r.gpus;
      type_[first_[i] + o] = r.type;
    }
  }
  Seed();
  auto any_left = [&] {
    return std::any_of(cap_.begin(), cap_.end(), [](int64_t c) { return c > 0; });
  };
  while (!heap_.empty() && any_left()) {
    std::pop_heap(heap_.begin(), heap_.end());
    const Step s = heap_.back();
    heap_.pop_back();
    if (s.version != version_[s.job]) continue;  // superseded by a later proposal
    const size_t row = first_[s.job] + static_cast<size_t>(s.option);
    if (Need(s.job, s.option) <= cap_[static_cast<size_t>(type_[row])]) Grant(s.job, s.option);
    // Granted: its next step. Not: what it wanted went to others; its best step against what
    // is left.
    Propose(s.job);
  }
  if (k_->swap_types) SwapTypes();
  return choice_;
}

// Predicted remaining time of job `i` on option `o`.
double AllocationCore::T(size_t i, int o) const {
  const CoreJob& j = jobs_[i];
  double t = j.remaining_tokens / j.speed[static_cast<size_t>(o)];
  t += o == j.current ? j.current_extra_s : j.restart_s;
  return std::max(t, kMinTimeS);
}

// GPUs of its type that option `o` takes from the pool, given what job `i` holds.
int64_t AllocationCore::Need(size_t i, int o) const {
  const CoreJob& j = jobs_[i];
  const int c = choice_[i];
  if (c >= 0 && Opt(j, c).type == Opt(j, o).type) return Opt(j, o).gpus - Opt(j, c).gpus;
  return Opt(j, o).gpus;
}

void AllocationCore::Seed() {
  const size_t types = cap_.size();
  for (size_t i = 0; i < jobs_.size(); ++i) {
    const CoreJob& j = jobs_[i];
    if (j.pinned) {
      choice_[i] = j.current;
      continue;
    }
    // Options are sorted by (type, GPUs): the first usable one of a type is its smallest.
    for (size_t o = j.speed.size(); !k_->elastic && o-- > 0;) {
      const RunOption& r = j.options->options[o];
      if (j.speed[o] > 0) smallest_[i * types + static_cast<size_t>(r.type)] = r.gpus;
    }
    // Without preemption a running job keeps at least what it holds.
    if (j.current >= 0 && !k_->preempt) Grant(i, j.current);
    // A first start (no restart to price) on the untouched capacity: the best option is the
    // one with the most tokens/s per GPU, whatever the job's remaining tokens, so jobs of one
    // speed class share it (the proposals' scan is most of a decision with many waiting jobs).
    const bool shared = k_->preempt && j.current < 0 && j.restart_s == 0 && j.speed_class >= 0;
    if (shared) {
      auto it = first_step_.find(j.speed_class);
      if (it != first_step_.end()) {
        ++version_[i];
        const size_t row = first_[i] + static_cast<size_t>(it->second);
        Step st{inv_t_[row] / static_cast<double>(gpus_[row]), i, it->second, version_[i]};
        if (!k_->shortest_first) st.key = 1e12 - static_cast<double>(j.order);
        heap_.push_back(st);
        std::push_heap(heap_.begin(), heap_.end());
        continue;
      }
    }
    Propose(i);
    if (shared && !heap_.empty() && heap_.front().job == i) {
      first_step_.emplace(j.speed_class, heap_.front().option);
    } else if (shared) {
      for (const Step& st : heap_) {
        if (st.job == i) first_step_.emplace(j.speed_class, st.option);
      }
    }
  }
}

// Whether job i may step to option o from what it holds now. (Propose has checked that it adds
// GPUs and gains.)
bool AllocationCore::Allowed(size_t i, int o) const {
  const CoreJob& j = jobs_[i];
  const RunOption& r = Opt(j, o);
  if (o == j.current) return true;
  if (j.current >= 0 && !k_->move) return false;
  return k_->elastic || r.gpus <= smallest_[i * cap_.size() + static_cast<size_t>(r.type)];
}

// Pushes job i's best next step (if any) against the capacity left now. Options are sorted
// by (type, GPUs) and the GPUs a step needs grow with its count, so the scan of a type stops
// at the first count that does not fit.
void AllocationCore::Propose(size_t i) {
  ++version_[i];
  const CoreJob& j = jobs_[i];
  const int c = choice_[i];
  const size_t base = first_[i];
  const double have = c >= 0 ? inv_t_[base + static_cast<size_t>(c)] : 0.0;
  const int c_type = c >= 0 ? type_[base + static_cast<size_t>(c)] : -1;
  const int64_t c_gpus = c >= 0 ? gpus_[base + static_cast<size_t>(c)] : 0;
  Step best{0, i, -1, version_[i]};
  // A job that runs nowhere yet, with every count allowed, may take any option (Allowed).
  const bool free_choice = j.current < 0 && k_->elastic;
  const size_t n = j.speed.size();
  for (size_t o = 0; o < n;) {
    const int type = type_[base + o];
    const int64_t held = type == c_type ? c_gpus : 0;
    const int64_t cap = cap_[static_cast<size_t>(type)] + held;
    for (; o < n && type_[base + o] == type; ++o) {
      const int64_t gpus = gpus_[base + o];
      if (gpus > cap) {  // the rest of this type is larger still
        while (o < n && type_[base + o] == type) ++o;
        break;
      }
      const double gain = inv_t_[base + o] - have;
      if (gain <= 0 || gpus <= held) continue;  // the greedy only adds
      // key = gain / need, compared without dividing; ties go to the larger step (fewer grants).
      const double need = static_cast<double>(gpus - held);
      if (gain < best.key * need) continue;
      const int oi = static_cast<int>(o);
      if (!free_choice && !Allowed(i, oi)) continue;
      best.key = gain / need;
      best.option = oi;
    }
  }
  if (best.option < 0) return;
  // First come, first served: every start outranks every growth (whose keys are gains in 1/s
  // per GPU, below 1), in arrival order; the job's option still by its own gain per GPU.
  if (!k_->shortest_first && c < 0) best.key = 1e12 - static_cast<double>(j.order);
  heap_.push_back(best);
  std::push_heap(heap_.begin(), heap_.end());
}

// The option of job i on `type` with exactly `gpus` GPUs that it may run, or -1.
int AllocationCore::Same(size_t i, int type, int64_t gpus) const {
  const CoreJob& j = jobs_[i];
  const RunOption* r = j.options->Find(type, gpus);
  if (r == nullptr) return -1;
  const int o = static_cast<int>(r - j.options->options.data());
  return j.speed[static_cast<size_t>(o)] > 0 && (j.current < 0 || k_->move || o == j.current) ? o
                                                                                              : -1;
}

// Comparative advantage: the greedy serves the best gain per GPU first, so of two jobs that
// gain alike from a fast type, the one that would lose little on a slower type may take it
// before the one that would lose much. One pass repairs that: every job that holds GPUs of one
// type but would run faster on the same count of another type trades places with the job there
// whose trade raises the objective most (the two 1 / T sums; restarts priced as everywhere).
// O(D P) for D such jobs and P jobs holding GPUs.
void AllocationCore::SwapTypes() {
  // Jobs holding GPUs, sorted by (type, GPUs): the candidates for a trade with job a are the
  // run of those holding ra.gpus GPUs of another type.
  struct Holder {
    int type;
    int64_t gpus;
    size_t job;
    bool operator<(const Holder& o) const {
      return type != o.type ? type < o.type : gpus != o.gpus ? gpus < o.gpus : job < o.job;
    }
  };
  std::vector<Holder> held;
  for (size_t i = 0; i < jobs_.size(); ++i) {
    if (choice_[i] < 0 || jobs_[i].pinned) continue;
    const size_t row = first_[i] + static_cast<size_t>(choice_[i]);
    held.push_back({type_[row], gpus_[row], i});
  }
  std::sort(held.begin(), held.end());
  std::vector<size_t> at(jobs_.size(), 0);  // job -> its index in `held`
  for (size_t h = 0; h < held.size(); ++h) at[held[h].job] = h;
  for (size_t h = 0; h < held.size(); ++h) {
    const size_t a = held[h].job;
    const int a_type = held[h].type;
    const int64_t g = held[h].gpus;
    const double a_now = Inv(a, choice_[a]);
    for (int type = 0; type < static_cast<int>(cap_.size()); ++type) {
      const int oa = type == a_type ? -1 : Same(a, type, g);
      if (oa < 0 || Inv(a, oa) <= a_now) continue;
      auto lo = std::lower_bound(held.begin(), held.end(), Holder{type, g, 0});
      size_t partner = a;
      int partner_option = -1;
      double best = 0;
      for (auto it = lo; it != held.end() && it->type == type && it->gpus == g; ++it) {
        const size_t b = it->job;
        const int ob = Same(b, a_type, g);
        if (ob < 0) continue;
        const double delta = Inv(a, oa) + Inv(b, ob) - a_now - Inv(b, choice_[b]);
        if (delta > best) {
          best = delta;
          partner = b;
          partner_option = ob;
        }
      }
      if (partner_option < 0) continue;
      // Same GPU counts: the capacity is unchanged. The two trade places in `held` too (its
      // order by (type, GPUs) still holds).
      choice_[partner] = partner_option;
      choice_[a] = oa;
      std::swap(held[at[a]].job, held[at[partner]].job);
      std::swap(at[a], at[partner]);
      break;
    }
  }
}

void AllocationCore::Grant(size_t i, int o) {
  const CoreJob& j = jobs_[i];
  const int c = choice_[i];
  if (c >= 0) cap_[static_cast<size_t>(Opt(j, c).type)] += Opt(j, c).gpus;
  cap_[static_cast<size_t>(Opt(j, o).type)] -= Opt(j, o).gpus;
  choice_[i] = o;
}

std::vector<int> AllocateGpus(std::span<const CoreJob> jobs, std::vector<int64_t> capacity,
                              const CoreKnobs& knobs) {
  AllocationCore core;
  return core.Allocate(jobs, capacity, knobs);
}

}  // namespace frenzy
