// The `frenzy` command: thin wrappers over the library. Every subcommand has --help and --json;
// errors go to stderr naming the bad input, with exit code 2 (1 for internal failures).
#include <cstdio>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{
      "Frenzy: serverless LLM training on heterogeneous GPU clusters.\n"
      "Give it a model and training goals; it predicts memory and picks GPUs."};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(frenzy::cli::kVersion));
  frenzy::cli::RegisterCommands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  } catch (const std::exception& e) {
    // The library returns statuses; anything thrown here is a bug, reported rather than a crash.
    std::cerr << "frenzy: internal error: " << e.what() << "\n";
    return 1;
  }
  return frenzy::cli::ExitCode();
}
