#include <fmt/core.h>
#include <openssl/evp.h>

#include <random>

#include "common/json_limits.h"
#include "server/daemon_internal.h"

namespace frenzy::server::internal {

using nlohmann::json;

int64_t KeyOf(const std::string& id) {
  size_t dash = id.find('-');
  return dash == std::string::npos ? -1 : std::strtoll(id.c_str() + dash + 1, nullptr, 10);
}

std::string Describe(const Plan& p) {
  return fmt::format("{} x {} (tp {}, pp {}, dp {}, micro-batch {}, zero {}, recompute {})", p.gpus,
                     p.gpu, p.tp, p.pp, p.dp, p.micro_batch, p.zero, RecomputeText(p));
}

json ParseOr(const std::string& text, json fallback) {
  return ParseJsonOr(text, std::move(fallback));
}

std::string Sha256Hex(const std::string& text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(text.data(), text.size(), digest, &len, EVP_sha256(), nullptr);
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) hex += fmt::format("{:02x}", digest[i]);
  return hex;
}

std::string NewRunToken() {
  std::random_device rd("/dev/urandom");
  std::string t;
  for (int i = 0; i < 8; ++i) t += fmt::format("{:08x}", rd());
  return "run-" + t;
}

Result<json> CleanGpuReading(const json& g, size_t i) {
  const std::string at = fmt::format("gpus[{}]", i);
  if (!g.is_object()) return InvalidArgument("each GPU must be an object", {}, at);
  json out = json::object();
  for (const char* key : {"gpu", "name"}) {
    if (!g.contains(key)) continue;
    if (!g[key].is_string() || g[key].get_ref<const std::string&>().size() > 128) {
      return InvalidArgument("must be a string of at most 128 characters", {}, at + "." + key);
    }
    out[key] = g[key];
  }
  if (g.contains("index")) {
    if (!g["index"].is_number_integer() || g["index"].get<int64_t>() < 0 ||
        g["index"].get<int64_t>() > 1024) {
      return InvalidArgument("must be an integer in [0, 1024]", {}, at + ".index");
    }
    out["index"] = g["index"];
  }
  for (const char* key : {"memory_total_bytes", "memory_used_bytes"}) {
    if (!g.contains(key)) continue;
    if (!g[key].is_number_integer() || g[key].get<int64_t>() < 0 ||
        g[key].get<double>() > kMaxPeakBytes) {
      return InvalidArgument("must be an integer number of bytes in [0, 1 TiB]", {},
                             at + "." + key);
    }
    out[key] = g[key];
  }
  return out;
}

}  // namespace frenzy::server::internal
