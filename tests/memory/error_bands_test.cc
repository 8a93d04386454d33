// The published error bands (data/measurements/error_bands.json) as predict and plan read them.
#include "memory/error_bands.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace frenzy {
namespace {

// The margin covers the worst published under-prediction: the prediction of that run raised by
// the margin is at least what was measured (prediction = measured x (1 + min_error)), with half a
// percent of the reading to spare at least.
TEST(ErrorBands, TheSafeMarginCoversEveryPublishedRunOfTheFramework) {
  int with_band = 0;
  for (Framework f : {Framework::kMegatron, Framework::kDeepSpeed, Framework::kFsdp,
                      Framework::kHf}) {
    auto band = PublishedErrorBand(f);
    const double m = SafeMargin(f, 0.10);
    EXPECT_GE(m, 0.10) << FrameworkName(f);
    if (!band) continue;
    ++with_band;
    EXPECT_GT(band->rows, 0);
    EXPECT_LE(band->min_error, band->max_error);
    EXPECT_LE(band->mean_abs_error,
              std::max(-band->min_error, band->max_error) + 1e-9);  // a mean within the range
    EXPECT_GE((1.0 + band->min_error) * (1.0 + m), 1.005) << FrameworkName(f);
  }
  // Megatron-LM's 13 published runs (Megatron's own logs) are the best covered.
  auto megatron = PublishedErrorBand(Framework::kMegatron);
  ASSERT_TRUE(megatron.has_value());
  EXPECT_GE(megatron->rows, 10);
  EXPECT_GE(with_band, 3);
}

}  // namespace
}  // namespace frenzy
