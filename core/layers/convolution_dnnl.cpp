// The DEFAULT engine of ConvolutionLayer: oneDNN's convolution primitives (forward, backward
// data, backward weights) built once per input shape. Tensors stay NCHW in our blobs; each
// pass reorders them into the layouts the JIT kernels want and back, which costs far less
// than the kernels save (the reorders are built once too; backward re-uses the forward's
// reordered input and one reordered top gradient for both its passes). Weight and bias gradients come out of oneDNN overwritten, so they
// land in scratch buffers and are added to the blobs' diffs (gradients accumulate).
#include <dnnl.hpp>

#include <array>
#include <cstdlib>
#include <memory>
#include <new>
#include <tuple>
#include <unordered_map>

#include "core/layers/convolution_layer.hpp"
#include "core/math.hpp"

namespace hogstream {

using dnnl::memory;
using Tag = memory::format_tag;

struct ConvolutionLayer::Dnnl {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  std::vector<int> shape;  // the input shape the primitives were built for
  memory::desc user_src, user_dst, user_wei, user_bias;
  dnnl::convolution_forward fwd;
  dnnl::convolution_backward_data bwd_data;
  dnnl::convolution_backward_weights bwd_wei;
  memory::desc fwd_src, fwd_wei, fwd_dst, bd_wei, bd_diff_dst, bd_diff_src, bw_src, bw_diff_dst,
      bw_diff_wei, fwd_pad, bd_pad, bw_pad;  // *_pad: each primitive's scratchpad
  std::vector<float> wgrad, bgrad;
  // The forward's input in the kernels' layout, one per bottom, kept for backward-weights
  // (TRAIN nets only; the input does not change between a forward and its backward, as every
  // layer's backward assumes): saves one reorder per layer and pass (resnet_c: ~21 of them).
  struct Kept {
    std::unique_ptr<void, void (*)(void*)> p{nullptr, std::free};
    bool valid = false;
  };
  std::vector<Kept> kept_src;
  // Scratch in the kernels' layouts (where they differ from ours) and the primitives'
  // scratchpads, one buffer per role and thread, grown to the largest any layer asked for and
  // kept: a pass is done with its scratch before the next layer's pass, so layers share it.
  // (Made per pass, every large buffer was an mmap and a munmap, with page faults on every
  // touch: 1.0 M faults per 100 batches of a 4-convolution net, 27 % of its time.) The
  // primitives' scratchpads are ours too (scratchpad_mode::user), so executing allocates
  // nothing, rather than leaving oneDNN to allocate and free them at execute time.
  enum Role { kFwdSrc, kFwdWei, kFwdDst, kBwSrc, kBwDiffDst, kBwDiffWei, kBdWei, kBdDiffDst,
              kBdDiffSrc, kPad, kRoles };
  // Reorders between our layout and the kernels', built on first use (per role and direction).
  std::array<dnnl::reorder, kRoles> to_kernel, to_user;

  static void* Aligned(size_t bytes) {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) throw std::bad_alloc();
    return p;
  }
  memory Scratch(Role r, const memory::desc& want) {
    struct Buffer {
      std::unique_ptr<void, void (*)(void*)> p{nullptr, std::free};
      size_t bytes = 0;
    };
    thread_local std::array<Buffer, kRoles> pool;
    Buffer& b = pool[r];
    const size_t bytes = (want.get_size() + 63) / 64 * 64;
    if (b.bytes < bytes) {
      b.p.reset(Aligned(bytes));
      b.bytes = bytes;
    }
    return memory(want, eng, b.p.get());
  }
  void Reorder(dnnl::reorder& r, memory& from, memory& to) {
    if (!r) r = dnnl::reorder(from, to);
    r.execute(strm, from, to);
  }
  // A memory in `want` layout holding the user's data: the user's memory itself when the
  // layouts agree, else `into` (role r's scratch when none is given) filled by a reorder.
  memory In(const memory::desc& user, const memory::desc& want, const float* data, Role r,
            void* into = nullptr) {
    memory u(user, eng, const_cast<float*>(data));
    if (user == want) return u;
    memory m = into ? memory(want, eng, into) : Scratch(r, want);
    Reorder(to_kernel[r], u, m);
    return m;
  }
  // A memory in `have` layout whose contents must end up in `data` (call Out after execute).
  memory Target(const memory::desc& user, const memory::desc& have, float* data, Role r) {
    if (user == have) return memory(user, eng, data);
    return Scratch(r, have);
  }
  void Out(memory& m, const memory::desc& user, float* data, Role r) {
    if (m.get_desc() == user) return;
    memory u(user, eng, data);
    Reorder(to_user[r], m, u);
  }
};

ConvolutionLayer::ConvolutionLayer(const pb::LayerParameter& param) : Layer(param) {}
ConvolutionLayer::~ConvolutionLayer() = default;

void ConvolutionLayer::SetBlocked(const std::vector<bool>& bottom, const std::vector<bool>& top) {
  HS_CHECK(use_dnnl_ && bottom.size() == 1 && top.size() == 1);
  blocked_bottom_ = bottom[0];
  blocked_top_ = top[0];
  dnnl_.reset();  // the primitives' user layouts change: built again at the next Reshape
}

void ConvolutionLayer::PrepareDnnl(const Blob& bottom) {
  if (dnnl_ && dnnl_->shape == bottom.shape()) return;
  auto d = std::make_unique<Dnnl>();
  d->shape = bottom.shape();
  const memory::dim N = bottom.shape(0), G = group_;
  const memory::dims src{N, channels_, height_, width_}, dst{N, num_output_, out_h_, out_w_};
  const memory::dims wei = G == 1 ? memory::dims{num_output_, channels_, kernel_h_, kernel_w_}
                                  : memory::dims{G, num_output_ / G, channels_ / G, kernel_h_, kernel_w_};
  const memory::dims strides{stride_h_, stride_w_}, dil{dil_h_ - 1, dil_w_ - 1},
      pad{pad_h_, pad_w_};
  using dt = memory::data_type;
  // Our blobs' layouts: NCHW, or nChw16c where the Net keeps the blob blocked (then the
  // kernels read and write it as it is, no reorder, when they chose that layout too).
  d->user_src = memory::desc(src, dt::f32, blocked_bottom_ ? Tag::nChw16c : Tag::nchw);
  d->user_dst = memory::desc(dst, dt::f32, blocked_top_ ? Tag::nChw16c : Tag::nchw);
  d->user_wei = memory::desc(wei, dt::f32, G == 1 ? Tag::oihw : Tag::goihw);
  d->user_bias = memory::desc({num_output_}, dt::f32, Tag::x);
  const memory::desc any_src(src, dt::f32, Tag::any), any_dst(dst, dt::f32, Tag::any),
      any_wei(wei, dt::f32, Tag::any);
  const memory::desc bias = bias_term_ ? d->user_bias : memory::desc();
  // Winograd F(4x4, 3x3) for 3x3 stride-1 convolutions with >= 32 channels in and out: per
  // pass 1.5-2x faster than the direct kernels on ResNet-20's 32- and 64-channel layers
  // (oneDNN verbose, 64x32x16x16: forward 2.46 -> 1.69 ms, backward 2.74 -> 1.63 ms), but no
  // faster at 16 channels, where the transforms dominate. oneDNN says where it has no such
  // kernel (a shape, or a CPU without AVX-512): then the direct one.
  const bool try_wino = kernel_h_ == 3 && kernel_w_ == 3 && stride_h_ == 1 && stride_w_ == 1 &&
                        dil_h_ == 1 && dil_w_ == 1 && group_ == 1 && channels_ >= 32 &&
                        num_output_ >= 32;
  // Its weight gradient works on whole 4x4 output tiles; where the output is no multiple of
  // them the direct kernel is as fast or faster (AMD EPYC, 64x32x14x14: 1.16 -> 0.88 ms;
  // 64x64x7x7: 0.85 -> 0.88; at 16x16 and 8x8 Winograd stays ahead, 1.19 vs 1.16 and 0.87 vs
  // 1.14), so there it takes the direct one.
  const bool whole_tiles = out_h_ % 4 == 0 && out_w_ % 4 == 0;
  dnnl::primitive_attr attr;  // scratchpads are ours (Dnnl::Scratch), not made per execute
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  auto build = [&](dnnl::algorithm algo) {
    const dnnl::algorithm wei_algo = whole_tiles ? algo : dnnl::algorithm::convolution_direct;
    auto fpd = dnnl::convolution_forward::primitive_desc(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, any_src,
                                        any_wei, bias, any_dst, strides, dil, pad, pad),
        attr, d->eng);
    auto bdpd = dnnl::convolution_backward_data::primitive_desc(
        dnnl::convolution_backward_data::desc(algo, any_src, any_wei, any_dst, strides, dil, pad,
                                              pad),
        attr, d->eng, fpd);
    auto bwpd = dnnl::convolution_backward_weights::primitive_desc(
        dnnl::convolution_backward_weights::desc(wei_algo, any_src, any_wei, bias, any_dst,
                                                 strides, dil, pad, pad),
        attr, d->eng, fpd);
    return std::make_tuple(fpd, bdpd, bwpd);
  };
  auto [fpd, bdpd, bwpd] = [&] {
    if (try_wino) {
      try {
        auto pds = build(dnnl::algorithm::convolution_winograd);
        winograd_ = true;
        return pds;
      } catch (const dnnl::error&) {
      }
    }
    winograd_ = false;
    return build(dnnl::algorithm::convolution_direct);
  }();
  d->fwd = dnnl::convolution_forward(fpd);
  d->bwd_data = dnnl::convolution_backward_data(bdpd);
  d->bwd_wei = dnnl::convolution_backward_weights(bwpd);
  d->fwd_src = fpd.src_desc();
  d->fwd_wei = fpd.weights_desc();
  d->fwd_dst = fpd.dst_desc();
  d->bd_wei = bdpd.weights_desc();
  d->bd_diff_dst = bdpd.diff_dst_desc();
  d->bd_diff_src = bdpd.diff_src_desc();
  d->bw_src = bwpd.src_desc();
  d->bw_diff_dst = bwpd.diff_dst_desc();
  d->bw_diff_wei = bwpd.diff_weights_desc();
  d->fwd_pad = fpd.scratchpad_desc();
  d->bd_pad = bdpd.scratchpad_desc();
  d->bw_pad = bwpd.scratchpad_desc();
  d->wgrad.resize(blobs_[0]->count());
  d->bgrad.resize(num_output_);
  dnnl_ = std::move(d);
}

void ConvolutionLayer::ForwardDnnl(const Blobs& bottom, const Blobs& top) {
  Dnnl& d = *dnnl_;
  memory wei = d.In(d.user_wei, d.fwd_wei, blobs_[0]->cpu_data(), Dnnl::kFwdWei);
  const bool keep = phase() == pb::TRAIN && d.fwd_src == d.bw_src && !(d.fwd_src == d.user_src);
  d.kept_src.resize(bottom.size());
  for (size_t b = 0; b < bottom.size(); ++b) {
    Dnnl::Kept& kept = d.kept_src[b];
    if (keep && !kept.p) kept.p.reset(Dnnl::Aligned(d.fwd_src.get_size()));
    kept.valid = keep;
    memory src = d.In(d.user_src, d.fwd_src, bottom[b]->cpu_data(), Dnnl::kFwdSrc,
                      keep ? kept.p.get() : nullptr);
    float* y = top[b]->mutable_cpu_data();
    memory dst = d.Target(d.user_dst, d.fwd_dst, y, Dnnl::kFwdDst);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei},
                                         {DNNL_ARG_DST, dst},
                                         {DNNL_ARG_SCRATCHPAD, d.Scratch(Dnnl::kPad, d.fwd_pad)}};
    if (bias_term_)
      args.emplace(DNNL_ARG_BIAS, memory(d.user_bias, d.eng, const_cast<float*>(blobs_[1]->cpu_data())));
    d.fwd.execute(d.strm, args);
    d.Out(dst, d.user_dst, y, Dnnl::kFwdDst);
  }
  d.strm.wait();
}

void ConvolutionLayer::BackwardDnnl(const Blobs& top, const std::vector<bool>& propagate_down,
                                    const Blobs& bottom) {
  Dnnl& d = *dnnl_;
  const bool want_w = param_propagate_down(0);
  const bool want_b = bias_term_ && param_propagate_down(1);
  for (size_t b = 0; b < top.size(); ++b) {
    const float* dy = top[b]->cpu_diff();
    memory ddst_w;  // the top gradient in backward-weights' layout, re-used by backward-data
    if (want_w || want_b) {
      const bool kept = b < d.kept_src.size() && d.kept_src[b].valid;
      memory src = kept ? memory(d.bw_src, d.eng, d.kept_src[b].p.get())
                        : d.In(d.user_src, d.bw_src, bottom[b]->cpu_data(), Dnnl::kBwSrc);
      ddst_w = d.In(d.user_dst, d.bw_diff_dst, dy, Dnnl::kBwDiffDst);
      memory dwei = d.Target(d.user_wei, d.bw_diff_wei, d.wgrad.data(), Dnnl::kBwDiffWei);
      std::unordered_map<int, memory> args{
          {DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, ddst_w}, {DNNL_ARG_DIFF_WEIGHTS, dwei},
          {DNNL_ARG_SCRATCHPAD, d.Scratch(Dnnl::kPad, d.bw_pad)}};
      if (bias_term_) args.emplace(DNNL_ARG_DIFF_BIAS, memory(d.user_bias, d.eng, d.bgrad.data()));
      d.bwd_wei.execute(d.strm, args);
      d.Out(dwei, d.user_wei, d.wgrad.data(), Dnnl::kBwDiffWei);
      d.strm.wait();
      if (want_w) axpy(blobs_[0]->count(), 1.f, d.wgrad.data(), blobs_[0]->mutable_cpu_diff());
      if (want_b) axpy(num_output_, 1.f, d.bgrad.data(), blobs_[1]->mutable_cpu_diff());
    }
    if (propagate_down[b]) {
      memory wei = d.In(d.user_wei, d.bd_wei, blobs_[0]->cpu_data(), Dnnl::kBdWei);
      memory ddst = ddst_w && d.bd_diff_dst == d.bw_diff_dst
                        ? ddst_w
                        : d.In(d.user_dst, d.bd_diff_dst, dy, Dnnl::kBdDiffDst);
      float* dx = bottom[b]->mutable_cpu_diff();
      memory dsrc = d.Target(d.user_src, d.bd_diff_src, dx, Dnnl::kBdDiffSrc);
      d.bwd_data.execute(d.strm, {{DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_WEIGHTS, wei},
                                  {DNNL_ARG_DIFF_SRC, dsrc},
                                  {DNNL_ARG_SCRATCHPAD, d.Scratch(Dnnl::kPad, d.bd_pad)}});
      d.Out(dsrc, d.user_src, dx, Dnnl::kBdDiffSrc);
      d.strm.wait();
    }
  }
}

}  // namespace hogstream
