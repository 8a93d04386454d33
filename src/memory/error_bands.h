// MARP's error band per framework, measured against published peak-memory readings it was not
// fitted to (data/measurements/error_bands.json, written by tools/compare_published.py --bands
// from data/measurements/published.csv): what `predict` reports beside a prediction, and what a
// margin must cover to err on the safe side.
#ifndef FRENZY_MEMORY_ERROR_BANDS_H_
#define FRENZY_MEMORY_ERROR_BANDS_H_

#include <cstdint>
#include <optional>

#include "memory/training.h"

namespace frenzy {

struct ErrorBand {
  int64_t rows = 0;          // published runs compared
  double min_error = 0;      // most negative (predicted - measured) / measured: under-prediction
  double max_error = 0;      // most positive
  double mean_abs_error = 0;
};

// The band of the framework's runs; nullopt when none was compared.
std::optional<ErrorBand> PublishedErrorBand(Framework f);

// A memory margin that covers the framework's worst published under-prediction with 2 points
// to spare: the m with predicted x (1 + m) = measured on that run, + 0.02, at least `base`;
// `base` when nothing was compared or it never under-predicted.
double SafeMargin(Framework f, double base);

}  // namespace frenzy

#endif  // FRENZY_MEMORY_ERROR_BANDS_H_
