// Data files compiled into the binary (the model zoo, the GPU catalog, the bundled clusters),
// so that `frenzy` runs anywhere without its source tree. Paths are relative to `data/`,
// e.g. "models/llama-2-7b.json".
#ifndef FRENZY_DATA_EMBEDDED_H_
#define FRENZY_DATA_EMBEDDED_H_

#include <optional>
#include <span>
#include <string_view>

namespace frenzy {

struct EmbeddedFile {
  std::string_view path;
  std::string_view contents;
};

// All embedded files, sorted by path.
std::span<const EmbeddedFile> EmbeddedFiles();

// The contents of `path`, or nullopt.
std::optional<std::string_view> FindEmbeddedFile(std::string_view path);

}  // namespace frenzy

#endif  // FRENZY_DATA_EMBEDDED_H_
