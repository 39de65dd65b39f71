#include "core/context.hpp"

#include <omp.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "base/common.hpp"
#include "core/gpu_engine.hpp"

#ifdef HOGSTREAM_CUDA
#include <cuda_runtime.h>
#include <dlfcn.h>
#endif

namespace hogstream {

namespace {
thread_local Context* current = nullptr;
thread_local std::unique_ptr<Context> fallback;
std::atomic<bool> engine_loaded{false};
}  // namespace

namespace {
GpuKernels& KernelTable() {
  static GpuKernels table;
  return table;
}
}  // namespace

void RegisterGpuKernels(const GpuKernels& kernels) {
  KernelTable() = kernels;
  engine_loaded.store(true);
}

const GpuKernels& GpuKernelTable() {
  HS_CHECK(engine_loaded.load()) << "the GPU engine is not loaded";
  return KernelTable();
}
bool GpuEngineLoaded() { return engine_loaded.load(); }

void LoadGpuEngine() {
#ifdef HOGSTREAM_CUDA
  if (engine_loaded.load()) return;
  static std::mutex m;
  std::lock_guard<std::mutex> lock(m);
  if (engine_loaded.load()) return;
  // Beside this library (the build folder, or wherever both were installed).
  std::string path = "libhogstream_gpu.so";
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&LoadGpuEngine), &info) && info.dli_fname) {
    const std::string self = info.dli_fname;
    const size_t slash = self.find_last_of('/');
    if (slash != std::string::npos) path = self.substr(0, slash + 1) + path;
  }
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!handle) {
    const char* why = dlerror();
    HS_FAIL() << "GPU mode needs the GPU engine " << path << ": " << (why ? why : "dlopen failed");
  }
  HS_CHECK(engine_loaded.load()) << path << " loaded but did not register itself";
#endif
}

uint64_t FreshSeed() {
  auto t = std::chrono::high_resolution_clock::now().time_since_epoch().count();
  auto tid = std::hash<std::thread::id>()(std::this_thread::get_id());
  return static_cast<uint64_t>(t) * 6364136223846793005ULL ^ tid;
}

void NameThisThread(const std::string& name) {
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());  // (a name is a courtesy: a failure is not)
}

Context::Context(Mode mode, int device, uint64_t seed)
    : mode_(mode), device_(device), seed_(seed ? seed : FreshSeed()), rng_(seed_) {
#ifndef HOGSTREAM_CUDA
  HS_REQUIRE(mode == Mode::CPU) << "GPU mode requested but this hogstream was built without CUDA";
#endif
  if (mode == Mode::GPU) LoadGpuEngine();
}

Context::~Context() {
#ifdef HOGSTREAM_CUDA
  if (gpu_handles_ && destroy_gpu_handles_) destroy_gpu_handles_(gpu_handles_);
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
#endif
}

Context& Context::Get() {
  if (current) return *current;
  if (!fallback) {
    fallback = std::make_unique<Context>(Mode::CPU, 0, 0);
    omp_set_num_threads(1);
  }
  return *fallback;
}

void Context::set_seed(uint64_t seed) {
  seed_ = seed;
  rng_.seed(seed);
}

void Context::set_threads(int n) {
  threads_ = n < 1 ? 1 : n;
  if (current == this) omp_set_num_threads(threads_);
}

void Context::set_gpu_handles(void* handles, void (*destroy)(void*)) {
  HS_CHECK(gpu_handles_ == nullptr) << "GPU handles installed twice";
  gpu_handles_ = handles;
  destroy_gpu_handles_ = destroy;
}

void* Context::stream() {
#ifdef HOGSTREAM_CUDA
  if (!stream_) {
    HS_CUDA_CHECK(cudaSetDevice(device_));
    cudaStream_t s;
    HS_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    stream_ = s;
  }
#endif
  return stream_;
}

ContextScope::ContextScope(Context* ctx) : prev_(current) {
  current = ctx;
  omp_set_num_threads(ctx->threads());
#ifdef HOGSTREAM_CUDA
  if (ctx->mode() == Mode::GPU) HS_CUDA_CHECK(cudaSetDevice(ctx->device()));
#endif
}

ContextScope::~ContextScope() {
  current = prev_;
  if (current) omp_set_num_threads(current->threads());
}

int GpuDevices() {
#ifdef HOGSTREAM_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

bool GpuAvailable() { return GpuDevices() > 0; }

bool GpuBuild() {
#ifdef HOGSTREAM_CUDA
  return true;
#else
  return false;
#endif
}

void RequireGpu(int device, const std::string& what) {
  HS_REQUIRE(GpuBuild()) << what << ": this hogstream was built without CUDA";
  const int n = GpuDevices();
  HS_REQUIRE(n > 0) << what << ": no CUDA device is visible";
  HS_REQUIRE(device >= 0 && device < n) << what << ": no CUDA device " << device << " (this machine has " << n
                                        << ", numbered from 0)";
}

void DeviceSynchronize() {
#ifdef HOGSTREAM_CUDA
  if (Context::Get().mode() == Mode::GPU) HS_CUDA_CHECK(cudaDeviceSynchronize());
#endif
}

}  // namespace hogstream
