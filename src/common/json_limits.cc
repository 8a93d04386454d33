#include "common/json_limits.h"

#include <fmt/core.h>

#include <utility>
#include <vector>

namespace frenzy {

int JsonDepth(std::string_view text, int stop_at) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, whatever it is, cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        if (++depth > deepest) {
          deepest = depth;
          if (deepest > stop_at) return deepest;
        }
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        break;
      default:
        break;
    }
  }
  return deepest;
}

Result<nlohmann::json> ParseJsonBounded(std::string_view text, const std::string& field,
                                        const JsonLimits& limits) {
  if (text.size() > limits.max_bytes) {
    return InvalidArgument(
        fmt::format("JSON of {} bytes; at most {}", text.size(), limits.max_bytes), {}, field);
  }
  if (JsonDepth(text, limits.max_depth) > limits.max_depth) {
    return InvalidArgument(fmt::format("JSON nested deeper than {} levels", limits.max_depth), {},
                           field);
  }
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is the 1-based position where the parser gave up.
    return InvalidArgument(fmt::format("not valid JSON (at byte {})", e.byte), {}, field);
  } catch (const nlohmann::json::exception&) {
    // out_of_range: a number beyond a double (1e400).
    return InvalidArgument("not valid JSON: a number out of range", {}, field);
  }
}

nlohmann::json ParseJsonOr(std::string_view text, nlohmann::json fallback,
                           const JsonLimits& limits) {
  if (text.empty() || text.size() > limits.max_bytes ||
      JsonDepth(text, limits.max_depth) > limits.max_depth) {
    return fallback;
  }
  try {
    nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    return j.is_discarded() ? fallback : j;
  } catch (const nlohmann::json::exception&) {
    return fallback;  // a number beyond a double
  }
}

std::string DumpJson(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string Utf8Prefix(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  size_t end = max_bytes;
  // Back up over continuation bytes (10xxxxxx) to the start of the cut sequence.
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return std::string(text.substr(0, end));
}

int JsonValueDepth(const nlohmann::json& value) {
  int deepest = 0;
  std::vector<std::pair<const nlohmann::json*, int>> todo = {{&value, 0}};
  while (!todo.empty()) {
    auto [v, d] = todo.back();
    todo.pop_back();
    if (!v->is_structured()) continue;
    deepest = std::max(deepest, d + 1);
    for (const auto& child : *v) todo.emplace_back(&child, d + 1);
  }
  return deepest;
}

}  // namespace frenzy
