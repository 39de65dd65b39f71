// GPU twin of Convolution on cuDNN: one set of descriptors per shape (groups through cuDNN's
// group count, dilation, stride, padding), algorithms timed by cuDNN once per shape (as PyTorch's
// cudnn.benchmark does; HS_GPU_CONV_SEARCH=0 takes cuDNN's heuristics instead) within a workspace
// cap, gradients accumulated into the parameter diffs as on the CPU. Float32 convolutions may
// use TF32 tensor cores (as PyTorch's do by default); HS_GPU_TF32=0 asks for exact FMA math.
// Built only with cuDNN; without it the layer runs its CPU passes.
#ifdef HOGSTREAM_CUDNN

#include <cstdlib>
#include <cstring>

#include "core/gpu_common.cuh"
#include "core/layers/convolution_layer.hpp"

namespace hogstream {

namespace {
constexpr size_t kWorkspaceCap = size_t{1} << 30;

bool EnvOn(const char* name) {
  const char* v = std::getenv(name);
  return !(v && std::strcmp(v, "0") == 0);
}
bool Tf32Allowed() { return EnvOn("HS_GPU_TF32"); }
bool SearchAlgorithms() { return EnvOn("HS_GPU_CONV_SEARCH"); }
}  // namespace

class ConvolutionGpuLayer : public ConvolutionLayer {
 public:
  explicit ConvolutionGpuLayer(const pb::LayerParameter& param) : ConvolutionLayer(param) { host_passes_ = false; }
  ~ConvolutionGpuLayer() override {
    if (!described_) return;
    cudnnDestroyTensorDescriptor(x_);
    cudnnDestroyTensorDescriptor(y_);
    cudnnDestroyTensorDescriptor(bias_);
    cudnnDestroyFilterDescriptor(w_);
    cudnnDestroyConvolutionDescriptor(conv_);
  }

  void Reshape(const Blobs& bottom, const Blobs& top) override {
    ConvolutionLayer::Reshape(bottom, top);
    if (Context::Get().mode() == Mode::GPU) Describe(*bottom[0]);
  }

 protected:
  void Forward_gpu(const Blobs& bottom, const Blobs& top) override {
    const float one = 1.f, zero = 0.f;
    cudnnHandle_t h = Cudnn();
    for (size_t i = 0; i < bottom.size(); ++i) {
      float* y = top[i]->mutable_gpu_data();
      HS_CUDNN_CHECK(cudnnConvolutionForward(h, &one, x_, bottom[i]->gpu_data(), w_, blobs_[0]->gpu_data(), conv_,
                                             fwd_, Workspace(), workspace_bytes_, &zero, y_, y));
      if (bias_term_) HS_CUDNN_CHECK(cudnnAddTensor(h, &one, bias_, blobs_[1]->gpu_data(), &one, y_, y));
    }
  }

  void Backward_gpu(const Blobs& top, const std::vector<bool>& propagate_down, const Blobs& bottom) override {
    const float one = 1.f, zero = 0.f;
    cudnnHandle_t h = Cudnn();
    for (size_t i = 0; i < top.size(); ++i) {
      const float* dy = top[i]->gpu_diff();
      if (bias_term_ && param_propagate_down(1))
        HS_CUDNN_CHECK(cudnnConvolutionBackwardBias(h, &one, y_, dy, &one, bias_, blobs_[1]->mutable_gpu_diff()));
      if (param_propagate_down(0))
        HS_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, &one, x_, bottom[i]->gpu_data(), y_, dy, conv_, bwd_filter_,
                                                      Workspace(), workspace_bytes_, &one, w_,
                                                      blobs_[0]->mutable_gpu_diff()));
      if (propagate_down[i])
        HS_CUDNN_CHECK(cudnnConvolutionBackwardData(h, &one, w_, blobs_[0]->gpu_data(), y_, dy, conv_, bwd_data_,
                                                    Workspace(), workspace_bytes_, &zero, x_,
                                                    bottom[i]->mutable_gpu_diff()));
    }
  }

 private:
  void Describe(const Blob& b) {
    if (!described_) {
      HS_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x_));
      HS_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y_));
      HS_CUDNN_CHECK(cudnnCreateTensorDescriptor(&bias_));
      HS_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w_));
      HS_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv_));
      described_ = true;
    }
    const std::vector<int> shape = b.shape();
    if (shape == described_shape_) return;
    described_shape_ = shape;
    const int n = b.shape(0);
    HS_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, channels_, height_, width_));
    HS_CUDNN_CHECK(cudnnSetTensor4dDescriptor(y_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, num_output_, out_h_, out_w_));
    HS_CUDNN_CHECK(cudnnSetTensor4dDescriptor(bias_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, num_output_, 1, 1));
    HS_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, num_output_, channels_ / group_,
                                              kernel_h_, kernel_w_));
    HS_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv_, pad_h_, pad_w_, stride_h_, stride_w_, dil_h_, dil_w_,
                                                   CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    HS_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv_, group_));
    HS_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_, Tf32Allowed() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
    // Ranked choices, the first that runs within the cap: timed on this device (fastest first),
    // or cuDNN's heuristics.
    cudnnHandle_t h = Cudnn();
    const bool search = SearchAlgorithms();
    size_t need = 0;
    {
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      int got = 0;
      if (search)
        HS_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithm(h, x_, w_, conv_, y_, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                            &got, perf));
      else
        HS_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, x_, w_, conv_, y_, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                              &got, perf));
      fwd_ = Pick(perf, got, &need, "forward");
    }
    {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      int got = 0;
      if (search)
        HS_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithm(h, x_, y_, conv_, w_,
                                                                   CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, perf));
      else
        HS_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, x_, y_, conv_, w_,
                                                                     CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, perf));
      bwd_filter_ = Pick(perf, got, &need, "backward filter");
    }
    {
      cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      int got = 0;
      if (search)
        HS_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithm(h, w_, y_, conv_, x_,
                                                                 CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, perf));
      else
        HS_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, w_, y_, conv_, x_,
                                                                   CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, perf));
      bwd_data_ = Pick(perf, got, &need, "backward data");
    }
    workspace_bytes_ = need;
  }

  template <typename Perf>
  static decltype(Perf{}.algo) Pick(const Perf* perf, int got, size_t* need, const char* what) {
    for (int i = 0; i < got; ++i)
      if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= kWorkspaceCap) {
        *need = std::max(*need, perf[i].memory);
        return perf[i].algo;
      }
    HS_FAIL() << "cuDNN has no " << what << " convolution algorithm for this layer's shape";
  }

  void* Workspace() {
    if (workspace_bytes_ == 0) return nullptr;
    const int floats = static_cast<int>((workspace_bytes_ + sizeof(float) - 1) / sizeof(float));
    if (workspace_.count() < floats) workspace_.Reshape(std::vector<int>{floats});
    return workspace_.mutable_gpu_data();
  }

  bool described_ = false;
  std::vector<int> described_shape_;
  cudnnTensorDescriptor_t x_{}, y_{}, bias_{};
  cudnnFilterDescriptor_t w_{};
  cudnnConvolutionDescriptor_t conv_{};
  cudnnConvolutionFwdAlgo_t fwd_{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter_{};
  cudnnConvolutionBwdDataAlgo_t bwd_data_{};
  size_t workspace_bytes_ = 0;
  Blob workspace_;
};

HS_REGISTER_GPU_LAYER(Convolution, ConvolutionGpuLayer);

}  // namespace hogstream

#endif  // HOGSTREAM_CUDNN
