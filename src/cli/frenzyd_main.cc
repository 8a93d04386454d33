// frenzyd: Frenzy's control plane (the same as `frenzy serve`).
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"frenzyd: Frenzy's control plane. Accepts jobs over HTTP (/v1), plans and "
               "schedules them, launches them on a backend, and keeps its state in SQLite."};
  app.set_version_flag("--version", std::string(frenzy::cli::kVersion));
  frenzy::cli::RegisterServeOptions(&app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  } catch (const std::exception& e) {
    std::cerr << "frenzyd: internal error: " << e.what() << "\n";
    return 1;
  }
  return frenzy::cli::ExitCode();
}
