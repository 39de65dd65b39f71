#include "sync/shm_region.hpp"

#include <fcntl.h>
#include <pwd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/text_format.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <sstream>
#include <thread>
#include <vector>

#include "base/futex.hpp"
#include "base/hash.hpp"
#include "sync/solver_group.hpp"

namespace hogstream {

namespace {
constexpr uint64_t kMagic = 0x4D41455254534F48ULL;  // "HOSTREAM"
constexpr uint32_t kVersion = 3;  // 3: the group's futex word; no network-only fields
constexpr int kMaxProcs = 64;
constexpr size_t kMaxSettings = 1024;
enum State : uint32_t { kInitializing = 0, kReady = 1 };

// Lock bytes, far past the end of any segment (POSIX locks may lie beyond EOF): one per slot,
// and one that serialises attaching and leaving.
constexpr off_t kSlotLockBase = off_t{1} << 40;
constexpr off_t kMembershipLock = kSlotLockBase - 1;

struct flock LockAt(off_t at, short type) {
  struct flock fl {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = at;
  fl.l_len = 1;
  fl.l_pid = 0;  // required 0 for OFD locks
  return fl;
}

std::string UserName(uid_t uid) {
  struct passwd pw {}, *found = nullptr;
  char buf[1024];
  if (getpwuid_r(uid, &pw, buf, sizeof(buf), &found) == 0 && found) return found->pw_name;
  return "uid " + std::to_string(uid);
}

using Clock = std::chrono::steady_clock;
}  // namespace

// Fixed-size, position-independent: only integers, bytes and atomics.
struct ShmRegion::Header {
  uint64_t magic;
  uint32_t version;
  std::atomic<uint32_t> state;
  uint64_t floats;
  uint64_t shape_hash;
  uint32_t settings_len;
  char settings[kMaxSettings];           // SolverSettings of the job
  std::atomic<int32_t> pids[kMaxProcs];  // for messages only: liveness is the slot's lock
  alignas(64) SolverGroup group;
};

SolverGroup* ShmRegion::group() const { return &header_->group; }

bool ShmRegion::SlotHeld(int slot) const {
  struct flock fl = LockAt(kSlotLockBase + slot, F_WRLCK);
  if (fcntl(fd_, F_OFD_GETLK, &fl) != 0) return false;
  return fl.l_type != F_UNLCK;
}

void ShmRegion::LockMembership(bool on) const {
  struct flock fl = LockAt(kMembershipLock, on ? F_WRLCK : F_UNLCK);
  while (fcntl(fd_, F_OFD_SETLKW, &fl) != 0 && errno == EINTR) {
  }
}

int ShmRegion::Members() const {
  int n = slot_ >= 0 ? 1 : 0;
  for (int i = 0; i < kMaxProcs; ++i)
    if (i != slot_ && SlotHeld(i)) ++n;
  return n;
}

std::unique_ptr<ShmRegion> ShmRegion::CreateOrAttach(const std::string& name, const JobIdentity& id,
                                                     bool* created) {
  HS_REQUIRE(!name.empty() && name.size() < 200 && name.find('/') == std::string::npos)
      << "--shm name '" << name << "' must be non-empty, short and contain no '/'";
  HS_REQUIRE(id.solver_settings.size() <= kMaxSettings)
      << "solver settings too long for a --shm job (" << id.solver_settings.size() << " bytes)";
  std::unique_ptr<ShmRegion> r(new ShmRegion);
  r->name_ = "/hogstream." + name;
  r->path_ = "/dev/shm" + r->name_;
  const size_t header = (sizeof(Header) + 63) / 64 * 64;
  r->bytes_ = header + id.floats * sizeof(float);
  const std::string taken = "; choose another --shm name";

  int fd = shm_open(r->name_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  *created = fd >= 0;
  if (fd < 0) {
    HS_REQUIRE(errno == EEXIST) << r->path_ << ": cannot create: " << ErrnoText(errno);
    fd = shm_open(r->name_.c_str(), O_RDWR, 0600);
    HS_REQUIRE(fd >= 0 || errno != EACCES)
        << "the job name '" << name << "' is taken by another user (" << r->path_ << ")" << taken;
    HS_REQUIRE(fd >= 0) << r->path_ << ": cannot open: " << ErrnoText(errno);
  }
  r->fd_ = fd;  // closed by the destructor: the slot lock lives as long as this descriptor
  if (*created) {
    // The creator is slot 0 before the file has a size, so an attacher that sees a size also
    // sees a live creator, or none (then the creator died).
    struct flock fl = LockAt(kSlotLockBase, F_WRLCK);
    HS_REQUIRE(fcntl(fd, F_OFD_SETLK, &fl) == 0)
        << r->path_ << ": cannot lock (does /dev/shm support OFD locks?): " << ErrnoText(errno);
    r->slot_ = 0;
    if (ftruncate(fd, static_cast<off_t>(r->bytes_)) != 0) {
      const int e = errno;
      shm_unlink(r->name_.c_str());
      HS_FAIL() << r->path_ << ": cannot size to " << r->bytes_ << " bytes: " << ErrnoText(e);
    }
  } else {
    struct stat st {};
    HS_REQUIRE(fstat(fd, &st) == 0) << r->path_ << ": " << ErrnoText(errno);
    // root could open anyone's segment: a job belongs to the user who started it.
    HS_REQUIRE(st.st_uid == geteuid())
        << "the job name '" << name << "' is taken by user " << UserName(st.st_uid) << " ("
        << r->path_ << ")" << taken;
    HS_REQUIRE(S_ISREG(st.st_mode)) << r->path_ << " is not a hogstream segment" << taken;
    // The creator may still be sizing it.
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    while (static_cast<size_t>(st.st_size) < header && Clock::now() < deadline &&
           r->SlotHeld(0) && fstat(fd, &st) == 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    HS_REQUIRE(static_cast<size_t>(st.st_size) >= header)
        << r->path_ << " is not a hogstream segment (too small, and no process is setting it up); "
        << "remove it with `rm " << r->path_ << "` to start a new job";
    HS_REQUIRE(static_cast<size_t>(st.st_size) == r->bytes_)
        << r->path_ << " holds a job for another net (" << (st.st_size - header) / sizeof(float)
        << " weights, this net has " << id.floats << ")";
  }
  void* p = mmap(nullptr, r->bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  HS_REQUIRE(p != MAP_FAILED) << r->path_ << ": mmap failed: " << ErrnoText(errno);
  r->header_ = static_cast<Header*>(p);
  r->weights_ = reinterpret_cast<float*>(static_cast<char*>(p) + header);
  Header* h = r->header_;

  if (*created) {
    // Fresh pages are zero: the atomics start at 0, state = kInitializing.
    new (&h->group) SolverGroup();
    h->magic = kMagic;
    h->version = kVersion;
    h->floats = id.floats;
    h->shape_hash = id.shape_hash;
    h->settings_len = static_cast<uint32_t>(id.solver_settings.size());
    std::memcpy(h->settings, id.solver_settings.data(), id.solver_settings.size());
    h->pids[0].store(getpid());
    return r;
  }

  // Wait for the creator to finish (MarkReady wakes this), unless it died first (its slot lock
  // is then gone: looked at every 100 ms).
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  for (uint32_t state; (state = h->state.load()) != kReady;) {
    HS_REQUIRE(r->SlotHeld(0))
        << r->path_ << " was never initialised (no process is setting it up); remove it with `rm "
        << r->path_ << "` and start again";
    HS_REQUIRE(Clock::now() < deadline)
        << r->path_ << " is still being initialised after 60 s by process " << h->pids[0].load();
    FutexWait(h->state, state, std::chrono::milliseconds(100));
  }
  // Every header field is checked before it is used: the file is only as trustworthy as
  // whoever could write /dev/shm.
  HS_REQUIRE(h->magic == kMagic && h->version == kVersion)
      << r->path_ << " is not a hogstream v" << kVersion << " segment; remove it to start a new job";
  HS_REQUIRE(h->floats == id.floats && h->shape_hash == id.shape_hash)
      << r->path_ << " holds a job for another net (" << h->floats << " weights, shape hash "
      << std::hex << h->shape_hash << "; this net: " << std::dec << id.floats << " weights, hash "
      << std::hex << id.shape_hash << ")";
  HS_REQUIRE(h->settings_len <= kMaxSettings) << r->path_ << " has a corrupt header (settings length)";
  const std::string job_settings(h->settings, h->settings_len);
  if (!id.solver_settings.empty()) {
    const std::string diff = SolverSettingsDiff(job_settings, id.solver_settings);
    HS_REQUIRE(job_settings == id.solver_settings)
        << r->path_ << " trains with other solver settings: " << diff
        << "; every process of a job needs the same solver";
  }
  const SolverGroup& g = h->group;
  auto in = [](int64_t v, int64_t lo, int64_t hi) { return v >= lo && v <= hi; };
  bool sane = in(g.iter.load(), 0, INT32_MAX) && in(g.stop.load(), 0, 1) &&
              in(g.leader.load(), 0, SolverGroup::kMaxSolvers - 1) &&
              in(g.solvers.load(), 0, SolverGroup::kMaxSolvers) && in(g.job_done.load(), 0, 1) &&
              in(g.stop_requested.load(), 0, 1) && g.snapshot_requests.load() >= 0;
  for (int i = 0; i < SolverGroup::kMaxSolvers && sane; ++i)
    sane = in(g.done[i].load(), 0, INT32_MAX) && in(g.finished[i].load(), 0, 1) &&
           in(g.gone[i].load(), 0, 1);
  HS_REQUIRE(sane) << r->path_ << " has a corrupt header (its solver group counters are out of "
                   << "range); remove it with `rm " << r->path_ << "` to start a new job";

  // Join under the membership lock, so that the last process out cannot remove the file
  // between our checks and our slot.
  r->LockMembership(true);
  struct Unlock {
    const ShmRegion* r;
    ~Unlock() { r->LockMembership(false); }
  } unlock{r.get()};
  struct stat st {};
  HS_REQUIRE(fstat(fd, &st) == 0 && st.st_nlink > 0)
      << "the job '" << name << "' ended while this process was joining; start it again";
  HS_REQUIRE(r->Members() > 0)
      << r->path_ << " is left over from a crashed job (none of its processes is running); "
      << "remove it with `rm " << r->path_ << "` to start a new one";
  HS_REQUIRE(!g.stop.load() && !g.job_done.load())
      << r->path_ << " belongs to a job that has stopped; remove it to start a new one";
  for (int i = 0; i < kMaxProcs && r->slot_ < 0; ++i) {
    struct flock fl = LockAt(kSlotLockBase + i, F_WRLCK);
    if (fcntl(fd, F_OFD_SETLK, &fl) == 0) r->slot_ = i;
  }
  HS_REQUIRE(r->slot_ >= 0) << r->path_ << ": more than " << kMaxProcs << " processes attached";
  h->pids[r->slot_].store(getpid());
  return r;
}

void ShmRegion::MarkReady() {
  header_->state.store(kReady);
  FutexWakeAll(header_->state);  // the processes waiting to join
}

ShmRegion::~ShmRegion() {
  if (fd_ < 0) return;
  if (header_ && slot_ >= 0) {
    // Leave under the membership lock: of two processes leaving at once, exactly the second
    // sees no other member and removes the file; a joiner waits and then sees it gone.
    LockMembership(true);
    header_->pids[slot_].store(0);
    struct flock fl = LockAt(kSlotLockBase + slot_, F_UNLCK);
    fcntl(fd_, F_OFD_SETLK, &fl);
    slot_ = -1;
    if (Members() == 0) shm_unlink(name_.c_str());
  } else if (slot_ >= 0) {
    shm_unlink(name_.c_str());  // a creator that failed before its segment was even mapped
  }
  // A refused attach was never a member: it leaves the job, and its file, as they were.
  if (header_) munmap(header_, bytes_);
  close(fd_);  // drops every lock this descriptor held
}

uint64_t ParamShapeHash(const Net& net) {
  std::vector<uint64_t> words;  // per param: its axis count, then its dimensions
  for (const Blob* b : net.learnable_params()) {
    words.push_back(static_cast<uint64_t>(b->num_axes()));
    for (int d : b->shape()) words.push_back(static_cast<uint64_t>(d));
  }
  return Digest64(words.data(), words.size() * sizeof(uint64_t));
}

namespace {
// The update-defining subset of a SolverParameter.
pb::SolverParameter SettingsOf(const pb::SolverParameter& p) {
  pb::SolverParameter s;
  s.set_type(p.type());
  if (p.has_solver_type()) s.set_solver_type(p.solver_type());
  s.set_base_lr(p.base_lr());
  s.set_lr_policy(p.lr_policy());
  s.set_gamma(p.gamma());
  s.set_power(p.power());
  s.set_stepsize(p.stepsize());
  *s.mutable_stepvalue() = p.stepvalue();
  s.set_max_iter(p.max_iter());
  s.set_momentum(p.momentum());
  s.set_momentum2(p.momentum2());
  s.set_delta(p.delta());
  s.set_rms_decay(p.rms_decay());
  s.set_weight_decay(p.weight_decay());
  s.set_regularization_type(p.regularization_type());
  s.set_clip_gradients(p.clip_gradients());
  s.set_iter_size(p.iter_size());
  return s;
}
}  // namespace

std::string SolverSettings(const pb::SolverParameter& param) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    SettingsOf(param).SerializeToCodedStream(&coded);
  }  // the coded stream flushes into `out` here
  return out;
}

std::string SolverSettingsDiff(const std::string& job, const std::string& mine) {
  pb::SolverParameter a, b;
  if (!a.ParseFromString(job) || !b.ParseFromString(mine)) return "(unreadable settings)";
  // SettingsOf sets every field it keeps, so the two text forms list the same fields in the
  // same order, one per line (repeated stepvalue aside, which then shows its first change).
  std::string ta, tb;
  google::protobuf::TextFormat::PrintToString(a, &ta);
  google::protobuf::TextFormat::PrintToString(b, &tb);
  std::istringstream sa(ta), sb(tb);
  std::string la, lb;
  while (true) {
    const bool ga = static_cast<bool>(std::getline(sa, la));
    const bool gb = static_cast<bool>(std::getline(sb, lb));
    if (!ga && !gb) return "";
    if (!ga) la = "(none)";
    if (!gb) lb = "(none)";
    if (la != lb) return la + " (job) vs " + lb + " (this solver)";
  }
}

}  // namespace hogstream
