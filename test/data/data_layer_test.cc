// The Data layer: shapes, transforms applied, rand_skip, several sources mixed by probability,
// determinism under a fixed seed, errors at SetUp and from the reader threads, shutdown with
// live prefetch threads, and use inside a Net.
#include "data/data_layer.hpp"

#include <gtest/gtest.h>

#include <leveldb/db.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>

#include "core/context.hpp"
#include "core/synced_memory.hpp"
#include "core/net.hpp"
#include "test/data/data_test_util.hpp"
#include "test/test_seed.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

using test::DataParam;
using test::ErrorOf;
using test::MakeDatum;
using test::TempDir;

// n Datums 1 x 4 x 4 whose every pixel is the record index and whose label is `label` (or
// the index when label < 0).
std::vector<pb::Datum> Numbered(int n, int label = -1) {
  std::vector<pb::Datum> data;
  for (int i = 0; i < n; ++i)
    data.push_back(MakeDatum(1, 4, 4, std::string(16, char(i)), label < 0 ? i : label));
  return data;
}

struct Tops {
  Blob data, label;
  Blobs all() { return {&data, &label}; }
};

TEST(DataLayerTest, ShapesAndTransformParam) {
  TempDir dir;
  test::WriteLmdb(dir / "db", Numbered(3));
  pb::LayerParameter p = DataParam({dir / "db"}, 5);
  p.mutable_transform_param()->set_crop_size(2);
  p.mutable_transform_param()->set_scale(0.5f);
  p.mutable_transform_param()->add_mean_value(1.f);
  Tops t;
  auto layer = CreateLayer(p);
  layer->SetUp({}, t.all());
  EXPECT_EQ(t.data.shape(), (std::vector<int>{5, 1, 2, 2}));
  EXPECT_EQ(t.label.shape(), std::vector<int>{5});
  layer->Forward({}, t.all());
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(t.label.cpu_data()[i], i % 3);
    for (int j = 0; j < 4; ++j) EXPECT_EQ(t.data.cpu_data()[i * 4 + j], (i % 3 - 1.f) * 0.5f);
  }
  // The label top is optional.
  p.clear_top();
  p.add_top("data");
  auto only = CreateLayer(p);
  only->SetUp({}, {&t.data});
  only->Forward({}, {&t.data});
}

// An epoch in one solver's iterations: the TRAIN net's first Data layer (its sources' records
// over its batch), or ImageData's list lines; 0 where there is none or a source is missing, and
// a missing LevelDB is not created by the look.
TEST(DataLayerTest, EpochIterationsOfTheTrainNet) {
  TempDir dir;
  test::WriteLmdb(dir / "a", Numbered(50));
  test::WriteLmdb(dir / "b", Numbered(21));
  pb::SolverParameter solver;
  pb::NetParameter* net = solver.mutable_net_param();
  auto layer = [](pb::LayerParameter p, pb::Phase phase) {
    p.clear_phase();
    p.add_include()->set_phase(phase);
    return p;
  };
  *net->add_layer() = layer(test::DataParam({dir / "a"}, 5), pb::TEST);  // the test net's: not this one
  *net->add_layer() = layer(test::DataParam({dir / "a", dir / "b"}, 8), pb::TRAIN);
  EXPECT_EQ(EpochIterations(solver), (50u + 21u) / 8);
  net->mutable_layer(1)->mutable_data_param()->set_batch_size(10);
  EXPECT_EQ(EpochIterations(solver), 7u);
  // A missing LevelDB: unknown, and nothing left behind.
  net->mutable_layer(1)->mutable_data_param()->set_backend(pb::DataParameter::LEVELDB);
  net->mutable_layer(1)->mutable_data_param()->set_source(0, dir / "none");
  EXPECT_EQ(EpochIterations(solver), 0u);
  EXPECT_FALSE(std::filesystem::exists(dir / "none"));
  // ImageData: the list's lines (blank ones not counted).
  {
    std::ofstream list(dir / "list.txt");
    for (int i = 0; i < 13; ++i) list << "img" << i << ".png " << i % 3 << "\n";
    list << "\n";
  }
  pb::LayerParameter images;
  images.set_type("ImageData");
  images.mutable_image_data_param()->set_source(dir / "list.txt");
  images.mutable_image_data_param()->set_batch_size(4);
  net->mutable_layer(1)->Swap(&images);
  EXPECT_EQ(EpochIterations(solver), 3u);
  net->clear_layer();
  EXPECT_EQ(EpochIterations(solver), 0u);
  EXPECT_EQ(EpochIterations(pb::SolverParameter()), 0u);
}

// rand_skip starts somewhere in [0, rand_skip) and reads on in order from there.
TEST(DataLayerTest, RandSkip) {
  TempDir dir;
  test::WriteLmdb(dir / "db", Numbered(10));
  pb::LayerParameter p = DataParam({dir / "db"}, 4);
  p.mutable_data_param()->set_rand_skip(6);
  std::set<int> starts;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    Context::Get().set_seed(seed);
    Tops t;
    auto layer = CreateLayer(p);
    layer->SetUp({}, t.all());
    layer->Forward({}, t.all());
    const int first = static_cast<int>(t.label.cpu_data()[0]);
    ASSERT_LT(first, 6);
    for (int i = 1; i < 4; ++i) ASSERT_EQ(t.label.cpu_data()[i], (first + i) % 10);
    starts.insert(first);
  }
  EXPECT_GT(starts.size(), 2u);
}

// Two sources of constant labels 0 and 1 mixed 0.8 / 0.2.
TEST(DataLayerTest, SourcesMixByProbability) {
  TempDir dir;
  test::WriteLmdb(dir / "zeros", Numbered(7, 0));
  test::WriteLmdb(dir / "ones", Numbered(5, 1));
  pb::LayerParameter p = DataParam({dir / "zeros", dir / "ones"}, 100);
  p.mutable_data_param()->add_probability(0.8f);
  p.mutable_data_param()->add_probability(0.2f);
  Tops t;
  auto layer = CreateLayer(p);
  layer->SetUp({}, t.all());
  double ones = 0;
  const int batches = 50;
  for (int b = 0; b < batches; ++b) {
    layer->Forward({}, t.all());
    for (int i = 0; i < 100; ++i) ones += t.label.cpu_data()[i];
  }
  EXPECT_NEAR(ones / (batches * 100), 0.2, 0.05);

  p.mutable_data_param()->add_probability(0.5f);
  const std::string e = ErrorOf([&] { CreateLayer(p)->SetUp({}, t.all()); });
  EXPECT_NE(e.find("3 probability value(s) for 2 source(s)"), std::string::npos) << e;
}

// A fixed seed gives identical batches whatever the threads' timing: two sources, random
// crops and mirrors.
TEST(DataLayerTest, SameSeedSameBatches) {
  TempDir dir;
  std::mt19937 gen(1);
  for (const char* name : {"a", "b"}) {
    std::vector<pb::Datum> data;
    for (int i = 0; i < 9; ++i)
      data.push_back(MakeDatum(3, 6, 6, test::RandomBytes(108, gen), i));
    test::WriteLmdb(dir / name, data);
  }
  pb::LayerParameter p = DataParam({dir / "a", dir / "b"}, 8, pb::TRAIN);
  p.mutable_transform_param()->set_crop_size(4);
  p.mutable_transform_param()->set_mirror(true);
  p.mutable_data_param()->set_prefetch(1);
  auto batches = [&](uint64_t seed) {
    Context::Get().set_seed(seed);
    Tops t;
    auto layer = CreateLayer(p);
    layer->SetUp({}, t.all());
    std::vector<float> all;
    for (int b = 0; b < 6; ++b) {
      layer->Forward({}, t.all());
      all.insert(all.end(), t.data.cpu_data(), t.data.cpu_data() + t.data.count());
      all.insert(all.end(), t.label.cpu_data(), t.label.cpu_data() + t.label.count());
    }
    return all;
  };
  const std::vector<float> first = batches(42);
  EXPECT_EQ(first, batches(42));
  EXPECT_NE(first, batches(43));
}

// GPU mode: the batches come to the device through the prefetch (the next one in flight while
// this one trains) and are the host's, batch for batch; the tops are left on the device.
TEST(DataLayerTest, OnTheGpuTheBatchesAreTheHostsOnTheDevice) {
  if (!GpuAvailable()) GTEST_SKIP() << "no GPU on this machine";
  TempDir dir;
  std::mt19937 gen(::hogstream::TestSeed());
  std::vector<pb::Datum> data;
  for (int i = 0; i < 23; ++i) data.push_back(MakeDatum(3, 6, 6, test::RandomBytes(108, gen), i));
  test::WriteLmdb(dir / "db", data);
  pb::LayerParameter p = DataParam({dir / "db"}, 8, pb::TRAIN);
  p.mutable_transform_param()->set_crop_size(4);
  p.mutable_transform_param()->set_mirror(true);
  std::vector<float> seen[2];
  for (int gpu = 0; gpu < 2; ++gpu) {
    Context ctx(gpu ? Mode::GPU : Mode::CPU, 0, 42);
    ContextScope scope(&ctx);
    Tops t;
    auto layer = CreateLayer(p);
    layer->SetUp({}, t.all());
    for (int b = 0; b < 7; ++b) {
      layer->Forward({}, t.all());
      if (gpu) {
        EXPECT_EQ(t.data.data()->head(), SyncedMemory::HEAD_AT_GPU) << "batch " << b << " went through the host blob";
        EXPECT_EQ(t.label.data()->head(), SyncedMemory::HEAD_AT_GPU);
      }
      seen[gpu].insert(seen[gpu].end(), t.data.cpu_data(), t.data.cpu_data() + t.data.count());
      seen[gpu].insert(seen[gpu].end(), t.label.cpu_data(), t.label.cpu_data() + t.label.count());
    }
  }
  EXPECT_EQ(seen[1], seen[0]);
}

TEST(DataLayerTest, SetUpErrorsNameTheSource) {
  TempDir dir;
  test::WriteLmdb(dir / "small", Numbered(2));
  test::WriteLmdb(dir / "big", {MakeDatum(1, 5, 5, std::string(25, 'x'), 0)});
  test::WriteLmdb(dir / "corrupt", {MakeDatum(1, 4, 4, "short", 0)});
  pb::Datum encoded = MakeDatum(1, 4, 4, std::string(16, 'x'), 0);
  encoded.set_encoded(true);
  test::WriteLmdb(dir / "encoded", {encoded});
  Tops t;
  auto error_of = [&](const pb::LayerParameter& p) {
    return ErrorOf([&] { CreateLayer(p)->SetUp({}, t.all()); });
  };

  std::string e = error_of(DataParam({dir / "missing"}, 2));
  EXPECT_NE(e.find("cannot open LMDB '" + dir / "missing" + "'"), std::string::npos) << e;
  e = error_of(DataParam({dir / "small", dir / "big"}, 2));
  EXPECT_NE(e.find(dir / "big"), std::string::npos) << e;
  EXPECT_NE(e.find(dir / "small"), std::string::npos) << e;
  e = error_of(DataParam({dir / "corrupt"}, 2));
  EXPECT_NE(e.find("source '" + dir / "corrupt" + "', key '00000000'"), std::string::npos) << e;
  EXPECT_NE(e.find("corrupt datum"), std::string::npos) << e;
  e = error_of(DataParam({dir / "encoded"}, 2));
  EXPECT_NE(e.find(dir / "encoded"), std::string::npos) << e;
  EXPECT_NE(e.find("neither a JPEG nor a PNG file"), std::string::npos) << e;

  pb::LayerParameter p = DataParam({dir / "small"}, 2);
  p.mutable_data_param()->clear_backend();  // LEVELDB, Caffe's default
  e = error_of(p);
  EXPECT_NE(e.find("cannot open LevelDB '" + dir / "small" + "'"), std::string::npos) << e;
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(dir / "small") / "LOCK")) << "LevelDB's files written into an LMDB";
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(dir / "small") / "LOG"));
  p.mutable_data_param()->set_source(0, dir / "missing");  // a LevelDB that is not there: not made
  e = error_of(p);
  EXPECT_NE(e.find("cannot open LevelDB '" + dir / "missing" + "': no such folder"), std::string::npos) << e;
  EXPECT_FALSE(std::filesystem::exists(dir / "missing"));
  e = error_of(DataParam({dir / "small"}, 0));
  EXPECT_NE(e.find("batch_size"), std::string::npos) << e;
}

// A bad record past the first is met by the reader thread; the next Forward that needs it
// raises an Error naming the source and key, and the process lives on.
TEST(DataLayerTest, ReaderErrorsSurfaceInForward) {
  TempDir dir;
  std::vector<pb::Datum> data = Numbered(6);
  data[5].set_data("short");
  test::WriteLmdb(dir / "db", data);
  Tops t;
  auto layer = CreateLayer(DataParam({dir / "db"}, 2));
  layer->SetUp({}, t.all());
  layer->Forward({}, t.all());
  layer->Forward({}, t.all());
  EXPECT_EQ(t.label.cpu_data()[1], 3);
  for (int i = 0; i < 2; ++i) {
    const std::string e = ErrorOf([&] { layer->Forward({}, t.all()); });
    EXPECT_NE(e.find("source '" + dir / "db" + "', key '00000005'"), std::string::npos) << e;
  }
}

TEST(DataLayerTest, DestructorWithLivePrefetchDoesNotHang) {
  TempDir dir;
  test::WriteLmdb(dir / "a", Numbered(50));
  test::WriteLmdb(dir / "b", Numbered(50));
  const auto start = std::chrono::steady_clock::now();
  for (int forwards : {0, 1, 3}) {
    Tops t;
    pb::LayerParameter p = DataParam({dir / "a", dir / "b"}, 16);
    p.mutable_data_param()->set_prefetch(2);
    auto layer = CreateLayer(p);
    layer->SetUp({}, t.all());
    for (int i = 0; i < forwards; ++i) layer->Forward({}, t.all());
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

TEST(DataLayerTest, FeedsANet) {
  TempDir dir;
  test::WriteLmdb(dir / "db", Numbered(4));
  pb::NetParameter np = ParseNetText(R"(
layer { name: "d" type: "Data" top: "data" top: "label"
        data_param { source: ")" + dir / "db" +
                                         R"(" batch_size: 3 backend: LMDB }
        transform_param { scale: 0.25 } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "y"
        inner_product_param { num_output: 4 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "y" bottom: "label" top: "loss" })",
                                     "net");
  Net net(np);
  net.Forward();
  net.Forward();
  const Blob& data = *net.blob_by_name("data");
  EXPECT_EQ(data.shape(), (std::vector<int>{3, 1, 4, 4}));
  const float* label = net.blob_by_name("label")->cpu_data();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(label[i], (3 + i) % 4);
    EXPECT_EQ(data.cpu_data()[i * 16], (3 + i) % 4 * 0.25f);
  }
}


// An absurd batch_size was std::bad_alloc (1e9), "vector::_M_default_append" (4e9) or an
// OOM kill (1e6 of large images): now one Error naming the layer, its file:line and the
// size, raised before anything is allocated.
TEST(DataLayerTest, AbsurdBatchSizeIsAnErrorBeforeAllocating) {
  TempDir dir;
  test::WriteLmdb(dir / "db", Numbered(4));
  const auto start = std::chrono::steady_clock::now();
  for (const char* batch : {"1000000000", "4000000000"}) {
    std::string e;
    try {
      NetOptions o;
      Net net(ParseNetText(R"(
layer { name: "d" type: "Data" top: "data" top: "label"
        data_param { source: ")" + dir / "db" + R"(" batch_size: )" + batch +
                               R"( backend: LMDB } })",
                           "big.prototxt", &o.source),
              o);
      ADD_FAILURE() << "batch_size " << batch << " accepted";
    } catch (const Error& err) {
      e = err.what();
    } catch (const std::exception& err) {
      ADD_FAILURE() << "batch_size " << batch << ": " << err.what();
    }
    EXPECT_NE(e.find("big.prototxt:2:"), std::string::npos) << e;
    EXPECT_NE(e.find("layer 'd' (Data)"), std::string::npos) << e;
    EXPECT_NE(e.find(std::string(batch) + "x1x4x4"), std::string::npos) << e;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// LevelDB (Caffe's default backend) holds the same records as an LMDB and gives the same
// batches; two readers in one process share the database (LevelDB locks it per process).
TEST(DataLayerTest, LevelDbGivesTheBatchesOfItsLmdbTwin) {
  TempDir dir;
  const std::vector<pb::Datum> records = Numbered(7);
  test::WriteLmdb(dir / "lmdb", records);
  {
    leveldb::Options options;
    options.create_if_missing = true;
    leveldb::DB* raw = nullptr;
    ASSERT_TRUE(leveldb::DB::Open(options, dir / "leveldb", &raw).ok());
    std::unique_ptr<leveldb::DB> db(raw);
    for (size_t i = 0; i < records.size(); ++i)
      ASSERT_TRUE(db->Put(leveldb::WriteOptions(), test::Key8(i), records[i].SerializeAsString()).ok());
  }
  pb::LayerParameter p = DataParam({dir / "leveldb"}, 3);
  p.mutable_data_param()->set_backend(pb::DataParameter::LEVELDB);
  Tops a, b, c;
  auto lmdb = CreateLayer(DataParam({dir / "lmdb"}, 3));
  auto one = CreateLayer(p), two = CreateLayer(p);
  lmdb->SetUp({}, a.all());
  one->SetUp({}, b.all());
  two->SetUp({}, c.all());
  for (int pass = 0; pass < 4; ++pass) {
    lmdb->Forward({}, a.all());
    one->Forward({}, b.all());
    two->Forward({}, c.all());
    for (int i = 0; i < a.data.count(); ++i) {
      ASSERT_EQ(a.data.cpu_data()[i], b.data.cpu_data()[i]) << pass;
      ASSERT_EQ(a.data.cpu_data()[i], c.data.cpu_data()[i]) << pass;
    }
    for (int i = 0; i < 3; ++i) ASSERT_EQ(b.label.cpu_data()[i], (pass * 3 + i) % 7);
  }
}

// The readers start at the first Forward, at the shard and seed the Context holds then: a
// Hogwild solver learns its rank (and so its shard) only after its nets were built. They used
// to start at SetUp, with whatever shard the Context had before the rank was known.
TEST(DataLayerTest, ReadersStartAtTheShardOfTheFirstForward) {
  TempDir dir;
  test::WriteLmdb(dir / "db", Numbered(20));
  Context ctx(Mode::CPU, 0, 1);
  ContextScope scope(&ctx);
  ctx.set_data_shard(0);
  Tops t;
  auto layer = CreateLayer(DataParam({dir / "db"}, 2));
  layer->SetUp({}, t.all());
  ctx.set_data_shard(0.5);  // the rank is known now
  layer->Forward({}, t.all());
  EXPECT_EQ(t.label.cpu_data()[0], 10);
  EXPECT_EQ(t.label.cpu_data()[1], 11);
}

}  // namespace
}  // namespace hogstream
