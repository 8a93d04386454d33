// Bounded JSON: every JSON text that arrives from outside (an HTTP body, a stored row written
// from one) is checked against a size and nesting limit before nlohmann::json sees it.
//
// Why: nlohmann::json parses iteratively but serialises and compares recursively, so a value
// nested tens of thousands deep parses fine and then overflows the stack when it is dumped or
// stored and read back. Checking the text first is O(n), needs no allocation, and keeps a
// poison value from ever becoming a json object.
//
// Pure functions; no I/O; thread-safe.
#ifndef FRENZY_COMMON_JSON_LIMITS_H_
#define FRENZY_COMMON_JSON_LIMITS_H_

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/status.h"

namespace frenzy {

struct JsonLimits {
  // Deepest nesting of arrays and objects: a job spec with an inline HF config needs about 4;
  // real configs (rope_scaling, quantization_config) stay under 8.
  int max_depth = 64;
  size_t max_bytes = 16u << 20;
};

// The deepest nesting of arrays and objects in `text`, counting brackets outside strings (an
// invalid text still gets a number; the parser rejects it later). Stops early and returns a
// value > `stop_at` once that depth is passed.
int JsonDepth(std::string_view text, int stop_at);

// Parses `text` if it is within `limits`; kInvalidArgument naming `field` otherwise (too
// large, too deep, or not JSON, with the parser's position).
Result<nlohmann::json> ParseJsonBounded(std::string_view text, const std::string& field,
                                        const JsonLimits& limits = {});

// The parsed text, or `fallback` when it is empty, invalid or beyond the limits. For values
// this program wrote itself (stored rows) that must never crash a reader.
nlohmann::json ParseJsonOr(std::string_view text, nlohmann::json fallback,
                           const JsonLimits& limits = {});

// The nesting depth of an already-parsed value (iterative: safe on any depth).
int JsonValueDepth(const nlohmann::json& value);

// value.dump(), with invalid UTF-8 in strings replaced by U+FFFD instead of an exception: for
// values that hold bytes from outside (a request's path or method echoed in an error).
std::string DumpJson(const nlohmann::json& value);

// At most `max_bytes` of `text`, cut before a UTF-8 sequence rather than inside one.
std::string Utf8Prefix(std::string_view text, size_t max_bytes);

}  // namespace frenzy

#endif  // FRENZY_COMMON_JSON_LIMITS_H_
