// worker_runtime/sampler: the same indices as torch's DistributedSampler.
#include <catch2/catch.hpp>
#include <set>
#include <vector>

#include "worker_runtime/sampler.h"

using namespace crun::rt;
using V = std::vector<std::size_t>;

// Reference values computed with torch 1.13 DistributedSampler(shuffle=False).
TEST_CASE("sampler pads from the start like torch", "[sampler]") {
  CHECK(DistributedSampler(10, 3, 0, false).indices() == V{0, 3, 6, 9});
  CHECK(DistributedSampler(10, 3, 1, false).indices() == V{1, 4, 7, 0});
  CHECK(DistributedSampler(10, 3, 2, false).indices() == V{2, 5, 8, 1});
  CHECK(DistributedSampler(2, 5, 3, false).indices() == V{1});
  CHECK(DistributedSampler(2, 5, 4, false).indices() == V{0});
  CHECK(DistributedSampler(10, 3, 0, false).total_size() == 12);
}

TEST_CASE("sampler drop_last truncates like torch", "[sampler]") {
  DistributedSampler s(10, 3, 1, false, 0, true);
  CHECK(s.num_samples() == 3);
  CHECK(s.indices() == V{1, 4, 7});
  CHECK(DistributedSampler(9, 3, 2, false, 0, true).indices() == V{2, 5, 8});
  CHECK(DistributedSampler(2, 3, 0, false, 0, true).num_samples() == 0);
}

TEST_CASE("sampler shuffle: seeded per epoch, disjoint cover across ranks", "[sampler]") {
  const std::size_t n = 1001;
  for (std::uint64_t epoch : {0, 1}) {
    std::multiset<std::size_t> all;
    for (int r = 0; r < 4; ++r) {
      DistributedSampler s(n, 4, r, true, 42);
      s.set_epoch(epoch);
      auto idx = s.indices();
      CHECK(idx.size() == 251);
      CHECK(idx == [&] { DistributedSampler t(n, 4, r, true, 42); t.set_epoch(epoch); return t.indices(); }());
      all.insert(idx.begin(), idx.end());
    }
    CHECK(all.size() == 1004);
    for (std::size_t i = 0; i < n; ++i) CHECK(all.count(i) >= 1);
  }
  DistributedSampler a(n, 1, 0, true, 42), b(n, 1, 0, true, 42);
  b.set_epoch(1);
  CHECK(a.indices() != b.indices());
  CHECK_THROWS(DistributedSampler(10, 2, 2));
}
