// Subcommands of the `frenzy` CLI. Each registers itself on the CLI11 app and, when run,
// records its exit code (0 ok, 2 bad input, 1 internal error).
#ifndef FRENZY_CLI_COMMANDS_H_
#define FRENZY_CLI_COMMANDS_H_

#include <cstdint>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "common/status.h"

namespace frenzy::cli {

inline constexpr std::string_view kVersion = "0.1.0";

void RegisterCommands(CLI::App& app);
int ExitCode();
// Parses the command line and runs what it names; returns the process's exit code: 2 for a bad
// command line, 1 for an exception (a bug, reported as "PROGRAM: internal error"), else
// ExitCode().
int Main(CLI::App& app, int argc, char** argv, const char* program);

// Shared by the command files: print a failed status to stderr and record exit code 2 (1 for
// internal errors); set the exit code; print one JSON document to stdout.
void Fail(const Status& s);
void SetExitCode(int code);
void PrintJson(const nlohmann::json& j);
// Bytes as GiB with two decimals.
std::string Gib(int64_t bytes);
// The command-line flag of a layout field ("micro_batch" -> "--micro-batch").
std::string FlagOf(std::string field);

// catalog_commands.cc: `frenzy inspect`, and `frenzy models`, `gpus`, `cluster show|list`.
void RegisterInspectCommand(CLI::App& app);
void RegisterCatalogCommands(CLI::App& app);
// plan_command.cc: `frenzy plan`.
void RegisterPlanCommand(CLI::App& app);
// Defined in their own files: `frenzy trace ...` / `frenzy workload ...` (trace_commands.cc)
// and `frenzy simulate` (simulate_commands.cc).
void RegisterTraceCommands(CLI::App& app);
void RegisterSimulateCommands(CLI::App& app);
// server_commands.cc: `frenzy serve` (frenzyd), submit/jobs/status/cancel/cluster, agent.
void RegisterServerCommands(CLI::App& app);
// The daemon's flags on `cmd` (the `serve` subcommand, or frenzyd's own app).
void RegisterServeOptions(CLI::App* cmd);

}  // namespace frenzy::cli

#endif  // FRENZY_CLI_COMMANDS_H_
