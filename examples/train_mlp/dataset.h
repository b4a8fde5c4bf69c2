// Synthetic, learnable classification data made deterministically from a seed: a Gaussian
// mixture with `classes` classes, each the union of `clusters_per_class` blobs (so a linear
// model is not enough, an MLP is). Same seed -> same bytes on every rank and every run.
//
// Threading: a value type.
#pragma once

#include <cstdint>
#include <vector>

struct Dataset {
  int dim = 0;
  int classes = 0;
  std::vector<float> x;   // n * dim, row-major
  std::vector<int> y;     // n
  std::size_t size() const { return y.size(); }
};

struct DatasetSpec {
  int dim = 32;
  int classes = 10;
  int clusters_per_class = 3;
  float center_scale = 1.0f;
  float noise = 0.6f;
};

// Train and test sets drawn from the same mixture (independent samples).
void make_datasets(const DatasetSpec& spec, std::uint64_t seed, std::size_t n_train, std::size_t n_test,
                   Dataset& train, Dataset& test);
