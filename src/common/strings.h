// Small string helpers shared by the modules.
#ifndef FRENZY_COMMON_STRINGS_H_
#define FRENZY_COMMON_STRINGS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace frenzy {

std::string ToLower(std::string_view s);

// a == b in time that depends only on the lengths, not on where they differ (for secrets).
bool EqualConstantTime(std::string_view a, std::string_view b);
// `s` without leading and trailing whitespace (a view into `s`).
std::string_view Trim(std::string_view s);
std::string Join(const std::vector<std::string>& parts, std::string_view sep);

// Up to `limit` candidates closest to `query` by case-insensitive edit distance, best first,
// keeping only plausible ones (distance at most a third of the longer string, or a prefix
// match).
std::vector<std::string> ClosestMatches(std::string_view query,
                                        const std::vector<std::string>& candidates, size_t limit);

// 6738415616 -> "6,738,415,616".
std::string WithThousands(int64_t v);
// 6738415616 -> "6.74B"; 124439808 -> "124.4M".
std::string HumanCount(int64_t v);

}  // namespace frenzy

#endif  // FRENZY_COMMON_STRINGS_H_
