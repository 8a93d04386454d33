#include "data/embedded.h"

#include <algorithm>

namespace frenzy {

std::optional<std::string_view> FindEmbeddedFile(std::string_view path) {
  auto files = EmbeddedFiles();
  auto it = std::lower_bound(files.begin(), files.end(), path,
                             [](const EmbeddedFile& f, std::string_view p) { return f.path < p; });
  if (it == files.end() || it->path != path) return std::nullopt;
  return it->contents;
}

}  // namespace frenzy
