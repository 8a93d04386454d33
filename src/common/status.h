// Status and Result<T>: errors as values.
//
// A recoverable failure (bad input file, unknown name, impossible request) is returned as a
// Status carrying a code, a message a user can act on, and where known the place of the problem
// (`where`: a file, "file:line" or a URL path) and the offending `field`. Exceptions never cross
// a module boundary; broken invariants are assertions, not statuses.
//
// Result<T> holds either a T or a non-OK Status. C++20 has no std::expected; this small type is
// shaped so that it can be swapped for one later.
//
// Thread safety: values; no shared state.
#ifndef FRENZY_COMMON_STATUS_H_
#define FRENZY_COMMON_STATUS_H_

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace frenzy {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // malformed or nonsensical input
  kNotFound,         // a named thing (file, model, GPU type) does not exist
  kFailedPrecondition,
  kInternal,
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message, std::string where = {}, std::string field = {})
      : code_(code), message_(std::move(message)), where_(std::move(where)),
        field_(std::move(field)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  const std::string& where() const { return where_; }
  const std::string& field() const { return field_; }

  // Returns a copy whose `where` is set if it was empty (used when a caller knows the file).
  Status WithWhere(const std::string& where) const;

  // "where: field 'x': message" — the form printed to users.
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
  std::string where_;
  std::string field_;
};

inline Status InvalidArgument(std::string message, std::string where = {},
                              std::string field = {}) {
  return Status(StatusCode::kInvalidArgument, std::move(message), std::move(where),
                std::move(field));
}
inline Status NotFound(std::string message, std::string where = {}, std::string field = {}) {
  return Status(StatusCode::kNotFound, std::move(message), std::move(where), std::move(field));
}

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT: implicit by design
    assert(!std::get<Status>(v_).ok() && "Result needs a non-OK status or a value");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  // REQUIRES: ok()
  const T& value() const& {
    assert(ok());
    return std::get<T>(v_);
  }
  T& value() & {
    assert(ok());
    return std::get<T>(v_);
  }
  T&& value() && {
    assert(ok());
    return std::get<T>(std::move(v_));
  }
  const T& operator*() const& { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace frenzy

#define FRENZY_CONCAT_INNER_(a, b) a##b
#define FRENZY_CONCAT_(a, b) FRENZY_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (a Status) is not OK.
#define RETURN_IF_ERROR(expr)                    \
  do {                                           \
    ::frenzy::Status frenzy_status_ = (expr);    \
    if (!frenzy_status_.ok()) return frenzy_status_; \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, F())`: x = F().value(), or returns F()'s status.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(FRENZY_CONCAT_(frenzy_result_, __LINE__), lhs, expr)
// NOLINTNEXTLINE(bugprone-macro-parentheses): lhs is a declaration, it cannot be parenthesized.
#define ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                           \
  if (!tmp.ok()) return tmp.status();          \
  lhs = std::move(tmp).value()

#endif  // FRENZY_COMMON_STATUS_H_
