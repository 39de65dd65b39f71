// --metrics end to end: a short hogwild.bin run serves /metrics (fetched here with a plain
// socket), the global iteration grows between scrapes, and the names are all there. A port
// already taken is one line and exit 1, before any training.
#include "observe/metrics.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <regex>
#include <thread>

#include "base/common.hpp"
#include "test/observe/scrape.hpp"
#include "test/program_runner.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

using test::Listener;
using test::Sample;
using test::Scrape;

TEST(Metrics, AddressSpec) {
  EXPECT_EQ(MetricsAddress("9100"), "127.0.0.1:9100");
  EXPECT_EQ(MetricsAddress("0.0.0.0:9100"), "0.0.0.0:9100");
  for (const char* bad : {"", "abc", "127.0.0.1:", ":9100", "70000", "1:2:x"})
    EXPECT_THROW(MetricsAddress(bad), Error) << bad;
}

TEST(Metrics, ServedDuringHogwildRun) {
  if (!MetricsAvailable()) GTEST_SKIP() << "built without prometheus-cpp";
  test::ScratchDir dir("metrics");
  int port = 0;
  {
    Listener probe;  // a port that was free a moment ago
    ASSERT_GT(probe.port, 0);
    port = probe.port;
  }
  // Long enough to outlast the scrapes; stopped with SIGINT (snapshot, exit 0) once done.
  const std::string solver = test::ThreeOutputSolver(dir, 2000000);
  test::Child run(HS_HOGWILD_BIN,
                  {solver, "2", "--private", "--chunk=64", "--metrics=127.0.0.1:" + std::to_string(port)},
                  dir);
  auto scrape_until = [&](const std::function<bool(const std::string&)>& ok, double seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    std::string text;
    while (std::chrono::steady_clock::now() < deadline && run.running()) {
      text = Scrape(port);
      if (ok(text)) return text;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return std::string();
  };
  const std::string first =
      scrape_until([](const std::string& t) { return Sample(t, "hogstream_iteration") > 0; }, 60);
  ASSERT_FALSE(first.empty()) << "no iteration served within 60 s:\n" << run.err();
  EXPECT_EQ(first.rfind("HTTP/1.", 0), 0u);
  for (const char* name :
       {"hogstream_iteration", "hogstream_max_iterations", "hogstream_images_per_second", "hogstream_loss",
        "hogstream_learning_rate", "hogstream_leader_rank", "hogstream_solver_iteration{solver=\"0\"}",
        "hogstream_solver_iteration{solver=\"1\"}", "hogstream_solver_images_per_second{solver=\"1\"}",
        "hogstream_train_output{output=\"aux\"}", "hogstream_segment_bytes_total{solver=\"0\"}",
        "hogstream_segment_chunks_total{solver=\"1\"}", "hogstream_segment_dropped_total{solver=\"0\"}",
        "hogstream_segment_sweeps_total{solver=\"0\"}", "hogstream_segment_sweeps_per_second{solver=\"1\"}",
        "hogstream_segment_stale_ignored_total{solver=\"0\"}"})
    EXPECT_GE(Sample(first, name), 0) << name << " missing in:\n" << first;
  EXPECT_EQ(Sample(first, "hogstream_max_iterations"), 2000000);
  EXPECT_EQ(Sample(first, "hogstream_leader_rank"), 0);
  EXPECT_GT(Sample(first, "hogstream_learning_rate"), 0);
  const double it0 = Sample(first, "hogstream_iteration");
  const std::string later = scrape_until(
      [&](const std::string& t) {
        return Sample(t, "hogstream_iteration") > it0 &&
               Sample(t, "hogstream_test_output{net=\"0\",output=\"top1_accuracy\"}") >= 0;
      },
      60);
  ASSERT_FALSE(later.empty()) << "the iteration did not grow past " << it0 << " within 60 s";
  EXPECT_GE(Sample(later, "hogstream_segment_sweeps_total{solver=\"0\"}"),
            Sample(first, "hogstream_segment_sweeps_total{solver=\"0\"}"));
  // The values, not only the names: one display's figures agree with each other.
  const double it = Sample(later, "hogstream_iteration");
  const double s0 = Sample(later, "hogstream_solver_iteration{solver=\"0\"}"),
               s1 = Sample(later, "hogstream_solver_iteration{solver=\"1\"}");
  EXPECT_GT(s0, 0);
  EXPECT_GT(s1, 0);
  EXPECT_NEAR(s0 + s1, it, 2 + 0.01 * it) << "the solvers' iterations add up to the global iteration";
  const double accuracy = Sample(later, "hogstream_test_output{net=\"0\",output=\"top1_accuracy\"}");
  EXPECT_GE(accuracy, 0);
  EXPECT_LE(accuracy, 1);
  const double loss = Sample(later, "hogstream_loss");
  EXPECT_TRUE(std::isfinite(loss) && loss > 0) << loss;
  EXPECT_GT(Sample(later, "hogstream_images_per_second"), 0);
  for (const char* s : {"0", "1"}) {
    const std::string label = std::string("{solver=\"") + s + "\"}";
    const double chunks = Sample(later, "hogstream_segment_chunks_total" + label),
                 bytes = Sample(later, "hogstream_segment_bytes_total" + label);
    EXPECT_GT(chunks, 0) << "solver " << s << "'s segment moved chunks";
    // Each chunk moved is a position and a delta of at most --chunk=64 floats each way.
    EXPECT_GT(bytes, 0) << "solver " << s;
    EXPECT_LE(bytes, chunks * 2 * 64 * sizeof(float)) << "solver " << s;
    EXPECT_GT(Sample(later, "hogstream_segment_sweeps_total" + label), 0) << "solver " << s;
  }
  // Done: SIGINT snapshots (into the scratch folder) and stops cleanly.
  ASSERT_TRUE(run.running());
  kill(run.pid(), SIGINT);
  const test::Finished r = run.Wait(60);
  EXPECT_EQ(r.rc, 0) << r.err;
}

TEST(Metrics, PortInUseIsOneLineBeforeTraining) {
  if (!MetricsAvailable()) GTEST_SKIP() << "built without prometheus-cpp";
  test::ScratchDir dir("metrics");
  Listener busy;
  ASSERT_GT(busy.port, 0);
  const test::Finished r =
      test::RunProgram(HS_HOGWILD_BIN,
                       {test::ThreeOutputSolver(dir, 50), "2", "--metrics=" + std::to_string(busy.port)},
                       dir, 60);
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_EQ(r.last_line().rfind("hogwild.bin: --metrics: cannot serve on 127.0.0.1:" +
                                    std::to_string(busy.port), 0),
            0u)
      << r.err;
  EXPECT_EQ(r.err.find("Iteration"), std::string::npos) << "it trained first:\n" << r.err;
}

TEST(Metrics, BadSpecIsOneLine) {
  test::ScratchDir dir("metrics");
  const test::Finished r = test::RunProgram(
      HS_HOGSTREAM_BIN, {"train", "--solver=" + test::ThreeOutputSolver(dir, 50), "--metrics=localhost"}, dir, 60);
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.last_line().find("--metrics wants [HOST:]PORT"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace hogstream
