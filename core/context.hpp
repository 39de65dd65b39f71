// Context: everything a solver thread needs that Caffe kept in a process-wide singleton — the
// compute mode, the GPU it drives, its random generator, its BLAS threading and (on CUDA
// builds) its cuBLAS/cuDNN handles and stream. Each thread has its own current Context; a
// thread that never installs one gets a default CPU context of its own. Nothing is shared
// between threads, so N solvers in one process never contend here.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace hogstream {

enum class Mode { CPU, GPU };

class Context {
 public:
  explicit Context(Mode mode = Mode::CPU, int device = 0, uint64_t seed = 0);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // The calling thread's current context.
  static Context& Get();

  Mode mode() const { return mode_; }
  int device() const { return device_; }
  std::mt19937& rng() { return rng_; }
  uint64_t seed() const { return seed_; }
  void set_seed(uint64_t seed);
  // Threads the math library may use for this thread's calls (1 = the calling thread only).
  void set_threads(int n);
  int threads() const { return threads_; }

  // Where this solver starts reading its data, as a fraction of each source ([0, 1)): solver
  // k of K in one process starts at k/K, so parallel solvers read their own shards.
  double data_shard() const { return data_shard_; }
  void set_data_shard(double fraction) {
    data_shard_ = fraction;
    data_part_ = 0;
  }
  // A disjoint partition instead: the TRAIN data this solver reads is the records
  // [begin, begin + length) (fractions of each source), over and over; the job's solvers
  // cover [0, 1) once between them, so one epoch reads each record once across the job.
  // 0: no partition (the shard's start, then the whole source).
  double data_part() const { return data_part_; }
  void set_data_partition(double begin, double length) {
    data_shard_ = begin;
    data_part_ = length;
  }
  // With a partition: more ranges [begin, begin + length) this solver reads after its own in
  // each round (a dead machine's partition, taken over: sync/hogwild.hpp), asked anew at the
  // start of every round from the reader's thread (so it must be safe there). Unset: none.
  using Takeover = std::function<std::vector<std::pair<double, double>>()>;
  const Takeover& data_takeover() const { return data_takeover_; }
  void set_data_takeover(Takeover f) { data_takeover_ = std::move(f); }
  // With a partition: its [begin, begin + length) asked anew at the start of every round, from
  // the reader's thread (a job whose machines change cuts the data anew). Unset: the one given
  // to set_data_partition, always.
  using Repartition = std::function<std::pair<double, double>()>;
  const Repartition& data_repartition() const { return data_repartition_; }
  void set_data_repartition(Repartition f) { data_repartition_ = std::move(f); }

  // The CUDA stream of this context, created on first use (void* keeps CUDA out of this
  // header).
  void* stream();
  // Library handles of the GPU math (cuBLAS, cuDNN): created by the hogstream_gpu library on
  // first use and destroyed with the context. Opaque here, so that the engine itself links no
  // GPU library and CPU work never pays for loading one.
  void* gpu_handles() const { return gpu_handles_; }
  void set_gpu_handles(void* handles, void (*destroy)(void*));

 private:
  friend class ContextScope;
  Mode mode_;
  int device_;
  uint64_t seed_;
  int threads_ = 1;
  double data_shard_ = 0;
  double data_part_ = 0;
  Takeover data_takeover_;
  Repartition data_repartition_;
  std::mt19937 rng_;
  void* gpu_handles_ = nullptr;
  void (*destroy_gpu_handles_)(void*) = nullptr;
  void* stream_ = nullptr;
};

// Installs a context as the current one for this thread for the scope's lifetime.
class ContextScope {
 public:
  explicit ContextScope(Context* ctx);
  ~ContextScope();
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  Context* prev_;
};

// A seed from the clock and the thread, for random_seed = -1.
uint64_t FreshSeed();

// Names the calling thread as `top -H`, `ps -L` and /proc/PID/task/TID/comm show it (at most
// 15 characters kept): "hs-net", "hs-solver-2"... Not for the main thread (whose name is the
// process's, what pgrep and killall find).
void NameThisThread(const std::string& name);

// True on CUDA builds when at least one GPU is visible.
bool GpuAvailable();
// How many GPUs are visible (0 on builds without CUDA), and whether this is a CUDA build.
int GpuDevices();
bool GpuBuild();
// An Error unless GPU `device` can be used: this build has CUDA and the device is visible.
// `what` names what asked for it ("--gpu=1", "solver_mode: GPU") at the head of the message.
void RequireGpu(int device, const std::string& what);
// Waits until the calling thread's GPU is idle (nothing in CPU mode): timers that measure GPU
// work end with it.
void DeviceSynchronize();

}  // namespace hogstream
