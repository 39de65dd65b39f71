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

// Kernels the engine's core (the solver) calls in GPU mode, registered by hogstream_gpu as it
// loads; each runs on the calling thread's Context stream.
struct GpuKernels {
  // SGD with momentum, one parameter blob in one pass (Caffe's rule, as SGDSolver on the CPU):
  //   g = g * scale + decay * (l1 ? sign(w) : w);  h = momentum * h + lr * g;  g = h;  w -= h.
  void (*sgd_update)(int n, float scale, float decay, bool l1, float momentum, float lr, float* w, float* g,
                     float* h) = nullptr;
};
// Called by the engine's own static initialisation: the engine is then loaded.
void RegisterGpuKernels(const GpuKernels& kernels);
// The table; a Bug before the engine is loaded.
const GpuKernels& GpuKernelTable();

}  // namespace hogstream
