#include "worker_runtime/sampler.h"

#include <numeric>
#include <random>
#include <stdexcept>
#include <string>

namespace crun::rt {
namespace {

// Uniform integer in [0, bound) without modulo bias (Lemire's multiply-shift with rejection).
std::uint64_t uniform_below(std::mt19937_64& g, std::uint64_t bound) {
  unsigned __int128 m = static_cast<unsigned __int128>(g()) * bound;
  auto low = static_cast<std::uint64_t>(m);
  if (low < bound) {
    const std::uint64_t threshold = (0 - bound) % bound;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(g()) * bound;
      low = static_cast<std::uint64_t>(m);
    }
  }
  return static_cast<std::uint64_t>(m >> 64);
}

}  // namespace

DistributedSampler::DistributedSampler(std::size_t dataset_size, int num_replicas, int rank, bool shuffle,
                                       std::uint64_t seed, bool drop_last)
    : n_(dataset_size), replicas_(num_replicas), rank_(rank), shuffle_(shuffle), seed_(seed), drop_last_(drop_last) {
  if (num_replicas < 1 || rank < 0 || rank >= num_replicas) {
    throw std::invalid_argument("DistributedSampler: invalid rank " + std::to_string(rank) + ", should be in [0, " +
                                std::to_string(num_replicas - 1) + "]");
  }
  const std::size_t r = static_cast<std::size_t>(num_replicas);
  if (drop_last_ && n_ % r != 0) {
    num_samples_ = n_ >= r ? (n_ - r + r - 1) / r : 0;  // ceil((N - R) / R)
  } else {
    num_samples_ = (n_ + r - 1) / r;
  }
  total_size_ = num_samples_ * r;
}

std::vector<std::size_t> DistributedSampler::indices() const {
  std::vector<std::size_t> idx(n_);
  std::iota(idx.begin(), idx.end(), std::size_t{0});
  if (shuffle_ && n_ > 1) {
    std::mt19937_64 g(seed_ + epoch_);
    for (std::size_t i = n_ - 1; i > 0; --i) {
      std::swap(idx[i], idx[uniform_below(g, i + 1)]);
    }
  }
  if (!drop_last_) {
    const std::size_t pad = total_size_ - idx.size();
    if (pad > 0 && n_ > 0) {
      idx.reserve(total_size_);
      for (std::size_t i = 0; i < pad; ++i) idx.push_back(idx[i % n_]);
    }
  } else {
    idx.resize(total_size_);
  }
  std::vector<std::size_t> mine;
  mine.reserve(num_samples_);
  for (std::size_t i = static_cast<std::size_t>(rank_); i < total_size_; i += static_cast<std::size_t>(replicas_)) {
    mine.push_back(idx[i]);
  }
  return mine;
}

}  // namespace crun::rt
