// Replays a recorded sequence of allocations and frees through Frenzy's caching-allocator model
// (memory/caching_allocator.h) and prints what it reserved and held allocated at most, as JSON.
// The events come from `tools/measure_memory.py --events-out FILE` (a real PyTorch step on a
// CPU, allocation by allocation): the check of MARP's synthetic step events (memory/
// step_events.h) against a real step's.
//
// usage: frenzy_alloc_replay EVENTS_FILE [STEPS]   (STEPS: replays of the file, default 1)
// Each line is `BYTES FREE_OF`: BYTES > 0 with FREE_OF -1 allocates (the event's index is its
// line, from 0); FREE_OF >= 0 frees that earlier allocation.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "memory/step_events.h"

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: %s EVENTS_FILE [STEPS]\n", argv[0]);
    return 2;
  }
  std::ifstream in(argv[1]);
  if (!in) {
    std::fprintf(stderr, "%s: cannot read %s\n", argv[0], argv[1]);
    return 1;
  }
  int steps = 1;
  if (argc == 3) {
    try {
      steps = std::stoi(argv[2]);
    } catch (const std::exception&) {
      steps = 0;
    }
    if (steps < 1) {
      std::fprintf(stderr, "%s: STEPS must be a positive integer, got '%s'\n", argv[0], argv[2]);
      return 2;
    }
  }
  std::vector<frenzy::StepEvent> events;
  std::vector<bool> live;
  int64_t bytes = 0, free_of = 0;
  int64_t line = 0;
  while (in >> bytes >> free_of) {
    ++line;
    const auto n = static_cast<int64_t>(events.size());
    const bool alloc = free_of == -1 && bytes > 0;
    const bool free = bytes == 0 && free_of >= 0 && free_of < n &&
                      live[static_cast<size_t>(free_of)];
    if (!alloc && !free) {
      std::fprintf(stderr, "%s: %s line %lld: expected `BYTES -1` or `0 I` of a live allocation\n",
                   argv[0], argv[1], static_cast<long long>(line));
      return 1;
    }
    if (free) live[static_cast<size_t>(free_of)] = false;
    live.push_back(alloc);
    events.push_back({alloc ? bytes : 0, alloc ? -1 : free_of});
  }
  if (!in.eof()) {
    std::fprintf(stderr, "%s: %s line %lld: not two integers\n", argv[0], argv[1],
                 static_cast<long long>(line + 1));
    return 1;
  }
  const frenzy::StepReplay r = frenzy::ReplaySteps(events, steps);
  std::printf("{\"events\": %zu, \"steps\": %d, \"peak_allocated_bytes\": %lld, "
              "\"reserved_bytes\": %lld}\n",
              events.size(), steps, static_cast<long long>(r.peak_allocated),
              static_cast<long long>(r.reserved));
  return 0;
}
