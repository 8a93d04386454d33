// frenzyd: Frenzy's control plane (the same as `frenzy serve`).
#include <string>

#include <CLI/CLI.hpp>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"frenzyd: Frenzy's control plane. Accepts jobs over HTTP (/v1), plans and "
               "schedules them, launches them on a backend, and keeps its state in SQLite."};
  app.set_version_flag("--version", std::string(frenzy::cli::kVersion));
  frenzy::cli::RegisterServeOptions(&app);
  return frenzy::cli::Main(app, argc, argv, "frenzyd");
}
