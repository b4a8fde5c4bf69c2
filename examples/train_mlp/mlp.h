// A two-layer perceptron (dim -> hidden ReLU -> classes, softmax cross-entropy) in plain C++,
// with parameters laid out as four flat float arrays so they can be bucketed, checkpointed and
// hashed directly. Computation order is fixed, so results are bit-reproducible.
//
// Threading: one thread per Mlp.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

struct Mlp {
  int dim, hidden, classes;
  // Forward order: W1 [hidden x dim], b1 [hidden], W2 [classes x hidden], b2 [classes].
  std::vector<std::vector<float>> params;
  std::vector<std::vector<float>> grads;

  Mlp(int dim, int hidden, int classes, std::uint64_t seed);

  // Mean loss over the batch; fills grads (of the mean loss). `on_grad_ready(k)` is called as soon
  // as grads[k] is final (backward order: 3, 2, then 1, 0), so communication can start early.
  double forward_backward(const float* x, const int* y, int batch, const std::function<void(std::size_t)>& on_grad_ready);
  // Predicted class per row; returns the summed loss and counts correct predictions.
  double evaluate(const float* x, const int* y, int n, std::size_t& correct) const;
};
