#include "observe/web.hpp"

#include <glog/logging.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "base/common.hpp"
#include "core/group.hpp"
#include "observe/metrics.hpp"
#include "observe/stats_json.hpp"

#ifdef HOGSTREAM_PROMETHEUS
#include <civetweb.h>
#endif

namespace hogstream {

#ifdef HOGSTREAM_PROMETHEUS
namespace {

// The last error civetweb logged while starting (it says why a port cannot be bound).
std::mutex g_start_mu;
std::string g_start_error;

int KeepLastError(const mg_connection*, const char* message) {
  std::lock_guard<std::mutex> lock(g_start_mu);
  g_start_error = message ? message : "";
  return 1;  // handled: nothing on stderr
}

void Reply(mg_connection* c, int status, const char* type, const std::string& body, const char* extra = "") {
  const char* reason = status == 200 ? "OK" : status == 403 ? "Forbidden" : status == 404 ? "Not Found"
                                            : status == 405 ? "Method Not Allowed" : "Error";
  mg_printf(c,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nCache-Control: no-store\r\n%s"
            "Connection: close\r\n\r\n",
            status, reason, type, body.size(), extra);
  mg_write(c, body.data(), body.size());
}

bool Loopback(const char* addr) {
  return std::strncmp(addr, "127.", 4) == 0 || std::strcmp(addr, "::1") == 0 ||
         std::strncmp(addr, "::ffff:127.", 11) == 0;
}

// Equal without telling by its time how much of the token a guess got right.
bool SameToken(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char d = 0;
  for (size_t i = 0; i < a.size(); ++i) d |= static_cast<unsigned char>(a[i] ^ b[i]);
  return d == 0;
}

class WebSink final : public FiguresSink {
 public:
  explicit WebSink(const WebOptions& o) : opt_(o), metrics_(MakeMetricsText()) {
    mg_init_library(0);
    mg_callbacks callbacks{};
    callbacks.log_message = KeepLastError;
    const std::string port = o.address;  // civetweb's listening_ports takes HOST:PORT
    const char* options[] = {"listening_ports", port.c_str(), "num_threads", "4", "request_timeout_ms", "10000",
                             nullptr};
    {
      std::lock_guard<std::mutex> lock(g_start_mu);
      g_start_error.clear();
    }
    ctx_ = mg_start(&callbacks, this, options);
    if (!ctx_) {
      std::string why;
      {
        std::lock_guard<std::mutex> lock(g_start_mu);
        why = g_start_error;
      }
      while (!why.empty() && (why.back() == '\n' || why.back() == '\r')) why.pop_back();
      mg_exit_library();
      HS_FAIL() << "--" << o.flag << ": cannot serve on " << o.address << " (port in use?)"
                << (why.empty() ? "" : ": " + why);
    }
    mg_set_request_handler(ctx_, "/", &WebSink::Serve, this);
    LOG(INFO) << "The job's page on http://" << o.address << "/ (figures at /metrics and /stats.json"
              << (o.control ? "; --ui_control: its buttons stop and snapshot the job" : "") << ")";
  }
  ~WebSink() override {
    mg_stop(ctx_);  // waits for the requests in flight
    mg_exit_library();
  }

  void OnTrain(TrainFigures& f) override {
    metrics_->OnTrain(f);
    records_.OnTrain(f);
  }
  void OnTest(const TestFigures& f) override {
    metrics_->OnTest(f);
    records_.OnTest(f);
  }
  void OnNetwork(const NetworkFigures& f) override {
    metrics_->OnNetwork(f);
    records_.OnNetwork(f);
  }

 private:
  static int Serve(mg_connection* c, void* self) { return static_cast<WebSink*>(self)->Handle(c); }

  int Handle(mg_connection* c) {
    const mg_request_info* ri = mg_get_request_info(c);
    const std::string uri = ri->local_uri ? ri->local_uri : "";
    const std::string method = ri->request_method ? ri->request_method : "";
    if (uri.rfind("/control/", 0) == 0) return Control(c, ri, uri.substr(9), method);
    if (method != "GET" && method != "HEAD") {
      Reply(c, 405, "text/plain", "GET only here\n");
      return 405;
    }
    if (uri == "/" || uri == "/index.html") {
      Reply(c, 200, "text/html; charset=utf-8", LivePage());
    } else if (uri == "/stats.json") {
      Reply(c, 200, "application/json", Stats(ri), "Access-Control-Allow-Origin: *\r\n");
    } else if (uri == "/metrics") {
      Reply(c, 200, "text/plain; version=0.0.4; charset=utf-8", metrics_->Text());
    } else {
      Reply(c, 404, "text/plain", "not here: /, /stats.json, /metrics\n");
      return 404;
    }
    return 200;
  }

  std::string Stats(const mg_request_info* ri) const {
    uint64_t after = 0;
    char v[32];
    if (ri->query_string && mg_get_var(ri->query_string, std::strlen(ri->query_string), "after", v, sizeof v) > 0)
      after = std::strtoull(v, nullptr, 10);
    uint64_t last = 0;
    const std::vector<std::string> records = records_.After(after, &last);
    std::string out = "{\"next\":" + std::to_string(last) + ",\"control\":" + (opt_.control ? "true" : "false") +
                      ",\"token\":" + (opt_.token.empty() ? "false" : "true") + ",\"records\":[";
    for (size_t i = 0; i < records.size(); ++i) out += (i ? ",\n" : "\n") + records[i];
    return out + "]}\n";
  }

  int Control(mg_connection* c, const mg_request_info* ri, const std::string& what, const std::string& method) {
    const SolverAction action = what == "stop" ? SolverAction::STOP : what == "snapshot" ? SolverAction::SNAPSHOT
                                                                                          : SolverAction::NONE;
    if (action == SolverAction::NONE) {
      Reply(c, 404, "text/plain", "not here: /control/stop, /control/snapshot\n");
      return 404;
    }
    if (method != "POST") {
      Reply(c, 405, "text/plain", "POST only here\n");
      return 405;
    }
    const std::string from = ri->remote_addr;
    std::string why;
    if (!opt_.control) {
      why = "this machine takes no requests from the page (start it with --ui_control)";
    } else if (!opt_.token.empty()) {
      const char* got = mg_get_header(c, "X-Hogstream-Token");
      if (!got || !*got) why = "it carries no control token (the job has a --job-key: hogstream ui-token --job-key=FILE)";
      else if (!SameToken(got, opt_.token)) why = "its control token is not this job's";
    } else if (!Loopback(from.c_str())) {
      why = "a job without a --job-key takes requests from this host only";
    }
    if (!why.empty()) {
      LOG(WARNING) << "The page: a " << what << " request from " << from << " refused: " << why;
      Reply(c, 403, "text/plain", "refused: " + why + "\n");
      return 403;
    }
    opt_.request(action, "the page (from " + from + ")");
    Reply(c, 200, "text/plain", what == "stop" ? "stopping: a snapshot, then the end\n" : "a snapshot is coming\n");
    return 200;
  }

  WebOptions opt_;
  std::unique_ptr<MetricsText> metrics_;
  RecentRecords records_;
  mg_context* ctx_ = nullptr;
};

}  // namespace

std::shared_ptr<FiguresSink> StartWeb(const WebOptions& options) {
  HS_CHECK(!options.control || options.request) << "StartWeb: control without a request function";
  return std::make_shared<WebSink>(options);
}
#else
std::shared_ptr<FiguresSink> StartWeb(const WebOptions& options) {
  (void)options;
  MakeMetricsText();  // says what is missing
  return nullptr;
}
#endif

}  // namespace hogstream
