#include "cli/finetune_flags.h"

#include <fmt/format.h>

namespace frenzy::cli {

void AddFineTuneFlags(CLI::App* cmd, FineTuneFlags* f) {
  cmd->add_option("--finetune", f->finetune,
                  "full|lora|qlora (PEFT adapters over a frozen 16-bit or 4-bit NF4 base)")
      ->capture_default_str();
  cmd->add_option("--lora-rank", f->lora.rank, "LoRA rank r")->capture_default_str();
  cmd->add_option("--lora-alpha", f->lora.alpha, "LoRA alpha (scaling alpha / r)")
      ->capture_default_str();
  cmd->add_option("--lora-dropout", f->lora.dropout, "Dropout on the adapters' input")
      ->capture_default_str();
  cmd->add_option("--lora-targets", f->lora_targets,
                  "attention|all-linear|q_proj,v_proj,... (PEFT's target_modules); add "
                  "lm_head to adapt the output layer too (all-linear,lm_head)")
      ->capture_default_str();
  cmd->add_option("--lora-dtype", f->lora_dtype,
                  "fp32 (PEFT's default) or bf16/fp16 (adapters cast to 16 bits, as the QLoRA "
                  "reference script does)")
      ->capture_default_str();
  cmd->add_flag("--no-double-quant", f->no_double_quant,
                "QLoRA without double quantisation (fp32 absmax per 64 weights)");
  cmd->add_flag("--no-kbit-upcast", f->no_kbit_upcast,
                "QLoRA without prepare_model_for_kbit_training: unquantised weights stay 16-bit "
                "(litgpt, torchtune)");
}

Status ResolveFineTune(const FineTuneFlags& f, FineTune* method, LoraSpec* lora) {
  auto m = ParseFineTune(f.finetune);
  if (!m) {
    return InvalidArgument("unknown value '" + f.finetune + "' (expected full, lora or qlora)", {},
                           "--finetune");
  }
  std::string word;
  auto targets = ParseLoraTargets(f.lora_targets, &word);
  if (!targets) {
    return InvalidArgument("unknown module '" + word +
                               "' (expected attention, all-linear or q_proj,k_proj,v_proj,o_proj,"
                               "gate_proj,up_proj,down_proj,lm_head)",
                           {}, "--lora-targets");
  }
  LoraSpec l = f.lora;
  l.targets = *targets;
  l.double_quant = !f.no_double_quant;
  l.upcast_rest = !f.no_kbit_upcast;
  if (f.lora_dtype == "fp32") {
    l.adapter_bytes = 4;
  } else if (f.lora_dtype == "bf16" || f.lora_dtype == "fp16") {
    l.adapter_bytes = 2;
  } else {
    return InvalidArgument("unknown value '" + f.lora_dtype + "' (expected fp32, bf16 or fp16)",
                           {}, "--lora-dtype");
  }
  *method = *m;
  *lora = l;
  return Status::Ok();
}

std::string DescribeFineTune(FineTune method, const LoraSpec& l) {
  if (method == FineTune::kFull) return "";
  const bool q = method == FineTune::kQlora;
  return fmt::format("{}: rank {} on {} ({} adapters{}{}), base frozen ({})",
                     FineTuneName(method), l.rank, LoraTargetsName(l.targets),
                     l.adapter_bytes == 4 ? "fp32" : "16-bit",
                     l.dropout > 0 ? fmt::format(", dropout {:g}", l.dropout) : std::string(),
                     q && !l.double_quant ? ", no double quant" : "",
                     q ? (l.upcast_rest ? "NF4 layers, fp32 rest" : "NF4 layers, 16-bit rest")
                       : "16-bit");
}

}  // namespace frenzy::cli
