#include <cmath>

#include "core/gpu_engine.hpp"
#include "core/solvers/solvers.hpp"

namespace hogstream {

AdamSolver::AdamSolver(const pb::SolverParameter& p, const SolverOptions& o) : Solver(p, o, 2) {}

void AdamSolver::ComputeUpdateValue(int id, float rate) {
  Blob* p = net_->learnable_params()[id];
  const int P = static_cast<int>(net_->learnable_params().size());
  const float lr = rate * net_->params_lr()[id], eps = param_.delta();
  const float b1 = param_.momentum(), b2 = param_.momentum2();
  const double t = iter_ + 1;
  const float correction = static_cast<float>(std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t)));
  float* m = history_[id]->mutable_cpu_data();
  float* v = history_[P + id]->mutable_cpu_data();
  float* g = p->mutable_cpu_diff();
  for (int i = 0; i < p->count(); ++i) {
    m[i] = b1 * m[i] + (1 - b1) * g[i];
    v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
    g[i] = lr * correction * m[i] / (std::sqrt(v[i]) + eps);
  }
}

void AdamSolver::UpdateOnDevice(int id, float rate) {
  const double t = iter_ + 1;  // as ComputeUpdateValue
  const float correction = static_cast<float>(std::sqrt(1 - std::pow(param_.momentum2(), t)) /
                                              (1 - std::pow(param_.momentum(), t)));
  DeviceUpdate u;
  u.rule = DeviceUpdate::kAdam;
  u.lr = rate * net_->params_lr()[id] * correction;
  u.momentum = param_.momentum();
  u.momentum2 = param_.momentum2();
  u.delta = param_.delta();
  RunDeviceUpdate(id, u);
}

}  // namespace hogstream
