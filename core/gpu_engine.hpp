// The GPU engine: the hogstream_gpu library (GPU math, the GPU layer twins), loaded only when a
// thread first enters GPU mode, so that CPU programs never map cuBLAS or cuDNN (~130 MiB).
// Programs that link it (the tests) have it loaded already; the others get it from the folder
// that holds libhogstream_core.so.
#pragma once

namespace hogstream {

// Loads the engine once per process (a Context in GPU mode calls it); an engine that cannot
// be loaded is an Error naming the file and the loader's reason. A no-op on builds without CUDA.
void LoadGpuEngine();
// Called by the engine's own static initialisation.
void MarkGpuEngineLoaded();
bool GpuEngineLoaded();

}  // namespace hogstream
