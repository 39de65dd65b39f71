#include "sync/shm_region.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

namespace hogstream {

namespace {
constexpr uint64_t kMagic = 0x4D41455254534F48ULL;  // "HOSTREAM"
constexpr uint32_t kVersion = 1;
constexpr int kMaxProcs = 64;
enum State : uint32_t { kInitializing = 0, kReady = 1 };

bool Alive(int32_t pid) { return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM); }
}  // namespace

// Fixed-size, position-independent: only integers and atomics.
struct ShmRegion::Header {
  uint64_t magic;
  uint32_t version;
  std::atomic<uint32_t> state;
  uint64_t floats;
  uint64_t shape_hash;
  std::atomic<int32_t> pids[kMaxProcs];  // attached processes; 0 = free slot
  alignas(64) SolverGroup group;
};

SolverGroup* ShmRegion::group() const { return &header_->group; }

std::unique_ptr<ShmRegion> ShmRegion::CreateOrAttach(const std::string& name, size_t floats,
                                                     uint64_t shape_hash, bool* created) {
  HS_REQUIRE(!name.empty() && name.find('/') == std::string::npos)
      << "--shm name '" << name << "' must be non-empty and contain no '/'";
  std::unique_ptr<ShmRegion> r(new ShmRegion);
  r->name_ = "/hogstream." + name;
  r->path_ = "/dev/shm" + r->name_;
  const size_t header = (sizeof(Header) + 63) / 64 * 64;
  r->bytes_ = header + floats * sizeof(float);

  int fd = shm_open(r->name_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  *created = fd >= 0;
  if (fd < 0) {
    HS_REQUIRE(errno == EEXIST) << r->path_ << ": cannot create: " << std::strerror(errno);
    fd = shm_open(r->name_.c_str(), O_RDWR, 0600);
    HS_REQUIRE(fd >= 0) << r->path_ << ": cannot open: " << std::strerror(errno);
    // The creator may still be sizing it.
    struct stat st {};
    for (int i = 0; i < 5000 && fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) < header; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    HS_REQUIRE(static_cast<size_t>(st.st_size) >= header)
        << r->path_ << " is not a hogstream segment (too small); remove it to start a new job";
    HS_REQUIRE(static_cast<size_t>(st.st_size) == r->bytes_)
        << r->path_ << " holds a job for another net (" << (st.st_size - header) / sizeof(float)
        << " weights, this net has " << floats << ")";
  } else if (ftruncate(fd, static_cast<off_t>(r->bytes_)) != 0) {
    const int e = errno;
    close(fd);
    shm_unlink(r->name_.c_str());
    HS_FAIL() << r->path_ << ": cannot size to " << r->bytes_ << " bytes: " << std::strerror(e);
  }
  void* p = mmap(nullptr, r->bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  HS_REQUIRE(p != MAP_FAILED) << r->path_ << ": mmap failed: " << std::strerror(errno);
  r->header_ = static_cast<Header*>(p);
  r->weights_ = reinterpret_cast<float*>(static_cast<char*>(p) + header);
  Header* h = r->header_;

  if (*created) {
    // Fresh pages are zero: the atomics start at 0, state = kInitializing.
    new (&h->group) SolverGroup();
    h->magic = kMagic;
    h->version = kVersion;
    h->floats = floats;
    h->shape_hash = shape_hash;
  } else {
    // Wait for the creator to finish, unless it died first.
    for (int i = 0; h->state.load() != kReady; ++i) {
      const bool creator_alive = Alive(h->pids[0].load());
      HS_REQUIRE(i < 60000 && (creator_alive || h->pids[0].load() == 0 || i < 1000))
          << r->path_ << " was never initialised (its creator is gone); remove it with `rm "
          << r->path_ << "` and start again";
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    HS_REQUIRE(h->magic == kMagic && h->version == kVersion)
        << r->path_ << " is not a hogstream v" << kVersion << " segment; remove it to start a new job";
    HS_REQUIRE(h->floats == floats && h->shape_hash == shape_hash)
        << r->path_ << " holds a job for another net (" << h->floats << " weights, shape hash "
        << std::hex << h->shape_hash << "; this net: " << std::dec << floats << " weights, hash "
        << std::hex << shape_hash << ")";
    // A job whose processes are all gone crashed: its weights and counters are not trusted.
    bool any_alive = false, any_registered = false;
    for (auto& pid : h->pids) {
      const int32_t v = pid.load();
      any_registered |= v != 0;
      any_alive |= Alive(v);
    }
    HS_REQUIRE(any_alive || !any_registered)
        << r->path_ << " is left over from a crashed job (none of its processes is running); "
        << "remove it with `rm " << r->path_ << "` to start a new one";
    HS_REQUIRE(h->group.iter.load() == 0 || !h->group.stop.load())
        << r->path_ << " belongs to a job that has stopped; remove it to start a new one";
  }
  for (int i = 0; i < kMaxProcs; ++i) {
    int32_t expected = 0;
    if (h->pids[i].compare_exchange_strong(expected, getpid())) {
      r->slot_ = i;
      break;
    }
  }
  HS_REQUIRE(r->slot_ >= 0) << r->path_ << ": more than " << kMaxProcs << " processes attached";
  return r;
}

void ShmRegion::MarkReady() { header_->state.store(kReady); }

ShmRegion::~ShmRegion() {
  if (!header_) return;
  header_->pids[slot_].store(0);
  bool others = false;
  for (auto& pid : header_->pids) others |= Alive(pid.load());
  munmap(header_, bytes_);
  if (!others) shm_unlink(name_.c_str());
}

uint64_t ParamShapeHash(const Net& net) {
  uint64_t h = 1469598103934665603ULL;
  auto mix = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i, v >>= 8) h = (h ^ (v & 0xff)) * 1099511628211ULL;
  };
  for (const Blob* b : net.learnable_params()) {
    mix(b->num_axes());
    for (int d : b->shape()) mix(static_cast<uint64_t>(d));
  }
  return h;
}

}  // namespace hogstream
