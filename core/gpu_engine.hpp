// The GPU engine: the hogstream_gpu library (GPU math, the GPU layer twins), loaded only when a
// thread first enters GPU mode, so that CPU programs never map cuBLAS or cuDNN (~130 MiB).
// Programs that link it (the tests) have it loaded already; the others get it from the folder
// that holds libhogstream_core.so.
#pragma once

namespace hogstream {

// Loads the engine once per process (a Context in GPU mode calls it); an engine that cannot
// be loaded is an Error naming the file and the loader's reason. A no-op on builds without CUDA.
void LoadGpuEngine();
bool GpuEngineLoaded();

// One parameter blob's update on the device, in one pass (core/solvers/solvers.hpp states each
// rule, as the solvers apply it on the host):
//   g = g * scale + decay * (l1 ? sign(w) : w);  step = RULE(g, h, h2);  g = step;  w -= step.
struct DeviceUpdate {
  enum Rule : int { kSgd, kNesterov, kAdaGrad, kRMSProp, kAdaDelta, kAdam };
  Rule rule = kSgd;
  float scale = 1;       // 1 / iter_size
  float decay = 0;       // weight decay times the blob's decay_mult
  bool l1 = false;
  float lr = 0;          // the rate times the blob's lr_mult (Adam: times its bias correction)
  float momentum = 0;    // SGD, Nesterov; AdaDelta's m; Adam's b1
  float momentum2 = 0;   // Adam's b2
  float delta = 0;       // AdaGrad, RMSProp, AdaDelta, Adam
  float rms_decay = 0;   // RMSProp
};

// Kernels the engine's core (the solver) calls in GPU mode, registered by hogstream_gpu as it
// loads; each runs on the calling thread's Context stream.
struct GpuKernels {
  // `h2` only for AdaDelta and Adam (nullptr otherwise).
  void (*update)(int n, const DeviceUpdate& u, float* w, float* g, float* h, float* h2) = nullptr;
  // The sum of squares of n device floats (waits for the stream), and x *= a on the stream:
  // gradient clipping and the norm guard without taking the gradients to the host.
  double (*sumsq)(int n, const float* x) = nullptr;
  void (*scale)(int n, float a, float* x) = nullptr;
};
// Called by the engine's own static initialisation: the engine is then loaded.
void RegisterGpuKernels(const GpuKernels& kernels);
// The table; a Bug before the engine is loaded.
const GpuKernels& GpuKernelTable();

}  // namespace hogstream
