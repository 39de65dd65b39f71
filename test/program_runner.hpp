// For tests that run hogstream's programs: a scratch folder removed at the end, and a child
// process with its stderr (and stdout) in files and a deadline on every wait, so a hang fails
// the test instead of stalling the suite.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace hogstream::test {

namespace fs = std::filesystem;

// A fresh folder under the temp directory, removed with everything in it.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& tag) {
    path_ = fs::temp_directory_path() /
            ("hs_" + tag + "_" + std::to_string(getpid()) + "_" + std::to_string(std::random_device{}()));
    fs::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const fs::path& path() const { return path_; }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A text's last line (trailing newlines left out).
inline std::string LastLine(const std::string& text) {
  const std::string t = text.substr(0, text.find_last_not_of('\n') + 1);
  const size_t nl = t.find_last_of('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

struct Finished {
  int rc = -1;  // exit status; 128 + N for signal N; -1: killed at the deadline
  std::string out, err;
  std::string last_line() const { return LastLine(err); }
};

// A running program; stdout and stderr go to `dir`/NAME.out and NAME.err.
class Child {
 public:
  Child(const std::string& program, const std::vector<std::string>& args, const ScratchDir& dir,
        const std::string& name = "run")
      : out_(dir / (name + ".out")), err_(dir / (name + ".err")) {
    pid_ = fork();
    if (pid_ == 0) {
      if (!freopen(err_.c_str(), "w", stderr) || !freopen(out_.c_str(), "w", stdout)) _exit(126);
      std::vector<char*> argv{const_cast<char*>(program.c_str())};
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(program.c_str(), argv.data());
      _exit(127);
    }
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  bool running() {
    if (reaped_) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) != pid_) return true;
    Reaped(status);
    return false;
  }
  std::string err() const { return ReadFile(err_); }
  pid_t pid() const { return pid_; }

  // Waits up to `seconds`; past it the child is killed and rc is -1.
  Finished Wait(double seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (running()) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
        reaped_ = true;
        rc_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return {rc_, ReadFile(out_), ReadFile(err_)};
  }

 private:
  void Reaped(int status) {
    reaped_ = true;
    rc_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  std::string out_, err_;
  pid_t pid_ = -1;
  bool reaped_ = false;
  int rc_ = -1;
};

inline Finished RunProgram(const std::string& program, const std::vector<std::string>& args,
                           const ScratchDir& dir, double seconds = 120) {
  return Child(program, args, dir).Wait(seconds);
}

// A tiny net on DummyData with three outputs whose names are out of alphabetical order in the
// net (loss, then top1_accuracy, then a loss-weighted "aux"), for format checks. Their values
// differ (aux: a Euclidean distance between two projections), so a value printed under the
// wrong name shows.
inline std::string ThreeOutputNet() {
  return R"(
    name: "three"
    layer { name: "d" type: "DummyData" top: "x" top: "label"
            dummy_data_param { shape { dim: 8 dim: 6 } shape { dim: 8 }
                               data_filler { type: "gaussian" }
                               data_filler { type: "constant" value: 1 } } }
    layer { name: "ip" type: "InnerProduct" bottom: "x" top: "s"
            inner_product_param { num_output: 3 weight_filler { type: "xavier" } } }
    layer { name: "loss" type: "SoftmaxWithLoss" bottom: "s" bottom: "label" top: "loss" }
    layer { name: "acc" type: "Accuracy" bottom: "s" bottom: "label" top: "top1_accuracy" }
    layer { name: "ip2" type: "InnerProduct" bottom: "x" top: "t"
            inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 3 } } }
    layer { name: "aux" type: "EuclideanLoss" bottom: "s" bottom: "t" top: "aux"
            loss_weight: 0.5 }
  )";
}

// A solver file for ThreeOutputNet in `dir`: display every 10, test every 20 (2 batches),
// snapshots into `dir`; `extra` is appended.
inline std::string ThreeOutputSolver(const ScratchDir& dir, int max_iter, const std::string& extra = "") {
  const std::string path = dir / "solver.prototxt";
  std::ofstream(path) << "net_param {" << ThreeOutputNet() << "}\n"
                      << "test_iter: 2 test_interval: 20 display: 10 max_iter: " << max_iter
                      << " base_lr: 0.01 lr_policy: \"inv\" gamma: 0.0001 power: 0.75"
                      << " momentum: 0.9 solver_mode: CPU random_seed: 7\n"
                      << "snapshot_prefix: \"" << (dir / "snap") << "\"\n" << extra;
  return path;
}

}  // namespace hogstream::test
