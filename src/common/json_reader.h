// Typed, error-collecting access to the fields of a JSON object read from a user's file.
//
// Input files (HuggingFace configs, GPU catalogs, cluster files) are untrusted. JsonReader reads
// fields by name with a type check and an optional default, and collects every problem (missing
// field, wrong type, negative count) with the field's path instead of throwing. After reading,
// `Finish()` returns OK or one InvalidArgument status naming the file and every bad field.
//
// Thread safety: one reader per thread.
#ifndef FRENZY_COMMON_JSON_READER_H_
#define FRENZY_COMMON_JSON_READER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace frenzy {

// Parses `text` as JSON. On a syntax error the status names `where` with line and column.
Result<nlohmann::json> ParseJson(std::string_view text, const std::string& where);

// Reads a whole file. NotFound names the path when it cannot be opened.
Result<std::string> ReadFileToString(const std::string& path);

class JsonReader {
 public:
  // `obj` must outlive the reader. `where` names the file; `prefix` is prepended to field names
  // in messages (e.g. "node_groups[2].").
  JsonReader(const nlohmann::json& obj, std::string where, std::string prefix = {});

  bool Has(std::string_view name) const;
  // True when the field exists and is not null.
  bool HasValue(std::string_view name) const;

  // Integer fields. Accept JSON integers and floats with an integral value.
  std::optional<int64_t> OptInt(std::string_view name);
  int64_t Int(std::string_view name);                    // required
  int64_t Int(std::string_view name, int64_t fallback);  // optional with default
  // Like Int but requires value >= min_value.
  int64_t IntAtLeast(std::string_view name, int64_t min_value);
  int64_t IntAtLeast(std::string_view name, int64_t fallback, int64_t min_value);

  std::optional<double> OptDouble(std::string_view name);
  double Double(std::string_view name);
  double Double(std::string_view name, double fallback);

  bool Bool(std::string_view name, bool fallback);
  std::optional<bool> OptBool(std::string_view name);

  std::string String(std::string_view name);
  std::string String(std::string_view name, std::string fallback);
  std::optional<std::string> OptString(std::string_view name);

  std::vector<int64_t> IntList(std::string_view name);  // optional, empty when absent
  std::vector<std::string> StringList(std::string_view name);

  // Records a problem found by the caller (e.g. a cross-field check).
  void Error(std::string_view field, const std::string& message);

  bool ok() const { return errors_.empty(); }
  const std::string& where() const { return where_; }
  // OK, or InvalidArgument naming `where`, the first bad field, and every problem.
  Status Finish() const;

 private:
  const nlohmann::json* Get(std::string_view name) const;
  std::string FieldName(std::string_view name) const;

  const nlohmann::json& obj_;
  std::string where_;
  std::string prefix_;
  struct Problem {
    std::string field;
    std::string message;
  };
  std::vector<Problem> errors_;
};

}  // namespace frenzy

#endif  // FRENZY_COMMON_JSON_READER_H_
