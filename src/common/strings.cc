#include "common/strings.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

namespace frenzy {

std::string_view Trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::string ToLower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string Join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += sep;
    out += parts[i];
  }
  return out;
}

namespace {
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}
}  // namespace

std::vector<std::string> ClosestMatches(std::string_view query,
                                        const std::vector<std::string>& candidates, size_t limit) {
  std::string q = ToLower(query);
  std::vector<std::pair<size_t, std::string>> scored;
  for (const auto& c : candidates) {
    std::string lc = ToLower(c);
    size_t d = EditDistance(q, lc);
    bool prefix = !q.empty() && lc.starts_with(q);
    if (prefix) d = std::min<size_t>(d, 1);
    if (prefix || d * 3 <= std::max(q.size(), lc.size())) scored.emplace_back(d, c);
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> out;
  for (size_t i = 0; i < scored.size() && i < limit; ++i) out.push_back(scored[i].second);
  return out;
}

std::string WithThousands(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v);
  std::string out;
  int n = 0;
  for (auto it = digits.rbegin(); it != digits.rend(); ++it) {
    if (n > 0 && n % 3 == 0) out.push_back(',');
    out.push_back(*it);
    ++n;
  }
  if (v < 0) out.push_back('-');
  std::reverse(out.begin(), out.end());
  return out;
}

std::string HumanCount(int64_t v) {
  char buf[32];
  double d = static_cast<double>(v);
  if (d >= 1e12) {
    std::snprintf(buf, sizeof buf, "%.2fT", d / 1e12);
  } else if (d >= 1e9) {
    std::snprintf(buf, sizeof buf, "%.2fB", d / 1e9);
  } else if (d >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.1fM", d / 1e6);
  } else if (d >= 1e3) {
    std::snprintf(buf, sizeof buf, "%.1fK", d / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
  }
  return buf;
}

bool EqualConstantTime(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace frenzy
