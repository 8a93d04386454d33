#include "cli/recompute_flags.h"

#include <fmt/core.h>

#include <charconv>

namespace frenzy::cli {
namespace {

// torchtitan's JobConfig default for selective_ac_option (torchtitan/config/job_config.py:
// `selective_ac_option: str = "2"`).
constexpr const char* kTorchtitanDefaultOption = "2";

std::string Option(const RecomputeFlags& f) {
  return f.ac_option.empty() ? kTorchtitanDefaultOption : f.ac_option;
}

// 2nd, 3rd, 4th, 11th, 21st, ...
std::string Ordinal(int64_t n) {
  const int64_t tens = n % 100, ones = n % 10;
  const char* suffix = (tens >= 11 && tens <= 13) ? "th"
                       : ones == 1                ? "st"
                       : ones == 2                ? "nd"
                       : ones == 3                ? "rd"
                                                  : "th";
  return std::to_string(n) + suffix;
}

}  // namespace

Status ResolveRecompute(const RecomputeFlags& f, TrainingSpec* t) {
  if (f.ac_mode.empty()) {
    if (!f.ac_option.empty()) {
      return InvalidArgument("needs --ac-mode selective (torchtitan's words go together)", {},
                             "--selective-ac-option");
    }
    auto r = ParseRecompute(f.recompute);
    if (!r) {
      return InvalidArgument("unknown value '" + f.recompute +
                                 "' (expected none, selective, op or full)",
                             {}, "--recompute");
    }
    if (f.every < 1) {
      return InvalidArgument("must be at least 1", {}, "--recompute-every");
    }
    t->recompute = *r;
    t->recompute_every = f.every;
    return Status::Ok();
  }
  if (f.recompute != "none" || f.every != 1) {
    return InvalidArgument("give either torchtitan's --ac-mode or --recompute/--recompute-every",
                           {}, "--ac-mode");
  }
  t->recompute_every = 1;
  if (f.ac_mode == "none") {
    t->recompute = Recompute::kNone;
    return Status::Ok();
  }
  if (f.ac_mode == "full") {
    t->recompute = Recompute::kFull;
    return Status::Ok();
  }
  if (f.ac_mode != "selective") {
    return InvalidArgument("unknown value '" + f.ac_mode + "' (expected none, selective or full)",
                           {}, "--ac-mode");
  }
  const std::string option = Option(f);
  if (option == "op") {
    t->recompute = Recompute::kOp;
    return Status::Ok();
  }
  int64_t n = 0;
  auto [end, ec] = std::from_chars(option.data(), option.data() + option.size(), n);
  if (ec != std::errc() || end != option.data() + option.size() || n < 1) {
    return InvalidArgument("unknown value '" + option +
                               "' (expected op or a positive layer interval)",
                           {}, "--selective-ac-option");
  }
  t->recompute = Recompute::kFull;
  t->recompute_every = n;
  return Status::Ok();
}

std::string DescribeRecompute(const RecomputeFlags& f, const TrainingSpec& t) {
  if (f.ac_mode.empty()) {
    if (t.recompute_every <= 1) return "";
    return fmt::format("recompute: whole layers, every {} (1-based layers {}, {}, ...; the others "
                       "keep everything)",
                       Ordinal(t.recompute_every), t.recompute_every, 2 * t.recompute_every);
  }
  std::string words = fmt::format("torchtitan mode = \"{}\"", f.ac_mode);
  if (f.ac_mode == "selective") {
    words += fmt::format(", selective_ac_option = \"{}\"{}", Option(f),
                         f.ac_option.empty() ? " (torchtitan's default)" : "");
  }
  std::string what;
  switch (t.recompute) {
    case Recompute::kNone:
      what = "no recomputation";
      break;
    case Recompute::kOp:
      what = "per-op selective checkpointing (recompute op: every other matmul output and the "
             "attention output kept)";
      break;
    case Recompute::kFull:
      what = t.recompute_every > 1
                 ? fmt::format("full recomputation of every {} layer (1-based layers {}, {}, "
                               "...), the others keeping everything",
                               Ordinal(t.recompute_every), t.recompute_every,
                               2 * t.recompute_every)
                 : std::string("full recomputation of every layer");
      break;
    case Recompute::kSelective:
      what = "selective recomputation of the attention core";
      break;
  }
  return words + " -> " + what;
}

}  // namespace frenzy::cli
