// CUDA path of train_mlp. Layout notes: parameters are row-major as in mlp.h; a row-major
// matrix M (r x c) is the column-major matrix M^T (c x r) for cuBLAS, so activations are kept
// as column-major (features x batch) arrays.
#include "examples/train_mlp/mlp_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace {

void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
void ck(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string(what) + ": cuBLAS status " + std::to_string(s));
}

__global__ void bias_act(float* a, const float* bias, int rows, int n, bool relu) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float v = a[i] + bias[i % rows];
    a[i] = (relu && v < 0.f) ? 0.f : v;
  }
}

// One thread per sample: z (classes x batch) -> dz = (softmax - onehot) / batch; loss per sample.
__global__ void softmax_grad(float* z, const int* y, int classes, int batch, float* loss) {
  int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  float* zb = z + b * classes;
  float mx = zb[0];
  for (int k = 1; k < classes; ++k) mx = fmaxf(mx, zb[k]);
  double sum = 0;
  for (int k = 0; k < classes; ++k) sum += exp((double)(zb[k] - mx));
  for (int k = 0; k < classes; ++k) {
    double p = exp((double)(zb[k] - mx)) / sum;
    if (k == y[b]) loss[b] = (float)(-log(fmax(p, 1e-30)));
    zb[k] = (float)((p - (k == y[b] ? 1.0 : 0.0)) / batch);
  }
}

// Row sums of a column-major (rows x cols) matrix, one thread per row (deterministic order).
__global__ void row_sum(const float* m, int rows, int cols, float* out) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  float s = 0;
  for (int c = 0; c < cols; ++c) s += m[r + c * rows];
  out[r] = s;
}

__global__ void relu_mask(float* dh, const float* h, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && h[i] <= 0.f) dh[i] = 0.f;
}

__global__ void sgd(float* p, float* v, const float* g, int n, float lr, float mu) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    v[i] = mu * v[i] + g[i];
    p[i] -= lr * v[i];
  }
}

int blocks(int n) { return (n + 255) / 256; }

}  // namespace

struct CudaMlp::Impl {
  int D, H, C, max_batch, device;
  size_t off[5];  // offsets of W1, b1, W2, b2 in the flat buffers, then the total
  float *p = nullptr, *g = nullptr, *v = nullptr;
  float *x = nullptr, *h = nullptr, *z = nullptr, *dh = nullptr, *loss = nullptr;
  int* y = nullptr;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
};

CudaMlp::CudaMlp(int dim, int hidden, int classes, int max_batch, int device) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.D = dim; s.H = hidden; s.C = classes; s.max_batch = max_batch; s.device = device;
  s.off[0] = 0;
  s.off[1] = s.off[0] + (size_t)hidden * dim;
  s.off[2] = s.off[1] + hidden;
  s.off[3] = s.off[2] + (size_t)classes * hidden;
  s.off[4] = s.off[3] + classes;
  ck(cudaSetDevice(device), "cudaSetDevice");
  ck(cudaStreamCreate(&s.stream), "cudaStreamCreate");
  ck(cublasCreate(&s.blas), "cublasCreate");
  ck(cublasSetStream(s.blas, s.stream), "cublasSetStream");
  const size_t n = s.off[4];
  ck(cudaMalloc(&s.p, n * sizeof(float)), "cudaMalloc");
  ck(cudaMalloc(&s.g, n * sizeof(float)), "cudaMalloc");
  ck(cudaMalloc(&s.v, n * sizeof(float)), "cudaMalloc");
  ck(cudaMalloc(&s.x, (size_t)dim * max_batch * sizeof(float)), "cudaMalloc");
  ck(cudaMalloc(&s.h, (size_t)hidden * max_batch * sizeof(float)), "cudaMalloc");
  ck(cudaMalloc(&s.dh, (size_t)hidden * max_batch * sizeof(float)), "cudaMalloc");
  ck(cudaMalloc(&s.z, (size_t)classes * max_batch * sizeof(float)), "cudaMalloc");
  ck(cudaMalloc(&s.loss, (size_t)max_batch * sizeof(float)), "cudaMalloc");
  ck(cudaMalloc(&s.y, (size_t)max_batch * sizeof(int)), "cudaMalloc");
}

CudaMlp::~CudaMlp() {
  Impl& s = *impl_;
  for (void* q : {(void*)s.p, (void*)s.g, (void*)s.v, (void*)s.x, (void*)s.h, (void*)s.dh, (void*)s.z, (void*)s.loss,
                  (void*)s.y}) {
    cudaFree(q);
  }
  if (s.blas) cublasDestroy(s.blas);
  if (s.stream) cudaStreamDestroy(s.stream);
}

void CudaMlp::from_host(const Mlp& m, const std::vector<std::vector<float>>& mom) {
  Impl& s = *impl_;
  for (int k = 0; k < 4; ++k) {
    ck(cudaMemcpy(s.p + s.off[k], m.params[k].data(), m.params[k].size() * sizeof(float), cudaMemcpyHostToDevice), "H2D");
    ck(cudaMemcpy(s.v + s.off[k], mom[k].data(), mom[k].size() * sizeof(float), cudaMemcpyHostToDevice), "H2D");
  }
}

void CudaMlp::to_host(Mlp& m, std::vector<std::vector<float>>& mom) const {
  const Impl& s = *impl_;
  ck(cudaStreamSynchronize(s.stream), "sync");
  for (int k = 0; k < 4; ++k) {
    ck(cudaMemcpy(m.params[k].data(), s.p + s.off[k], m.params[k].size() * sizeof(float), cudaMemcpyDeviceToHost), "D2H");
    ck(cudaMemcpy(mom[k].data(), s.v + s.off[k], mom[k].size() * sizeof(float), cudaMemcpyDeviceToHost), "D2H");
  }
}

double CudaMlp::step(const float* x, const int* y, int B, crun::rt::ProcessGroup& pg, float lr, float mu) {
  Impl& s = *impl_;
  if (B > s.max_batch) throw std::invalid_argument("batch larger than max_batch");
  ck(cudaSetDevice(s.device), "cudaSetDevice");
  const float one = 1.f, zero = 0.f;
  float *W1 = s.p + s.off[0], *b1 = s.p + s.off[1], *W2 = s.p + s.off[2], *b2 = s.p + s.off[3];
  float *gW1 = s.g + s.off[0], *gb1 = s.g + s.off[1], *gW2 = s.g + s.off[2], *gb2 = s.g + s.off[3];
  ck(cudaMemcpyAsync(s.x, x, (size_t)s.D * B * sizeof(float), cudaMemcpyHostToDevice, s.stream), "H2D x");
  ck(cudaMemcpyAsync(s.y, y, (size_t)B * sizeof(int), cudaMemcpyHostToDevice, s.stream), "H2D y");
  // h (H x B) = relu(W1 x + b1)
  ck(cublasSgemm(s.blas, CUBLAS_OP_T, CUBLAS_OP_N, s.H, B, s.D, &one, W1, s.D, s.x, s.D, &zero, s.h, s.H), "gemm1");
  bias_act<<<blocks(s.H * B), 256, 0, s.stream>>>(s.h, b1, s.H, s.H * B, true);
  // z (C x B) = W2 h + b2, then dz in place
  ck(cublasSgemm(s.blas, CUBLAS_OP_T, CUBLAS_OP_N, s.C, B, s.H, &one, W2, s.H, s.h, s.H, &zero, s.z, s.C), "gemm2");
  bias_act<<<blocks(s.C * B), 256, 0, s.stream>>>(s.z, b2, s.C, s.C * B, false);
  softmax_grad<<<blocks(B), 256, 0, s.stream>>>(s.z, s.y, s.C, B, s.loss);
  // gW2^T (H x C) = h dz^T ; gb2 = row sums of dz
  ck(cublasSgemm(s.blas, CUBLAS_OP_N, CUBLAS_OP_T, s.H, s.C, B, &one, s.h, s.H, s.z, s.C, &zero, gW2, s.H), "gemm3");
  row_sum<<<blocks(s.C), 256, 0, s.stream>>>(s.z, s.C, B, gb2);
  // dh (H x B) = W2^T dz, masked by ReLU
  ck(cublasSgemm(s.blas, CUBLAS_OP_N, CUBLAS_OP_N, s.H, B, s.C, &one, W2, s.H, s.z, s.C, &zero, s.dh, s.H), "gemm4");
  relu_mask<<<blocks(s.H * B), 256, 0, s.stream>>>(s.dh, s.h, s.H * B);
  // gW1^T (D x H) = x dh^T ; gb1 = row sums of dh
  ck(cublasSgemm(s.blas, CUBLAS_OP_N, CUBLAS_OP_T, s.D, s.H, B, &one, s.x, s.D, s.dh, s.H, &zero, gW1, s.D), "gemm5");
  row_sum<<<blocks(s.H), 256, 0, s.stream>>>(s.dh, s.H, B, gb1);
  ck(cudaGetLastError(), "kernel launch");
  ck(cudaStreamSynchronize(s.stream), "sync before all_reduce");
  pg.all_reduce(s.g, s.off[4], crun::rt::DType::kFloat32, crun::rt::ReduceOp::kAvg)->wait();
  sgd<<<blocks((int)s.off[4]), 256, 0, s.stream>>>(s.p, s.v, s.g, (int)s.off[4], lr, mu);
  std::vector<float> loss(B);
  ck(cudaMemcpyAsync(loss.data(), s.loss, B * sizeof(float), cudaMemcpyDeviceToHost, s.stream), "D2H loss");
  ck(cudaStreamSynchronize(s.stream), "sync");
  double total = 0;
  for (float l : loss) total += l;
  return total / B;
}
