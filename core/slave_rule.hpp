// The slave's side of the delta rule (sync/segment.hpp) for one element, written once for the
// host and the device: the GPU segment's kernel (core/device_api_cuda.cu), the CPU fake's
// (test/core/fake_device.cc) and the tests that hold both to sync/segment.cpp's slave.
//   d = w - last;  w = w + (pos - last);  last = pos + d;  delta = d
// (float32 positions and deltas: the GPU segment runs no codec.)
#pragma once

#if defined(__CUDACC__)
#define HS_HOST_DEVICE __host__ __device__
#else
#define HS_HOST_DEVICE
#endif

namespace hogstream {

HS_HOST_DEVICE inline void SlaveRuleStep(float pos, float& w, float& last, float& delta) {
  const float l = last;
  const float d = w - l;
  w = w + (pos - l);
  last = pos + d;
  delta = d;
}

}  // namespace hogstream
