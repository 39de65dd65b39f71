// Helpers shared by the data/ tests: a temporary directory that removes itself, random
// Datums, LMDBs written from Datums, and Data layer parameters. Not used outside test/data/.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "test/error_of.hpp"
#include "base/common.hpp"
#include "core/proto/hogstream.pb.h"
#include "data/lmdb.hpp"

namespace hogstream::test {

using hogstream::ErrorOf;  // test/error_of.hpp

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("hogstream-data-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) +
             "-" + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline std::string RandomBytes(size_t n, std::mt19937& gen) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(byte(gen));
  return s;
}

inline pb::Datum MakeDatum(int c, int h, int w, const std::string& pixels, int label) {
  pb::Datum d;
  d.set_channels(c);
  d.set_height(h);
  d.set_width(w);
  d.set_data(pixels);
  d.set_label(label);
  return d;
}

inline std::string Key8(size_t i) {
  char key[16];
  std::snprintf(key, sizeof key, "%08d", static_cast<int>(i));
  return key;
}

// Writes the Datums under keys "%08d" of their index.
inline void WriteLmdb(const std::string& path, const std::vector<pb::Datum>& data) {
  LmdbWriter db(path);
  for (size_t i = 0; i < data.size(); ++i) db.Put(Key8(i), data[i].SerializeAsString());
  db.Commit();
}

// Data that a solver reading one part of it cannot learn alone: `classes` classes, each a random
// 1 x 8 x 8 template plus noise; the training set (200 records a class) sorted by class, so that
// solvers or machines reading disjoint partitions of it each see one class, and a balanced test
// set (50 a class, interleaved). A sharing test then fails when the sharing is cut: alone a
// solver says its one class everywhere.
inline void WriteSplitLmdbs(const std::string& train_path, const std::string& test_path, int classes, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> byte(40, 215), noise(-30, 30);
  std::vector<std::string> templates(classes, std::string(64, '\0'));
  for (auto& t : templates)
    for (char& c : t) c = static_cast<char>(byte(gen));
  auto sample = [&](int k) {
    std::string px = templates[k];
    for (char& c : px) c = static_cast<char>(static_cast<unsigned char>(c) + noise(gen));
    return MakeDatum(1, 8, 8, px, k);
  };
  std::vector<pb::Datum> train, test;
  for (int k = 0; k < classes; ++k)
    for (int i = 0; i < 200; ++i) train.push_back(sample(k));
  for (int i = 0; i < 50 * classes; ++i) test.push_back(sample(i % classes));
  WriteLmdb(train_path, train);
  WriteLmdb(test_path, test);
}

inline pb::LayerParameter DataParam(const std::vector<std::string>& sources, int batch_size,
                                    pb::Phase phase = pb::TEST) {
  pb::LayerParameter p;
  p.set_name("data");
  p.set_type("Data");
  p.set_phase(phase);
  p.add_top("data");
  p.add_top("label");
  auto* dp = p.mutable_data_param();
  for (const auto& s : sources) dp->add_source(s);
  dp->set_batch_size(batch_size);
  dp->set_backend(pb::DataParameter::LMDB);
  return p;
}

}  // namespace hogstream::test
