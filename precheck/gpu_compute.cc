// The precheck's SGEMM timing and all_reduce buffer on a CUDA device (precheck/gpu_compute.h).
// cuBLAS is opened (dlopen) on the first GPU timing, not linked: linked, its loading cost every
// start of crun-precheck about 60 ms and 215 MB of resident memory, on CPU nodes too.
#include "precheck/gpu_compute.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

namespace crun::precheck {
namespace {

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

void cublas_ok(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string(what) + ": cuBLAS status " + std::to_string(static_cast<int>(s)));
}

// The three cuBLAS calls, from CRUN_CUBLAS_SONAME (the toolkit's major version), found as the
// dynamic loader finds libraries, else in the toolkit's library folder of the build.
struct Cublas {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
};

const Cublas& cublas() {
  static const Cublas api = [] {
    void* lib = dlopen(CRUN_CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) lib = dlopen(CRUN_CUBLAS_DIR "/" CRUN_CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) throw std::runtime_error(std::string("cannot open cuBLAS: ") + dlerror());
    Cublas c;
    c.create = reinterpret_cast<decltype(c.create)>(dlsym(lib, "cublasCreate_v2"));
    c.destroy = reinterpret_cast<decltype(c.destroy)>(dlsym(lib, "cublasDestroy_v2"));
    c.sgemm = reinterpret_cast<decltype(c.sgemm)>(dlsym(lib, "cublasSgemm_v2"));
    if (!c.create || !c.destroy || !c.sgemm) throw std::runtime_error(CRUN_CUBLAS_SONAME " lacks cublasCreate_v2, cublasDestroy_v2 or cublasSgemm_v2");
    return c;
  }();
  return api;
}

// Device memory and a cuBLAS handle, released on every path.
struct GemmResources {
  float* a = nullptr;
  float* b = nullptr;
  float* c = nullptr;
  cublasHandle_t handle = nullptr;
  ~GemmResources() {
    if (handle != nullptr) cublas().destroy(handle);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
  }
};

}  // namespace

double time_gpu_sgemm(int device, int n, int repeat) {
  cuda_ok(cudaSetDevice(device), "cudaSetDevice");
  const std::size_t count = static_cast<std::size_t>(n) * n;
  std::vector<float> ha(count), hb(count);
  for (std::size_t i = 0; i < count; ++i) {  // the CPU matmul's inputs
    ha[i] = static_cast<float>(i % 7) * 0.25f;
    hb[i] = static_cast<float>(i % 5) * 0.5f;
  }
  GemmResources r;
  const std::size_t bytes = count * sizeof(float);
  cuda_ok(cudaMalloc(reinterpret_cast<void**>(&r.a), bytes), "cudaMalloc");
  cuda_ok(cudaMalloc(reinterpret_cast<void**>(&r.b), bytes), "cudaMalloc");
  cuda_ok(cudaMalloc(reinterpret_cast<void**>(&r.c), bytes), "cudaMalloc");
  cuda_ok(cudaMemcpy(r.a, ha.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  cuda_ok(cudaMemcpy(r.b, hb.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  cublas_ok(cublas().create(&r.handle), "cublasCreate");
  const float one = 1.0f;
  const float zero = 0.0f;
  auto gemm = [&] {
    cublas_ok(cublas().sgemm(r.handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, r.a, n, r.b, n, &zero, r.c, n), "cublasSgemm");
  };
  gemm();  // cuBLAS's first call loads its kernels: not part of the timing
  cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < repeat; ++i) gemm();
  cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

DeviceFloats::DeviceFloats(int device, std::size_t count, float value) : count_(count) {
  cuda_ok(cudaSetDevice(device), "cudaSetDevice");
  cuda_ok(cudaMalloc(reinterpret_cast<void**>(&data_), count * sizeof(float)), "cudaMalloc");
  const std::vector<float> host(count, value);
  const cudaError_t e = cudaMemcpy(data_, host.data(), count * sizeof(float), cudaMemcpyHostToDevice);
  if (e != cudaSuccess) {
    cudaFree(data_);
    cuda_ok(e, "cudaMemcpy");
  }
}

DeviceFloats::~DeviceFloats() { cudaFree(data_); }

}  // namespace crun::precheck
