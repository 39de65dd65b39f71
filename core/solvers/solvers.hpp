// The update rules, one class each, with Caffe's exact formulas. Notation per learnable param:
// g = its gradient (after iter_size normalisation and weight decay), w = its value, lr = the
// policy's rate times the param's lr_mult, h/h2 = the solver's history blobs. Each writes the
// step into the diff; the base class then does w -= diff. In GPU mode each rule also runs on
// the device, the whole update of a blob in one kernel (GpuKernels::update, the same formulas).
#pragma once

#include "core/solver.hpp"

namespace hogstream {

// h = momentum * h + lr * g;  step = h
class SGDSolver : public Solver {
 public:
  using Solver::Solver;
  const char* type() const override { return "SGD"; }

 protected:
  void ComputeUpdateValue(int id, float rate) override;
  bool HasDeviceUpdate() const override { return true; }
  void UpdateOnDevice(int id, float rate) override;
};

// h' = momentum * h + lr * g;  step = (1 + momentum) * h' - momentum * h
class NesterovSolver : public Solver {
 public:
  using Solver::Solver;
  const char* type() const override { return "Nesterov"; }

 protected:
  void ComputeUpdateValue(int id, float rate) override;
  bool HasDeviceUpdate() const override { return true; }
  void UpdateOnDevice(int id, float rate) override;
};

// h += g^2;  step = lr * g / (sqrt(h) + delta)
class AdaGradSolver : public Solver {
 public:
  AdaGradSolver(const pb::SolverParameter& p, const SolverOptions& o);
  const char* type() const override { return "AdaGrad"; }

 protected:
  void ComputeUpdateValue(int id, float rate) override;
  bool HasDeviceUpdate() const override { return true; }
  void UpdateOnDevice(int id, float rate) override;
};

// h = rms_decay * h + (1 - rms_decay) * g^2;  step = lr * g / (sqrt(h) + delta)
class RMSPropSolver : public Solver {
 public:
  RMSPropSolver(const pb::SolverParameter& p, const SolverOptions& o);
  const char* type() const override { return "RMSProp"; }

 protected:
  void ComputeUpdateValue(int id, float rate) override;
  bool HasDeviceUpdate() const override { return true; }
  void UpdateOnDevice(int id, float rate) override;
};

// h = m h + (1-m) g^2;  u = g * sqrt((h2 + delta) / (h + delta));  h2 = m h2 + (1-m) u^2;
// step = lr * u
class AdaDeltaSolver : public Solver {
 public:
  AdaDeltaSolver(const pb::SolverParameter& p, const SolverOptions& o);
  const char* type() const override { return "AdaDelta"; }

 protected:
  void ComputeUpdateValue(int id, float rate) override;
  bool HasDeviceUpdate() const override { return true; }
  void UpdateOnDevice(int id, float rate) override;
};

// m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  t = iter + 1;
// step = lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + delta)
class AdamSolver : public Solver {
 public:
  AdamSolver(const pb::SolverParameter& p, const SolverOptions& o);
  const char* type() const override { return "Adam"; }

 protected:
  void ComputeUpdateValue(int id, float rate) override;
  bool HasDeviceUpdate() const override { return true; }
  void UpdateOnDevice(int id, float rate) override;
};

}  // namespace hogstream
