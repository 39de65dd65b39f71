// HDF5Data and HDF5Output on files written here with libhdf5: rows in order across files and
// round again, every row once per pass when shuffled, disjoint partitions, the errors that
// name the file and dataset, and HDF5Output's file read back by HDF5Data.
#include "data/hdf5_layers.hpp"

#include <hdf5.h>

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <random>

#include "core/context.hpp"
#include "test/core/gradient_checker.hpp"
#include "test/data/data_test_util.hpp"
#include "test/test_seed.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

using test::ErrorOf;
using test::TempDir;

void WriteDataset(hid_t file, const char* name, const std::vector<hsize_t>& dims, const std::vector<float>& v) {
  const hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  const hid_t d = H5Dcreate2(file, name, H5T_NATIVE_FLOAT, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(d, 0);
  ASSERT_GE(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
  H5Dclose(d);
  H5Sclose(space);
}

// A file of `rows` rows: data (rows x 2 x 3, random) and label (rows, the global row number
// first + i). Returns the data.
std::vector<float> WriteFile(const std::string& path, int rows, int first, std::mt19937& gen,
                             bool with_label = true, int width = 3) {
  std::normal_distribution<float> nd;
  std::vector<float> data(rows * 2 * width), label(rows);
  for (float& v : data) v = nd(gen);
  for (int i = 0; i < rows; ++i) label[i] = static_cast<float>(first + i);
  const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  EXPECT_GE(f, 0);
  WriteDataset(f, "data", {hsize_t(rows), 2, hsize_t(width)}, data);
  if (with_label) WriteDataset(f, "label", {hsize_t(rows)}, label);
  H5Fclose(f);
  return data;
}

pb::LayerParameter Param(const std::string& list, int batch, bool shuffle = false, pb::Phase phase = pb::TEST) {
  pb::LayerParameter p;
  p.set_name("h5");
  p.set_type("HDF5Data");
  p.set_phase(phase);
  p.add_top("data");
  p.add_top("label");
  p.mutable_hdf5_data_param()->set_source(list);
  p.mutable_hdf5_data_param()->set_batch_size(batch);
  p.mutable_hdf5_data_param()->set_shuffle(shuffle);
  return p;
}

struct Fixture {
  TempDir dir;
  std::vector<float> rows;  // all data rows, 6 floats each, in list order
  std::string list = dir / "list.txt";
  explicit Fixture(std::mt19937& gen) {
    auto a = WriteFile(dir / "a.h5", 5, 0, gen), b = WriteFile(dir / "b.h5", 3, 5, gen);
    rows = a;
    rows.insert(rows.end(), b.begin(), b.end());
    std::ofstream(list) << dir / "a.h5" << "\n  " << dir / "b.h5" << "  \n\n";
  }
};

TEST(HDF5DataLayer, ReadsRowsInOrderAcrossFilesAndRoundAgain) {
  std::mt19937 gen(::hogstream::TestSeed());
  Fixture fx(gen);
  Blob data, label;
  auto layer = CreateLayer(Param(fx.list, 3));
  layer->SetUp({}, {&data, &label});
  ASSERT_EQ(data.shape(), (std::vector<int>{3, 2, 3}));
  ASSERT_EQ(label.shape(), (std::vector<int>{3}));
  for (int batch = 0; batch < 6; ++batch) {
    layer->Forward({}, {&data, &label});
    for (int i = 0; i < 3; ++i) {
      const int row = (batch * 3 + i) % 8;
      ASSERT_EQ(label.cpu_data()[i], row) << batch;
      for (int k = 0; k < 6; ++k) ASSERT_EQ(data.cpu_data()[i * 6 + k], fx.rows[row * 6 + k]);
    }
  }
}

TEST(HDF5DataLayer, ShuffledPassesReadEveryRowOnceAndPartitionsAreDisjoint) {
  std::mt19937 gen(::hogstream::TestSeed());
  Fixture fx(gen);
  Blob data, label;
  {
    auto layer = CreateLayer(Param(fx.list, 4, /*shuffle=*/true));
    layer->SetUp({}, {&data, &label});
    std::map<int, int> seen;
    bool moved = false;
    for (int batch = 0; batch < 4; ++batch) {  // 16 rows: two passes of 8
      layer->Forward({}, {&data, &label});
      for (int i = 0; i < 4; ++i) {
        const int row = static_cast<int>(label.cpu_data()[i]);
        ++seen[row];
        moved |= row != (batch * 4 + i) % 8;
        for (int k = 0; k < 6; ++k) ASSERT_EQ(data.cpu_data()[i * 6 + k], fx.rows[row * 6 + k]) << "row and label";
      }
    }
    EXPECT_TRUE(moved) << "shuffle changed nothing";
    ASSERT_EQ(seen.size(), 8u);
    for (auto& [row, n] : seen) EXPECT_EQ(n, 2) << row;
  }
  // Two solvers of a partitioned job, one pass of a's rows each half: disjoint.
  std::map<int, int> reads;
  for (int part = 0; part < 2; ++part) {
    Context ctx(Mode::CPU, 0, 1);
    ContextScope scope(&ctx);
    ctx.set_data_partition(part * 0.5, 0.5);
    std::ofstream(fx.dir / "one.txt") << fx.dir / "a.h5" << "\n";
    auto layer = CreateLayer(Param(fx.dir / "one.txt", 1, true, pb::TRAIN));
    layer->SetUp({}, {&data, &label});
    for (int i = 0; i < (part == 0 ? 2 : 3); ++i) {  // rows [0, 2) and [2, 5)
      layer->Forward({}, {&data, &label});
      ++reads[static_cast<int>(label.cpu_data()[0])];
    }
  }
  ASSERT_EQ(reads.size(), 5u);
  for (auto& [row, n] : reads) EXPECT_EQ(n, 1) << row;
}

TEST(HDF5DataLayer, ErrorsNameTheFileAndDataset) {
  std::mt19937 gen(7);
  TempDir dir;
  Blob data, label;
  std::string e = ErrorOf([&] { CreateLayer(Param(dir / "none.txt", 2))->SetUp({}, {&data, &label}); });
  EXPECT_NE(e.find("cannot open the HDF5 file list"), std::string::npos) << e;
  WriteFile(dir / "nolabel.h5", 4, 0, gen, /*with_label=*/false);
  std::ofstream(dir / "l1.txt") << dir / "nolabel.h5" << "\n";
  e = ErrorOf([&] { CreateLayer(Param(dir / "l1.txt", 2))->SetUp({}, {&data, &label}); });
  EXPECT_NE(e.find("'" + dir / "nolabel.h5" + "' has no dataset 'label'"), std::string::npos) << e;
  std::ofstream(dir / "bad.h5") << "not hdf5";
  std::ofstream(dir / "l2.txt") << dir / "bad.h5" << "\n";
  e = ErrorOf([&] { CreateLayer(Param(dir / "l2.txt", 2))->SetUp({}, {&data, &label}); });
  EXPECT_NE(e.find("cannot open HDF5 file '" + dir / "bad.h5" + "'"), std::string::npos) << e;
  // A second file whose rows differ fails when the layer reaches it, naming it.
  WriteFile(dir / "a.h5", 2, 0, gen);
  WriteFile(dir / "wide.h5", 2, 2, gen, true, /*width=*/4);
  std::ofstream(dir / "l3.txt") << dir / "a.h5" << "\n" << dir / "wide.h5" << "\n";
  auto layer = CreateLayer(Param(dir / "l3.txt", 2));
  layer->SetUp({}, {&data, &label});
  layer->Forward({}, {&data, &label});
  e = ErrorOf([&] { layer->Forward({}, {&data, &label}); });
  EXPECT_NE(e.find("'" + dir / "wide.h5" + "': dataset 'data' rows are 2 4"), std::string::npos) << e;
}

TEST(HDF5OutputLayer, AppendsBatchesThatHDF5DataReadsBack) {
  std::mt19937 gen(::hogstream::TestSeed());
  TempDir dir;
  std::vector<float> all;
  {
    pb::LayerParameter p;
    p.set_name("out");
    p.set_type("HDF5Output");
    p.add_bottom("data");
    p.add_bottom("label");
    p.mutable_hdf5_output_param()->set_file_name(dir / "out.h5");
    auto layer = CreateLayer(p);
    Blob data({3, 2, 3}), label({3});
    layer->SetUp({&data, &label}, {});
    for (int batch = 0; batch < 2; ++batch) {
      test::FillGaussian(&data, gen);
      for (int i = 0; i < 3; ++i) label.mutable_cpu_data()[i] = static_cast<float>(batch * 3 + i);
      all.insert(all.end(), data.cpu_data(), data.cpu_data() + data.count());
      layer->Forward({&data, &label}, {});
    }
  }
  std::ofstream(dir / "list.txt") << dir / "out.h5" << "\n";
  Blob data, label;
  auto reader = CreateLayer(Param(dir / "list.txt", 6));
  reader->SetUp({}, {&data, &label});
  reader->Forward({}, {&data, &label});
  ASSERT_EQ(data.shape(), (std::vector<int>{6, 2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(label.cpu_data()[i], i);
  for (int k = 0; k < 36; ++k) EXPECT_EQ(data.cpu_data()[k], all[k]);
}

}  // namespace
}  // namespace hogstream
