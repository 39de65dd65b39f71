#include "core/net_report.hpp"

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <random>
#include <sstream>

#include "core/context.hpp"
#include "core/math.hpp"

namespace hogstream {

namespace {
std::string Shapes(const Blobs& tops) {
  std::ostringstream os;
  for (size_t t = 0; t < tops.size(); ++t) {
    if (t) os << ", ";
    const Blob* b = tops[t];
    for (int i = 0; i < b->num_axes(); ++i) os << (i ? "x" : "") << b->shape(i);
    if (b->num_axes() == 0) os << "scalar";
  }
  return os.str();
}

std::string WithCommas(size_t n) {
  const std::string digits = std::to_string(n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}
}  // namespace

void DescribeNet(const Net& net, std::ostream& os) {
  // Parameters counted where they are owned; sharers show "shared".
  std::vector<size_t> owned(net.layers().size(), 0);
  std::vector<bool> shares(net.layers().size(), false);
  for (size_t p = 0; p < net.params().size(); ++p) {
    const int layer = net.param_layer_indices()[p].first;
    if (net.param_owners()[p] == static_cast<int>(p)) owned[layer] += net.params()[p]->count();
    else shares[layer] = true;
  }
  size_t wname = 5, wtype = 4, wshape = 10;
  for (size_t i = 0; i < net.layers().size(); ++i) {
    wname = std::max(wname, net.layer_names()[i].size());
    wtype = std::max(wtype, std::string(net.layers()[i]->type()).size());
    wshape = std::max(wshape, Shapes(net.top_vecs()[i]).size());
  }
  os << std::left << std::setw(wname + 2) << "layer" << std::setw(wtype + 2) << "type"
     << std::setw(wshape + 2) << "top shapes" << std::right << std::setw(12) << "params" << "\n";
  for (size_t i = 0; i < net.layers().size(); ++i) {
    std::string count = WithCommas(owned[i]);
    if (shares[i]) count += " (+shared)";
    os << std::left << std::setw(wname + 2) << net.layer_names()[i] << std::setw(wtype + 2)
       << net.layers()[i]->type() << std::setw(wshape + 2) << Shapes(net.top_vecs()[i])
       << std::right << std::setw(12) << count << "\n";
  }
  os << "params: " << net.num_learnable() << "\n";
}

TimingReport TimeNet(Net& net, int iterations) {
  HS_REQUIRE(iterations > 0) << "--iterations must be > 0";
  std::mt19937 gen(1234);
  std::normal_distribution<float> nd;
  for (Blob* b : net.input_blobs()) {
    float* d = b->mutable_cpu_data();
    const bool label = b->num_axes() <= 1;
    for (int i = 0; i < b->count(); ++i) d[i] = label ? 0.f : nd(gen);
  }
  using clock = std::chrono::steady_clock;
  auto ms = [](clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
  const int L = static_cast<int>(net.layers().size());
  TimingReport r;
  r.iterations = iterations;
  r.forward_ms.assign(L, 0);
  r.backward_ms.assign(L, 0);
  net.ForwardBackward();  // warm-up: first touches, lazy allocations
  DeviceSynchronize();
  std::vector<double> totals;
  for (int it = 0; it < iterations; ++it) {
    net.ClearParamDiffs();
    const auto start = clock::now();
    auto last = start;
    for (int i = 0; i < L; ++i) {
      net.ForwardFromTo(i, i);
      DeviceSynchronize();
      const auto now = clock::now();
      r.forward_ms[i] += ms(now - last);
      last = now;
    }
    const auto mid = last;
    for (int i = L - 1; i >= 0; --i) {
      net.BackwardFromTo(i, i);
      DeviceSynchronize();
      const auto now = clock::now();
      r.backward_ms[i] += ms(now - last);
      last = now;
    }
    r.mean_forward_ms += ms(mid - start);
    r.mean_backward_ms += ms(last - mid);
    totals.push_back(ms(last - start));
  }
  for (int i = 0; i < L; ++i) {
    r.forward_ms[i] /= iterations;
    r.backward_ms[i] /= iterations;
  }
  r.mean_forward_ms /= iterations;
  r.mean_backward_ms /= iterations;
  r.mean_total_ms = r.mean_forward_ms + r.mean_backward_ms;
  std::sort(totals.begin(), totals.end());
  r.median_total_ms = totals[totals.size() / 2];
  return r;
}

void PrintTiming(const Net& net, const TimingReport& r, std::ostream& os) {
  size_t wname = 5;
  for (const auto& n : net.layer_names()) wname = std::max(wname, n.size());
  os << std::left << std::setw(wname + 2) << "layer" << std::right << std::setw(12)
     << "forward ms" << std::setw(13) << "backward ms" << "\n"
     << std::fixed << std::setprecision(3);
  // In GPU mode, the layers with no GPU twin (their passes ran on the host copy) say so.
  const bool gpu = Context::Get().mode() == Mode::GPU;
  const std::vector<std::string> twins = gpu ? GpuLayerTypeList() : std::vector<std::string>{};
  for (size_t i = 0; i < net.layers().size(); ++i) {
    os << std::left << std::setw(wname + 2) << net.layer_names()[i] << std::right
       << std::setw(12) << r.forward_ms[i] << std::setw(13) << r.backward_ms[i];
    const std::string type = net.layers()[i]->type();
    if (gpu && std::find(twins.begin(), twins.end(), type) == twins.end()) os << "  (" << type << " on the host)";
    os << "\n";
  }
  os << "Average Forward pass: " << r.mean_forward_ms << " ms.\n"
     << "Average Backward pass: " << r.mean_backward_ms << " ms.\n"
     << "Average Forward-Backward: " << r.mean_total_ms << " ms.\n"
     << "Median Forward-Backward: " << r.median_total_ms << " ms (" << r.iterations
     << " iterations, batch " << (net.input_blobs().empty() ? 0 : net.input_blobs()[0]->shape(0))
     << ").\n";
  os.unsetf(std::ios::fixed);
}

}  // namespace hogstream
