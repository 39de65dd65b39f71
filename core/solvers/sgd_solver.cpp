#include "core/math.hpp"
#include "core/solvers/solvers.hpp"

namespace hogstream {

void SGDSolver::ComputeUpdateValue(int id, float rate) {
  Blob* p = net_->learnable_params()[id];
  const float lr = rate * net_->params_lr()[id];
  float* h = history_[id]->mutable_cpu_data();
  float* g = p->mutable_cpu_diff();
  const float momentum = param_.momentum();
  const int n = p->count();
  for (int i = 0; i < n; ++i) g[i] = h[i] = momentum * h[i] + lr * g[i];
}

}  // namespace hogstream
