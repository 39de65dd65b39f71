// The Data, ImageData and WindowData layers (see data_layer.hpp): sources (data/records.hpp:
// LMDB, LevelDB, an image list, a window file) read ahead by one thread each.
//
// Design: every source owns `prefetch * batch_size` preallocated item slots (one transformed
// example and its label each) and two Boost.Lockfree spsc_queues of slot pointers: `free`
// (empty slots) and `full` (transformed, in the source's read order). Its reader thread pops a
// free slot, reads, decodes and transforms the next record into it, and pushes it to `full`.
// Forward builds the batch item by item: draw a source, pop its next full slot, copy it into
// the tops, push the slot back to `free`.
//
// Threading contract:
//  * LayerSetUp (the layer's thread) opens the cursors, fills `free` with every slot and only
//    then starts the reader; starting a std::thread makes all of that visible to it.
//  * The reader thread alone consumes `free`, produces `full`, and uses the cursor and the
//    source's RNG. On an error it writes `error`, then sets `failed` (release) and ends.
//  * Forward (the layer's thread: calls never overlap, though successive calls may come from
//    different threads if each happens-after the last) alone consumes `full` and produces
//    `free`; it reads `error` only after loading `failed` (acquire) as true.
//  * spsc_queue::push publishes with release and pop observes with acquire, so a slot's
//    contents written before push are seen by whoever pops it; a slot belongs to exactly one
//    side between a pop and the next push.
//  * `stop` only asks the reader to end (relaxed); join() in ~Source orders everything else.
//  * The reader sleeps on `returned` (a futex: std::atomic::wait) while no slot is free; Forward
//    bumps it (release) after handing back a batch's slots, and ~Source bumps it after setting
//    `stop`, so the reader wakes once a batch and at shutdown, never to poll. It loads
//    `returned` before trying the queue, so a bump between its try and its wait is not missed.
//  * Forward never blocks: an empty `full` queue is waited out by yielding, then short sleeps,
//    checking `failed`, so error reporting never hangs.
#include "data/data_layer.hpp"

#include <atomic>
#include <boost/lockfree/spsc_queue.hpp>
#include <algorithm>
#include <climits>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <thread>

#include "core/context.hpp"
#include "core/device_api.hpp"
#include "core/io.hpp"
#include "core/net.hpp"
#include "data/device_prefetch.hpp"
#include "data/image.hpp"

namespace hogstream {

namespace {

// Forward's wait for the reader: a few yields, then sleeps from 50 us, doubling up to 100 us
// (the reader is behind; it is seldom). The reader itself does not poll for free slots: they
// come back a whole batch at a time, and it sleeps until they do (`returned`). Polling for them
// (yields, then sleeps up to 1 ms) woke an idle reader ~400 times a second, each wake-up a
// context switch that preempted a solver: 5-7% of a machine held to 0.4 core.
class Backoff {
 public:
  explicit Backoff(std::chrono::microseconds max_sleep) : max_sleep_(max_sleep) {}
  void Wait() {
    if (++spins_ < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(sleep_);
      sleep_ = std::min(2 * sleep_, max_sleep_);
    }
  }

 private:
  int spins_ = 0;
  std::chrono::microseconds max_sleep_, sleep_{50};
};
constexpr std::chrono::microseconds kForwardMaxSleep{100};

std::mt19937 SeededRng(uint64_t seed, uint32_t stream) {
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32), stream};
  return std::mt19937(seq);
}

}  // namespace

struct DataLayer::Source {
  struct Slot {
    float* data;
    float label;
  };

  Source(std::unique_ptr<Records> c, size_t slots, int item_count, std::mt19937 r)
      : cursor(std::move(c)),
        rng(r),
        buffer(slots * item_count),
        slot(slots),
        free(slots),
        full(slots) {
    for (size_t i = 0; i < slots; ++i) {
      slot[i].data = buffer.data() + i * item_count;
      free.push(&slot[i]);
    }
  }
  ~Source() {
    stop.store(true, std::memory_order_relaxed);
    Returned();  // wakes a reader waiting for a free slot
    if (thread.joinable()) thread.join();
  }

  // Forward's side, after handing back slots: wakes the reader if it sleeps.
  void Returned() {
    returned.fetch_add(1, std::memory_order_release);
    returned.notify_one();
  }

  // The reader's side: the next free slot, sleeping until Forward hands one back; nullptr
  // once stopped.
  Slot* NextFree() {
    for (;;) {
      const uint32_t seen = returned.load(std::memory_order_acquire);
      Slot* s;
      if (free.pop(s)) return s;
      if (stop.load(std::memory_order_relaxed)) return nullptr;
      returned.wait(seen, std::memory_order_acquire);
    }
  }

  // Reader thread body: skip to this solver's shard and past rand_skip, then fill slots until
  // stopped or failed.
  void Read(const DataTransformer& transformer, std::vector<int> datum_shape,
            std::vector<int> item_shape, uint32_t skip, double shard, double part, Context::Takeover takeover,
            Context::Repartition repartition) {
    NameThisThread("hs-data");
    std::string where;  // the record being read, for messages
    try {
      // A partition: records [first, first + count), then back to `first` (the cursor wraps at
      // the end of the source, so the rest of it is skipped on the way round).
      const size_t size = cursor->size();
      // (1e-7: partitions meet exactly where fractions like 1/3 round either way)
      const auto at = [size](double f) { return static_cast<size_t>(f * static_cast<double>(size) + 1e-7); };
      const size_t first = at(shard) % std::max<size_t>(size, 1);
      const size_t count = part > 0 ? std::clamp<size_t>(at(shard + part) - at(shard), 1, size) : 0;
      // A round: the partition (asked anew each round where it may change), then the ranges
      // taken over (asked anew each round); each leg is (first record, records).
      const auto range = [&](double b, double len) {
        return std::pair<size_t, size_t>(at(b) % size, std::clamp<size_t>(at(b + len) - at(b), 1, size));
      };
      const auto legs = [&] {
        std::vector<std::pair<size_t, size_t>> plan = {{first, count}};
        if (repartition) {
          const auto [b, len] = repartition();
          plan[0] = range(b, len);
        }
        if (takeover)
          for (const auto& [b, len] : takeover()) plan.push_back(range(b, len));
        return plan;
      };
      std::vector<std::pair<size_t, size_t>> plan;
      if (count) plan = legs();
      const size_t start = count ? plan[0].first : first;
      size_t leg = 0, in_leg = 0, pos = start;  // pos: the record the cursor is at
      for (size_t n = start; n > 0; --n) cursor->Next();
      if (skip > 0 && count == 0) {  // (a partition is read whole, from its start)
        for (uint32_t n = std::uniform_int_distribution<uint32_t>(0, skip - 1)(rng); n > 0; --n)
          cursor->Next();
      }
      pb::Datum datum;
      while (!stop.load(std::memory_order_relaxed)) {
        Slot* s = NextFree();
        if (!s) return;
        where = cursor->Where();
        cursor->Read(&datum);
        const std::vector<int> shape = {datum.channels(), datum.height(), datum.width()};
        // Another size is fine where the crop makes every item one shape (images in a list).
        if (shape != datum_shape) {
          std::vector<int> out;
          try {
            out = transformer.OutputShape(datum);
          } catch (const Error&) {
          }
          HS_REQUIRE(out == item_shape) << "datum is " << ShapeString(shape) << " but the first record is "
                                        << ShapeString(datum_shape);
        }
        transformer.Transform(datum, s->data, rng);
        s->label = static_cast<float>(datum.label());
        full.push(s);  // never full: it has room for every slot
        cursor->Next();
        if (size) pos = (pos + 1) % size;
        if (count && ++in_leg == plan[leg].second) {
          in_leg = 0;
          if (++leg == plan.size()) {
            leg = 0;
            plan = legs();
          }
          for (size_t n = (plan[leg].first + size - pos) % size; n > 0; --n) cursor->Next();
          pos = plan[leg].first;
        }
      }
    } catch (const std::exception& e) {
      error = (where.empty() ? cursor->Where() : where) + ": " + e.what();
      failed.store(true, std::memory_order_release);
    }
  }

  // Forward's side: the next transformed item, waiting for it if need be.
  Slot* Take() {
    Slot* s;
    for (Backoff b(kForwardMaxSleep); !full.pop(s); b.Wait()) {
      if (failed.load(std::memory_order_acquire)) {
        if (full.pop(s)) break;  // items made before the failure are still good
        HS_FAIL() << error;
      }
    }
    return s;
  }

  std::unique_ptr<Records> cursor;
  std::mt19937 rng;
  std::vector<float> buffer;  // slot.size() items of item_count floats
  std::vector<Slot> slot;
  boost::lockfree::spsc_queue<Slot*> free, full;
  std::atomic<bool> stop{false}, failed{false};
  std::atomic<uint32_t> returned{0};  // bumped whenever slots come back (and at stop)
  std::string error;
  std::thread thread;  // last: started once everything above exists
};

DataLayer::DataLayer(const pb::LayerParameter& param) : Layer(param) {}

DataLayer::~DataLayer() = default;

namespace {
// Color mode from transform_param's force_color / force_gray (and data_param's older switch).
ColorMode ColorOf(const pb::TransformationParameter& tp, bool force_color) {
  HS_REQUIRE(!(tp.force_color() && tp.force_gray())) << "give force_color or force_gray, not both";
  return tp.force_gray() ? ColorMode::kGray : tp.force_color() || force_color ? ColorMode::kColor : ColorMode::kNative;
}
}  // namespace

DataLayer::Settings DataLayer::Configure() {
  const pb::DataParameter& dp = param_.data_param();
  const int n = dp.source_size();
  HS_REQUIRE(n > 0) << "data_param needs a source";
  Settings s;
  s.batch_size = dp.batch_size();
  s.prefetch = dp.prefetch();
  s.rand_skip = dp.rand_skip();
  s.weights.assign(dp.probability().begin(), dp.probability().end());
  if (s.weights.empty()) s.weights.assign(n, 1.0);
  HS_REQUIRE(static_cast<int>(s.weights.size()) == n)
      << dp.probability_size() << " probability value(s) for " << n
      << " source(s); give one per source";
  // Caffe's deprecated transform fields in data_param still count, over transform_param.
  s.transform = param_.transform_param();
  if (dp.has_scale()) s.transform.set_scale(dp.scale());
  if (dp.has_mean_file()) s.transform.set_mean_file(dp.mean_file());
  if (dp.has_crop_size()) s.transform.set_crop_size(dp.crop_size());
  if (dp.has_mirror()) s.transform.set_mirror(dp.mirror());
  const ColorMode color = ColorOf(s.transform, dp.force_encoded_color());
  for (int i = 0; i < n; ++i)
    s.sources.push_back(dp.backend() == pb::DataParameter::LMDB ? OpenLmdbRecords(dp.source(i), color)
                                                                : OpenLevelDbRecords(dp.source(i), color));
  return s;
}

void DataLayer::LayerSetUp(const Blobs&, const Blobs&) {
  // Open every source now, so that a missing or mismatched one fails SetUp, not Forward.
  Settings set = Configure();
  const int n = static_cast<int>(set.sources.size());
  HS_REQUIRE(set.batch_size > 0) << type_param() << ".batch_size must be positive";
  HS_REQUIRE(set.prefetch > 0) << type_param() << ".prefetch must be positive";
  double total = 0;
  for (double w : set.weights) {
    HS_REQUIRE(std::isfinite(w) && w >= 0) << "probability " << w << " is not a weight >= 0";
    total += w;
  }
  HS_REQUIRE(total > 0) << "the source probabilities sum to 0";
  pick_ = std::discrete_distribution<int>(set.weights.begin(), set.weights.end());
  transformer_ = std::make_unique<DataTransformer>(set.transform, phase_);

  std::vector<int> datum_shape;
  pb::Datum datum;
  std::string first;
  for (int s = 0; s < n; ++s) {
    Records& c = *set.sources[s];
    std::vector<int> out;
    try {
      c.Read(&datum);
      out = transformer_->OutputShape(datum);
    } catch (const Error& e) {
      HS_FAIL() << c.Where() << ": " << e.what();
    }
    const std::vector<int> shape = {datum.channels(), datum.height(), datum.width()};
    if (s == 0) {
      datum_shape = shape;
      item_shape_ = out;
      first = c.Where();
    }
    HS_REQUIRE(shape == datum_shape) << "all sources must hold records of one shape: " << c.Where()
                                     << " is " << ShapeString(shape) << " but " << first
                                     << " is " << ShapeString(datum_shape);
  }

  // Sizes are checked as given (batch_size is a uint32) before anything is allocated: an
  // absurd batch was std::bad_alloc, "vector max_size" or the OOM killer.
  auto top_name = [&](int i) {
    return "top '" + (i < param_.top_size() ? param_.top(i) : std::to_string(i)) + "'";
  };
  const int64_t batch = set.batch_size;
  CheckedShape({batch, item_shape_[0], item_shape_[1], item_shape_[2]}, top_name(0));
  CheckedShape({batch}, top_name(1));
  batch_size_ = static_cast<int>(batch);
  prefetch_ = set.prefetch;
  rand_skip_ = set.rand_skip;
  item_count_ = item_shape_[0] * item_shape_[1] * item_shape_[2];
  const double tops = 2.0 * sizeof(float) * (static_cast<double>(batch) * item_count_ + batch);
  const double ahead =
      static_cast<double>(n) * set.prefetch * batch * (item_count_ * sizeof(float) + 16);
  RequireMemory(tops + ahead, "batch_size " + std::to_string(batch) + " with prefetch " +
                                  std::to_string(set.prefetch) + " over " + std::to_string(n) +
                                  " source(s) (tops and read-ahead buffers)");
  datum_shape_ = datum_shape;
  cursors_ = std::move(set.sources);
}

void DataLayer::StartReaders() {
  // The readers start at the first batch, not at SetUp: a Hogwild solver learns its rank (and
  // so its seed and data shard) only after its nets exist.
  const uint64_t seed = Context::Get().seed();
  rng_ = SeededRng(seed, 0);
  const size_t slots = static_cast<size_t>(prefetch_) * batch_size_;
  for (size_t s = 0; s < cursors_.size(); ++s) {
    cursors_[s]->Seed(seed + s);
    sources_.push_back(std::make_unique<Source>(std::move(cursors_[s]), slots, item_count_,
                                                SeededRng(seed, static_cast<uint32_t>(s + 1))));
    Source* src = sources_.back().get();
    src->thread = std::thread(&Source::Read, src, std::cref(*transformer_), datum_shape_, item_shape_,
                              rand_skip_, Context::Get().data_shard(),
                              phase_ == pb::TRAIN ? Context::Get().data_part() : 0.0,
                              phase_ == pb::TRAIN ? Context::Get().data_takeover() : Context::Takeover{},
                              phase_ == pb::TRAIN ? Context::Get().data_repartition() : Context::Repartition{});
  }
  cursors_.clear();
}

void DataLayer::Reshape(const Blobs&, const Blobs& top) {
  top[0]->Reshape({batch_size_, item_shape_[0], item_shape_[1], item_shape_[2]});
  if (top.size() > 1) top[1]->Reshape({batch_size_});
}

void DataLayer::Forward_cpu(const Blobs&, const Blobs& top) {
  if (sources_.empty()) StartReaders();
  Assemble(top[0]->mutable_cpu_data(), top.size() > 1 ? top[1]->mutable_cpu_data() : nullptr);
}

void DataLayer::Forward_gpu(const Blobs& bottom, const Blobs& top) {
  DeviceApi* api = LoadedDeviceApi();
  if (!api) return Forward_cpu(bottom, top);
  if (sources_.empty()) StartReaders();
  const size_t data_floats = static_cast<size_t>(batch_size_) * item_count_;
  const bool labels = top.size() > 1;
  if (!device_) device_ = std::make_unique<DeviceBatches>(*api, (data_floats + (labels ? batch_size_ : 0)) * sizeof(float));
  // The batch after this one is assembled here too, and crosses while this one trains.
  auto* batch = static_cast<float*>(const_cast<void*>(device_->Next(api->CurrentStream(), [&](void* host) {
    float* h = static_cast<float*>(host);
    Assemble(h, labels ? h + data_floats : nullptr);
  })));
  // The tops view the batch on the device (its host copies are read only when asked for).
  top[0]->data()->set_gpu_data(batch);
  if (labels) top[1]->data()->set_gpu_data(batch + data_floats);
}

void DataLayer::Assemble(float* data, float* label) {
  for (int i = 0; i < batch_size_; ++i) {
    Source& src = *sources_[pick_(rng_)];
    Source::Slot* s = src.Take();
    std::memcpy(data + static_cast<size_t>(i) * item_count_, s->data, item_count_ * sizeof(float));
    if (label) label[i] = s->label;
    src.free.push(s);
  }
  for (auto& src : sources_) src->Returned();  // one wake-up a batch, not one a slot
}

HS_REGISTER_LAYER(Data, DataLayer);

DataLayer::Settings ImageDataLayer::Configure() {
  const pb::ImageDataParameter& ip = param_.image_data_param();
  HS_REQUIRE(ip.has_source()) << "image_data_param needs a source (a list file of 'PATH LABEL' lines)";
  Settings s;
  s.batch_size = ip.batch_size();
  s.prefetch = 4;
  s.rand_skip = ip.rand_skip();
  s.weights = {1.0};
  s.transform = param_.transform_param();
  if (ip.has_scale()) s.transform.set_scale(ip.scale());
  if (ip.has_mean_file()) s.transform.set_mean_file(ip.mean_file());
  if (ip.has_crop_size()) s.transform.set_crop_size(ip.crop_size());
  if (ip.has_mirror()) s.transform.set_mirror(ip.mirror());
  ImageListOptions o;
  o.root = ip.root_folder();
  o.new_height = static_cast<int>(std::min<uint32_t>(ip.new_height(), 1u << 16));
  o.new_width = static_cast<int>(std::min<uint32_t>(ip.new_width(), 1u << 16));
  HS_REQUIRE(o.new_height == static_cast<int>(ip.new_height()) && o.new_width == static_cast<int>(ip.new_width()))
      << "new_height and new_width must be at most 65536";
  o.color = ip.is_color() ? ColorMode::kColor : ColorMode::kGray;
  if (s.transform.force_color() || s.transform.force_gray()) o.color = ColorOf(s.transform, false);
  o.shuffle = ip.shuffle();
  s.sources.push_back(OpenImageList(ip.source(), o));
  return s;
}

HS_REGISTER_LAYER(ImageData, ImageDataLayer);

DataLayer::Settings WindowDataLayer::Configure() {
  const pb::WindowDataParameter& wp = param_.window_data_param();
  HS_REQUIRE(wp.has_source()) << "window_data_param needs a source (a window file)";
  HS_REQUIRE(wp.crop_mode() == "warp" || wp.crop_mode() == "square")
      << "window_data_param.crop_mode must be warp or square, got '" << wp.crop_mode() << "'";
  Settings s;
  s.batch_size = wp.batch_size();
  s.prefetch = 4;
  s.weights = {1.0};
  s.transform = param_.transform_param();
  if (wp.has_scale()) s.transform.set_scale(wp.scale());
  if (wp.has_mean_file()) s.transform.set_mean_file(wp.mean_file());
  if (wp.has_mirror()) s.transform.set_mirror(wp.mirror());
  WindowOptions o;
  o.root = wp.root_folder();
  o.crop_size = static_cast<int>(std::min<uint32_t>(wp.has_crop_size() ? wp.crop_size() : s.transform.crop_size(), 1u << 16));
  s.transform.clear_crop_size();  // the window is cut to size already
  o.context_pad = static_cast<int>(std::min<uint32_t>(wp.context_pad(), 1u << 16));
  o.batch_size = static_cast<int>(std::min<uint32_t>(s.batch_size, INT_MAX));
  o.square = wp.crop_mode() == "square";
  o.cache_images = wp.cache_images();
  o.fg_threshold = wp.fg_threshold();
  o.bg_threshold = wp.bg_threshold();
  o.fg_fraction = wp.fg_fraction();
  s.sources.push_back(OpenWindowFile(wp.source(), o));
  return s;
}

HS_REGISTER_LAYER(WindowData, WindowDataLayer);

uint64_t EpochIterations(const pb::SolverParameter& solver) {
  try {
    pb::NetParameter net;
    if (solver.has_train_net_param()) net = solver.train_net_param();
    else if (solver.has_train_net()) net = ReadNetText(solver.train_net());
    else if (solver.has_net_param()) net = solver.net_param();
    else if (solver.has_net()) net = ReadNetText(solver.net());
    else return 0;
    pb::NetState state = solver.train_state();  // (the default state where none is given)
    state.set_phase(pb::TRAIN);
    const pb::NetParameter train = FilterNet(net, state);
    for (const pb::LayerParameter& l : train.layer()) {
      uint64_t records = 0, batch = 0;
      if (l.type() == "Data") {
        const pb::DataParameter& dp = l.data_param();
        batch = dp.batch_size();
        for (const std::string& src : dp.source()) {
          records += dp.backend() == pb::DataParameter::LMDB ? OpenLmdbRecords(src, ColorMode::kNative)->size()
                                                             : OpenLevelDbRecords(src, ColorMode::kNative)->size();
        }
      } else if (l.type() == "ImageData") {
        batch = l.image_data_param().batch_size();
        std::ifstream list(l.image_data_param().source());
        if (!list) return 0;
        for (std::string line; std::getline(list, line);) records += line.find_first_not_of(" \t\r") != std::string::npos;
      } else {
        continue;
      }
      return batch > 0 ? records / batch : 0;
    }
  } catch (const std::exception&) {
    // an unreadable net or source: unknown here; the solver's own set-up says why
  }
  return 0;
}

}  // namespace hogstream
