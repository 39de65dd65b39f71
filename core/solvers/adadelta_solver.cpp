#include <cmath>

#include "core/gpu_engine.hpp"
#include "core/solvers/solvers.hpp"

namespace hogstream {

AdaDeltaSolver::AdaDeltaSolver(const pb::SolverParameter& p, const SolverOptions& o) : Solver(p, o, 2) {}

void AdaDeltaSolver::ComputeUpdateValue(int id, float rate) {
  Blob* p = net_->learnable_params()[id];
  const int P = static_cast<int>(net_->learnable_params().size());
  const float lr = rate * net_->params_lr()[id], delta = param_.delta(), m = param_.momentum();
  float* hg = history_[id]->mutable_cpu_data();      // running mean of g^2
  float* hu = history_[P + id]->mutable_cpu_data();  // running mean of step^2
  float* g = p->mutable_cpu_diff();
  for (int i = 0; i < p->count(); ++i) {
    hg[i] = (1 - m) * g[i] * g[i] + m * hg[i];
    const float u = g[i] * std::sqrt((hu[i] + delta) / (hg[i] + delta));
    hu[i] = (1 - m) * u * u + m * hu[i];
    g[i] = lr * u;
  }
}

void AdaDeltaSolver::UpdateOnDevice(int id, float rate) {
  DeviceUpdate u;
  u.rule = DeviceUpdate::kAdaDelta;
  u.lr = rate * net_->params_lr()[id];
  u.delta = param_.delta();
  u.momentum = param_.momentum();
  RunDeviceUpdate(id, u);
}

}  // namespace hogstream
