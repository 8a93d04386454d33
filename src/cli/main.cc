// The `frenzy` command: thin wrappers over the library. Every subcommand has --help and --json;
// errors go to stderr naming the bad input, with exit code 2 (1 for internal failures).
#include <string>

#include <CLI/CLI.hpp>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{
      "Frenzy: serverless LLM training on heterogeneous GPU clusters.\n"
      "Give it a model and training goals; it predicts memory and picks GPUs."};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(frenzy::cli::kVersion));
  frenzy::cli::RegisterCommands(app);
  return frenzy::cli::Main(app, argc, argv, "frenzy");
}
