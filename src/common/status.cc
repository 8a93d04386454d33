#include "common/status.h"

namespace frenzy {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kInvalidArgument:
      return "invalid_argument";
    case StatusCode::kNotFound:
      return "not_found";
    case StatusCode::kFailedPrecondition:
      return "failed_precondition";
    case StatusCode::kInternal:
      return "internal";
  }
  return "unknown";
}

Status Status::WithWhere(const std::string& where) const {
  Status copy = *this;
  if (copy.where_.empty()) copy.where_ = where;
  return copy;
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  std::string out;
  if (!where_.empty()) out += where_ + ": ";
  if (!field_.empty()) out += "field '" + field_ + "': ";
  out += message_;
  return out;
}

}  // namespace frenzy
