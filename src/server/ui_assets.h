// The dashboard's static files (src/server/ui/), embedded in the binary at build time: frenzyd
// serves them at / and /ui/ with nothing to download or install (docs/server.md, "Dashboard").
#ifndef FRENZY_SERVER_UI_ASSETS_H_
#define FRENZY_SERVER_UI_ASSETS_H_

#include <string_view>

namespace frenzy::server {

struct UiAsset {
  std::string_view content_type;
  std::string_view body;
};

// The asset served at `path` ("/" is index.html; "/ui/app.js", "/ui/app.css"), or nullptr.
const UiAsset* FindUiAsset(std::string_view path);

}  // namespace frenzy::server

#endif  // FRENZY_SERVER_UI_ASSETS_H_
