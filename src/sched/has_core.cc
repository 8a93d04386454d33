#include "sched/has_core.h"

#include <algorithm>
#include <cstddef>

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
  single_.assign(jobs.size(), 0);
  // Each option table's (type, GPUs) columns, read once per decision: many jobs share a table
  // and a RunOption is large, so the rows are copied from these compact columns.
  tables_.clear();
  col_type_.clear();
  col_gpus_.clear();
  col_run_end_.clear();
  table_col_.resize(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    const CoreJob& j = jobs[i];
    const auto& opts = j.options->options;
    const size_t n = j.speed.size();
    auto [it, added] = tables_.try_emplace(j.options, Columns{col_type_.size(), 0});
    if (added) {
      it->second.single = static_cast<size_t>(
          std::partition_point(opts.begin(), opts.end(),
                               [](const RunOption& r) { return !r.mixed(); }) -
          opts.begin());
      for (const RunOption& r : opts) {
        col_type_.push_back(r.type);
        col_gpus_.push_back(r.gpus);
      }
      // Where each single-type row's run of its type ends (the proposals skip the counts of a
      // type too large to fit in one step).
      const size_t first = it->second.first, single = it->second.single;
      col_run_end_.resize(col_type_.size(), 0);
      for (size_t o = single; o-- > 0;) {
        const bool last = o + 1 == single || col_type_[first + o + 1] != col_type_[first + o];
        col_run_end_[first + o] = last ? o + 1 : col_run_end_[first + o + 1];
      }
    }
    const size_t col = it->second.first, row = first_[i];
    table_col_[i] = col;
    single_[i] = std::min(it->second.single, n);
    std::copy_n(col_type_.begin() + static_cast<std::ptrdiff_t>(col), n,
                type_.begin() + static_cast<std::ptrdiff_t>(row));
    std::copy_n(col_gpus_.begin() + static_cast<std::ptrdiff_t>(col), n,
                gpus_.begin() + static_cast<std::ptrdiff_t>(row));
    // 1 / T = 1 / max(remaining / speed + extra, kMinTimeS), with one division per job for
    // the options without extra (most of them) and one per option with.
    const double rem = j.remaining_tokens;
    const double inv_rem = rem > 0 ? 1.0 / rem : 0.0;
    if (rem > 0 && j.current < 0 && j.restart_s <= 0) {
      // A job that never ran (most of a long queue): no extra on any option, one multiply each
      // (an option it may not run has speed 0, so 1 / T = 0).
      for (size_t o = 0; o < n; ++o) {
        inv_t_[row + o] = std::min(j.speed[o] * inv_rem, 1.0 / kMinTimeS);
      }
      continue;
    }
    for (size_t o = 0; o < n; ++o) {
      const double v = j.speed[o];
      double inv = 0;
      if (v > 0) {
        const double extra = static_cast<int>(o) == j.current ? j.current_extra_s : j.restart_s;
        if (rem <= 0) {
          inv = extra > kMinTimeS ? 1.0 / extra : 1.0 / kMinTimeS;
        } else {
          inv = extra > 0 ? v / (rem + extra * v) : v * inv_rem;
          inv = std::min(inv, 1.0 / kMinTimeS);
        }
      }
      inv_t_[row + o] = inv;
    }
  }
  idle_.clear();
  Greedy();
  // GPUs nobody took are every job's fallback: a second pass scores a job's first step by what
  // it gains over its best option on them (only when some are left; on a full cluster the first
  // pass stands).
  if (k_->fallback && contended_ &&
      std::any_of(cap_.begin(), cap_.end(), [](int64_t c) { return c > 0; })) {
    idle_ = cap_;
    cap_.assign(capacity.begin(), capacity.end());
    choice_.assign(jobs.size(), -1);
    version_.assign(jobs.size(), 0);
    heap_.clear();
    first_step_.clear();
    Greedy();
  }
  if (k_->swap_types) SwapTypes();
  return choice_;
}

void AllocationCore::Greedy() {
  contended_ = false;
  Seed();
  auto any_left = [&] {
    return std::any_of(cap_.begin(), cap_.end(), [](int64_t c) { return c > 0; });
  };
  while (!heap_.empty() && any_left()) {
    std::pop_heap(heap_.begin(), heap_.end());
    const Step s = heap_.back();
    heap_.pop_back();
    if (s.version != version_[s.job]) continue;  // superseded by a later proposal
    if (Fits(s.job, s.option)) {
      Grant(s.job, s.option);
    } else {
      contended_ = true;
    }
    // Granted: its next step. Not: what it wanted went to others; its best step against what
    // is left.
    Propose(s.job);
  }
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
  if (c >= 0 && !Mixed(i, c) && !Mixed(i, o) && Opt(j, c).type == Opt(j, o).type) {
    return Opt(j, o).gpus - Opt(j, c).gpus;
  }
  return Opt(j, o).gpus;
}

// Whether option `o` of job i fits what is left, given what the job holds (its GPUs return to
// the pool when it changes option).
bool AllocationCore::Fits(size_t i, int o) const {
  const CoreJob& j = jobs_[i];
  if (!Mixed(i, o)) {
    const int c = choice_[i];
    const RunOption& r = Opt(j, o);
    int64_t back = 0;  // of its type, what the job's current choice gives back
    if (c >= 0 && Mixed(i, c)) {
      for (const auto& [t, g] : Opt(j, c).parts) back += t == r.type ? g : 0;
      return r.gpus <= cap_[static_cast<size_t>(r.type)] + back;
    }
    return Need(i, o) <= cap_[static_cast<size_t>(r.type)];
  }
  for (const auto& [t, g] : Opt(j, o).parts) {
    int64_t back = 0;
    const int c = choice_[i];
    if (c >= 0 && Mixed(i, c)) {
      for (const auto& [t2, g2] : Opt(j, c).parts) back += t2 == t ? g2 : 0;
    } else if (c >= 0) {
      back = Opt(j, c).type == t ? Opt(j, c).gpus : 0;
    }
    if (g > cap_[static_cast<size_t>(t)] + back) return false;
  }
  return true;
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
    for (size_t o = single_[i]; !k_->elastic && o-- > 0;) {
      const RunOption& r = j.options->options[o];
      if (j.speed[o] > 0) smallest_[i * types + static_cast<size_t>(r.type)] = r.gpus;
    }
    // Without preemption a running job keeps at least what it holds.
    if (j.current >= 0 && !k_->preempt) Grant(i, j.current);
    // A first start (no restart to price) on the untouched capacity: the best option is the
    // one with the most tokens/s per GPU, whatever the job's remaining tokens, so jobs of one
    // speed class share it (the proposals' scan is most of a decision with many waiting jobs).
    // (In the second pass a first step's key depends on the job's fallback: not shared.)
    const bool shared =
        k_->preempt && j.current < 0 && j.restart_s == 0 && j.speed_class >= 0 && idle_.empty();
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
  if (Mixed(i, o)) return true;  // one count per composition: nothing to bound
  return k_->elastic || r.gpus <= smallest_[i * cap_.size() + static_cast<size_t>(r.type)];
}

// Pushes job i's best next step (if any) against the capacity left now. Options are sorted
// by (type, GPUs) and the GPUs a step needs grow with its count, so the scan of a type stops
// at the first count that does not fit.
void AllocationCore::Propose(size_t i) {
  ++version_[i];
  Step best = BestStep(i);
  if (best.option < 0) return;
  heap_.push_back(best);
  std::push_heap(heap_.begin(), heap_.end());
}

// Whether growing job j from option `from` (on `held` GPUs) to option `to` (`added` more of the
// same type) brings at least growth_floor x its tokens/s per GPU with every added GPU.
bool AllocationCore::GrowthPays(const CoreJob& j, int from, size_t to, int64_t added,
                                int64_t held) const {
  if (k_->growth_floor <= 0 || from < 0) return true;
  const double now = j.speed[static_cast<size_t>(from)];
  return (j.speed[to] - now) * static_cast<double>(held) >=
         k_->growth_floor * now * static_cast<double>(added);
}

// Job i's best next step against the capacity left now (option -1: none), with its current
// version.
AllocationCore::Step AllocationCore::BestStep(size_t i) {
  const CoreJob& j = jobs_[i];
  const int c = choice_[i];
  const size_t base = first_[i];
  const double have = c >= 0 ? inv_t_[base + static_cast<size_t>(c)] : 0.0;
  const int c_type = c >= 0 && !Mixed(i, c) ? type_[base + static_cast<size_t>(c)] : -1;
  const int64_t c_gpus = c >= 0 ? gpus_[base + static_cast<size_t>(c)] : 0;
  // A job that runs nowhere yet, with every count allowed, may take any option (Allowed).
  const bool free_choice = j.current < 0 && k_->elastic;
  const size_t n = single_[i];  // the single-type options; the mixed ones after them
  // Second pass, a job holding nothing: its fallback is its best 1 / T on the idle GPUs of the
  // first pass (those still free now), and a step onto a type gains over the best fallback on
  // the other types.
  double fallback = 0, runner_up = 0;
  int fallback_type = -1;
  const bool over_fallback = c < 0 && !idle_.empty();
  if (over_fallback) {
    best_on_.assign(cap_.size(), 0.0);
    for (size_t o = 0; o < n; ++o) {
      const size_t t = static_cast<size_t>(type_[base + o]);
      if (!free_choice && !Allowed(i, static_cast<int>(o))) continue;  // not its to take
      if (gpus_[base + o] <= std::min(cap_[t], idle_[t])) {
        best_on_[t] = std::max(best_on_[t], inv_t_[base + o]);
      }
    }
    for (size_t t = 0; t < best_on_.size(); ++t) {
      if (best_on_[t] > fallback) {
        runner_up = fallback;
        fallback = best_on_[t];
        fallback_type = static_cast<int>(t);
      } else if (best_on_[t] > runner_up) {
        runner_up = best_on_[t];
      }
    }
  }
  auto scan = [&](bool fall) {
    Step best{0, i, -1, version_[i]};
    for (size_t o = 0; o < n;) {
      const int type = type_[base + o];
      const int64_t held = type == c_type ? c_gpus : 0;
      int64_t cap = cap_[static_cast<size_t>(type)] + held;
      if (c >= 0 && Mixed(i, c)) {  // a mixed choice gives its GPUs of this type back
        for (const auto& [t, g] : Opt(j, c).parts) cap += t == type ? g : 0;
      }
      const double from = !fall ? have : type == fallback_type ? runner_up : fallback;
      for (; o < n && type_[base + o] == type; ++o) {
        const int64_t gpus = gpus_[base + o];
        if (gpus > cap) {  // the rest of this type is larger still
          o = std::min(n, col_run_end_[table_col_[i] + o]);
          break;
        }
        const double gain = inv_t_[base + o] - from;
        if (gain <= 0 || gpus <= held) continue;  // the greedy only adds
        // Not for the option the job runs on: it may always keep what it holds.
        if (held > 0 && static_cast<int>(o) != j.current &&
            !GrowthPays(j, c, o, gpus - held, held)) {
          continue;
        }
        // key = gain / need, compared without dividing; ties go to the larger step (fewer
        // grants).
        const double need = static_cast<double>(gpus - held);
        if (gain < best.key * need) continue;
        const int oi = static_cast<int>(o);
        if (!free_choice && !Allowed(i, oi)) continue;
        best.key = gain / need;
        best.option = oi;
      }
    }
    return best;
  };
  // Mixed options: a job that holds nothing, or a mixed option, may step to one (no growth from
  // or into one: one count per composition; growing a single-type job into a mix that keeps its
  // GPUs measured no gain, docs/scheduling.md).
  auto scan_mixed = [&](bool fall, Step best) {
    if (c >= 0 && !Mixed(i, c)) return best;
    const double from = !fall ? have : fallback;
    for (size_t o = n; o < j.speed.size(); ++o) {
      const double gain = inv_t_[base + o] - from;
      if (gain <= 0 || static_cast<int>(o) == c) continue;
      // From one mix to a larger one: the growth floor, as on one type (not for the option the
      // job runs on: it may always keep what it holds).
      if (c >= 0 && gpus_[base + o] > gpus_[base + static_cast<size_t>(c)] &&
          static_cast<int>(o) != j.current) {
        const int64_t held = gpus_[base + static_cast<size_t>(c)];
        if (!GrowthPays(j, c, o, gpus_[base + o] - held, held)) continue;
      }
      const double need = static_cast<double>(gpus_[base + o]);
      if (gain < best.key * need) continue;
      const int oi = static_cast<int>(o);
      if (!Fits(i, oi) || (!free_choice && !Allowed(i, oi))) continue;
      best.key = gain / need;
      best.option = oi;
    }
    return best;
  };
  Step best = scan_mixed(over_fallback, scan(over_fallback));
  // Nothing beats its fallback (it ties on two idle types): its best by whole gain, as in the
  // first pass, rather than nothing.
  if (best.option < 0 && over_fallback) best = scan_mixed(false, scan(false));
  // First come, first served: every start outranks every growth (whose keys are gains in 1/s
  // per GPU, below 1), in arrival order; the job's option still by its own gain per GPU.
  if (best.option >= 0 && !k_->shortest_first && c < 0) {
    best.key = 1e12 - static_cast<double>(j.order);
  }
  return best;
}

// Job i's single-type option on `type` with exactly `gpus` GPUs, or -1: a binary search of its
// compact (type, GPUs) columns, sorted as its options are.
int AllocationCore::Row(size_t i, int type, int64_t gpus) const {
  size_t lo = first_[i], hi = first_[i] + single_[i];
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (type_[mid] < type || (type_[mid] == type && gpus_[mid] < gpus)) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo == first_[i] + single_[i] || type_[lo] != type || gpus_[lo] != gpus) return -1;
  return static_cast<int>(lo - first_[i]);
}

// The option of job i on `type` with exactly `gpus` GPUs that it may run, or -1.
int AllocationCore::Same(size_t i, int type, int64_t gpus) const {
  const CoreJob& j = jobs_[i];
  const int o = Row(i, type, gpus);
  if (o < 0) return -1;
  return j.speed[static_cast<size_t>(o)] > 0 && (j.current < 0 || k_->move || o == j.current) ? o
                                                                                              : -1;
}

// The summed completion time of jobs a and b when a runs option `pa` and b option `pb`, with no
// other change: the first to finish leaves its GPUs to the other, which moves there (alt_a,
// alt_b: each one's option on the other's GPUs) if that finishes it sooner, after a restart.
inline double AllocationCore::PairSum(const Side& pa, const Side& alt_a, const Side& pb,
                                      const Side& alt_b) {
  // A job's completion on p when the other job finishes at t1 (a job that never ran has no
  // restart to price, restart_s = 0: its move is counted free, as its first start is).
  auto second = [](const Side& p, const Side& alt, double t1) {
    if (p.run <= 0) return p.t;  // nothing left to run
    const double pause = p.t - p.run;
    const double done = std::clamp((t1 - pause) * p.inv_run, 0.0, 1.0);
    return std::min(p.t, t1 + p.restart_s + (1 - done) * alt.run);
  };
  return pa.t <= pb.t ? pa.t + second(pb, alt_b, pa.t) : pb.t + second(pa, alt_a, pb.t);
}

// Comparative advantage: the greedy serves the best gain per GPU first, so of two jobs that
// gain alike from a fast type, the one that would lose little on a slower type may take it
// before the one that would lose much. One pass repairs that: every job that holds GPUs of one
// type but would run faster on what another job holds of another type (any counts) trades
// places with the job there whose trade shortens the two jobs' summed completion time most
// (PairSum; restarts priced as everywhere). The capacity is unchanged by a trade. A trade obeys
// the knobs (Allowed: moves, elastic counts; without preemption a running job keeps at least
// its GPUs) for both jobs. O(P R log K + M) for P jobs holding GPUs in R distinct (type, GPUs)
// runs, with at most K options, and M candidate pairs.
void AllocationCore::SwapTypes() {
  held_.clear();
  holder_.assign(jobs_.size(), 0);
  for (size_t i = 0; i < jobs_.size(); ++i) {
    if (choice_[i] >= 0 && !jobs_[i].pinned && !Mixed(i, choice_[i])) {
      holder_[i] = held_.size();
      held_.push_back({Opt(jobs_[i], choice_[i]).type, Opt(jobs_[i], choice_[i]).gpus, i});
    }
  }
  // Without preemption a running job keeps at least the GPUs it runs on.
  auto keeps = [&](size_t i, int o) {
    const CoreJob& j = jobs_[i];
    return k_->preempt || j.current < 0 || Opt(j, o).gpus >= Opt(j, j.current).gpus;
  };
  // By (type, GPUs): the candidates for job a's option o are the run holding exactly o. A trade
  // gives each job the other's (type, GPUs), so trading the two entries' jobs keeps the order.
  std::sort(held_.begin(), held_.end());
  // Each (type, GPUs) run is a slot; job b's option on slot s is looked up once (many jobs hold
  // the same slot and scan the same partners).
  slots_.clear();
  slot_.assign(held_.size(), 0);
  for (size_t h = 0; h < held_.size(); ++h) {
    if (h == 0 || held_[h].type != held_[h - 1].type || held_[h].gpus != held_[h - 1].gpus) {
      slots_.push_back({held_[h].type, held_[h].gpus, h, h});
    }
    slots_.back().end = h + 1;
    slot_[h] = slots_.size() - 1;
  }
  on_slot_.assign(slots_.size() * held_.size(), Side{});
  // Each holder's side on what it holds now.
  now_.resize(held_.size());
  for (const Holder& e : held_) now_[holder_[e.job]] = SideOf(e.job, choice_[e.job]);
  for (size_t h = 0; h < held_.size(); ++h) {
    const size_t a = held_[h].job;
    const int ca = choice_[a];
    const double a_now = Inv(a, ca);
    const Side a_cur = now_[holder_[a]];
    size_t at = 0;
    int pa = -1, pb = -1;
    double best = 0;
    // a's options where someone holds exactly that (type, GPUs): the slots of other types, in
    // the order of a's options (both by type, then GPUs).
    for (const Slot& sl : slots_) {
      if (sl.type == held_[h].type) continue;
      const int oa = Row(a, sl.type, sl.gpus);
      if (oa < 0 || inv_t_[first_[a] + static_cast<size_t>(oa)] <= a_now) continue;
      if (!Allowed(a, oa) || !keeps(a, oa)) continue;
      const Side a_alt = SideOf(a, oa);
      for (size_t e = sl.begin; e < sl.end; ++e) {
        const size_t b = held_[e].job;
        Side& b_alt = on_slot_[slot_[h] * held_.size() + holder_[b]];
        if (b_alt.option == -2) {  // not looked up yet
          const int ob = Same(b, held_[h].type, held_[h].gpus);
          b_alt = ob >= 0 && Allowed(b, ob) && keeps(b, ob) ? SideOf(b, ob) : Side{-1};
        }
        if (b_alt.option < 0) continue;
        const Side& b_cur = now_[holder_[b]];
        const double gain =
            PairSum(a_cur, a_alt, b_cur, b_alt) - PairSum(a_alt, a_cur, b_alt, b_cur);
        if (gain > best) {
          best = gain;
          at = e;
          pa = oa;
          pb = b_alt.option;
        }
      }
    }
    if (pa < 0) continue;
    const size_t b = held_[at].job;
    choice_[b] = pb;
    choice_[a] = pa;
    // Their sides on what they now hold (their entries in held_ trade jobs).
    now_[holder_[a]] = SideOf(a, pa);
    now_[holder_[b]] = SideOf(b, pb);
    std::swap(held_[h].job, held_[at].job);
  }
}

// Job i's side of a pair on option o: what PairSum reads of it.
AllocationCore::Side AllocationCore::SideOf(size_t i, int o) const {
  const CoreJob& j = jobs_[i];
  const double run = j.remaining_tokens / j.speed[static_cast<size_t>(o)];
  return Side{o, T(i, o), run, run > 0 ? 1 / run : 0, j.restart_s};
}

void AllocationCore::Grant(size_t i, int o) {
  const CoreJob& j = jobs_[i];
  auto add = [&](int option, int64_t sign) {
    const RunOption& r = Opt(j, option);
    if (r.mixed()) {
      for (const auto& [t, g] : r.parts) cap_[static_cast<size_t>(t)] += sign * g;
    } else {
      cap_[static_cast<size_t>(r.type)] += sign * r.gpus;
    }
  };
  if (choice_[i] >= 0) add(choice_[i], +1);
  add(o, -1);
  choice_[i] = o;
}

std::vector<int> AllocateGpus(std::span<const CoreJob> jobs, std::vector<int64_t> capacity,
                              const CoreKnobs& knobs) {
  AllocationCore core;
  return core.Allocate(jobs, capacity, knobs);
}

}  // namespace frenzy
