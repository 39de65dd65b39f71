// Caffe's recurrent layers (RNN, LSTM, LSTMUnit): forward values against each definition,
// written out directly in double precision, on fresh random inputs whose cont starts sequences
// in the middle of a batch; the state carried from one Forward to the next; numerical
// gradients of every bottom but cont and of every learned blob; the learned blobs' order and
// shapes; a net built from text; Caffe's field numbers and defaults; and the refusals.
#include "test/test_seed.hpp"

#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/context.hpp"
#include "core/io.hpp"
#include "core/layer.hpp"
#include "core/net.hpp"
#include "test/core/gradient_checker.hpp"
#include "test/error_of.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

using test::LayerText;

// An RNN or LSTM layer's text: num_output H, random weights and biases.
std::string RecurrentText(const std::string& type, int h, bool expose) {
  return "type: \"" + type + "\" recurrent_param { num_output: " + std::to_string(h) +
         " weight_filler { type: \"uniform\" min: -0.6 max: 0.6 }"
         " bias_filler { type: \"uniform\" min: -0.5 max: 0.5 }" +
         (expose ? " expose_hidden: true" : "") + " }";
}

double Sig(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// The learned blobs and inputs of one layer, read as doubles.
struct Weights {
  explicit Weights(const Layer& l) {
    for (const auto& b : l.blobs()) w.emplace_back(b->cpu_data(), b->cpu_data() + b->count());
  }
  std::vector<std::vector<double>> w;
};

// The final state(s) of a sequence: h (and c), N x H.
struct State {
  std::vector<double> h, c;
};

// RNN, straight from its definition. Weights: W_xh, b_h, [W_xh_static], W_hh, W_ho, b_o.
// Returns the top (T x N x H) and leaves the final h in `st`.
std::vector<double> RefRNN(const Weights& W, const Blob& x, const Blob& cont, const Blob* xs,
                           int H, State& st) {
  const int T = x.shape(0), N = x.shape(1), D = x.count(2), S = xs ? xs->count(1) : 0;
  const int s = xs ? 1 : 0;
  const auto &wxh = W.w[0], &bh = W.w[1], &whh = W.w[2 + s], &who = W.w[3 + s], &bo = W.w[4 + s];
  std::vector<double> top(static_cast<size_t>(T) * N * H);
  for (int t = 0; t < T; ++t) {
    std::vector<double> hn(static_cast<size_t>(N) * H);
    for (int n = 0; n < N; ++n) {
      const double k = cont.cpu_data()[t * N + n];
      for (int j = 0; j < H; ++j) {
        double a = bh[j];
        for (int d = 0; d < D; ++d) a += wxh[j * D + d] * x.cpu_data()[(t * N + n) * D + d];
        for (int q = 0; q < S; ++q) a += W.w[2][j * S + q] * xs->cpu_data()[n * S + q];
        for (int q = 0; q < H; ++q) a += whh[j * H + q] * k * st.h[n * H + q];
        hn[n * H + j] = std::tanh(a);
      }
      for (int j = 0; j < H; ++j) {
        double a = bo[j];
        for (int q = 0; q < H; ++q) a += who[j * H + q] * hn[n * H + q];
        top[(static_cast<size_t>(t) * N + n) * H + j] = std::tanh(a);
      }
    }
    st.h = hn;
  }
  return top;
}

// LSTM, straight from its definition. Weights: W_xc, b_c, [W_xc_static], W_hc; gates i, f, o, g.
std::vector<double> RefLSTM(const Weights& W, const Blob& x, const Blob& cont, const Blob* xs,
                            int H, State& st) {
  const int T = x.shape(0), N = x.shape(1), D = x.count(2), S = xs ? xs->count(1) : 0;
  const int s = xs ? 1 : 0;
  const auto &wxc = W.w[0], &bc = W.w[1], &whc = W.w[2 + s];
  std::vector<double> top(static_cast<size_t>(T) * N * H);
  for (int t = 0; t < T; ++t) {
    std::vector<double> hn(static_cast<size_t>(N) * H), cn(hn.size());
    for (int n = 0; n < N; ++n) {
      const double k = cont.cpu_data()[t * N + n];
      std::vector<double> z(4 * H);
      for (int r = 0; r < 4 * H; ++r) {
        double a = bc[r];
        for (int d = 0; d < D; ++d) a += wxc[r * D + d] * x.cpu_data()[(t * N + n) * D + d];
        for (int q = 0; q < S; ++q) a += W.w[2][r * S + q] * xs->cpu_data()[n * S + q];
        for (int q = 0; q < H; ++q) a += whc[r * H + q] * k * st.h[n * H + q];
        z[r] = a;
      }
      for (int j = 0; j < H; ++j) {
        const double i = Sig(z[j]), f = Sig(z[H + j]), o = Sig(z[2 * H + j]),
                     g = std::tanh(z[3 * H + j]);
        const double c = k * f * st.c[n * H + j] + i * g;
        cn[n * H + j] = c;
        hn[n * H + j] = o * std::tanh(c);
        top[(static_cast<size_t>(t) * N + n) * H + j] = hn[n * H + j];
      }
    }
    st.h = hn;
    st.c = cn;
  }
  return top;
}

class Recurrent : public test::LayerTest {
 protected:
  void SetUp() override { Context::Get().set_seed(TestSeed()); }

 public:
  // T x N continuation indicators: 1 everywhere but where `starts` says (t, n) begins a
  // sequence.
  Blob* Cont(int T, int N, const std::vector<std::pair<int, int>>& starts) {
    Blob* b = Empty();
    b->Reshape({T, N});
    for (int i = 0; i < T * N; ++i) b->mutable_cpu_data()[i] = 1.f;
    for (auto [t, n] : starts) b->mutable_cpu_data()[t * N + n] = 0.f;
    return b;
  }
};

void ExpectNear(const float* got, const std::vector<double>& want, const std::string& what) {
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 2e-5 * std::max(1.0, std::fabs(want[i])))
        << what << " element " << i;
}

// One forward case of RNN or LSTM: shapes, learned blobs, values; then, without expose_hidden,
// a second batch that continues the first one's sequences from the carried state.
void ForwardCase(Recurrent* fx, bool lstm, bool with_static, bool expose) {
  SCOPED_TRACE(std::string(lstm ? "LSTM" : "RNN") + (with_static ? " static" : "") +
               (expose ? " expose_hidden" : ""));
  const int T = 4, N = 3, H = 5, D = 6, S = 4;
  Blob* x = fx->Random({T, N, 2, 3});
  // Stream 0 starts at t = 0 and again at t = 2; stream 1 starts at t = 0; stream 2 goes on
  // from the initial state (exposed or carried, which is zero at first).
  Blob* c = fx->Cont(T, N, {{0, 0}, {2, 0}, {0, 1}});
  Blob* xs = with_static ? fx->Random({N, 2, 2}) : nullptr;
  Blobs bottom{x, c};
  if (xs) bottom.push_back(xs);
  const int states = lstm ? 2 : 1;
  State st;
  st.h.assign(N * H, 0.0);
  st.c.assign(N * H, 0.0);
  if (expose) {
    for (int k = 0; k < states; ++k) {
      Blob* s0 = fx->Random({1, N, H});
      bottom.push_back(s0);
      (k ? st.c : st.h).assign(s0->cpu_data(), s0->cpu_data() + N * H);
    }
  }
  Blobs top{fx->Empty()};
  if (expose)
    for (int k = 0; k < states; ++k) top.push_back(fx->Empty());
  auto layer = CreateLayer(LayerText(RecurrentText(lstm ? "LSTM" : "RNN", H, expose)));
  layer->SetUp(bottom, top);
  ASSERT_EQ(top[0]->shape(), (std::vector<int>{T, N, H}));
  for (size_t k = 1; k < top.size(); ++k) ASSERT_EQ(top[k]->shape(), (std::vector<int>{1, N, H}));
  std::vector<std::vector<int>> shapes;
  const int G = lstm ? 4 * H : H;
  shapes.push_back({G, D});
  shapes.push_back({G});
  if (with_static) shapes.push_back({G, S});
  if (lstm) {
    shapes.push_back({G, H});
  } else {
    shapes.insert(shapes.end(), {{H, H}, {H, H}, {H}});
  }
  ASSERT_EQ(layer->blobs().size(), shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    EXPECT_EQ(layer->blobs()[i]->shape(), shapes[i]) << "learned blob " << i;
    EXPECT_GT(layer->blobs()[i]->asum_data(), 0.f) << "learned blob " << i << " not filled";
  }
  const Weights W(*layer);
  layer->Forward(bottom, top);
  std::vector<double> want = lstm ? RefLSTM(W, *x, *c, xs, H, st) : RefRNN(W, *x, *c, xs, H, st);
  ExpectNear(top[0]->cpu_data(), want, "top 0");
  if (expose) {
    ExpectNear(top[1]->cpu_data(), st.h, "final h");
    if (lstm) ExpectNear(top[2]->cpu_data(), st.c, "final c");
    return;
  }
  // A second batch: every stream goes on from the first batch's final state but stream 1,
  // which starts a new sequence at t = 1.
  test::FillGaussian(x, fx->gen_);
  for (int i = 0; i < T * N; ++i) c->mutable_cpu_data()[i] = 1.f;
  c->mutable_cpu_data()[1 * N + 1] = 0.f;
  layer->Forward(bottom, top);
  want = lstm ? RefLSTM(W, *x, *c, xs, H, st) : RefRNN(W, *x, *c, xs, H, st);
  ExpectNear(top[0]->cpu_data(), want, "second batch, top 0");
}

TEST_F(Recurrent, RnnMatchesItsDefinition) {
  for (bool with_static : {false, true})
    for (bool expose : {false, true})
      ForwardCase(this, false, with_static, expose);
}

TEST_F(Recurrent, LstmMatchesItsDefinition) {
  for (bool with_static : {false, true})
    for (bool expose : {false, true})
      ForwardCase(this, true, with_static, expose);
}

// A state carried into a batch whose first step starts every sequence changes nothing; a
// change of stream count starts from zero. (The number of steps may change too, which
// Caffe's layer refuses.)
TEST_F(Recurrent, LstmCarriedStateIsCutByContAndResetByNewStreamCount) {
  const int T = 3, H = 4;
  auto layer = CreateLayer(LayerText(RecurrentText("LSTM", H, false)));
  Blob* x = Random({T, 2, 3});
  Blob* c = Cont(T, 2, {{0, 0}, {0, 1}});
  Blob* y = Empty();
  layer->SetUp({x, c}, {y});
  layer->Forward({x, c}, {y});
  const std::vector<float> first(y->cpu_data(), y->cpu_data() + y->count());
  layer->Forward({x, c}, {y});
  for (int i = 0; i < y->count(); ++i) EXPECT_EQ(y->cpu_data()[i], first[i]) << i;
  // Three streams and five steps, every stream continuing: the carried state is zero again.
  Blob* x3 = Random({T + 2, 3, 3});
  Blob* c3 = Cont(T + 2, 3, {});
  layer->Reshape({x3, c3}, {y});
  ASSERT_EQ(y->shape(), (std::vector<int>{T + 2, 3, H}));
  layer->Forward({x3, c3}, {y});
  State st;
  st.h.assign(3 * H, 0.0);
  st.c.assign(3 * H, 0.0);
  ExpectNear(y->cpu_data(), RefLSTM(Weights(*layer), *x3, *c3, nullptr, H, st), "3 streams");
}

// ---------------------------------------------------------------- gradients

void GradientCase(const std::string& type, bool with_static, bool expose,
                  Blob* x, Blob* c, Blob* xs, const std::vector<Blob*>& states,
                  const std::vector<Blob*>& tops) {
  SCOPED_TRACE(type + (with_static ? " static" : "") + (expose ? " expose_hidden" : ""));
  Blobs bottom{x, c};
  if (with_static) bottom.push_back(xs);
  if (expose) bottom.insert(bottom.end(), states.begin(), states.end());
  Blobs top{tops[0]};
  if (expose) top.insert(top.end(), tops.begin() + 1, tops.begin() + 1 + states.size());
  auto layer = CreateLayer(LayerText(RecurrentText(type, 4, expose)));
  layer->SetUp(bottom, top);
  test::GradientCheck opt;
  for (int b = 0; b < static_cast<int>(bottom.size()); ++b)
    if (b != 1) opt.check_bottoms.push_back(b);
  opt.seed = TestSeed();
  test::CheckGradients(layer.get(), bottom, top, opt);
}

TEST_F(Recurrent, RnnAndLstmGradientsMatchNumeric) {
  const int T = 3, N = 2;
  for (const std::string type : {"RNN", "LSTM"}) {
    const int states = type == "LSTM" ? 2 : 1;
    for (bool with_static : {false, true}) {
      for (bool expose : {false, true}) {
        Blob* x = Random({T, N, 3});
        // Without exposed states, the first step starts every sequence (so the state carried
        // between the checker's Forward calls plays no part); stream 1 starts again at t = 2.
        Blob* c = expose ? Cont(T, N, {{0, 1}, {2, 1}}) : Cont(T, N, {{0, 0}, {0, 1}, {2, 1}});
        Blob* xs = Random({N, 2});
        std::vector<Blob*> states_in;
        for (int k = 0; k < states; ++k) states_in.push_back(Random({1, N, 4}));
        GradientCase(type, with_static, expose, x, c, xs, states_in,
                     {Empty(), Empty(), Empty()});
      }
    }
  }
}

// ---------------------------------------------------------------- LSTMUnit

TEST_F(Recurrent, LstmUnitMatchesItsDefinitionAndGradients) {
  const int N = 3, D = 4;
  Blob* c_prev = Random({1, N, D});
  Blob* gates = Random({1, N, 4 * D});
  Blob* cont = Cont(1, N, {{0, 1}});
  Blob* c = Empty();
  Blob* h = Empty();
  auto layer = CreateLayer(LayerText(R"(type: "LSTMUnit")"));
  layer->SetUp({c_prev, gates, cont}, {c, h});
  EXPECT_TRUE(layer->blobs().empty());
  ASSERT_EQ(c->shape(), (std::vector<int>{1, N, D}));
  ASSERT_EQ(h->shape(), (std::vector<int>{1, N, D}));
  layer->Forward({c_prev, gates, cont}, {c, h});
  for (int n = 0; n < N; ++n) {
    for (int d = 0; d < D; ++d) {
      const float* g = gates->cpu_data() + n * 4 * D;
      const double i = Sig(g[d]), f = Sig(g[D + d]), o = Sig(g[2 * D + d]), u = std::tanh(g[3 * D + d]);
      const double k = cont->cpu_data()[n];
      const double cc = k * f * c_prev->cpu_data()[n * D + d] + i * u;
      EXPECT_NEAR(c->cpu_data()[n * D + d], cc, 1e-5) << n << " " << d;
      EXPECT_NEAR(h->cpu_data()[n * D + d], o * std::tanh(cc), 1e-5) << n << " " << d;
    }
  }
  test::GradientCheck opt;
  opt.check_bottoms = {0, 1};
  opt.seed = TestSeed();
  test::CheckGradients(layer.get(), {c_prev, gates, cont}, {c, h}, opt);
  const std::string e = ErrorOf([&] { layer->Backward({c, h}, {true, true, true}, {c_prev, gates, cont}); });
  EXPECT_NE(e.find("no gradient flows to the sequence continuation indicators"), std::string::npos) << e;
  EXPECT_FALSE(layer->AllowForceBackward(2));
  EXPECT_TRUE(layer->AllowForceBackward(1));
  Blob* bad_gates = Random({1, N, 3 * D});
  EXPECT_NE(ErrorOf([&] { layer->Reshape({c_prev, bad_gates, cont}, {c, h}); }).find("must be 1 x N x 4D"),
            std::string::npos);
  Blob* bad_cont = Random({N});
  EXPECT_NE(ErrorOf([&] { layer->Reshape({c_prev, gates, bad_cont}, {c, h}); }).find("cont (bottom[2]) must be 1 x N"),
            std::string::npos);
}

// ---------------------------------------------------------------- in a net

const char kLstmNet[] = R"(
name: "lstm"
layer { name: "in" type: "Input" top: "x" top: "cont"
        input_param { shape { dim: 3 dim: 2 dim: 3 } shape { dim: 3 dim: 2 } } }
layer { name: "lstm" type: "LSTM" bottom: "x" bottom: "cont" top: "h"
        recurrent_param { num_output: 4
          weight_filler { type: "uniform" min: -0.5 max: 0.5 }
          bias_filler { type: "uniform" min: -0.5 max: 0.5 } } }
layer { name: "ip" type: "InnerProduct" bottom: "h" top: "y"
        inner_product_param { num_output: 2 axis: 2 weight_filler { type: "gaussian" std: 0.5 } } }
layer { name: "loss" type: "Reduction" bottom: "y" top: "loss" loss_weight: 1
        reduction_param { operation: SUMSQ } }
)";

TEST(RecurrentNet, LstmNetTrainsAndItsWeightsReload) {
  Context::Get().set_seed(TestSeed());
  std::mt19937 gen(TestSeed());
  Net net(ParseNetText(kLstmNet, "lstm"));
  ASSERT_EQ(net.learnable_params().size(), 5u);  // W_xc, b_c, W_hc; ip's weight and bias
  EXPECT_EQ(net.learnable_params()[0]->shape(), (std::vector<int>{16, 3}));
  EXPECT_EQ(net.learnable_params()[1]->shape(), (std::vector<int>{16}));
  EXPECT_EQ(net.learnable_params()[2]->shape(), (std::vector<int>{16, 4}));
  test::FillGaussian(net.blob_by_name("x").get(), gen);
  float* cont = net.blob_by_name("cont")->mutable_cpu_data();
  const float c[] = {0, 0, 1, 1, 1, 0};  // both start at t = 0; stream 1 again at t = 2
  std::copy(c, c + 6, cont);
  const float loss = net.ForwardBackward();
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_GT(loss, 0.f);
  for (int p = 0; p < 3; ++p) EXPECT_GT(net.learnable_params()[p]->asum_diff(), 0.f) << p;
  EXPECT_GT(test::ExpectNetGradientMatchesNumeric(net, 1e-2f, 1), 0);

  // Trained: plain gradient descent halves the loss (the sum of squares) within 400 steps.
  float trained = loss;
  int steps = 0;
  for (; steps < 400 && trained >= 0.5f * loss; ++steps) {
    net.ClearParamDiffs();
    net.ForwardBackward();
    for (Blob* p : net.learnable_params()) {
      p->scale_diff(0.05f);
      p->Update();
    }
    trained = net.Forward();
  }
  EXPECT_LT(trained, 0.5f * loss) << "trained from " << loss << " for " << steps << " steps";

  // Saved and loaded into a fresh net drawn from another seed (as a .caffemodel's layers are
  // loaded), the trained outputs: not the fresh net's own.
  pb::NetParameter saved;
  net.ToProto(&saved);
  Context::Get().set_seed(TestSeed() + 1);
  Net again(ParseNetText(kLstmNet, "lstm"));
  std::copy(net.blob_by_name("x")->cpu_data(), net.blob_by_name("x")->cpu_data() + 18,
            again.blob_by_name("x")->mutable_cpu_data());
  std::copy(c, c + 6, again.blob_by_name("cont")->mutable_cpu_data());
  EXPECT_NE(again.Forward(), trained) << "a fresh net of another seed differs";
  again.CopyTrainedLayersFrom(saved, "saved");
  EXPECT_FLOAT_EQ(again.Forward(), trained);
  for (size_t p = 0; p < net.learnable_params().size(); ++p)
    EXPECT_EQ(again.learnable_params()[p]->asum_data(), net.learnable_params()[p]->asum_data()) << p;
}

// ---------------------------------------------------------------- refusals

TEST_F(Recurrent, BadSettingsAndInputsAreOneLineErrors) {
  const int T = 3, N = 2;
  Blob* x = Random({T, N, 3});
  Blob* c = Cont(T, N, {{0, 0}});
  Blob* y = Empty();
  for (const char* type : {"RNN", "LSTM"}) {
    SCOPED_TRACE(type);
    auto no_output = [&] {
      CreateLayer(LayerText(std::string("type: \"") + type + "\""))->SetUp({x, c}, {y});
    };
    std::string e = ErrorOf(no_output);
    EXPECT_NE(e.find("recurrent_param.num_output must be positive; got 0"), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;

    Blob* bad_cont = Random({T, N, 1});
    e = ErrorOf([&] { CreateLayer(LayerText(RecurrentText(type, 4, false)))->SetUp({x, bad_cont}, {y}); });
    EXPECT_NE(e.find("cont (bottom[1]) must be T x N = 3 x 2"), std::string::npos) << e;
    Blob* short_cont = Random({T - 1, N});
    e = ErrorOf([&] { CreateLayer(LayerText(RecurrentText(type, 4, false)))->SetUp({x, short_cont}, {y}); });
    EXPECT_NE(e.find("got shape 2 2"), std::string::npos) << e;

    Blob* x1 = Random({T});
    e = ErrorOf([&] { CreateLayer(LayerText(RecurrentText(type, 4, false)))->SetUp({x1, c}, {y}); });
    EXPECT_NE(e.find("x (bottom[0]) must have at least 2 axes"), std::string::npos) << e;

    // Exposed states of the wrong shape (and the wrong number of them).
    const bool lstm = std::string(type) == "LSTM";
    Blob* h0 = Random({1, N, 4});
    Blob* bad = Random({N, 4});
    Blobs bottom{x, c, lstm ? h0 : bad};
    if (lstm) bottom.push_back(bad);
    Blobs top{y, Empty()};
    if (lstm) top.push_back(Empty());
    e = ErrorOf([&] { CreateLayer(LayerText(RecurrentText(type, 4, true)))->SetUp(bottom, top); });
    EXPECT_NE(e.find(std::string(lstm ? "c_0 (bottom[3])" : "h_0 (bottom[2])") +
                     " must be 1 x N x num_output = 1 2 4"),
              std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;

    // x_static with the wrong stream count; x whose features change after set-up.
    Blob* xs = Random({N + 1, 2});
    e = ErrorOf([&] { CreateLayer(LayerText(RecurrentText(type, 4, false)))->SetUp({x, c, xs}, {y}); });
    EXPECT_NE(e.find("x_static (bottom[2]) must be N = 2 streams"), std::string::npos) << e;
    auto layer = CreateLayer(LayerText(RecurrentText(type, 4, false)));
    layer->SetUp({x, c}, {y});
    Blob* x5 = Random({T, N, 5});
    e = ErrorOf([&] { layer->Reshape({x5, c}, {y}); });
    EXPECT_NE(e.find("has 5 features per step, but the weights take 3"), std::string::npos) << e;

    // No gradient to cont.
    EXPECT_FALSE(layer->AllowForceBackward(1));
    EXPECT_TRUE(layer->AllowForceBackward(0));
    layer->Forward({x, c}, {y});
    e = ErrorOf([&] { layer->Backward({y}, {true, true}, {x, c}); });
    EXPECT_NE(e.find("no gradient flows to the sequence continuation indicators"), std::string::npos) << e;
  }
}

// ---------------------------------------------------------------- proto: Caffe's schema

TEST(RecurrentParams, FieldNumbersAndDefaultsAreCaffes) {
  EXPECT_EQ(pb::LayerParameter::descriptor()->FindFieldByName("recurrent_param")->number(), 146);
  const auto* d = pb::RecurrentParameter::descriptor();
  const std::pair<const char*, int> fields[] = {{"num_output", 1},
                                                {"weight_filler", 2},
                                                {"bias_filler", 3},
                                                {"debug_info", 4},
                                                {"expose_hidden", 5}};
  for (const auto& [name, number] : fields) {
    ASSERT_NE(d->FindFieldByName(name), nullptr) << name;
    EXPECT_EQ(d->FindFieldByName(name)->number(), number) << name;
  }
  const pb::RecurrentParameter p;
  EXPECT_EQ(p.num_output(), 0u);
  EXPECT_FALSE(p.expose_hidden());
  EXPECT_FALSE(p.debug_info());
  EXPECT_EQ(p.weight_filler().type(), "constant");
  for (const char* type : {"RNN", "LSTM", "LSTMUnit"}) EXPECT_TRUE(LayerTypeKnown(type)) << type;
}

}  // namespace
}  // namespace hogstream
