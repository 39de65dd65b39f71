#include "bin/program.hpp"

#include "bin/peers.hpp"
#include "sync/wire.hpp"
#include "transport/fault/endpoint.hpp"
#include "transport/frame.hpp"
#include "transport/registry.hpp"

#include "core/signals.hpp"
#include "data/data_layer.hpp"
#include "observe/metrics.hpp"
#include "observe/stats_json.hpp"
#include "observe/web.hpp"

#include <glog/logging.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <sstream>

namespace hogstream {

int RunProgram(const char* name, const char* argv0, const std::function<int()>& body) {
  // Caffe's log format on stderr, so Caffe's log parsers read our logs.
  FLAGS_logtostderr = true;
  FLAGS_colorlogtostderr = false;
  FLAGS_log_year_in_prefix = false;  // "I1121 ...", as Caffe's logs and parsers have it
  google::InitGoogleLogging(argv0);
  try {
    return body();
  } catch (const ProgramExit& e) {
    return e.code;
  } catch (const Error& e) {
    std::cerr << name << ": " << e.what() << "\n";
  } catch (const Bug& e) {
    std::cerr << name << ": internal error: " << e.what() << "\n";
  } catch (const std::bad_alloc&) {
    std::cerr << name << ": out of memory\n";
  } catch (const std::exception& e) {
    std::cerr << name << ": " << e.what() << "\n";
  }
  return 1;
}

std::map<std::string, std::vector<int>> InputShapes(const Flags& f) {
  std::map<std::string, std::vector<int>> shapes;
  for (const std::string& spec : f.all("input")) {
    const auto colon = spec.find(':');
    HS_REQUIRE(colon != std::string::npos && colon > 0)
        << "--input wants TOP:N,C,H,W, got '" << spec << "'";
    std::vector<int> dims;
    const std::string rest = spec.substr(colon + 1);
    size_t pos = 0;
    while (pos <= rest.size()) {
      const size_t comma = std::min(rest.find(',', pos), rest.size());
      const std::string d = rest.substr(pos, comma - pos);
      HS_REQUIRE(!d.empty() && d.find_first_not_of("0123456789") == std::string::npos)
          << "--input wants TOP:N,C,H,W with positive integers, got '" << spec << "'";
      HS_REQUIRE(d.size() <= 9) << "--input dimension " << d << " is too large in '" << spec << "'";
      dims.push_back(std::stoi(d));
      HS_REQUIRE(dims.back() > 0) << "--input dimensions must be > 0 in '" << spec << "'";
      pos = comma + 1;
    }
    shapes[spec.substr(0, colon)] = dims;
  }
  return shapes;
}

std::string UiControlToken(const JobKey& key) {
  return Hmac(key, "hogstream ui control").substr(0, 32);  // 128 bits: enough to guess against, short to paste
}

std::shared_ptr<FiguresSink> StatsFromFlags(const Flags& f) {
  std::vector<std::shared_ptr<FiguresSink>> sinks;
  HS_REQUIRE(!f.has("ui_control") || f.has("ui") || f.has("metrics"))
      << "--ui_control: give the page's address too (--ui=[HOST:]PORT)";
  if (f.has("metrics") || f.has("ui")) {
    WebOptions w;
    w.flag = f.has("ui") ? "ui" : "metrics";
    w.address = MetricsAddress(f.get(w.flag), w.flag);
    HS_REQUIRE(!f.has("ui") || !f.has("metrics") || MetricsAddress(f.get("metrics")) == w.address)
        << "--ui and --metrics name one server (the page and /metrics are served together): give one, or the "
           "same address";
    w.control = f.has("ui_control");
    if (w.control && f.declares("job-key") && f.has("job-key")) w.token = UiControlToken(LoadJobKey(f.get("job-key")));
    w.request = RequestAction;
    sinks.push_back(StartWeb(w));
  }
  if (f.has("stats_json")) sinks.push_back(std::make_shared<JsonLinesSink>(f.get("stats_json")));
  if (sinks.empty()) return nullptr;
  if (sinks.size() == 1) return sinks[0];
  return std::make_shared<TeeSink>(std::move(sinks));
}

HogwildOptions HogwildFromFlags(const Flags& f, const std::string& solvers, const PeerEntry* mine) {
  HS_REQUIRE(!(f.has("snapshot") && f.has("weights")))
      << "give --snapshot (resume) or --weights (fine-tune), not both";
  HogwildOptions h;
  h.solvers = ParseSolverSpec(solvers);
  h.shm = f.get("shm");
  h.private_copies = f.has("private") || (mine && mine->private_copies);
  h.policy = Policy::Parse(f.get("policy"), f.has("staleness-weight"), f.get("compress"));
  h.policy.svb = f.has("svb");
  h.policy.timeout = std::chrono::seconds(f.int_in("policy_timeout", 1, 86400));
  h.aggregate = f.get("aggregate");
  const long chunk = f.int_in("chunk", 1, INT_MAX);
  HS_REQUIRE(chunk > 0) << "--chunk must be > 0";
  h.chunk_floats = static_cast<size_t>(chunk);
  h.copy_lead = static_cast<int>(f.int_in("copy_lead", 0, 1 << 20));
  h.sweep_pause_us = static_cast<int>(f.int_in("sweep_pause_us", -1, 1000000));
  h.resume = f.get("snapshot");
  h.weights = f.get("weights");
  h.input_shapes = InputShapes(f);
  // Before any solver thread exists, so that every thread inherits the blocked signals.
  h.action = InstallSignalActions(f.get("sigint_effect"), f.get("sighup_effect"));
  // After the signals are blocked: the metrics server's threads must not take a SIGINT (it
  // would kill the process instead of stopping the job cleanly).
  const std::shared_ptr<FiguresSink> sinks = StatsFromFlags(f);
  h.stats = sinks;
  h.network = sinks;
  return h;
}

namespace {
// --share_weights=W0,W1,...: a positive weight per machine, by rank, at most one per machine.
// A mistake is one line.
std::vector<double> ShareWeights(const std::string& text, int machines) {
  std::vector<double> w;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    HS_REQUIRE(!item.empty() && end && *end == 0 && std::isfinite(v) && v > 0 && v <= 1e6)
        << "--share_weights wants a positive weight per machine, by rank (W0,W1,...), got '" << text << "'";
    w.push_back(v);
  }
  HS_REQUIRE(!w.empty() && static_cast<int>(w.size()) <= machines)
      << "--share_weights names " << w.size() << " weights for a job of " << machines << " machines";
  return w;
}

// "udp://": the schemes that can take a new machine into a running job.
std::string AdmittingSchemes() {
  std::string out;
  for (const TransportScheme* s : Transports())
    if (s->admits) out += (out.empty() ? "" : ", ") + s->name + "://";
  return out.empty() ? "no transport of this build" : out;
}

// A job whose frames carry no key, on addresses beyond this host, says so once.
void WarnUnkeyed(const PeerList& list) {
  const TransportScheme* scheme = FindTransport(list.scheme);
  const bool beyond = std::any_of(list.peers.begin(), list.peers.end(), [&](const PeerEntry& e) {
    return !scheme || !scheme->leaves_host || scheme->leaves_host(e);
  });
  LOG_IF(WARNING, beyond) << "Network: this job's frames carry no key: anyone on its network who spoofs a machine's "
                             "address can stop, end or poison it (give --job-key=FILE, or start it with --rendezvous)";
}
}  // namespace

std::unique_ptr<NetJob> TrainNetJob(const Flags& f, const pb::SolverParameter& solver, PeerEntry* mine,
                                    std::shared_ptr<void>* store) {
  if (f.has("peers")) {
    HS_REQUIRE(!f.has("rendezvous")) << "give --peers or --rendezvous, not both";
    return NetJobFromFlags(f, f.get("peers"), /*raw_form=*/false, solver, mine);
  }
  const int forced = f.has("rank") ? static_cast<int>(f.get_int("rank", -1, 0, kNoPeer - 1)) : -1;
  const int machines = f.has("machines") ? static_cast<int>(f.get_int("machines", 0, 1, kMaxPeers)) : 0;
  const std::optional<RendezvousPlan> plan = PlanRendezvous(f.get("rendezvous"), forced, machines, RendezvousEnv(), f.has("join"));
  // A launcher's environment alone, for one rank, is not a job across machines (mpirun -np 1).
  if (!plan || (!f.has("rendezvous") && !f.has("machines") && !f.has("join") && plan->machines == 1)) return nullptr;
  RendezvousOptions o;
  o.join = f.has("join");
  o.job = f.get("job", "rendezvous " + plan->host + ":" + std::to_string(plan->port));
  if (f.has("job-key")) o.key = LoadJobKey(f.get("job-key"));
  o.timeout = std::chrono::seconds(f.int_in("start_timeout", 1, 86400));
  Rendezvoused met = Rendezvous(*plan, o);
  if (store) *store = met.store;
  return NetJobFromFlags(f, met.peers, /*raw_form=*/false, solver, mine, &met);
}

std::unique_ptr<NetJob> NetJobFromFlags(const Flags& f, const std::string& peers, bool raw_form,
                                        const pb::SolverParameter& solver, PeerEntry* mine, Rendezvoused* met) {
  const PeerList list = raw_form ? ParseRawBinPeers(peers) : ParsePeers(peers);
  const int forced = met ? met->rank : f.has("rank") ? static_cast<int>(f.get_int("rank", -1, 0, kNoPeer - 1)) : -1;
  SelfRank self = FindSelf(list, ReadLocalAddresses(), met ? std::map<std::string, std::string>{} : LauncherEnv(), forced);
  if (met) self.how = "from the rendezvous store";
  if (mine) *mine = list.peers[self.rank];
  // --join: the others' list is this one without this machine's entry (the last); the job's
  // settings are theirs, for that many machines.
  const bool join = f.has("join");
  const int listed = static_cast<int>(list.peers.size());
  if (join) {
    const TransportScheme* scheme = FindTransport(list.scheme);
    HS_REQUIRE(scheme && scheme->admits) << "--join: " << list.scheme << ":// cannot take a new machine into a "
                                         << "running job (its machines are known at the start); " << AdmittingSchemes()
                                         << " can";
    HS_REQUIRE(f.has("job-key")) << "--join needs the job's --job-key: the others admit a new machine only on frames "
                                    "sealed with it";
    HS_REQUIRE(listed >= 2 && self.rank == listed - 1)
        << "--join: this machine's entry must be the last of --peers (the others' list, then its own); it is entry "
        << self.rank << " of " << listed;
    HS_REQUIRE(f.has("job") || peers.find(',') != std::string::npos)
        << "--join with --peers=@FILE needs the job's --job";
  }
  const int job_machines = join ? listed - 1 : listed;
  PeerOpenOptions o;
  // Jobs on one wire tell each other apart by a number from --job (default: the list itself;
  // a new machine's list without its own entry).
  const std::string job =
      met ? met->job : f.get("job", join ? peers.substr(0, peers.rfind(',')) : peers);
  const uint64_t id = JobIdOf(job);
  o.job = id;
  if (f.has("job-key")) o.key = LoadJobKey(f.get("job-key"));
  if (met && met->session) o.key = met->session;  // the store's fresh key for this job's frames
  if (!o.key) WarnUnkeyed(list);
  o.iface = f.get("iface", list.peers[self.rank].iface);
  o.multicast = f.get("multicast");
  o.max_payload = static_cast<uint32_t>(f.int_in("payload", 16, 1 << 20));
  HS_REQUIRE(o.max_payload % 16 == 0) << "--payload must be a multiple of 16 bytes, got " << o.max_payload;
  const int64_t start_s = f.int_in("start_timeout", 1, 86400);
  o.exchange_timeout = std::chrono::seconds(start_s);  // verbs: every machine up within it
  if (met) met->port_hold.reset();  // this machine's port, held since it was told to the store
  std::unique_ptr<Transport> t = OpenPeers(list, self, o);
  if (f.has("loss")) {  // injected loss on the data messages, to see how a job takes it
    const std::string text = f.get("loss");
    char* end = nullptr;
    const double p = std::strtod(text.c_str(), &end);
    HS_REQUIRE(end && *end == 0 && p >= 0 && p < 1) << "--loss wants a probability in [0, 1), got '" << text << "'";
    FaultOptions fo;
    fo.drop = p;
    fo.applies = FaultsOn(KindBit(MsgKind::kPosition) | KindBit(MsgKind::kDelta));
    fo.seed = id + static_cast<uint64_t>(self.rank);
    t = std::make_unique<FaultEndpoint>(std::move(t), fo);
  }
  NetJobOptions n;
  n.rank = self.rank;
  n.machines = static_cast<int>(list.peers.size());
  n.job_machines = job_machines;
  for (int r = 0; r < n.machines; ++r) n.names.push_back(PeerName(list, r));
  n.multicast = !o.multicast.empty();
  n.chunk_at_params = f.has("chunk_at_params");
  const Policy policy = Policy::Parse(f.get("policy"), f.has("staleness-weight"), f.get("compress"));
  n.rule = policy.Rule(nullptr);
  // (bsp and gsp make their rounds' steps themselves: bsp's deltas are never reweighted, gsp's
  // by its policy's 1/staleness weights between the groups)
  const bool rounds = policy.kind == Policy::Kind::kBsp || policy.kind == Policy::Kind::kGsp;
  const std::string aggregate = f.get("aggregate");
  // (easgd moves each machine toward the centre, bsp and gsp average their rounds: no shared momentum)
  // (gsp's machines take each other's deltas whole at equal pace: GspWeightScale. easgd's take
  // each other's pulls by 1 / staleness: a share of the centre moves by about twice its own
  // machine's pull, as the centre of synchronous easgd does at alpha = 1/2; see EasgdSpeed)
  HS_REQUIRE(!join || (!rounds && !f.has("svb")))
      << "--join: a job under bsp or gsp, or with --svb, cannot take a new machine (every machine's part is fixed)";
  AggregateSetting as;
  as.machines = rounds ? 1 : job_machines;
  as.default_scale = policy.kind == Policy::Kind::kGsp ? GspWeightScale(job_machines) : 1.f;
  as.policy_weights = policy.weights();
  as.offers_share = !rounds && policy.kind != Policy::Kind::kEasgd;  // deltas added: share and local offered
  as.solver = &solver;
  as.epoch = [&solver] { return EpochIterations(solver); };
  n.rule.aggregate = MakeAggregate(aggregate, as);
  if (job_machines > 1) LOG(INFO) << "Network: aggregation: " << n.rule.aggregate->Line();
  n.track_fresh = policy.kind == Policy::Kind::kSsp;
  n.sweep_ms = static_cast<uint32_t>(f.int_in("sweep_ms", 0, 60000));
  n.sweeps_per_iter = static_cast<uint32_t>(f.int_in("sweeps_per_iter", 0, 1000));
  n.window = static_cast<uint32_t>(f.int_in("window", 0, 1 << 20));
  n.dead_ms = static_cast<uint32_t>(f.int_in("dead_ms", 100, 3600000));
  n.quorum_ms = static_cast<uint32_t>(f.int_in("quorum_ms", 0, 86400000));  // 0: 30 x dead_ms
  if (f.has("straggler")) {
    const std::string text = f.get("straggler");
    char* end = nullptr;
    const double fraction = std::strtod(text.c_str(), &end);
    HS_REQUIRE(end && end != text.c_str() && *end == 0 && fraction >= 0 && fraction < 1)
        << "--straggler wants a fraction of the median rate in [0, 1) (0: never), got '" << text << "'";
    n.straggler = fraction;
  }
  if (f.has("share_weights")) n.share_weights = ShareWeights(f.get("share_weights"), n.machines);
  n.start_ms = static_cast<uint32_t>(start_s) * 1000;
  // What every machine must share (checked in each control message): the list, in order, with
  // the job's name; and the exchange's settings.
  std::string list_text = job;
  for (int r = 0; r < n.machines; ++r) {
    list_text += '\n';
    list_text += PeerName(list, r);
  }
  // (A new machine's list is the others' plus its own entry: it asserts none; its frames are
  // sealed with the job's key.)
  n.agree[kAgreePeers] = join ? 0 : Digest64(list_text);
  // A new machine is admitted only on frames sealed with the job's key.
  n.admit = f.has("job-key");
  std::ostringstream settings;
  settings << f.get("policy") << ";" << f.has("staleness-weight") << ";" << f.get("compress") << ";"
           << n.chunk_at_params << ";" << o.max_payload << ";" << n.multicast << ";" << f.has("svb") << ";"
           << n.rule.aggregate->Agreement()  // the rule as resolved, every field (its defaults follow the run)
           << ";";
  for (double w : n.share_weights) settings << w << ",";
  n.agree[kAgreeSettings] = Digest64(settings.str());
  LOG(INFO) << "Network: this is machine " << n.rank << " of " << n.machines << ", "
            << PeerName(list, n.rank) << " (" << self.how << ")"
            << (join ? "; it joins the running job as a new machine" : "");
  return std::make_unique<NetJob>(std::move(t), std::move(n));
}

}  // namespace hogstream
