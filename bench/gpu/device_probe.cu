// Measures what pipetab's device model needs from a real GPU (issue 15, point 8):
//   gemm      achieved BF16 matrix-multiply FLOP/s over a grid of shapes, for the three layouts a
//             linear layer runs (forward X·Wᵀ, input gradient dY·W, weight gradient dYᵀ·X), through
//             cublasGemmEx with FP32 accumulation, as PyTorch's at::cuda::blas::gemm calls it for
//             BF16 (CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP);
//   memory    achieved HBM bandwidth of an elementwise BF16 kernel (y = a·x + y: two reads, one
//             write) and of cudaMemcpy device-to-device, over sizes far above the L2 cache;
//   launch    the time per kernel of back-to-back empty launches on one stream.
// Output: CSV on stdout, one row per measurement (see the header lines).
//
// Build and run (CUDA toolkit with cuBLAS):  bench/gpu/run-device-probe OUT_DIR
//   nvcc -O2 -std=c++17 -arch=native -o device_probe bench/gpu/device_probe.cu -lcublas
//   ./device_probe > probe.csv
// Not part of the CMake build: CI has no GPU. The committed results are under data/gpu/.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#define CHECK_CUDA(x)                                                                         \
  do {                                                                                        \
    cudaError_t e = (x);                                                                      \
    if (e != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)
#define CHECK_CUBLAS(x)                                                                      \
  do {                                                                                       \
    cublasStatus_t s = (x);                                                                  \
    if (s != CUBLAS_STATUS_SUCCESS) {                                                        \
      std::fprintf(stderr, "%s:%d: %s: cuBLAS status %d\n", __FILE__, __LINE__, #x, (int)s); \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)

namespace {

__global__ void fill(__nv_bfloat16* p, std::size_t n, float v) {
  for (std::size_t i = blockIdx.x * (std::size_t)blockDim.x + threadIdx.x; i < n;
       i += (std::size_t)gridDim.x * blockDim.x)
    p[i] = __float2bfloat16(v * (float)((i * 2654435761u) % 1000) / 1000.0f);
}

// 16-byte loads and stores (8 BF16 values), as PyTorch's vectorized elementwise kernels do.
__global__ void axpy(const uint4* __restrict__ x, uint4* __restrict__ y, std::size_t n8, float a) {
  for (std::size_t i = blockIdx.x * (std::size_t)blockDim.x + threadIdx.x; i < n8;
       i += (std::size_t)gridDim.x * blockDim.x) {
    uint4 xv = x[i], yv = y[i];
    __nv_bfloat162* xp = reinterpret_cast<__nv_bfloat162*>(&xv);
    __nv_bfloat162* yp = reinterpret_cast<__nv_bfloat162*>(&yv);
    for (int j = 0; j < 4; ++j) {
      float2 xf = __bfloat1622float2(xp[j]), yf = __bfloat1622float2(yp[j]);
      yp[j] = __floats2bfloat162_rn(a * xf.x + yf.x, a * xf.y + yf.y);
    }
    y[i] = yv;
  }
}

__global__ void empty_kernel() {}

// Times `work` (which enqueues one repetition): two warm-up runs, then five trials of enough
// repetitions to fill `target_s` / 5 each; returns the median trial's seconds per repetition
// (robust to a trial disturbed by a clock change).
template <class Work>
double time_per_rep(Work work, double target_s, int min_reps = 3) {
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  work();
  work();
  CHECK_CUDA(cudaEventRecord(a));
  work();
  CHECK_CUDA(cudaEventRecord(b));
  CHECK_CUDA(cudaEventSynchronize(b));
  float ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
  const double once = std::max(ms * 1e-3, 1e-7);
  const int reps = std::max(min_reps, (int)std::min(10000.0, target_s / 5 / once));
  std::vector<double> trials;
  for (int t = 0; t < 5; ++t) {
    CHECK_CUDA(cudaEventRecord(a));
    for (int r = 0; r < reps; ++r)
      work();
    CHECK_CUDA(cudaEventRecord(b));
    CHECK_CUDA(cudaEventSynchronize(b));
    CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
    trials.push_back(ms * 1e-3 / reps);
  }
  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(b));
  std::sort(trials.begin(), trials.end());
  return trials[2];
}

}  // namespace

int main(int argc, char** argv) {
  // Optional: a cap on one GEMM's FLOPs (larger shapes sit on the plateau and take long).
  const double max_flops = argc > 1 ? std::atof(argv[1]) : 4e13;
  // Optional: the layouts to time, comma-separated (default all three; "forward" alone is what
  // `pipetab calibrate --fit-on forward` fits, in a third of the time).
  const std::string only = argc > 2 ? argv[2] : "forward,input_grad,weight_grad";
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  int version = 0;
  cublasHandle_t handle;
  CHECK_CUBLAS(cublasCreate(&handle));
  CHECK_CUBLAS(cublasGetVersion(handle, &version));
  std::printf("# device,%s,sms,%d,memory_bytes,%zu,l2_bytes,%d,cublas,%d\n", prop.name,
              prop.multiProcessorCount, prop.totalGlobalMem, prop.l2CacheSize, version);

  // The shapes: M×N output, K reduction (row-major terms, as PyTorch sees them). The values
  // cover a transformer's tokens per micro-batch (M) and hidden sizes split by TP (N, K).
  const std::vector<long> dims = {256,  512,  1024,  1536,  2048,  3072, 4096,
                                  6144, 8192, 12288, 16384, 24576, 32768};
  const long max_dim = dims.back();
  const std::size_t elems = (std::size_t)max_dim * max_dim;
  __nv_bfloat16 *A, *B, *C;
  CHECK_CUDA(cudaMalloc(&A, elems * sizeof(__nv_bfloat16)));
  CHECK_CUDA(cudaMalloc(&B, elems * sizeof(__nv_bfloat16)));
  CHECK_CUDA(cudaMalloc(&C, elems * sizeof(__nv_bfloat16)));
  fill<<<1024, 256>>>(A, elems, 1.0f);
  fill<<<1024, 256>>>(B, elems, 1.0f);
  CHECK_CUDA(cudaDeviceSynchronize());
  const float one = 1.0f, zero = 0.0f;

  // Row-major Y[M,N] = op(X)·op(W) is column-major Yᵀ[N,M] = op(W)ᵀ·op(X)ᵀ, hence the swapped
  // operands below. Layouts, named by the pass of a linear layer y = x·Wᵀ that runs them:
  //   forward:      Y[M,N] = X[M,K] · W[N,K]ᵀ     cuBLAS (T, N)
  //   input_grad:   Y[M,N] = X[M,K] · W[K,N]      cuBLAS (N, N)
  //   weight_grad:  Y[M,N] = X[K,M]ᵀ · W[K,N]     cuBLAS (N, T)
  struct Layout {
    const char* name;
    cublasOperation_t op_w, op_x;
  };
  const Layout layouts[] = {{"forward", CUBLAS_OP_T, CUBLAS_OP_N},
                            {"input_grad", CUBLAS_OP_N, CUBLAS_OP_N},
                            {"weight_grad", CUBLAS_OP_N, CUBLAS_OP_T}};
  // Bring the clocks up before the first measurement: 3 s of large GEMMs (an idle H100 sits at
  // 345 MHz and needs a moment under load to reach its boost clock).
  {
    const int big = 8192;
    cudaEvent_t a, b;
    CHECK_CUDA(cudaEventCreate(&a));
    CHECK_CUDA(cudaEventCreate(&b));
    float ms = 0;
    for (double spent = 0; spent < 3.0; spent += ms * 1e-3) {
      CHECK_CUDA(cudaEventRecord(a));
      for (int r = 0; r < 20; ++r)
        CHECK_CUBLAS(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, big, big, big, &one, B,
                                  CUDA_R_16BF, big, A, CUDA_R_16BF, big, &zero, C, CUDA_R_16BF, big,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP));
      CHECK_CUDA(cudaEventRecord(b));
      CHECK_CUDA(cudaEventSynchronize(b));
      CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
    }
  }
  std::printf("# gemm,layout,m,n,k,seconds,tflops\n");
  for (const Layout& l : layouts) {
    if (("," + only + ",").find("," + std::string(l.name) + ",") == std::string::npos) continue;
    for (long m : dims)
      for (long n : dims)
        for (long k : dims) {
          const double flops = 2.0 * m * n * k;
          if (flops > max_flops) continue;
          // W operand: N×K (forward) or K×N; X operand: M×K or K×M; leading dimensions follow.
          const int ldw = l.op_w == CUBLAS_OP_T ? (int)k : (int)n;
          const int ldx = l.op_x == CUBLAS_OP_N ? (int)k : (int)m;
          auto work = [&] {
            CHECK_CUBLAS(cublasGemmEx(handle, l.op_w, l.op_x, (int)n, (int)m, (int)k, &one, B,
                                      CUDA_R_16BF, ldw, A, CUDA_R_16BF, ldx, &zero, C, CUDA_R_16BF,
                                      (int)n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP));
          };
          const double s = time_per_rep(work, 0.025);
          std::printf("gemm,%s,%ld,%ld,%ld,%.6e,%.2f\n", l.name, m, n, k, s, flops / s / 1e12);
          std::fflush(stdout);  // a run cut short by a time limit keeps what it measured
        }
  }
  std::fflush(stdout);

  std::printf("# memory,kernel,bytes_moved,seconds,gb_per_s\n");
  for (std::size_t n : {(std::size_t)1 << 26, (std::size_t)1 << 28, (std::size_t)1 << 29}) {
    const double axpy_s = time_per_rep(
        [&] {
          axpy<<<prop.multiProcessorCount * 8, 512>>>(reinterpret_cast<const uint4*>(A),
                                                      reinterpret_cast<uint4*>(B), n / 8, 0.5f);
        },
        0.05);
    std::printf("memory,axpy_bf16,%zu,%.6e,%.1f\n", 3 * n * 2, axpy_s, 3.0 * n * 2 / axpy_s / 1e9);
    const double copy_s = time_per_rep(
        [&] { CHECK_CUDA(cudaMemcpyAsync(C, A, n * 2, cudaMemcpyDeviceToDevice)); }, 0.05);
    std::printf("memory,memcpy_d2d,%zu,%.6e,%.1f\n", 2 * n * 2, copy_s, 2.0 * n * 2 / copy_s / 1e9);
  }

  std::printf("# launch,kernel,launches,seconds_per_launch\n");
  const int launches = 20000;
  const double launch_s = time_per_rep(
      [&] {
        for (int i = 0; i < launches; ++i)
          empty_kernel<<<1, 32>>>();
      },
      0.2, 3);
  std::printf("launch,empty_back_to_back,%d,%.3e\n", launches, launch_s / launches);
  CHECK_CUDA(cudaGetLastError());
  cublasDestroy(handle);
  return 0;
}
