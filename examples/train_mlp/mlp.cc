#include "examples/train_mlp/mlp.h"

#include <algorithm>
#include <cmath>
#include <random>

Mlp::Mlp(int d, int h, int c, std::uint64_t seed) : dim(d), hidden(h), classes(c) {
  params = {std::vector<float>(static_cast<std::size_t>(h) * d), std::vector<float>(h),
            std::vector<float>(static_cast<std::size_t>(c) * h), std::vector<float>(c)};
  grads = params;
  // Uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) as torch.nn.Linear, from a fixed generator.
  std::mt19937_64 g(seed);
  auto fill = [&](std::vector<float>& v, int fan_in) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    for (auto& x : v) x = static_cast<float>((static_cast<double>(g() >> 11) / 9007199254740992.0 * 2 - 1) * bound);
  };
  fill(params[0], d);
  fill(params[1], d);
  fill(params[2], h);
  fill(params[3], h);
}

namespace {

void hidden_layer(const Mlp& m, const float* xi, float* hi) {
  const float* W1 = m.params[0].data();
  const float* b1 = m.params[1].data();
  for (int j = 0; j < m.hidden; ++j) {
    float s = b1[j];
    const float* w = W1 + static_cast<std::size_t>(j) * m.dim;
    for (int d = 0; d < m.dim; ++d) s += w[d] * xi[d];
    hi[j] = s > 0 ? s : 0;
  }
}

// logits -> softmax probabilities in place; returns -log p[label].
double softmax_loss(float* z, int classes, int label) {
  const float mx = *std::max_element(z, z + classes);
  double sum = 0;
  for (int k = 0; k < classes; ++k) {
    z[k] = std::exp(z[k] - mx);
    sum += z[k];
  }
  for (int k = 0; k < classes; ++k) z[k] = static_cast<float>(z[k] / sum);
  return -std::log(std::max(static_cast<double>(z[label]), 1e-30));
}

void output_layer(const Mlp& m, const float* hi, float* zi) {
  const float* W2 = m.params[2].data();
  const float* b2 = m.params[3].data();
  for (int k = 0; k < m.classes; ++k) {
    float s = b2[k];
    const float* w = W2 + static_cast<std::size_t>(k) * m.hidden;
    for (int j = 0; j < m.hidden; ++j) s += w[j] * hi[j];
    zi[k] = s;
  }
}

}  // namespace

double Mlp::forward_backward(const float* x, const int* y, int batch, const std::function<void(std::size_t)>& on_ready) {
  std::vector<float> h(static_cast<std::size_t>(batch) * hidden), z(static_cast<std::size_t>(batch) * classes);
  double loss = 0;
  for (int i = 0; i < batch; ++i) {
    hidden_layer(*this, x + static_cast<std::size_t>(i) * dim, &h[static_cast<std::size_t>(i) * hidden]);
    output_layer(*this, &h[static_cast<std::size_t>(i) * hidden], &z[static_cast<std::size_t>(i) * classes]);
    loss += softmax_loss(&z[static_cast<std::size_t>(i) * classes], classes, y[i]);
  }
  // dL/dz = (p - onehot) / batch
  const float inv = 1.0f / static_cast<float>(batch);
  for (int i = 0; i < batch; ++i) {
    float* zi = &z[static_cast<std::size_t>(i) * classes];
    zi[y[i]] -= 1.0f;
    for (int k = 0; k < classes; ++k) zi[k] *= inv;
  }
  for (auto& g : grads) std::fill(g.begin(), g.end(), 0.0f);
  float* gW2 = grads[2].data();
  float* gb2 = grads[3].data();
  for (int i = 0; i < batch; ++i) {
    const float* zi = &z[static_cast<std::size_t>(i) * classes];
    const float* hi = &h[static_cast<std::size_t>(i) * hidden];
    for (int k = 0; k < classes; ++k) {
      gb2[k] += zi[k];
      float* g = gW2 + static_cast<std::size_t>(k) * hidden;
      for (int j = 0; j < hidden; ++j) g[j] += zi[k] * hi[j];
    }
  }
  on_ready(3);
  on_ready(2);
  // dL/dh = W2^T dz, masked by ReLU; reuse h as dh.
  const float* W2 = params[2].data();
  float* gW1 = grads[0].data();
  float* gb1 = grads[1].data();
  std::vector<float> dh(hidden);
  for (int i = 0; i < batch; ++i) {
    const float* zi = &z[static_cast<std::size_t>(i) * classes];
    const float* hi = &h[static_cast<std::size_t>(i) * hidden];
    std::fill(dh.begin(), dh.end(), 0.0f);
    for (int k = 0; k < classes; ++k) {
      const float* w = W2 + static_cast<std::size_t>(k) * hidden;
      for (int j = 0; j < hidden; ++j) dh[j] += zi[k] * w[j];
    }
    const float* xi = x + static_cast<std::size_t>(i) * dim;
    for (int j = 0; j < hidden; ++j) {
      if (hi[j] <= 0) continue;
      gb1[j] += dh[j];
      float* g = gW1 + static_cast<std::size_t>(j) * dim;
      for (int d = 0; d < dim; ++d) g[d] += dh[j] * xi[d];
    }
  }
  on_ready(1);
  on_ready(0);
  return loss / batch;
}

double Mlp::evaluate(const float* x, const int* y, int n, std::size_t& correct) const {
  std::vector<float> h(hidden), z(classes);
  double loss = 0;
  for (int i = 0; i < n; ++i) {
    hidden_layer(*this, x + static_cast<std::size_t>(i) * dim, h.data());
    output_layer(*this, h.data(), z.data());
    const int pred = static_cast<int>(std::max_element(z.begin(), z.end()) - z.begin());
    correct += (pred == y[i]);
    loss += softmax_loss(z.data(), classes, y[i]);
  }
  return loss;
}
