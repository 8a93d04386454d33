// `predict`'s flags for batches of varying length (memory/variable_lengths.h): the dataset's
// length statistics, and the line that reports what an epoch of them reserves.
#ifndef FRENZY_CLI_LENGTH_FLAGS_H_
#define FRENZY_CLI_LENGTH_FLAGS_H_

#include <CLI/CLI.hpp>

#include <string>

#include "common/status.h"
#include "memory/memory_model.h"
#include "memory/training.h"

namespace frenzy::cli {

// `file` receives --length-file's path; ResolveLengthFile reads it into `l`.
void AddLengthOptions(CLI::App* cmd, LengthSpread* l, std::string* file);
Status ResolveLengthFile(const std::string& file, LengthSpread* l);

// What batches of varying length add to the readings, where accounted (text output).
void PrintLengthReserve(const TrainingSpec& t, const MemoryEstimate& est);

}  // namespace frenzy::cli

#endif  // FRENZY_CLI_LENGTH_FLAGS_H_
