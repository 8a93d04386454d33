#include "cli/length_flags.h"

#include <fmt/format.h>

#include <string>

#include "cli/commands.h"
#include "common/json_reader.h"

namespace frenzy::cli {

void AddLengthOptions(CLI::App* cmd, LengthSpread* l, std::string* file) {
  cmd->add_option("--length-mean", l->mean,
                  "Batches of varying length: the dataset's mean sample length in tokens "
                  "(--seq-len is then the longest batch); reports the reserved and device "
                  "readings an epoch reaches");
  cmd->add_option("--length-sd", l->sd, "... the standard deviation of its sample lengths");
  cmd->add_option("--length-min", l->min, "... its shortest sample")->capture_default_str();
  cmd->add_option("--length-samples", l->samples, "... the samples of an epoch")
      ->capture_default_str();
  cmd->add_option("--length-file", *file,
                  "Batches of varying length: the dataset's own sample lengths, one per line in "
                  "data order (instead of --length-mean and --length-sd; replayed as they come)");
  cmd->add_flag("--drop-long", l->drop_long,
                "... samples longer than --seq-len are dropped (ms-swift's truncation_strategy "
                "'delete'); default: cut to it");
}

Status ResolveLengthFile(const std::string& file, LengthSpread* l) {
  if (file.empty()) return Status::Ok();
  auto text = ReadFileToString(file);
  if (!text.ok()) return text.status().WithWhere("--length-file");
  auto order = ParseLengthFile(*text, file);
  if (!order.ok()) return order.status();
  l->order = std::move(*order);
  return Status::Ok();
}

void PrintLengthReserve(const TrainingSpec& t, const MemoryEstimate& est) {
  if (!t.lengths.active()) return;
  const LengthSpread& l = t.lengths;
  const StageEstimate& w = est.stages.at(static_cast<size_t>(est.worst_stage));
  if (w.length_batches == 0) {
    fmt::print("  varying lengths: every sample is longer than {} tokens, and --drop-long drops "
               "them all\n",
               t.seq_len);
    return;
  }
  const std::string replayed =
      w.length_replayed < w.length_batches
          ? fmt::format("; the first {} replayed: a lower bound", w.length_replayed)
          : "";
  const std::string source =
      l.order.empty()
          ? fmt::format("{:.0f} +- {:.0f} tokens, at least {}, {} samples", l.mean, l.sd, l.min,
                        l.samples)
          : fmt::format("{} samples of the length file, in its order", l.order.size());
  const std::string orders = l.order.empty()
                                 ? fmt::format("median of {} data orders; {} to {}",
                                               w.length_orders, Gib(w.length_reserve_low),
                                               Gib(w.length_reserve_high))
                                 : "the file's order";
  fmt::print("  varying lengths ({}, longer than {} {}; {} micro-batches padded to their "
             "longest{}): over an epoch the allocator reserves {} GiB more than at a fixed "
             "length ({}): reserved {} GiB, device {} GiB (at most the GPU's memory, where --gpu "
             "names it). A reading, not a fit: the allocator frees its cache before it reports "
             "out of memory\n",
             source, t.seq_len, l.drop_long ? "dropped" : "cut", w.length_batches, replayed,
             Gib(w.length_reserve_bytes), orders, Gib(est.length_reserved_bytes),
             Gib(est.length_device_bytes));
}

}  // namespace frenzy::cli
