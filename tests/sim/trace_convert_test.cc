// Trace conversion and the synthetic generator: parsing each trace format (and its bad lines),
// the mapping to LLM jobs (deterministic per seed; requested GPUs = trace GPUs; duration on the
// requested GPUs = trace duration), the generator's offered load, and the real traces.
#include "sim/trace_convert.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "hardware/cluster.h"
#include "hardware/gpu.h"
#include "model/zoo.h"
#include "sched/job_options.h"
#include "sim/generator.h"
#include "sim/workload.h"

namespace frenzy {
namespace {

const std::string kTraces = std::string(FRENZY_SOURCE_DIR) + "/tests/data/traces";

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const Cluster& Cluster64() {
  static const Cluster c = *ResolveCluster("cluster64", GpuCatalog::Default());
  return c;
}

// The predicted duration of a workload job on the GPUs it requested, computed from the workload
// alone with the hand-tuned option table, the way the simulator's fifo-static will.
class HandDuration {
 public:
  explicit HandDuration(const Cluster& c) : cache_(c, GpuCatalog::Default(), 0.10) {}
  double operator()(const WorkloadJob& j) {
    auto spec = ResolveModel(j.model);
    EXPECT_TRUE(spec.ok()) << j.model;
    JobSpec js;
    js.model = *spec;
    js.tokens = j.tokens;
    js.global_batch = j.global_batch;
    js.seq_len = j.seq_len;
    js.precision = j.precision;
    auto table = cache_.Get(j.model, js, OptionKind::kHand);
    EXPECT_TRUE(table.ok());
    int type = -1;
    for (size_t t = 0; t < (*table)->types.size(); ++t) {
      if ((*table)->types[t] == j.requested_gpu) type = static_cast<int>(t);
    }
    const RunOption* o = (*table)->Find(type, *j.requested_gpus);
    EXPECT_NE(o, nullptr) << j.id;
    return o == nullptr ? 0 : j.tokens / o->plan.tokens_per_s;
  }

 private:
  OptionCache cache_;
};

// ---- formats -------------------------------------------------------------------------------

TEST(TraceFormat, Names) {
  EXPECT_EQ(ParseTraceFormat("itp"), TraceFormat::kItp);
  EXPECT_EQ(ParseTraceFormat("GAVEL"), TraceFormat::kGavel);
  EXPECT_EQ(ParseTraceFormat("csv"), TraceFormat::kCsv);
  EXPECT_FALSE(ParseTraceFormat("slurm").has_value());
}

TEST(ColumnMap, ParsesKeysAndRejectsBadSpecs) {
  auto m = ParseColumnMap("submit=t, duration=run_s,gpus=n,model=arch,id=name");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->submit, "t");
  EXPECT_EQ(m->duration, "run_s");
  EXPECT_EQ(m->gpus, "n");
  EXPECT_EQ(m->model, "arch");
  EXPECT_EQ(m->id, "name");
  EXPECT_FALSE(ParseColumnMap("submit=t,duration=d").ok());  // gpus missing
  EXPECT_FALSE(ParseColumnMap("submit=t,duration=d,gpus=g,color=c").ok());
  EXPECT_FALSE(ParseColumnMap("submit=t,duration,gpus=g").ok());
  EXPECT_EQ(ParseColumnMap("submit=t").status().field(), "--columns");
}

TEST(ReadTrace, ItpSkipsBlankLinesAndRepeatedHeaders) {
  const std::string header = "job_id,submission_time,duration,num_gpu\n";
  auto jobs = ReadTrace(header + "a,100,3600,8\n\n" + header + "b,50,600,1\r\n", TraceFormat::kItp,
                        nullptr, "t.csv");
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].id, "a");
  EXPECT_EQ((*jobs)[0].submit_s, 100);
  EXPECT_EQ((*jobs)[0].duration_s, 3600);
  EXPECT_EQ((*jobs)[0].gpus, 8);
  EXPECT_EQ((*jobs)[0].line, 2);
  EXPECT_EQ((*jobs)[1].line, 5);
}

TEST(ReadTrace, ItpBadLinesNameLineAndField) {
  const std::string header = "job_id,submission_time,duration,num_gpu\n";
  const std::pair<std::string, std::string> cases[] = {
      {"b,x,600,1", "submission_time"}, {"b,1,-5,1", "duration"},   {"b,1,0,1", "duration"},
      {"b,1,600,0", "num_gpu"},         {"b,1,600,two", "num_gpu"}, {"b,1,600", "num_gpu"},
      {"a,1,600,1", "job_id"},  // duplicate id
  };
  for (const auto& [line, field] : cases) {
    auto jobs =
        ReadTrace(header + "a,0,600,1\n" + line + "\n", TraceFormat::kItp, nullptr, "t.csv");
    ASSERT_FALSE(jobs.ok()) << line;
    EXPECT_EQ(jobs.status().where(), "t.csv:3") << line;
    EXPECT_EQ(jobs.status().field(), field) << line;
  }
  auto no_col = ReadTrace("job_id,submission_time,num_gpu\n", TraceFormat::kItp, nullptr, "t.csv");
  ASSERT_FALSE(no_col.ok());
  EXPECT_EQ(no_col.status().field(), "duration");
}

TEST(ReadTrace, GavelDerivesDurationFromSteps) {
  const std::string good =
      "ResNet-50 (batch size 64)\tcd %s && python3 main.py\t--num_steps\t1\t10000\t12.5\t4\n";
  auto jobs = ReadTrace("\n" + good + good, TraceFormat::kGavel, nullptr, "g.trace");
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].id, "job-0");
  EXPECT_EQ((*jobs)[1].id, "job-1");
  EXPECT_EQ((*jobs)[0].line, 2);
  EXPECT_EQ((*jobs)[0].submit_s, 12.5);
  EXPECT_EQ((*jobs)[0].gpus, 4);
  // 10,000 steps x 0.244 s per ResNet-50 step (docs/workloads.md) = 2,440 s.
  EXPECT_NEAR((*jobs)[0].duration_s, 2440, 1e-9);
  EXPECT_EQ(GavelSecondsPerStep("Unknown model"), 1.0);
  EXPECT_EQ(GavelSecondsPerStep("LM (batch size 20)"), GavelSecondsPerStep("LM"));
}

// Gavel's duration sampler (scheduler/utils.py, _generate_duration: 60 x 10^U(1.5, 3) s with
// probability 0.8, else 60 x 10^U(3, 4) s) has median 60 x 10^2.4375 s: the 0.5 quantile lies in
// the first branch at 1.5 + 1.5 x 0.5 / 0.8. The rule of docs/workloads.md gives each family's
// 1-GPU job of median length (median total_steps of its 1-GPU jobs in Gavel's seed=0 traces,
// counted from the trace files) exactly that duration, up to the 3 significant figures of the
// seconds per step.
TEST(ReadTrace, GavelFamilyMedianJobLastsTheSamplerMedian) {
  const double median_s = 60 * std::pow(10.0, 1.5 + 1.5 * 0.5 / 0.8);
  EXPECT_NEAR(median_s, 16430, 1);
  const std::pair<const char*, int64_t> median_steps[] = {
      {"ResNet-18", 404367},    {"ResNet-50", 67361}, {"Transformer", 67112}, {"LM", 950480},
      {"Recommendation", 3803}, {"A3C", 67700},       {"CycleGAN", 42495},
  };
  for (const auto& [family, steps] : median_steps) {
    const std::string line = std::string(family) + " (batch size 16)\tcmd\t-n\t1\t" +
                             std::to_string(steps) + "\t0.0\t1\n";
    auto jobs = ReadTrace(line, TraceFormat::kGavel, nullptr, "g.trace");
    ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
    EXPECT_NEAR((*jobs)[0].duration_s, median_s, 0.002 * median_s) << family;
  }
}

TEST(ReadTrace, GavelBadLinesNameLineAndField) {
  const std::pair<std::string, std::string> cases[] = {
      {"LM\tcmd\t-n\t1\t100\t0.0", "scale_factor"},    // 6 fields
      {"LM\tcmd\t-n\t1\t100\t0.0\t1\textra", "line"},  // 8 fields
      {"LM\tcmd\t-n\t1\tmany\t0.0\t1", "total_steps"},
      {"LM\tcmd\t-n\t1\t0\t0.0\t1", "total_steps"},
      {"LM\tcmd\t-n\t1\t100\t-3\t1", "arrival_time"},
      {"LM\tcmd\t-n\t1\t100\t0.0\t0", "scale_factor"},
      {"LM\tcmd\t-n\t7\t100\t0.0\t1", "needs_data_dir"},
      {"\tcmd\t-n\t1\t100\t0.0\t1", "job_type"},
  };
  for (const auto& [line, field] : cases) {
    auto jobs = ReadTrace("LM\tcmd\t-n\t1\t100\t0.0\t1\n" + line + "\n", TraceFormat::kGavel,
                          nullptr, "g.trace");
    ASSERT_FALSE(jobs.ok()) << line;
    EXPECT_EQ(jobs.status().where(), "g.trace:2") << line;
    EXPECT_EQ(jobs.status().field(), field) << line;
  }
}

TEST(ReadTrace, CsvWithAColumnMap) {
  auto cols = ParseColumnMap("submit=start,duration=secs,gpus=gpu_count,model=arch");
  ASSERT_TRUE(cols.ok());
  auto jobs = ReadTrace("secs,arch,start,gpu_count,other\n3600,llama-2-7b,5,8,x\n",
                        TraceFormat::kCsv, &*cols, "c.csv");
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].model, "llama-2-7b");
  EXPECT_EQ((*jobs)[0].gpus, 8);
  EXPECT_EQ((*jobs)[0].id, "job-0");
  auto bad =
      ReadTrace("secs,arch,start,gpu_count\n3600,,5,8\n", TraceFormat::kCsv, &*cols, "c.csv");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().where(), "c.csv:2");
  EXPECT_EQ(bad.status().field(), "arch");
  EXPECT_FALSE(ReadTrace("a,b\n", TraceFormat::kCsv, nullptr, "c.csv").ok());
}

// ---- the mapping ---------------------------------------------------------------------------

TEST(Mapping, GlobalBatchIsAMultipleOfTheGpuCount) {
  EXPECT_EQ(GlobalBatchFor(1), 64);
  EXPECT_EQ(GlobalBatchFor(8), 64);
  EXPECT_EQ(GlobalBatchFor(16), 128);
  EXPECT_EQ(GlobalBatchFor(32), 256);
  EXPECT_EQ(GlobalBatchFor(12), 96);
  EXPECT_EQ(GlobalBatchFor(7), 112);
  for (int64_t n = 1; n <= 64; ++n) {
    EXPECT_EQ(GlobalBatchFor(n) % n, 0) << n;
    EXPECT_GE(GlobalBatchFor(n), 64) << n;
  }
}

TEST(Mapping, TraceModelsAreDecodersUpTo100B) {
  auto names = TraceModelNames();
  ASSERT_TRUE(names.ok());
  auto has = [&](const char* n) {
    return std::find(names->begin(), names->end(), n) != names->end();
  };
  EXPECT_TRUE(has("llama-2-7b"));
  EXPECT_TRUE(has("llama-2-70b"));
  EXPECT_FALSE(has("bert-base-uncased"));
  EXPECT_FALSE(has("llama-3.1-405b"));
  EXPECT_FALSE(has("bloom"));
  EXPECT_FALSE(has("mixtral-8x22b"));
}

// A converted job trains for the trace's duration at the speed of what it requested: tokens =
// round(trace duration x speed), so tokens / trace duration is one number for every job with the
// same (model, GPU type, GPU count, global batch), whatever that speed is — up to the rounding
// of tokens to whole numbers (0.5 / tokens, relative). Checks that, independently of the option
// tables, and returns the size of the largest such group.
size_t ExpectOneSpeedPerRequest(const Workload& w, const std::vector<TraceJob>& trace) {
  std::map<std::string, double> duration_of;
  for (const TraceJob& t : trace) duration_of[t.id] = t.duration_s;
  struct Group {
    double speed;
    std::string first;
    size_t jobs;
  };
  std::map<std::tuple<std::string, std::string, int64_t, int64_t>, Group> groups;
  size_t largest = 0;
  for (const WorkloadJob& j : w.jobs) {
    const double d = duration_of.at(j.id);
    const double speed = j.tokens / d;
    const std::string gpu = j.requested_gpu.value_or("");
    const int64_t gpus = j.requested_gpus.value_or(0);
    auto [it, fresh] = groups.try_emplace(std::make_tuple(j.model, gpu, gpus, j.global_batch),
                                          Group{speed, j.id, 0});
    ++it->second.jobs;
    largest = std::max(largest, it->second.jobs);
    if (fresh) continue;
    const double rounding = 0.5 / d + 0.5 / duration_of.at(it->second.first);
    EXPECT_NEAR(speed, it->second.speed, rounding * 1.0001)
        << j.id << " and " << it->second.first << " ask for the same " << j.model << " on " << gpus
        << " x " << gpu;
  }
  return largest;
}

std::vector<TraceJob> SmallTrace() {
  std::vector<TraceJob> t;
  const int64_t gpus[] = {1, 1, 2, 4, 8, 16, 32, 1, 8, 12, 64, 1, 4, 2, 24, 7};
  for (int i = 0; i < 16; ++i) {
    TraceJob j;
    j.id = "j" + std::to_string(i);
    j.submit_s = 1000 + 600.0 * i;
    j.duration_s = 900 + 3700.0 * i;
    j.gpus = gpus[i];
    j.line = i + 2;
    t.push_back(j);
  }
  return t;
}

TEST(ConvertTrace, RequestsTheTraceGpusAndTrainsForTheTraceDuration) {
  auto trace = SmallTrace();
  ConvertReport rep;
  auto w = ConvertTrace(trace, Cluster64(), GpuCatalog::Default(), ConvertOptions{}, &rep);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_EQ(w->jobs.size(), trace.size());
  EXPECT_EQ(rep.capped, 1);  // the 64-GPU job: cluster64 has at most 32 of one type
  EXPECT_EQ(rep.resized, 0);
  // Which jobs share a request depends on the draws; TokensFollowTheTraceDurationOfEachRequest
  // below makes sure some do.
  ExpectOneSpeedPerRequest(*w, trace);
  for (size_t i = 0; i < trace.size(); ++i) {
    const WorkloadJob& j = w->jobs[i];
    EXPECT_EQ(j.id, trace[i].id);
    EXPECT_EQ(j.submit_s, 600.0 * static_cast<double>(i)) << j.id;  // 1000 + 600 i, rebased
    EXPECT_EQ(*j.requested_gpus, std::min<int64_t>(trace[i].gpus, 32)) << j.id;
    EXPECT_EQ(j.global_batch % *j.requested_gpus, 0);
    EXPECT_EQ(j.seq_len, 2048);
    EXPECT_EQ(j.precision, Precision::kBf16);
  }
  // 32 GPUs of one type: only the RTX-3090s.
  EXPECT_EQ(w->jobs[6].requested_gpu, "RTX-3090");
}

// Twelve llama-2-7b jobs on 8 GPUs of cluster64, lasting 1,000 s to 12,000 s. Each job's draw
// picks one of at most three GPU types (A100-80GB, V100-32GB, RTX-3090), so some type serves at
// least four of them; within a type a job twice as long gets twice the tokens. The speed itself
// is bounded by physics: training costs at least 6 FLOPs per parameter per token (Kaplan et al.
// 2020, "Scaling laws for neural language models", §2.1), so tokens/s <= GPUs x peak / (6 x
// 6,738,415,616 parameters of Llama-2-7B). Peaks: dense tensor-core TFLOPS from NVIDIA's
// datasheets (A100 SXM bf16 312, V100 SXM2 fp16 125, RTX 3090 fp16 with fp16 accumulate 142).
TEST(ConvertTrace, TokensFollowTheTraceDurationOfEachRequest) {
  auto cols = ParseColumnMap("submit=t,duration=secs,gpus=n,model=arch,id=name");
  ASSERT_TRUE(cols.ok());
  std::string csv = "name,t,secs,n,arch\n";
  for (int i = 0; i < 12; ++i) {
    csv += "x" + std::to_string(i) + "," + std::to_string(50 + 10 * i) + "," +
           std::to_string(1000 * (i + 1)) + ",8,llama-2-7b\n";
  }
  auto trace = ReadTrace(csv, TraceFormat::kCsv, &*cols, "t.csv");
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  auto w = ConvertTrace(*trace, Cluster64(), GpuCatalog::Default(), ConvertOptions{});
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_EQ(w->jobs.size(), 12u);
  EXPECT_GE(ExpectOneSpeedPerRequest(*w, *trace), 4u);
  const std::map<std::string, double> peak_flops = {
      {"A100-80GB", 312e12}, {"V100-32GB", 125e12}, {"RTX-3090", 142e12}};
  for (size_t i = 0; i < w->jobs.size(); ++i) {
    const WorkloadJob& j = w->jobs[i];
    EXPECT_EQ(j.submit_s, 10.0 * static_cast<double>(i)) << j.id;  // 50 + 10 i, rebased
    EXPECT_EQ(*j.requested_gpus, 8);
    EXPECT_EQ(j.global_batch, 64);  // max(64, 8 x 8) = 64, a multiple of 8
    const std::string gpu = j.requested_gpu.value_or("");
    ASSERT_EQ(peak_flops.count(gpu), 1u) << gpu;
    const double speed = j.tokens / (1000.0 * static_cast<double>(i + 1));
    EXPECT_GT(speed, 0) << j.id;
    EXPECT_LE(speed, 8 * peak_flops.at(gpu) / (6 * 6738415616.0)) << j.id << " on " << gpu;
  }
}

TEST(ConvertTrace, DeterministicForASeedAndDifferentAcrossSeeds) {
  auto trace = SmallTrace();
  ConvertOptions a;
  a.seed = 7;
  auto w1 = ConvertTrace(trace, Cluster64(), GpuCatalog::Default(), a);
  auto w2 = ConvertTrace(trace, Cluster64(), GpuCatalog::Default(), a);
  ConvertOptions b;
  b.seed = 8;
  auto w3 = ConvertTrace(trace, Cluster64(), GpuCatalog::Default(), b);
  ASSERT_TRUE(w1.ok() && w2.ok() && w3.ok());
  EXPECT_EQ(WorkloadToCsv(*w1), WorkloadToCsv(*w2));
  EXPECT_NE(WorkloadToCsv(*w1), WorkloadToCsv(*w3));
  // A job's draw depends on (seed, id) only: dropping other jobs does not change it.
  a.max_jobs = 3;
  auto w4 = ConvertTrace(trace, Cluster64(), GpuCatalog::Default(), a);
  ASSERT_TRUE(w4.ok());
  ASSERT_EQ(w4->jobs.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(w4->jobs[i].model, w1->jobs[i].model);
}

TEST(ConvertTrace, ModelsNeedRoughlyTheGpusAskedFor) {
  // A 16-GPU request gets a model that does not fit on 8 of those GPUs (when one exists).
  auto mapper = LlmJobMapper::Create(Cluster64(), GpuCatalog::Default());
  ASSERT_TRUE(mapper.ok());
  for (uint64_t s = 0; s < 20; ++s) {
    auto rng = SeededRng(s, "x");
    auto m = (*mapper)->ForTraceJob(16, std::nullopt, rng);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(m->gpus, 16);
    EXPECT_TRUE(m->fits_prediction);
    auto half = (*mapper)->HandTable(m->model, GlobalBatchFor(8));
    ASSERT_TRUE(half.ok());
    int type = -1;
    for (size_t t = 0; t < (*half)->types.size(); ++t) {
      if ((*half)->types[t] == m->gpu) type = static_cast<int>(t);
    }
    const RunOption* o = (*half)->Find(type, 8);
    EXPECT_TRUE(o == nullptr || !o->fits_prediction) << m->model << " on " << m->gpu;
  }
}

TEST(ConvertTrace, UsesAModelTheTraceNames) {
  auto trace = SmallTrace();
  trace.resize(3);
  for (auto& j : trace) j.model = "opt-1.3b";
  auto w = ConvertTrace(trace, Cluster64(), GpuCatalog::Default(), ConvertOptions{});
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (const auto& j : w->jobs) EXPECT_EQ(j.model, "opt-1.3b");
  trace[1].model = "no-such-model";
  ConvertOptions o;
  o.source = "t.csv";
  auto bad = ConvertTrace(trace, Cluster64(), GpuCatalog::Default(), o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().where(), "t.csv:3");
  EXPECT_EQ(bad.status().field(), "model");
}

TEST(ConvertTrace, ScalesTimeToATargetLoad) {
  auto trace = SmallTrace();
  ConvertOptions o;
  o.target_load = 0.5;
  ConvertReport rep;
  auto w = ConvertTrace(trace, Cluster64(), GpuCatalog::Default(), o, &rep);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_GT(rep.trace_load, 1);  // 16 jobs of up to 32 GPUs in 2.5 hours
  // The load as defined (ConvertOptions::target_load), from the trace's own durations and the
  // requested (capped) GPU counts: sum of GPUs x duration / (64 GPUs x last submission).
  double gpu_s = 0, last_s = 0;
  for (size_t i = 0; i < trace.size(); ++i) {
    gpu_s += static_cast<double>(*w->jobs[i].requested_gpus) * trace[i].duration_s;
    last_s = std::max(last_s, w->jobs[i].submit_s);
  }
  EXPECT_NEAR(gpu_s / (64 * last_s), 0.5, 1e-9);
  o.target_load = -1;
  EXPECT_EQ(ConvertTrace(trace, Cluster64(), GpuCatalog::Default(), o).status().field(), "load");
}

// ---- the generator -------------------------------------------------------------------------

double OfferedLoad(const Workload& w, const Cluster& c) {
  HandDuration duration(c);
  double demand = 0, last = 0;
  for (const auto& j : w.jobs) {
    demand += static_cast<double>(*j.requested_gpus) * duration(j);
    last = std::max(last, j.submit_s);
  }
  return demand / (static_cast<double>(c.total_gpus()) * last);
}

TEST(Generator, OfferedLoadMatchesTheTarget) {
  GeneratorOptions o;
  o.jobs = 2000;
  o.load = 0.7;
  o.seed = 3;
  auto w = GenerateWorkload(o, Cluster64(), GpuCatalog::Default());
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_EQ(w->jobs.size(), 2000u);
  EXPECT_NEAR(OfferedLoad(*w, Cluster64()), 0.7, 0.07);
  // Without the clock scaling, the Poisson process alone lands within 10% too.
  o.exact_load = false;
  auto raw = GenerateWorkload(o, Cluster64(), GpuCatalog::Default());
  ASSERT_TRUE(raw.ok());
  EXPECT_NEAR(OfferedLoad(*raw, Cluster64()), 0.7, 0.07);
}

TEST(Generator, JobsFitTheirRequestAndLastWithinTheDurationRange) {
  GeneratorOptions o;
  o.jobs = 200;
  o.min_hours = 1;
  o.max_hours = 4;
  auto w = GenerateWorkload(o, Cluster64(), GpuCatalog::Default());
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  HandDuration duration(Cluster64());
  double prev = 0;
  for (const auto& j : w->jobs) {
    double d = duration(j);
    EXPECT_GE(d, 3600 * 0.999) << j.id;
    EXPECT_LE(d, 4 * 3600 * 1.001) << j.id;
    int64_t n = *j.requested_gpus;
    EXPECT_EQ(n & (n - 1), 0) << j.id;  // a power of two
    EXPECT_GE(j.submit_s, prev);
    prev = j.submit_s;
  }
}

TEST(Generator, DeterministicAndRespectsTheModelList) {
  GeneratorOptions o;
  o.jobs = 50;
  o.models = {"opt-125m", "llama-2-7b"};
  auto a = GenerateWorkload(o, Cluster64(), GpuCatalog::Default());
  auto b = GenerateWorkload(o, Cluster64(), GpuCatalog::Default());
  o.seed = 2;
  auto c = GenerateWorkload(o, Cluster64(), GpuCatalog::Default());
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(WorkloadToCsv(*a), WorkloadToCsv(*b));
  EXPECT_NE(WorkloadToCsv(*a), WorkloadToCsv(*c));
  for (const auto& j : a->jobs) EXPECT_TRUE(j.model == "opt-125m" || j.model == "llama-2-7b");
}

TEST(Generator, RejectsModelsThatFitNowhereAndBadOptions) {
  auto lab = ResolveCluster("lab", GpuCatalog::Default());
  ASSERT_TRUE(lab.ok());
  GeneratorOptions o;
  o.models = {"llama-2-70b"};  // needs more than the lab's 8 A100s
  auto w = GenerateWorkload(o, *lab, GpuCatalog::Default());
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().field(), "models");
  GeneratorOptions bad;
  bad.load = 0;
  EXPECT_EQ(GenerateWorkload(bad, *lab, GpuCatalog::Default()).status().field(), "load");
  // The default mix drops what the lab cannot run instead of failing.
  EXPECT_TRUE(GenerateWorkload(GeneratorOptions{}, *lab, GpuCatalog::Default()).ok());
}

// ---- excerpts of the real traces (tests/data/traces, see its README) -----------------------

TEST(RealTraces, ItpExcerptConvertsWithMatchingDurations) {
  std::string path = kTraces + "/itp-cluster04-head.csv";
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  auto trace = ReadTrace(ReadText(path), TraceFormat::kItp, nullptr, path);
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  EXPECT_EQ(trace->size(), 400u);
  ConvertOptions o;
  o.max_jobs = 300;
  ConvertReport rep;
  auto w = ConvertTrace(*trace, Cluster64(), GpuCatalog::Default(), o, &rep);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(rep.jobs, 300);
  EXPECT_EQ(rep.capped, 0);
  // Counted from the file (first 300 jobs by submission time; docs/workloads.md quotes them):
  // GPU counts, the median of the 300 durations (the mean of the 150th and 151st, 9,167 s and
  // 9,177 s), the first and the 300th submission (5,810 s and 251,395 s) and the first job's
  // request.
  const std::map<int64_t, int64_t> gpus = {{1, 192}, {4, 1}, {8, 74}, {16, 15}, {32, 18}};
  EXPECT_EQ(rep.trace_gpus, gpus);
  EXPECT_EQ(rep.requested_gpus, gpus);
  EXPECT_EQ(rep.trace_median_duration_s, 9172);
  ASSERT_EQ(w->jobs.size(), 300u);
  EXPECT_EQ(w->jobs.front().id, "c9c620ea-4336-c1a9-8abe-e26bd13076b8");
  EXPECT_EQ(w->jobs.front().submit_s, 0);
  EXPECT_EQ(*w->jobs.front().requested_gpus, 16);
  EXPECT_EQ(w->jobs.front().global_batch, 128);  // 16 x 2^3, the first >= max(64, 8 x 16)
  EXPECT_EQ(w->jobs.back().id, "49b549cc-bfb1-e9da-92eb-ff8f95c51842");
  EXPECT_EQ(w->jobs.back().submit_s, 251395 - 5810);
  // 192 one-GPU jobs among at most 35 zoo models x 3 types = 105 requests: some share one.
  EXPECT_GE(ExpectOneSpeedPerRequest(*w, *trace), 2u);
}

TEST(RealTraces, GavelExcerptReadsEveryLine) {
  std::string path = kTraces + "/gavel-0e4a51-head.trace";
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  auto trace = ReadTrace(ReadText(path), TraceFormat::kGavel, nullptr, path);
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  EXPECT_EQ(trace->size(), 120u);
  for (const auto& j : *trace) {
    EXPECT_GT(j.duration_s, 0);
    EXPECT_GE(j.gpus, 1);
  }
}

}  // namespace
}  // namespace frenzy
