// The live page (observe/web.hpp) end to end, on real programs: one process serves the page, its
// records and its metrics, and its buttons only as --ui_control allows; in a keyed job of two
// machines the Stop button needs the job's token and then stops the job with one snapshot; a
// real Prometheus (Debian's `prometheus`) scrapes a three-machine job and its answers agree with
// the machines' own records; a real browser (Debian's `chromium`, headless) shows the job, its
// leader, a machine slowed to a crawl as lagging, and the machine gone once it leaves; between
// network namespaces (root), a follower's page shows the test passes it reads from the leader's.
// The screenshots are kept in HS_ARTIFACTS_DIR. Tests that need a package skip with a line saying so.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "observe/metrics.hpp"
#include "test/data/data_test_util.hpp"
#include "test/observe/scrape.hpp"
#include "test/program_runner.hpp"
#include "test/transport/veth.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using test::Child;
using test::Finished;
using test::FreeUdpPort;
using test::Http;

// A TCP port on 127.0.0.1 free a moment ago.
int FreeTcpPort() {
  test::Listener probe;
  return probe.port;
}


// This host's first IPv4 address that is not a loopback one ("" where it has none).
std::string NonLoopbackAddress() {
  ifaddrs* all = nullptr;
  if (getifaddrs(&all) != 0) return "";
  std::string found;
  for (ifaddrs* i = all; i && found.empty(); i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
    const auto* a = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
    if ((ntohl(a->sin_addr.s_addr) >> 24) == 127) continue;
    char text[INET_ADDRSTRLEN];
    if (inet_ntop(AF_INET, &a->sin_addr, text, sizeof text)) found = text;
  }
  freeifaddrs(all);
  return found;
}

// Headless Chromium (as root: without its sandbox) on `url`, doing `what` (--dump-dom, or
// --screenshot=FILE) once the page's script has run 5-6 s of its timers; its own profile under
// `dir`/NAME; inside network namespace `netns` where one is given.
Finished Browse(const test::ScratchDir& dir, const std::string& url, const std::string& what,
                const std::string& name, const std::string& netns = "") {
  std::vector<std::string> args = {"/usr/bin/chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                                   "--hide-scrollbars", "--user-data-dir=" + (dir / ("chrome_" + name)),
                                   "--window-size=1300,1000", "--virtual-time-budget=6000", what, url};
  if (netns.empty()) return test::RunProgram(args[0], {args.begin() + 1, args.end()}, dir, 90);
  args.insert(args.begin(), {"netns", "exec", netns});
  return test::RunProgram("/usr/sbin/ip", args, dir, 90);
}

// Why the browser tests cannot run here ("" = they can).
std::string NoBrowser() {
  if (!MetricsAvailable()) return "built without prometheus-cpp and civetweb: no page";
  if (!fs::exists("/usr/bin/chromium")) return "no /usr/bin/chromium (Debian's chromium; scripts/setup.sh installs it)";
  return "";
}

// Polls `ok` every 100 ms until it holds (true) or `seconds` pass (false).
bool Within(double seconds, const std::function<bool()>& ok) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!ok()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return true;
}

// GET /stats.json?after=N as JSON (null when it does not answer or parse).
Json Records(int port, uint64_t after = 0) {
  const test::HttpReply r = Http(port, "GET", "/stats.json?after=" + std::to_string(after));
  if (r.status != 200) return nullptr;
  try {
    return Json::parse(r.body);
  } catch (const std::exception&) {
    return nullptr;
  }
}

// The records of one type, in order.
std::vector<Json> OfType(const Json& j, const std::string& type) {
  std::vector<Json> out;
  if (j.is_object() && j.contains("records"))
    for (const Json& r : j["records"])
      if (r.value("type", "") == type) out.push_back(r);
  return out;
}

// Machine `rank`'s boolean figure `key` ("straggler", "left") in the last network record of the
// page at `port` (false before there is one).
bool PeerFlag(int port, int rank, const char* key) {
  const std::vector<Json> nets = OfType(Records(port), "network");
  if (nets.empty()) return false;
  for (const Json& p : nets.back()["peers"])
    if (p["rank"] == rank) return p.value(key, false);
  return false;
}

class Page : public ::testing::Test {
 protected:
  // Class-split data (test/data: each machine's partition holds one class; only the exchange
  // teaches the job all three), tested every 200 global iterations.
  std::string Solver() {
    test::WriteSplitLmdbs(scratch_ / "train_lmdb", scratch_ / "test_lmdb", 3, static_cast<uint32_t>(getpid()));
    const std::string solver = scratch_ / "split.prototxt";
    std::ofstream(solver) << R"(
      net_param {
        layer { name: "d" type: "Data" top: "x" top: "label" include { phase: TRAIN }
                transform_param { scale: 0.00390625 }
                data_param { source: ")" << (scratch_ / "train_lmdb") << R"(" batch_size: 64 backend: LMDB } }
        layer { name: "t" type: "Data" top: "x" top: "label" include { phase: TEST }
                transform_param { scale: 0.00390625 }
                data_param { source: ")" << (scratch_ / "test_lmdb") << R"(" batch_size: 50 backend: LMDB } }
        layer { name: "h" type: "InnerProduct" bottom: "x" top: "h"
                inner_product_param { num_output: 64 weight_filler { type: "xavier" } } }
        layer { name: "r" type: "ReLU" bottom: "h" top: "h" }
        layer { name: "ip" type: "InnerProduct" bottom: "h" top: "s"
                inner_product_param { num_output: 3 weight_filler { type: "xavier" } } }
        layer { name: "loss" type: "SoftmaxWithLoss" bottom: "s" bottom: "label" top: "loss" }
        layer { name: "acc" type: "Accuracy" bottom: "s" bottom: "label" top: "accuracy" include { phase: TEST } } }
      base_lr: 0.01 momentum: 0.9 lr_policy: "fixed" display: 100 solver_mode: CPU
      test_iter: 3 test_interval: 200 test_initialization: false
      snapshot_after_train: true
      snapshot_prefix: ")" << (scratch_ / "snap") << "\"\n";
    return solver;
  }

  // Machine `rank` of a job of `machines` on loopback (ports from udp_), its page at ui_[rank].
  std::unique_ptr<Child> Start(int rank, int machines, const std::vector<std::string>& extra = {}) {
    if (udp_.empty()) {
      solver_ = Solver();
      for (int r = 0; r < machines; ++r) udp_.push_back(FreeUdpPort()), ui_.push_back(FreeTcpPort());
      peers_ = "udp://";
      for (int r = 0; r < machines; ++r) peers_ += (r ? ",127.0.0.1:" : "127.0.0.1:") + std::to_string(udp_[r]);
    }
    std::vector<std::string> args = {"train", "--solver=" + solver_, "--solvers=1", "--iterations=100000000",
                                     "--peers=" + peers_, "--rank=" + std::to_string(rank), "--dead_ms=600",
                                     "--start_timeout=30", "--sweep_ms=5", "--job=page" + std::to_string(getpid()),
                                     "--payload=4096", "--ui=127.0.0.1:" + std::to_string(ui_[rank])};
    args.insert(args.end(), extra.begin(), extra.end());
    return std::make_unique<Child>(HS_HOGSTREAM_BIN, args, scratch_, "m" + std::to_string(rank));
  }

  // Waits until machine `rank`'s page has a network record whose every machine trains, and a
  // test record reached it (its own, or for a follower: none needed).
  bool JobServed(int rank, int machines, double seconds) {
    return Within(seconds, [&] {
      const Json j = Records(ui_[rank]);
      const std::vector<Json> nets = OfType(j, "network");
      if (nets.empty()) return false;
      const Json& last = nets.back();
      int ready = 0;
      for (const Json& p : last["peers"]) ready += p.value("ready", false) ? 1 : 0;
      return ready == machines && (last["leader"] != rank || !OfType(j, "test").empty());
    });
  }

  std::string key_file() {
    const std::string path = scratch_ / "job.key";
    if (!fs::exists(path)) std::ofstream(path, std::ios::binary) << "a key for the page's test, " << getpid();
    return path;
  }
  int Caffemodels() const {
    int n = 0;
    for (const auto& e : fs::directory_iterator(scratch_.path()))
      n += e.path().extension() == ".caffemodel" ? 1 : 0;
    return n;
  }
  static void ExpectClean(const Finished& f, const std::string& who) {
    EXPECT_EQ(f.rc, 0) << who << ":\n" << f.err;
    for (const char* bad : {"terminate called", "Aborted", "*** Check failure", "internal error"})
      EXPECT_EQ(f.err.find(bad), std::string::npos) << who << ": " << bad;
  }
  // Where a test keeps what a person looks at after the run (screenshots).
  static fs::path Artifacts() {
    const char* env = std::getenv("HS_ARTIFACTS");
    const fs::path dir = env && *env ? fs::path(env) : fs::path(HS_ARTIFACTS_DIR);
    fs::create_directories(dir);
    return dir;
  }

  test::ScratchDir scratch_{"page"};
  std::string solver_, peers_;
  std::vector<int> udp_, ui_;
};

TEST_F(Page, OneProcessServesThePageItsRecordsAndMetricsAndTakesRequestsFromThisHostOnly) {
  if (!MetricsAvailable()) GTEST_SKIP() << "built without prometheus-cpp and civetweb: no page";
  const int port = FreeTcpPort();
  const std::string solver = Solver();
  Child run(HS_HOGSTREAM_BIN,
            {"train", "--solver=" + solver, "--iterations=100000000", "--ui=0.0.0.0:" + std::to_string(port),
             "--ui_control"},
            scratch_, "one");
  // The page, whole, with nothing fetched from elsewhere.
  test::HttpReply page;
  ASSERT_TRUE(Within(60, [&] { return (page = Http(port, "GET", "/")).status == 200; })) << run.err();
  for (const char* part : {"<title>hogstream job</title>", "id=\"machines\"", "/stats.json?after=", "<svg"})
    EXPECT_NE(page.body.find(part), std::string::npos) << part;
  for (const char* outside : {"src=\"http", "href=\"http", "@import", "//cdn"})
    EXPECT_EQ(page.body.find(outside), std::string::npos) << outside;
  // Its records: a test pass and displays, in order, then only what came after.
  Json j;
  ASSERT_TRUE(Within(60, [&] {
    j = Records(port);
    return OfType(j, "test").size() >= 1 && OfType(j, "train").size() >= 2;
  })) << run.err();
  EXPECT_TRUE(j["control"].get<bool>());
  EXPECT_FALSE(j["token"].get<bool>());
  const std::vector<Json> trains = OfType(j, "train");
  EXPECT_LT(trains[0]["iter"].get<int64_t>(), trains[1]["iter"].get<int64_t>());
  EXPECT_EQ(trains[0]["max_iter"], 100000000);
  const double accuracy = OfType(j, "test")[0]["outputs"]["accuracy"].get<double>();
  EXPECT_GE(accuracy, 0);
  EXPECT_LE(accuracy, 1);
  const uint64_t next = j["next"].get<uint64_t>();
  EXPECT_GE(next, j["records"].size());
  const Json later = Records(port, next);
  ASSERT_TRUE(later.is_object());
  EXPECT_GE(later["next"].get<uint64_t>(), next);
  EXPECT_EQ(later["records"].size(), later["next"].get<uint64_t>() - next) << "only the records after " << next;
  EXPECT_GE(test::Sample(Http(port, "GET", "/metrics").body, "hogstream_iteration"), 0);
  EXPECT_EQ(Http(port, "GET", "/nothing").status, 404);
  EXPECT_EQ(Http(port, "GET", "/control/snapshot").status, 405);
  // A snapshot from this host is taken; from another address of it, refused in one line.
  EXPECT_EQ(Http(port, "POST", "/control/snapshot").status, 200);
  EXPECT_TRUE(Within(60, [&] { return Caffemodels() == 1; })) << run.err();
  if (const std::string other = NonLoopbackAddress(); !other.empty()) {
    const test::HttpReply r = Http(port, "POST", "/control/stop", "", other);
    EXPECT_EQ(r.status, 403) << r.body;
    EXPECT_TRUE(Within(10, [&] {
      return run.err().find("The page: a stop request from " + other +
                            " refused: a job without a --job-key takes requests from this host only") != std::string::npos;
    })) << run.err();
    EXPECT_TRUE(run.running()) << "a refused stop stopped the job";
  } else {
    std::cout << "[ note ] this host has no address but loopback: the refusal from elsewhere is not tried\n";
  }
  kill(run.pid(), SIGINT);
  ExpectClean(run.Wait(60), "the process");
}

TEST_F(Page, WithoutUiControlTheButtonsAreRefused) {
  if (!MetricsAvailable()) GTEST_SKIP() << "built without prometheus-cpp and civetweb: no page";
  const int port = FreeTcpPort();
  Child run(HS_HOGSTREAM_BIN, {"train", "--solver=" + Solver(), "--iterations=100000000", "--metrics=" + std::to_string(port)},
            scratch_, "plain");
  ASSERT_TRUE(Within(60, [&] { return Records(port).is_object(); })) << run.err();
  EXPECT_FALSE(Records(port)["control"].get<bool>());
  // Without a HOST the page is this host's alone: not served on its other addresses.
  if (const std::string other = NonLoopbackAddress(); !other.empty()) {
    EXPECT_EQ(Http(port, "GET", "/", "", other).status, 0) << "the page answered on " << other;
  }
  const test::HttpReply r = Http(port, "POST", "/control/stop");
  EXPECT_EQ(r.status, 403);
  EXPECT_NE(r.body.find("--ui_control"), std::string::npos) << r.body;
  EXPECT_TRUE(Within(10, [&] {
    return run.err().find("The page: a stop request from 127.0.0.1 refused: this machine takes no requests") !=
           std::string::npos;
  })) << run.err();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_TRUE(run.running()) << "a refused stop stopped the job";
  kill(run.pid(), SIGINT);
  ExpectClean(run.Wait(60), "the process");
}

TEST_F(Page, MistakesInItsFlagsAreOneLineBeforeTraining) {
  const std::string solver = test::ThreeOutputSolver(scratch_, 50);
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--ui_control"}, "--ui_control: give the page's address too (--ui=[HOST:]PORT)"},
      {{"--ui=localhost"}, "--ui wants [HOST:]PORT"},
      {{"--ui=127.0.0.1:1", "--metrics=127.0.0.1:2"}, "--ui and --metrics name one server"}};
  for (const auto& [flags, said] : cases) {
    std::vector<std::string> args = {"train", "--solver=" + solver};
    args.insert(args.end(), flags.begin(), flags.end());
    const Finished r = test::RunProgram(HS_HOGSTREAM_BIN, args, scratch_, 60);
    EXPECT_EQ(r.rc, 1) << r.err;
    EXPECT_NE(r.last_line().find(said), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("Iteration"), std::string::npos) << "it trained first:\n" << r.err;
  }
}

TEST_F(Page, InAKeyedJobStopNeedsTheTokenAndThenEndsTheJobWithOneSnapshot) {
  if (!MetricsAvailable()) GTEST_SKIP() << "built without prometheus-cpp and civetweb: no page";
  const std::vector<std::string> keyed = {"--job-key=" + key_file(), "--ui_control"};
  auto m0 = Start(0, 2, keyed);
  auto m1 = Start(1, 2, keyed);
  ASSERT_TRUE(JobServed(0, 2, 90)) << m0->err();
  EXPECT_TRUE(Records(ui_[0])["token"].get<bool>());
  // No token, a wrong one: refused, one line each, and the job goes on.
  EXPECT_EQ(Http(ui_[0], "POST", "/control/stop").status, 403);
  EXPECT_EQ(Http(ui_[0], "POST", "/control/stop", "X-Hogstream-Token: 0123456789abcdef0123456789abcdef\r\n").status, 403);
  EXPECT_TRUE(Within(10, [&] {
    const std::string log = m0->err();
    return log.find("The page: a stop request from 127.0.0.1 refused: it carries no control token") != std::string::npos &&
           log.find("The page: a stop request from 127.0.0.1 refused: its control token is not this job's") !=
               std::string::npos;
  })) << m0->err();
  EXPECT_TRUE(m0->running() && m1->running());
  EXPECT_EQ(Caffemodels(), 0);
  // The job's token, as `hogstream ui-token` gives it: the job stops with one snapshot.
  const Finished token = test::RunProgram(HS_HOGSTREAM_BIN, {"ui-token", "--job-key=" + key_file()}, scratch_, 30);
  ASSERT_EQ(token.rc, 0) << token.err;
  const std::string t = token.out.substr(0, token.out.find('\n'));
  ASSERT_TRUE(std::regex_match(t, std::regex("[0-9a-f]{32}"))) << t;
  const test::HttpReply ok = Http(ui_[0], "POST", "/control/stop", "X-Hogstream-Token: " + t + "\r\n");
  EXPECT_EQ(ok.status, 200) << ok.body;
  const Finished f0 = m0->Wait(120), f1 = m1->Wait(120);
  ExpectClean(f0, "machine 0");
  ExpectClean(f1, "machine 1");
  EXPECT_NE(f0.err.find("Stop requested by the page (from 127.0.0.1)"), std::string::npos) << f0.err;
  EXPECT_EQ(Caffemodels(), 1) << f0.err;
}

TEST_F(Page, ARealPrometheusScrapesAThreeMachineJobAndAgreesWithItsRecords) {
  if (!MetricsAvailable()) GTEST_SKIP() << "built without prometheus-cpp and civetweb: no page";
  const char* prometheus = "/usr/bin/prometheus";
  if (!fs::exists(prometheus)) GTEST_SKIP() << "no " << prometheus << " (Debian's prometheus; scripts/setup.sh installs it)";
  const auto started = std::chrono::steady_clock::now();
  std::vector<std::unique_ptr<Child>> m;
  for (int r = 0; r < 3; ++r) m.push_back(Start(r, 3));
  // configs/observe/prometheus.yml's scrape, for this job's addresses, every second.
  const int api = FreeTcpPort();
  const std::string config = scratch_ / "prometheus.yml";
  {
    std::ofstream c(config);
    c << "global: {scrape_interval: 1s, evaluation_interval: 1s}\nscrape_configs:\n  - job_name: hogstream\n"
         "    metrics_path: /metrics\n    static_configs:\n";
    for (int r = 0; r < 3; ++r)
      c << "      - targets: [\"127.0.0.1:" << ui_[r] << "\"]\n        labels: {machine: \"m" << r << "\"}\n";
  }
  Child prom(prometheus,
             {"--config.file=" + config, "--storage.tsdb.path=" + (scratch_ / "tsdb"),
              "--web.listen-address=127.0.0.1:" + std::to_string(api), "--log.level=warn"},
             scratch_, "prometheus");
  auto query = [&](const std::string& q, const std::string& at = "") {
    std::string enc;
    for (unsigned char c : q) {
      if (std::isalnum(c) || c == '_') enc += static_cast<char>(c);
      else {
        char b[4];
        std::snprintf(b, sizeof b, "%%%02X", c);
        enc += b;
      }
    }
    const test::HttpReply r = Http(api, "GET", "/api/v1/query?query=" + enc + (at.empty() ? "" : "&time=" + at));
    try {
      const Json j = Json::parse(r.body);
      return j.value("status", "") == "success" ? j["data"]["result"] : Json::array();
    } catch (const std::exception&) {
      return Json::array();
    }
  };
  auto value = [](const Json& sample) { return std::stod(sample["value"][1].get<std::string>()); };
  // Every machine up, with the exchange's series and a staleness histogram from each other machine.
  ASSERT_TRUE(Within(120, [&] {
    return query("up == 1").size() == 3 && query("hogstream_network_machine").size() == 3 &&
           query("hogstream_peer_staleness_iterations_count > 0").size() == 6 &&
           query("hogstream_images_per_second > 0").size() == 3 &&
           query("rate(hogstream_network_sent_bytes_total[10s]) > 0").size() == 3;
  })) << "Prometheus did not see the job within 120 s:\n" << prom.err() << m[0]->err();
  // Each machine's own records (read after the queries' scrapes: its totals only grow).
  // Every query at one instant (the first one's), so that they read the same scrapes.
  const Json counts = query("hogstream_peer_staleness_iterations_count");
  ASSERT_EQ(counts.size(), 6u) << counts.dump();
  std::ostringstream instant;
  instant << std::fixed << std::setprecision(3) << counts[0]["value"][0].get<double>();
  const std::string at = instant.str();
  const Json bytes = query("hogstream_peer_received_bytes_total", at);
  const Json images = query("hogstream_images_per_second", at);
  auto quantile = [&](double q) {
    return query("histogram_quantile(" + std::to_string(q) +
                     ", sum by (machine, peer, le) (hogstream_peer_staleness_iterations_bucket))", at);
  };
  const Json rate = query("rate(hogstream_network_sent_bytes_total[10s])", at);
  std::vector<Json> recs;
  for (int r = 0; r < 3; ++r) {
    recs.push_back(Records(ui_[r]));
    ASSERT_TRUE(recs[r].is_object()) << "machine " << r << "'s /stats.json did not answer";
  }
  auto machine = [](const Json& s) { return std::stoi(s["metric"]["machine"].get<std::string>().substr(1)); };
  std::ostringstream said;
  // Per-peer bytes: each counter Prometheus holds is a total some network record of that machine gave.
  ASSERT_EQ(bytes.size(), 6u) << bytes.dump();
  for (const Json& s : bytes) {
    const int r = machine(s), peer = std::stoi(s["metric"]["peer"].get<std::string>());
    const double v = value(s);
    bool seen = false;
    for (const Json& n : OfType(recs[r], "network"))
      for (const Json& p : n["peers"])
        if (p["rank"] == peer && p["bytes_in"].get<double>() == v) seen = true;
    EXPECT_TRUE(seen) << "machine " << r << ": Prometheus' " << v << " bytes from machine " << peer
                      << " is no total of its records";
    said << "  bytes from machine " << peer << " at machine " << r << ": Prometheus " << std::setprecision(12) << v
         << (seen ? ", a record's total" : ", no record's") << "\n";
    EXPECT_GT(v, 0);
  }
  // Images/s: each gauge is a display record's figure.
  ASSERT_EQ(images.size(), 3u) << images.dump();
  for (const Json& s : images) {
    const int r = machine(s);
    const double v = value(s);
    bool seen = false;
    for (const Json& t : OfType(recs[r], "train"))
      if (!t["img_per_s"].is_null() && std::fabs(t["img_per_s"].get<double>() - v) <= 1e-6 * std::fabs(v)) seen = true;
    EXPECT_TRUE(seen) << "machine " << r << ": Prometheus' " << v << " images/s is no record's";
    said << "  images/s at machine " << r << ": Prometheus " << v << (seen ? ", a display record's" : ", no record's") << "\n";
  }
  // Staleness: each median and 90th percentile is the one of a record of that machine whose histogram of
  // that peer holds as many deltas as Prometheus counted, by Prometheus' rule (linear within the
  // bucket that holds the rank; the highest finite bound where it is the last bucket).
  for (const double level : {0.5, 0.9}) {
  const Json quantiles = quantile(level);
  ASSERT_EQ(quantiles.size(), 6u) << quantiles.dump();
  for (const Json& s : quantiles) {
    const int r = machine(s), peer = std::stoi(s["metric"]["peer"].get<std::string>());
    double count = -1;
    for (const Json& c : counts)
      if (machine(c) == r && c["metric"]["peer"] == s["metric"]["peer"]) count = value(c);
    bool seen = false;
    double expected = -1;
    for (const Json& n : OfType(recs[r], "network"))
      for (const Json& p : n["peers"]) {
        if (p["rank"] != peer) continue;
        const std::vector<double> b = p["staleness_buckets"].get<std::vector<double>>();
        const std::vector<double> bound = n["staleness_bounds"].get<std::vector<double>>();
        double total = 0;
        for (double x : b) total += x;
        if (total != count || seen) continue;
        seen = true;
        const double rank = level * total;
        double below = 0;
        for (size_t k = 0; k < b.size(); ++k) {
          if (below + b[k] < rank) {
            below += b[k];
            continue;
          }
          if (k >= bound.size()) expected = bound.back();
          else expected = (k ? bound[k - 1] : 0) + (bound[k] - (k ? bound[k - 1] : 0)) * (rank - below) / b[k];
          break;
        }
      }
    EXPECT_TRUE(seen) << "machine " << r << ": no record holds Prometheus' " << count << " deltas from machine " << peer;
    EXPECT_NEAR(value(s), expected, 1e-6 * std::max(1.0, expected)) << "machine " << r << " peer " << peer;
    said << "  staleness quantile " << level << ", machine " << r << " of machine " << peer << "'s " << count
         << " deltas: Prometheus " << value(s) << ", its record " << expected << "\n";
  }
  }
  // The exchange's rate: bytes flow from every machine.
  ASSERT_EQ(rate.size(), 3u) << rate.dump();
  for (const Json& s : rate) EXPECT_GT(value(s), 0) << s.dump();
  for (const Json& s : rate) said << "  sent bytes/s at machine " << machine(s) << " (rate over 10 s): " << value(s) << "\n";
  std::cout << "[ prometheus ] at " << at << ":\n" << said.str() << "[ prometheus ] wall "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() << " s\n";
  kill(prom.pid(), SIGTERM);
  prom.Wait(30);
  kill(m[0]->pid(), SIGINT);
  for (int r = 0; r < 3; ++r) ExpectClean(m[r]->Wait(120), "machine " + std::to_string(r));
}

TEST_F(Page, AHeadlessChromiumShowsTheJobALaggingMachineAndOneThatLeft) {
  if (const std::string why = NoBrowser(); !why.empty()) GTEST_SKIP() << why;
  std::vector<std::unique_ptr<Child>> m;
  for (int r = 0; r < 3; ++r) m.push_back(Start(r, 3, {"--straggler=0.5"}));
  ASSERT_TRUE(JobServed(0, 3, 90)) << m[0]->err();
  // Machine 2 slowed to a crawl: stopped 180 ms of every 200 (well within --dead_ms).
  std::atomic<bool> slow{true};
  std::thread crawl([&] {
    while (slow.load()) {
      kill(m[2]->pid(), SIGSTOP);
      std::this_thread::sleep_for(std::chrono::milliseconds(180));
      kill(m[2]->pid(), SIGCONT);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  const bool slowed = Within(60, [&] { return PeerFlag(ui_[0], 2, "straggler"); });
  const fs::path shots = Artifacts();
  const std::string url = "http://127.0.0.1:" + std::to_string(ui_[0]) + "/";
  // The page as a browser renders it, after its script has polled a few times.
  auto browse = [&](const std::string& what, const std::string& tag) { return Browse(scratch_, url, what, tag); };

  // A loaded host can see the slowed machine's rate near the threshold for a moment: up to three
  // looks, each once the record says it lags.
  Finished dom;
  for (int look = 0; look < 3; ++look) {
    Within(30, [&] { return PeerFlag(ui_[0], 2, "straggler"); });
    dom = browse("--dump-dom", "dom1_" + std::to_string(look));
    if (std::regex_search(dom.out, std::regex("<tr data-rank=\"2\" class=\"[^\"]*lagging"))) break;
  }
  const Finished shot = browse("--screenshot=" + (shots / "page_three_machines.png").string(), "shot1");
  slow.store(false);
  crawl.join();
  kill(m[2]->pid(), SIGCONT);
  ASSERT_TRUE(slowed) << "machine 2 never counted as lagging";
  ASSERT_EQ(dom.rc, 0) << dom.err;
  EXPECT_EQ(shot.rc, 0) << shot.err;
  const std::string& d = dom.out;
  std::smatch g;
  EXPECT_TRUE(std::regex_search(d, g, std::regex("id=\"iter\">([0-9,]+) / 100,000,000<"))) << d.substr(0, 3000);
  EXPECT_TRUE(std::regex_search(d, g, std::regex("id=\"accuracy\">(0\\.[0-9]+|1\\.0+)<"))) << "no test accuracy shown";
  EXPECT_TRUE(std::regex_search(d, std::regex("<tr data-rank=\"0\" class=\"leader\">"))) << "the leader is not marked";
  EXPECT_TRUE(std::regex_search(d, std::regex("<tr data-rank=\"2\" class=\"[^\"]*lagging"))) << "machine 2 not marked lagging";
  EXPECT_TRUE(std::regex_search(d, std::regex("id=\"lagging\"[^>]*>2 \\(udp://127\\.0\\.0\\.1:"))) << "machine 2 not named lagging";
  EXPECT_EQ(std::regex_search(d, std::regex("data-points=\"0\"")), false) << "a chart without points";
  EXPECT_TRUE(fs::exists(shots / "page_three_machines.png") && fs::file_size(shots / "page_three_machines.png") > 10000);
  // Machine 2 leaves on notice: the page shows it gone.
  kill(m[2]->pid(), SIGUSR1);
  const Finished left = m[2]->Wait(120);
  ExpectClean(left, "machine 2");
  ASSERT_TRUE(Within(30, [&] { return PeerFlag(ui_[0], 2, "left"); })) << m[0]->err();
  const Finished dom2 = browse("--dump-dom", "dom2");
  const Finished shot2 = browse("--screenshot=" + (shots / "page_after_a_machine_left.png").string(), "shot2");
  EXPECT_EQ(dom2.rc, 0) << dom2.err;
  EXPECT_EQ(shot2.rc, 0) << shot2.err;
  EXPECT_TRUE(std::regex_search(dom2.out, std::regex("<tr data-rank=\"2\" class=\"[^\"]*left[^\"]*\"><td class=\"name\">[^<]*</td><td class=\"state\">left<")))
      << "machine 2 not shown gone";
  std::cout << "[ screenshots ] " << (shots / "page_three_machines.png").string() << ", "
            << (shots / "page_after_a_machine_left.png").string() << "\n";
  kill(m[0]->pid(), SIGINT);
  for (int r = 0; r < 2; ++r) ExpectClean(m[r]->Wait(120), "machine " + std::to_string(r));
}

TEST_F(Page, BetweenNamespacesAFollowersPageShowsTheTestPassesOfTheLeadersPage) {
  if (const std::string why = NoBrowser(); !why.empty()) GTEST_SKIP() << why;
  if (const std::string why = test::TestNet::Unavailable(); !why.empty()) GTEST_SKIP() << why;
  test::VethBridge net(2);
  const std::string solver = Solver();
  const std::string peers = "udp://" + net.address(0) + ":7000," + net.address(1) + ":7000";
  // Two hosts, each page on the same port of its own address (as a job's machines would have).
  auto machine = [&](int i) {
    return std::make_unique<Child>("/usr/sbin/ip",
                                   std::vector<std::string>{"netns", "exec", net.ns(i), HS_HOGSTREAM_BIN, "train",
                                                            "--solver=" + solver, "--iterations=100000000",
                                                            "--peers=" + peers, "--job=pages", "--dead_ms=600",
                                                            "--start_timeout=30", "--sweep_ms=5", "--payload=4096",
                                                            "--ui=0.0.0.0:8765"},
                                   scratch_, "ns" + std::to_string(i));
  };
  auto m0 = machine(0), m1 = machine(1);
  ASSERT_TRUE(Within(90, [&] { return m0->err().find("Test net output") != std::string::npos || !m0->running(); }) &&
              m0->running())
      << m0->err();
  // The follower's page, in the follower's namespace: its own figures, the leader's test passes.
  const Finished dom = Browse(scratch_, "http://" + net.address(1) + ":8765/", "--dump-dom", "ns", net.ns(1));
  ASSERT_EQ(dom.rc, 0) << dom.err;
  EXPECT_TRUE(std::regex_search(dom.out, std::regex("machine 1 \\(udp://10\\.77\\.0\\.2:7000\\) of 2")))
      << "not the follower's page:\n" << dom.out.substr(0, 3000);
  EXPECT_TRUE(std::regex_search(dom.out, std::regex("id=\"accuracy\">(0\\.[0-9]+|1\\.0+)<")))
      << "no test accuracy on the follower's page:\n" << dom.out.substr(0, 3000);
  EXPECT_NE(dom.out.find("(the leader's page)"), std::string::npos) << "the accuracy is not the leader's";
  EXPECT_TRUE(std::regex_search(dom.out, std::regex("<tr data-rank=\"0\" class=\"leader\">"))) << "the leader is not marked";
  kill(m0->pid(), SIGINT);
  ExpectClean(m0->Wait(120), "machine 0");
  ExpectClean(m1->Wait(120), "machine 1");
}

}  // namespace HS_UNITY_ID
}  // namespace hogstream
