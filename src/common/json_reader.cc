#include "common/json_reader.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

namespace frenzy {
namespace {

const char* TypeName(const nlohmann::json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::null:
      return "null";
    case nlohmann::json::value_t::boolean:
      return "a boolean";
    case nlohmann::json::value_t::string:
      return "a string";
    case nlohmann::json::value_t::array:
      return "an array";
    case nlohmann::json::value_t::object:
      return "an object";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
      return "an integer";
    case nlohmann::json::value_t::number_float:
      return "a number";
    default:
      return "an unsupported value";
  }
}

}  // namespace

Result<nlohmann::json> ParseJson(std::string_view text, const std::string& where) {
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is 1-based and may point one past the end.
    size_t byte = e.byte == 0 ? 0 : e.byte - 1;
    if (byte > text.size()) byte = text.size();
    int line = 1, col = 1;
    for (size_t i = 0; i < byte; ++i) {
      if (text[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    std::string msg = e.what();
    // nlohmann's message starts with "[json.exception.parse_error.101] parse error at line..":
    // keep the part after the first ": " that follows "parse error".
    if (auto pos = msg.find("parse error"); pos != std::string::npos) {
      if (auto colon = msg.find(": ", pos); colon != std::string::npos) msg = msg.substr(colon + 2);
    }
    return InvalidArgument("invalid JSON at line " + std::to_string(line) + ", column " +
                               std::to_string(col) + ": " + msg,
                           where);
  } catch (const nlohmann::json::exception& e) {
    // E.g. out_of_range for a number like 1e600 that no double holds.
    std::string msg = e.what();
    if (auto pos = msg.find("] "); pos != std::string::npos) msg = msg.substr(pos + 2);
    return InvalidArgument("invalid JSON: " + msg, where);
  }
}

Result<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open file", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status(StatusCode::kInternal, "read error", path);
  return ss.str();
}

JsonReader::JsonReader(const nlohmann::json& obj, std::string where, std::string prefix)
    : obj_(obj), where_(std::move(where)), prefix_(std::move(prefix)) {
  if (!obj_.is_object()) {
    errors_.push_back({prefix_.empty() ? std::string("(top level)") : prefix_,
                       std::string("expected a JSON object, found ") + TypeName(obj_)});
  }
}

std::string JsonReader::FieldName(std::string_view name) const {
  return prefix_ + std::string(name);
}

const nlohmann::json* JsonReader::Get(std::string_view name) const {
  if (!obj_.is_object()) return nullptr;
  auto it = obj_.find(std::string(name));
  if (it == obj_.end()) return nullptr;
  return &*it;
}

bool JsonReader::Has(std::string_view name) const { return Get(name) != nullptr; }
bool JsonReader::HasValue(std::string_view name) const {
  const auto* v = Get(name);
  return v != nullptr && !v->is_null();
}

void JsonReader::Error(std::string_view field, const std::string& message) {
  errors_.push_back({FieldName(field), message});
}

std::optional<int64_t> JsonReader::OptInt(std::string_view name) {
  const auto* v = Get(name);
  if (v == nullptr || v->is_null()) return std::nullopt;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() &&
        v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      Error(name, "integer out of range");
      return std::nullopt;
    }
    return v->get<int64_t>();
  }
  if (v->is_number_float()) {
    double d = v->get<double>();
    if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9.0e15) {
      return static_cast<int64_t>(d);
    }
    Error(name, "expected an integer, found " + v->dump());
    return std::nullopt;
  }
  Error(name, std::string("expected an integer, found ") + TypeName(*v));
  return std::nullopt;
}

int64_t JsonReader::Int(std::string_view name) {
  if (!HasValue(name)) {
    Error(name, "missing required field");
    return 0;
  }
  return OptInt(name).value_or(0);
}

int64_t JsonReader::Int(std::string_view name, int64_t fallback) {
  return OptInt(name).value_or(fallback);
}

int64_t JsonReader::IntAtLeast(std::string_view name, int64_t min_value) {
  if (!HasValue(name)) {
    Error(name, "missing required field");
    return 0;
  }
  return IntAtLeast(name, 0, min_value);
}

int64_t JsonReader::IntAtLeast(std::string_view name, int64_t fallback, int64_t min_value) {
  auto v = OptInt(name);
  if (!v) return fallback;
  if (*v < min_value) {
    Error(name, "must be at least " + std::to_string(min_value) + ", found " +
                    std::to_string(*v));
    return fallback;
  }
  return *v;
}

std::optional<double> JsonReader::OptDouble(std::string_view name) {
  const auto* v = Get(name);
  if (v == nullptr || v->is_null()) return std::nullopt;
  if (v->is_number()) {
    double d = v->get<double>();
    if (!std::isfinite(d)) {
      Error(name, "must be a finite number");
      return std::nullopt;
    }
    return d;
  }
  Error(name, std::string("expected a number, found ") + TypeName(*v));
  return std::nullopt;
}

double JsonReader::Double(std::string_view name) {
  if (!HasValue(name)) {
    Error(name, "missing required field");
    return 0;
  }
  return OptDouble(name).value_or(0);
}

double JsonReader::Double(std::string_view name, double fallback) {
  return OptDouble(name).value_or(fallback);
}

std::optional<bool> JsonReader::OptBool(std::string_view name) {
  const auto* v = Get(name);
  if (v == nullptr || v->is_null()) return std::nullopt;
  if (v->is_boolean()) return v->get<bool>();
  Error(name, std::string("expected true or false, found ") + TypeName(*v));
  return std::nullopt;
}

bool JsonReader::Bool(std::string_view name, bool fallback) {
  return OptBool(name).value_or(fallback);
}

std::optional<std::string> JsonReader::OptString(std::string_view name) {
  const auto* v = Get(name);
  if (v == nullptr || v->is_null()) return std::nullopt;
  if (v->is_string()) return v->get<std::string>();
  Error(name, std::string("expected a string, found ") + TypeName(*v));
  return std::nullopt;
}

std::string JsonReader::String(std::string_view name) {
  if (!HasValue(name)) {
    Error(name, "missing required field");
    return {};
  }
  return OptString(name).value_or("");
}

std::string JsonReader::String(std::string_view name, std::string fallback) {
  auto v = OptString(name);
  return v ? *v : std::move(fallback);
}

std::vector<int64_t> JsonReader::IntList(std::string_view name) {
  std::vector<int64_t> out;
  const auto* v = Get(name);
  if (v == nullptr || v->is_null()) return out;
  if (!v->is_array()) {
    Error(name, std::string("expected a list of integers, found ") + TypeName(*v));
    return out;
  }
  for (const auto& e : *v) {
    if (!e.is_number_integer()) {
      Error(name, std::string("expected a list of integers, found an element that is ") +
                      TypeName(e));
      return {};
    }
    out.push_back(e.get<int64_t>());
  }
  return out;
}

std::vector<std::string> JsonReader::StringList(std::string_view name) {
  std::vector<std::string> out;
  const auto* v = Get(name);
  if (v == nullptr || v->is_null()) return out;
  if (!v->is_array()) {
    Error(name, std::string("expected a list of strings, found ") + TypeName(*v));
    return out;
  }
  for (const auto& e : *v) {
    if (!e.is_string()) {
      Error(name, std::string("expected a list of strings, found an element that is ") +
                      TypeName(e));
      return {};
    }
    out.push_back(e.get<std::string>());
  }
  return out;
}

Status JsonReader::Finish() const {
  if (errors_.empty()) return Status::Ok();
  std::string msg = errors_[0].message;
  for (size_t i = 1; i < errors_.size(); ++i) {
    msg += "; also field '" + errors_[i].field + "': " + errors_[i].message;
  }
  return InvalidArgument(msg, where_, errors_[0].field);
}

}  // namespace frenzy
