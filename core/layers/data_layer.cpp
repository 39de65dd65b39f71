// "Data": Caffe's LMDB-backed input layer. Reading LMDB sources comes with the training work
// (data/); until then a Data layer must be stood in for by a shape (NetOptions::input_shapes,
// `--input=TOP:N,C,H,W` on the command line), which turns it into an Input layer. Building a
// net with a Data layer and no stand-in is a clear error rather than a silent fake.
#include "core/layer.hpp"

namespace hogstream {

class DataLayer : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Data"; }
  int ExactNumBottomBlobs() const override { return 0; }
  int MinTopBlobs() const override { return 1; }
  int MaxTopBlobs() const override { return 2; }
  void LayerSetUp(const Blobs&, const Blobs& top) override {
    const auto& dp = param_.data_param();
    HS_FAIL() << "reading LMDB source '" << (dp.source_size() ? dp.source(0) : std::string())
              << "' is not implemented yet; stand in with --input=" << param_.top(0)
              << ":N,C,H,W";
  }
  void Reshape(const Blobs&, const Blobs&) override {}

 protected:
  void Forward_cpu(const Blobs&, const Blobs&) override {}
  void Backward_cpu(const Blobs&, const std::vector<bool>&, const Blobs&) override {}
};

HS_REGISTER_LAYER(Data, DataLayer);

}  // namespace hogstream
