// The fine-tuning flags that `predict`, `perf` and `plan` share: --finetune with the LoRA
// adapter's rank, alpha, dropout, targets, adapter dtype and QLoRA's double quantisation.
#ifndef FRENZY_CLI_FINETUNE_FLAGS_H_
#define FRENZY_CLI_FINETUNE_FLAGS_H_

#include <CLI/CLI.hpp>

#include <string>

#include "common/status.h"
#include "memory/training.h"

namespace frenzy::cli {

struct FineTuneFlags {
  std::string finetune = "full";
  std::string lora_targets = "all-linear";
  std::string lora_dtype = "fp32";
  bool no_double_quant = false;
  bool no_kbit_upcast = false;
  LoraSpec lora;  // rank, alpha and dropout are read into it directly
};

void AddFineTuneFlags(CLI::App* cmd, FineTuneFlags* f);

// The method and adapter the flags name; fails with the flag that is wrong.
Status ResolveFineTune(const FineTuneFlags& f, FineTune* method, LoraSpec* lora);

// "lora: rank 16 on all-linear (fp32 adapters), base frozen (16-bit)", or "" for full training.
std::string DescribeFineTune(FineTune method, const LoraSpec& lora);

}  // namespace frenzy::cli

#endif  // FRENZY_CLI_FINETUNE_FLAGS_H_
