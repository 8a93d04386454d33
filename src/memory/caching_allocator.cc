#include "memory/caching_allocator.h"

#include <algorithm>

namespace frenzy {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kMinBlock = 512;           // every request is a multiple of this
constexpr int64_t kSmallSize = kMiB;         // largest request of the small pool
constexpr int64_t kSmallBuffer = 2 * kMiB;   // small-pool segments
constexpr int64_t kLargeBuffer = 20 * kMiB;  // segments for large requests under kMinLargeAlloc
constexpr int64_t kMinLargeAlloc = 10 * kMiB;
constexpr int64_t kRoundLarge = 2 * kMiB;

}  // namespace

int64_t CachingAllocatorModel::RoundSize(int64_t bytes) {
  if (bytes < kMinBlock) return kMinBlock;
  return (bytes + kMinBlock - 1) / kMinBlock * kMinBlock;
}

int64_t CachingAllocatorModel::SegmentSize(int64_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

CachingAllocatorModel::Handle CachingAllocatorModel::Malloc(int64_t bytes, int stream) {
  const int64_t size = RoundSize(std::max<int64_t>(bytes, 1));
  const bool small = size <= kSmallSize;
  std::set<FreeKey>& pool = free_[{stream, small}];
  Handle h;
  auto it = pool.lower_bound({size, -1});
  if (it != pool.end()) {
    h = it->second;
    pool.erase(it);
  } else {
    const int64_t segment = SegmentSize(size);
    if (limit_ > 0 && reserved_ + segment > limit_) {
      ReleaseFreeSegments();
      if (reserved_ + segment > limit_) out_of_memory_ = true;
    }
    h = static_cast<Handle>(blocks_.size());
    blocks_.push_back(Block{segment, stream, small, true, -1, -1});
    reserved_ += segment;
    peak_reserved_ = std::max(peak_reserved_, reserved_);
  }
  const int64_t rest = blocks_[h].size - size;
  if (small ? rest >= kMinBlock : rest > kSmallSize) {
    const Handle r = static_cast<Handle>(blocks_.size());
    const Handle after = blocks_[h].next;
    blocks_.push_back(Block{rest, stream, small, true, h, after});  // may reallocate blocks_
    if (after >= 0) blocks_[after].prev = r;
    blocks_[h].next = r;
    blocks_[h].size = size;
    pool.insert({rest, r});
  }
  blocks_[h].free = false;
  allocated_ += blocks_[h].size;
  return h;
}

void CachingAllocatorModel::Free(Handle h) {
  if (h < 0 || h >= static_cast<Handle>(blocks_.size()) || blocks_[h].free) return;
  allocated_ -= blocks_[h].size;
  blocks_[h].free = true;
  std::set<FreeKey>& pool = free_[{blocks_[h].stream, blocks_[h].small}];
  // Merge into a free predecessor, then absorb a free successor.
  const Handle p = blocks_[h].prev;
  if (p >= 0 && blocks_[p].free) {
    pool.erase({blocks_[p].size, p});
    Absorb(p, h, pool);
    h = p;
  }
  const Handle n = blocks_[h].next;
  if (n >= 0 && blocks_[n].free) Absorb(h, n, pool);
  pool.insert({blocks_[h].size, h});
}

void CachingAllocatorModel::Absorb(Handle h, Handle next, std::set<FreeKey>& pool) {
  pool.erase({blocks_[next].size, next});  // absent when `next` is the block being freed
  blocks_[h].size += blocks_[next].size;
  blocks_[h].next = blocks_[next].next;
  if (blocks_[next].next >= 0) blocks_[blocks_[next].next].prev = h;
  blocks_[next].size = 0;
}

void CachingAllocatorModel::ReleaseFreeSegments() {
  for (auto& [key, pool] : free_) {
    for (auto it = pool.begin(); it != pool.end();) {
      Block& b = blocks_[it->second];
      if (b.prev < 0 && b.next < 0) {
        reserved_ -= b.size;
        b.size = 0;
        it = pool.erase(it);
      } else {
        ++it;
      }
    }
  }
}

int64_t CachingAllocatorModel::CachedFree(int stream) const {
  int64_t sum = 0;
  for (const auto& [key, pool] : free_) {
    if (key.first != stream) continue;
    for (const auto& [size, h] : pool) sum += size;
  }
  return sum;
}

int64_t CachingAllocatorModel::LargestFree(int stream) const {
  int64_t best = 0;
  for (const auto& [key, pool] : free_) {
    if (key.first == stream && !pool.empty()) best = std::max(best, pool.rbegin()->first);
  }
  return best;
}

}  // namespace frenzy
