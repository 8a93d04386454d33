// A model of PyTorch's CUDA caching allocator: replays a sequence of allocations and frees and
// says what `torch.cuda.memory_reserved` and `memory_allocated` would read after it.
//
// The rules (PyTorch's "CUDA semantics: memory management" notes and the comments of
// c10/cuda/CUDACachingAllocator.cpp, stable from 1.x through 2.x with the default settings:
// no max_split_size_mb, no expandable segments, no garbage-collection threshold):
// * a request is rounded up to a multiple of 512 bytes (at least 512);
// * requests of at most 1 MiB are served from the small pool, larger ones from the large pool;
//   each pool is kept per CUDA stream, and a freed block serves only its own stream again;
// * a request takes the smallest cached free block of its pool that is large enough (best fit);
//   the rest of that block is split off as a new free block when at least 512 bytes (small pool)
//   or more than 1 MiB (large pool) would be left, otherwise the whole block is handed out and
//   counted as allocated;
// * with no such block a new segment is reserved from the driver: 2 MiB for a small request,
//   20 MiB for a large one under 10 MiB, the request rounded up to 2 MiB otherwise;
// * a freed block merges with free neighbours of its own segment; segments are never returned
//   (no empty_cache in a replay), except when a new segment would pass the device's memory (a
//   limit, where set): then, as PyTorch does before it reports an out-of-memory error
//   (`release_cached_blocks` in DeviceCachingAllocator::malloc), every cached segment that is
//   free as a whole goes back to the driver and the request is tried again.
#ifndef FRENZY_MEMORY_CACHING_ALLOCATOR_H_
#define FRENZY_MEMORY_CACHING_ALLOCATOR_H_

#include <cstdint>
#include <map>
#include <set>
#include <utility>
#include <vector>

namespace frenzy {

class CachingAllocatorModel {
 public:
  using Handle = int64_t;

  // Allocates `bytes` (> 0) on `stream` and returns the block's handle.
  Handle Malloc(int64_t bytes, int stream = 0);
  // Frees a block Malloc returned and not yet freed (anything else is ignored).
  void Free(Handle h);

  int64_t allocated() const { return allocated_; }
  int64_t reserved() const { return reserved_; }
  // The most reserved at once (torch.cuda.max_memory_reserved).
  int64_t peak_reserved() const { return peak_reserved_; }

  // Bytes the segments may take in all (0: no limit). A request that cannot be served within
  // them even after the free segments are released is still served, and counted as an
  // out-of-memory error.
  void set_limit(int64_t bytes) { limit_ = bytes; }
  bool out_of_memory() const { return out_of_memory_; }
  // Bytes of the free cached blocks that `stream` can reuse, and the largest of them.
  int64_t CachedFree(int stream) const;
  int64_t LargestFree(int stream) const;

  // The rounding and segment-size rules above.
  static int64_t RoundSize(int64_t bytes);
  static int64_t SegmentSize(int64_t rounded);

 private:
  struct Block {
    int64_t size = 0;
    int stream = 0;
    bool small = false;
    bool free = true;
    Handle prev = -1, next = -1;  // neighbours in the same segment
  };
  // Free blocks per (stream, small pool?), ordered by size then handle: best fit is lower_bound.
  using FreeKey = std::pair<int64_t, Handle>;
  // Merges free block `next` (the successor of `h`) into `h`, taking it out of `pool`.
  void Absorb(Handle h, Handle next, std::set<FreeKey>& pool);
  // Returns every cached segment that is free as a whole.
  void ReleaseFreeSegments();
  std::map<std::pair<int, bool>, std::set<FreeKey>> free_;
  std::vector<Block> blocks_;
  int64_t allocated_ = 0, reserved_ = 0, peak_reserved_ = 0, limit_ = 0;
  bool out_of_memory_ = false;
};

}  // namespace frenzy

#endif  // FRENZY_MEMORY_CACHING_ALLOCATOR_H_
