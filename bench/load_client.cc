// Load client for frenzyd (bench/load_bench.py drives it): N job submissions from C client
// threads, each on its own keep-alive connection, against POST /v1/jobs. Prints one JSON line:
// submissions per second (every answer a 201, sent after the daemon's commit) and latency
// percentiles in milliseconds. A compiled client keeps the measurement about the daemon: a
// Python client's interpreter lock adds milliseconds of its own to the tail.
//
// usage: frenzy_load_client PORT TOKEN SUBMISSIONS CLIENTS SPEC_JSON
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s PORT TOKEN SUBMISSIONS CLIENTS SPEC_JSON\n", argv[0]);
    return 2;
  }
  const int port = std::atoi(argv[1]);
  const std::string token = argv[2];
  const long n = std::atol(argv[3]);
  const int clients = std::atoi(argv[4]);
  const std::string spec = argv[5];
  if (port <= 0 || n <= 0 || clients <= 0) {
    std::fprintf(stderr, "PORT, SUBMISSIONS and CLIENTS must be positive\n");
    return 2;
  }
  using Clock = std::chrono::steady_clock;
  std::vector<double> latencies;
  std::mutex mu;
  std::atomic<long> failures{0};
  std::string first_failure;
  auto worker = [&](long count) {
    httplib::Client c("127.0.0.1", port);
    c.set_keep_alive(true);
    c.set_tcp_nodelay(true);
    c.set_read_timeout(30, 0);
    httplib::Headers headers = {{"Authorization", "Bearer " + token}};
    std::vector<double> mine;
    mine.reserve(static_cast<size_t>(count));
    for (long i = 0; i < count; ++i) {
      auto t0 = Clock::now();
      auto r = c.Post("/v1/jobs", headers, spec, "application/json");
      mine.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      if (!r || r->status != 201) {
        if (failures.fetch_add(1) == 0) {
          std::lock_guard<std::mutex> lock(mu);
          first_failure = r ? std::to_string(r->status) + " " + r->body
                            : "no answer: " + httplib::to_string(r.error());
        }
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    latencies.insert(latencies.end(), mine.begin(), mine.end());
  };
  std::vector<std::thread> threads;
  auto t0 = Clock::now();
  for (int i = 0; i < clients; ++i) threads.emplace_back(worker, n / clients + (i < n % clients));
  for (std::thread& t : threads) t.join();
  const double wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (failures.load() > 0) {
    std::fprintf(stderr, "%ld of %ld submissions failed; the first: %s\n", failures.load(), n,
                 first_failure.c_str());
    return 1;
  }
  std::sort(latencies.begin(), latencies.end());
  auto pct = [&](double p) {
    size_t i = std::min(latencies.size() - 1, static_cast<size_t>(p * latencies.size()));
    return latencies[i];
  };
  std::printf("{\"rate\": %.1f, \"p50_ms\": %.3f, \"p99_ms\": %.3f, \"max_ms\": %.3f}\n",
              static_cast<double>(n) / wall_s, pct(0.5), pct(0.99), latencies.back());
  return 0;
}
