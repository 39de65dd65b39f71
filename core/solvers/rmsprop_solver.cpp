#include <cmath>

#include "core/gpu_engine.hpp"
#include "core/solvers/solvers.hpp"

namespace hogstream {

RMSPropSolver::RMSPropSolver(const pb::SolverParameter& p, const SolverOptions& o) : Solver(p, o) {
  HS_REQUIRE(param_.momentum() == 0.f)
      << "RMSProp takes no momentum (set momentum: 0; rms_decay sets the averaging)";
  HS_REQUIRE(param_.rms_decay() >= 0.f && param_.rms_decay() < 1.f) << "rms_decay must be in [0, 1)";
}

void RMSPropSolver::ComputeUpdateValue(int id, float rate) {
  Blob* p = net_->learnable_params()[id];
  const float lr = rate * net_->params_lr()[id], delta = param_.delta();
  const float decay = param_.rms_decay();
  float* h = history_[id]->mutable_cpu_data();
  float* g = p->mutable_cpu_diff();
  for (int i = 0; i < p->count(); ++i) {
    h[i] = decay * h[i] + (1 - decay) * g[i] * g[i];
    g[i] = lr * g[i] / (std::sqrt(h[i]) + delta);
  }
}

void RMSPropSolver::UpdateOnDevice(int id, float rate) {
  DeviceUpdate u;
  u.rule = DeviceUpdate::kRMSProp;
  u.lr = rate * net_->params_lr()[id];
  u.delta = param_.delta();
  u.rms_decay = param_.rms_decay();
  RunDeviceUpdate(id, u);
}

}  // namespace hogstream
