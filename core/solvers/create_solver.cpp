// CreateSolver: the solver type by name (`type: "Adam"`) or by the legacy enum
// (`solver_type: ADAM`).
#include "core/solvers/solvers.hpp"

namespace hogstream {

std::unique_ptr<Solver> CreateSolver(const pb::SolverParameter& param, const SolverOptions& options) {
  std::string type = param.type();
  if (!param.has_type() && param.has_solver_type()) {
    static const char* kLegacy[] = {"SGD", "Nesterov", "AdaGrad", "RMSProp", "AdaDelta", "Adam"};
    type = kLegacy[param.solver_type()];
  }
  if (type == "SGD") return std::make_unique<SGDSolver>(param, options);
  if (type == "Nesterov") return std::make_unique<NesterovSolver>(param, options);
  if (type == "AdaGrad") return std::make_unique<AdaGradSolver>(param, options);
  if (type == "RMSProp") return std::make_unique<RMSPropSolver>(param, options);
  if (type == "AdaDelta") return std::make_unique<AdaDeltaSolver>(param, options);
  if (type == "Adam") return std::make_unique<AdamSolver>(param, options);
  HS_FAIL() << "unknown solver type '" << type
            << "' (SGD, Nesterov, AdaGrad, RMSProp, AdaDelta, Adam)";
}

}  // namespace hogstream
