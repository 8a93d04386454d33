// Subcommands of the `frenzy` CLI. Each registers itself on the CLI11 app and, when run,
// records its exit code (0 ok, 2 bad input, 1 internal error).
#ifndef FRENZY_CLI_COMMANDS_H_
#define FRENZY_CLI_COMMANDS_H_

#include <string_view>

#include <CLI/CLI.hpp>

namespace frenzy::cli {

inline constexpr std::string_view kVersion = "0.1.0";

void RegisterCommands(CLI::App& app);
int ExitCode();

}  // namespace frenzy::cli

#endif  // FRENZY_CLI_COMMANDS_H_
