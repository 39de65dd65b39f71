#include <cmath>

#include "core/gpu_engine.hpp"
#include "core/solvers/solvers.hpp"

namespace hogstream {

AdaGradSolver::AdaGradSolver(const pb::SolverParameter& p, const SolverOptions& o) : Solver(p, o) {
  HS_REQUIRE(param_.momentum() == 0.f) << "AdaGrad takes no momentum (set momentum: 0)";
}

void AdaGradSolver::ComputeUpdateValue(int id, float rate) {
  Blob* p = net_->learnable_params()[id];
  const float lr = rate * net_->params_lr()[id], delta = param_.delta();
  float* h = history_[id]->mutable_cpu_data();
  float* g = p->mutable_cpu_diff();
  for (int i = 0; i < p->count(); ++i) {
    h[i] += g[i] * g[i];
    g[i] = lr * g[i] / (std::sqrt(h[i]) + delta);
  }
}

void AdaGradSolver::UpdateOnDevice(int id, float rate) {
  DeviceUpdate u;
  u.rule = DeviceUpdate::kAdaGrad;
  u.lr = rate * net_->params_lr()[id];
  u.delta = param_.delta();
  RunDeviceUpdate(id, u);
}

}  // namespace hogstream
