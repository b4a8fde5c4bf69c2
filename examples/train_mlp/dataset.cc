#include "examples/train_mlp/dataset.h"

#include <cmath>
#include <random>

namespace {

// Deterministic normal draws from mt19937_64 via Box-Muller (std::normal_distribution's
// algorithm is implementation-defined, so it is not used).
struct Normal {
  std::mt19937_64 g;
  explicit Normal(std::uint64_t seed) : g(seed) {}
  double uniform() { return (static_cast<double>(g() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
  float operator()() {
    const double u1 = uniform(), u2 = uniform();
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
};

void draw(const DatasetSpec& spec, const std::vector<float>& centers, Normal& rng, std::size_t n, Dataset& out) {
  out.dim = spec.dim;
  out.classes = spec.classes;
  out.x.resize(n * spec.dim);
  out.y.resize(n);
  const int blobs = spec.classes * spec.clusters_per_class;
  for (std::size_t i = 0; i < n; ++i) {
    const int blob = static_cast<int>(rng.g() % static_cast<std::uint64_t>(blobs));
    out.y[i] = blob % spec.classes;
    for (int d = 0; d < spec.dim; ++d) {
      out.x[i * spec.dim + d] = centers[blob * spec.dim + d] + spec.noise * rng();
    }
  }
}

}  // namespace

void make_datasets(const DatasetSpec& spec, std::uint64_t seed, std::size_t n_train, std::size_t n_test,
                   Dataset& train, Dataset& test) {
  Normal rng(seed * 0x9E3779B97F4A7C15ULL + 1);
  const int blobs = spec.classes * spec.clusters_per_class;
  std::vector<float> centers(static_cast<std::size_t>(blobs) * spec.dim);
  for (auto& c : centers) c = spec.center_scale * rng();
  draw(spec, centers, rng, n_train, train);
  draw(spec, centers, rng, n_test, test);
}
