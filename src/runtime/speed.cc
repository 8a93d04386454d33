#include "runtime/speed.h"

#include <algorithm>

namespace frenzy::runtime {

std::optional<double> SpeedLearner::Report(int64_t key, int type, int64_t run, double t_s,
                                           double done_tokens, double predicted_tokens_per_s) {
  Job& j = jobs_[key];
  std::optional<double> ratio;
  // Since the run's first report: one long interval, not the luckiest of many short ones.
  if (j.run == run && j.type == type && t_s > j.t_s && done_tokens >= j.done &&
      predicted_tokens_per_s > 0) {
    const double r = (done_tokens - j.done) / (t_s - j.t_s) / predicted_tokens_per_s;
    // Outside the plausible range it is the report that is wrong (a counter that jumps, a run
    // resumed from a checkpoint nobody saw), not the model: it teaches nothing.
    if (!(r >= kMinSpeedRatio && r <= kMaxSpeedRatio)) return std::nullopt;
    ratio = r;
    j.run_best = r;
    const double prior =
        static_cast<size_t>(type) < j.best.size() ? j.best[static_cast<size_t>(type)] : 0;
    Learn(j, key, type, std::max(r, prior));
    return ratio;
  }
  if (j.run != run) {  // a new run: the one before joins the earlier runs
    if (j.type >= 0 && j.run_best > 0) {
      if (j.best.size() <= static_cast<size_t>(j.type))
        j.best.resize(static_cast<size_t>(j.type) + 1);
      double& b = j.best[static_cast<size_t>(j.type)];
      b = std::max(b, j.run_best);
    }
    j.run_best = 0;
  }
  j.run = run;
  j.type = type;
  j.t_s = t_s;
  j.done = done_tokens;
  return ratio;
}

double SpeedLearner::PriorFactor(int64_t key, int type) const {
  auto it = jobs_.find(key);
  if (it == jobs_.end() || type < 0 || static_cast<size_t>(type) >= it->second.best.size()) {
    return 0;
  }
  return it->second.best[static_cast<size_t>(type)];
}

std::vector<double> SpeedLearner::Factors(int64_t key, size_t types) const {
  auto it = jobs_.find(key);
  if (it == jobs_.end()) return {};
  const Job& j = it->second;
  std::vector<double> out = OwnOf(j);
  out.resize(types, 0.0);
  // Where the job has not run: what its class showed there.
  if (!j.cls.empty()) {
    auto c = classes_.find(j.cls);
    if (c != classes_.end()) {
      for (size_t t = 0; t < types && t < c->second.size(); ++t) {
        const ClassType& ct = c->second[t];
        if (out[t] == 0 && ct.n > 0) out[t] = ct.sum / static_cast<double>(ct.n);
      }
    }
  }
  if (std::none_of(out.begin(), out.end(), [](double f) { return f > 0; })) out.clear();
  return out;
}

// Job `key`'s factor on `type` is now `f` (its best run there): that is its one sample in its
// class's mean.
void SpeedLearner::Learn(const Job& j, int64_t key, int type, double f) {
  if (j.cls.empty() || type < 0 || !(f >= kMinSpeedRatio && f <= kMaxSpeedRatio)) return;
  auto& v = classes_[j.cls];
  if (v.size() <= static_cast<size_t>(type)) v.resize(static_cast<size_t>(type) + 1);
  ClassType& c = v[static_cast<size_t>(type)];
  auto [it, fresh] = c.of.emplace(key, f);
  if (fresh) {
    c.sum += f;
    ++c.n;
  } else if (it->second != f) {
    c.sum += f - it->second;
    it->second = f;
  } else {
    return;  // the same sample again: nothing learned
  }
  ++version_;
}

double SpeedLearner::Factor(int64_t key, int type) const {
  if (type < 0) return 1.0;
  const std::vector<double> f = Factors(key, static_cast<size_t>(type) + 1);
  return !f.empty() && f[static_cast<size_t>(type)] > 0 ? f[static_cast<size_t>(type)] : 1.0;
}

void SpeedLearner::Forget(int64_t key) {
  auto it = jobs_.find(key);
  if (it == jobs_.end()) return;
  // Its samples stay in their classes' sums; only the per-job handles (which let a later report
  // replace a sample) go.
  if (auto c = classes_.find(it->second.cls); c != classes_.end()) {
    for (ClassType& ct : c->second) ct.of.erase(key);
  }
  jobs_.erase(it);
}

std::vector<double> SpeedLearner::Own(int64_t key) const {
  auto it = jobs_.find(key);
  if (it == jobs_.end()) return {};
  std::vector<double> out = OwnOf(it->second);
  if (std::none_of(out.begin(), out.end(), [](double f) { return f > 0; })) out.clear();
  return out;
}

// Its earlier runs' best per type, with the current run's.
std::vector<double> SpeedLearner::OwnOf(const Job& j) {
  std::vector<double> out = j.best;
  if (j.type >= 0 && j.run_best > 0) {
    if (out.size() <= static_cast<size_t>(j.type)) out.resize(static_cast<size_t>(j.type) + 1);
    out[static_cast<size_t>(j.type)] = std::max(out[static_cast<size_t>(j.type)], j.run_best);
  }
  return out;
}

void SpeedLearner::Restore(int64_t key, const std::vector<double>& own) {
  Job& j = jobs_[key];
  j.best = own;
  for (size_t t = 0; t < own.size(); ++t) {
    if (own[t] > 0) Learn(j, key, static_cast<int>(t), own[t]);
  }
}

std::map<std::string, SpeedLearner::ClassEvidence> SpeedLearner::Settled() const {
  std::map<std::string, ClassEvidence> out;
  for (const auto& [name, types] : classes_) {
    ClassEvidence e;
    for (const ClassType& ct : types) {
      double held = 0;
      for (const auto& [job, f] : ct.of) held += f;
      const int64_t n = ct.n - static_cast<int64_t>(ct.of.size());
      // (Replaced samples leave rounding in the sum: none without samples, never below 0.)
      e.sum.push_back(n > 0 ? std::max(0.0, ct.sum - held) : 0.0);
      e.n.push_back(n);
    }
    out.emplace(name, std::move(e));
  }
  return out;
}

void SpeedLearner::RestoreSettled(const std::string& job_class, const ClassEvidence& e) {
  auto& v = classes_[job_class];
  ++version_;
  if (v.size() < e.sum.size()) v.resize(e.sum.size());
  for (size_t t = 0; t < e.sum.size() && t < e.n.size(); ++t) {
    v[t].sum += e.sum[t];
    v[t].n += e.n[t];
  }
}

}  // namespace frenzy::runtime
