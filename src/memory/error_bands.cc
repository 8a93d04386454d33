#include "memory/error_bands.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>

#include "data/embedded.h"

namespace frenzy {

std::optional<ErrorBand> PublishedErrorBand(Framework f) {
  static const nlohmann::json bands = [] {
    auto text = FindEmbeddedFile("measurements/error_bands.json");
    nlohmann::json j = text ? nlohmann::json::parse(*text, nullptr, false) : nlohmann::json();
    return j.is_object() && j.contains("frameworks") && j["frameworks"].is_object()
               ? j["frameworks"]
               : nlohmann::json::object();
  }();
  const std::string name = FrameworkName(f);
  if (!bands.contains(name) || !bands[name].is_object()) return std::nullopt;
  const nlohmann::json& b = bands[name];
  ErrorBand e;
  e.rows = b.value("rows", int64_t{0});
  e.min_error = b.value("min_error", 0.0);
  e.max_error = b.value("max_error", 0.0);
  e.mean_abs_error = b.value("mean_abs_error", 0.0);
  if (e.rows <= 0) return std::nullopt;
  return e;
}

double SafeMargin(Framework f, double base) {
  auto band = PublishedErrorBand(f);
  if (!band || band->min_error >= 0) return base;
  // predicted x (1 + m) >= measured, predicted = measured x (1 + min_error).
  return std::max(base, 1.0 / (1.0 + band->min_error) - 1.0 + 0.02);
}

}  // namespace frenzy
