// Serve(): the HTTP/1.1 front of frenzyd, event-driven on Boost.Beast/Asio.
//
// Why not a thread per connection (what cpp-httplib does): a client that holds a connection
// open without finishing a request held a worker for good, so 65 slow clients froze the daemon.
// Here a connection costs a socket and a buffer, never a thread, until its request is complete:
//   - the request line and headers must arrive within `header_timeout_s` of the connection
//     becoming idle (accepted, or its previous answer written): a total, not a per-read timer,
//     so dripping one byte a second does not extend it; the same timer closes idle keep-alive
//     connections;
//   - the body must arrive within `body_timeout_s` of the headers;
//   - connections beyond `max_connections`, or beyond `max_connections_per_client` from one
//     address, are closed as soon as they are accepted;
//   - a complete request is handed to a small pool that runs Handle() (plans to one of their
//     own); the network threads never wait on the daemon.
// Oversized targets (414), headers (431) and bodies (413) are answered in the API's error format
// without reading further.
// clang-format off
#include <utility>  // first: Boost 1.74's asio/awaitable.hpp uses std::exchange unincluded
// clang-format on
#include <fmt/core.h>
#include <sys/resource.h>

#include <array>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "server/api.h"

namespace frenzy::server {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

// Threads that run Handle(): enough that a few slow calls do not hold quick ones up; the daemon
// serialises on its own lock anyway.
constexpr int kHandlerThreads = 16;
// POST /v1/plan runs on a pool of its own: planning a large model that fits nowhere can take
// seconds, and a client sending many must not take every handler from the rest.
constexpr int kPlannerThreads = 4;
// Threads that move bytes. Two are plenty for thousands of requests a second on loopback.
constexpr int kNetworkThreads = 2;
constexpr size_t kMaxTargetBytes = 8 << 10;
constexpr size_t kMaxHeaderBytes = 16 << 10;  // request line and header fields
// What Beast may read before it gives up on a header: past kMaxHeaderBytes so that a large
// header still gets its 431 (or a long target its 414) rather than a bare close.
constexpr size_t kHeaderReadLimit = 64 << 10;
// After an answer that left the request unread: how long and how much to drain before closing.
constexpr int kLingerSeconds = 5;
constexpr size_t kMaxLingerBytes = 64u << 20;

int FromHex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string PercentDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && FromHex(s[i + 1]) >= 0 &&
               FromHex(s[i + 2]) >= 0) {
      out += static_cast<char>(FromHex(s[i + 1]) * 16 + FromHex(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// "/v1/jobs?state=queued&limit=5" -> path and decoded query (the last value of a repeated key).
void SplitTarget(std::string_view target, HttpRequest& req) {
  size_t q = target.find('?');
  req.path = PercentDecode(target.substr(0, q));
  if (q == std::string_view::npos) return;
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    size_t amp = rest.find('&');
    std::string_view pair = rest.substr(0, amp);
    size_t eq = pair.find('=');
    if (!pair.empty()) {
      req.query[PercentDecode(pair.substr(0, eq))] =
          eq == std::string_view::npos ? std::string() : PercentDecode(pair.substr(eq + 1));
    }
    if (amp == std::string_view::npos) break;
    rest = rest.substr(amp + 1);
  }
}

// Counts open connections, overall and per client address. Thread-safe.
class ConnectionLimiter {
 public:
  ConnectionLimiter(size_t total, size_t per_client) : total_max_(total), per_max_(per_client) {}
  bool Admit(const std::string& addr) {
    std::lock_guard<std::mutex> lock(mu_);
    size_t& n = per_[addr];
    if (total_ >= total_max_ || n >= per_max_) {
      if (n == 0) per_.erase(addr);
      return false;
    }
    ++n;
    ++total_;
    return true;
  }
  void Release(const std::string& addr) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = per_.find(addr);
    if (it != per_.end() && --it->second == 0) per_.erase(it);
    --total_;
  }

 private:
  std::mutex mu_;
  size_t total_max_, per_max_, total_ = 0;
  std::unordered_map<std::string, size_t> per_;
};

struct Front {
  Daemon& daemon;
  const ApiOptions& options;
  ConnectionLimiter limiter;  // before ioc: sessions destroyed with ioc release into it
  asio::io_context ioc{kNetworkThreads};
  asio::thread_pool handlers{kHandlerThreads};
  asio::thread_pool planners{kPlannerThreads};
  Front(Daemon& d, const ApiOptions& o)
      : daemon(d), options(o), limiter(o.max_connections, o.max_connections_per_client) {}
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(Front& front, tcp::socket socket, std::string peer)
      : front_(front), stream_(std::move(socket)), peer_(std::move(peer)) {}
  ~Session() { front_.limiter.Release(peer_); }

  void Start() { ReadHeader(); }

 private:
  std::chrono::seconds Seconds(double s) {
    return std::chrono::seconds(static_cast<int64_t>(std::max(1.0, s)));
  }

  void ReadHeader() {
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(kHeaderReadLimit));
    parser_->body_limit(front_.options.max_body_bytes);
    stream_.expires_after(Seconds(front_.options.header_timeout_s));
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  void OnHeader(beast::error_code ec) {
    if (ec == http::error::header_limit) {
      return Fail(431, "header_too_large",
                  fmt::format("request line and headers over {} bytes", kMaxHeaderBytes));
    }
    if (ec == http::error::body_limit) return TooLarge();
    if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
        ec == asio::error::connection_reset || ec == asio::error::eof ||
        ec == asio::error::operation_aborted) {
      return Close();
    }
    if (ec) return Fail(400, "bad_request", "not an HTTP/1.1 request: " + ec.message());
    const auto& h = parser_->get();
    if (h.target().size() > kMaxTargetBytes) {
      return Fail(414, "uri_too_long",
                  fmt::format("request target of {} bytes; at most {}", h.target().size(),
                              kMaxTargetBytes));
    }
    size_t header_bytes = h.target().size() + h.method_string().size();
    for (const auto& f : h) header_bytes += f.name_string().size() + f.value().size() + 4;
    if (header_bytes > kMaxHeaderBytes) {
      return Fail(431, "header_too_large",
                  fmt::format("request line and headers of {} bytes; at most {}", header_bytes,
                              kMaxHeaderBytes));
    }
    stream_.expires_after(Seconds(front_.options.body_timeout_s));
    auto expect = h[http::field::expect];
    if (!parser_->is_done() && beast::iequals(expect, "100-continue")) {
      // curl and others wait a second for this before they send a body.
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      asio::async_write(stream_, asio::buffer(kContinue),
                        [self = shared_from_this()](beast::error_code e, size_t) {
                          if (e) return self->Close();
                          self->ReadBody();
                        });
      return;
    }
    ReadBody();
  }

  void ReadBody() {
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       if (ec == http::error::body_limit) return self->TooLarge();
                       if (ec) return self->Close();
                       self->Dispatch();
                     });
  }

  void Dispatch() {
    http::request<http::string_body> in = parser_->release();
    keep_alive_ = in.keep_alive();
    HttpRequest req;
    req.method = std::string(in.method_string());
    SplitTarget(std::string_view(in.target().data(), in.target().size()), req);
    req.authorization = std::string(in[http::field::authorization]);
    req.content_type = std::string(in[http::field::content_type]);
    req.host = std::string(in[http::field::host]);
    req.origin = std::string(in[http::field::origin]);
    req.peer = peer_;
    req.body = std::move(in.body());
    auto run = [self = shared_from_this(), req = std::move(req)]() mutable {
      HttpResponse r;
      try {
        r = Handle(self->front_.daemon, req, self->front_.options);
      } catch (const std::exception& e) {
        r.status = 500;
        r.body = ErrorJson("internal", e.what());
      }
      asio::post(self->stream_.get_executor(),
                 [self, r = std::move(r)]() mutable { self->Write(std::move(r)); });
    };
    // A health check is cheap and must answer even while every handler is busy planning.
    if (in.method() == http::verb::get && req.path == "/healthz") {
      run();
    } else if (req.path == "/v1/plan") {
      asio::post(front_.planners, std::move(run));
    } else {
      asio::post(front_.handlers, std::move(run));
    }
  }

  void Write(HttpResponse r) {
    res_.emplace();
    res_->version(11);
    res_->result(static_cast<unsigned>(r.status));
    res_->set(http::field::server, "frenzyd");
    res_->set(http::field::content_type, r.content_type);
    for (const auto& [name, value] : r.headers) res_->set(name, value);
    res_->keep_alive(keep_alive_);
    res_->body() = std::move(r.body);
    res_->prepare_payload();
    stream_.expires_after(Seconds(front_.options.body_timeout_s));
    http::async_write(stream_, *res_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (!ec && self->linger_) return self->LingerAndClose();
      if (ec || !self->keep_alive_) return self->Close();
      self->res_.reset();
      self->ReadHeader();
    });
  }

  void TooLarge() {
    Fail(413, "too_large",
         fmt::format("request body over {} bytes", front_.options.max_body_bytes));
  }

  // Answers and closes: the rest of the request is not parsed.
  void Fail(int status, const std::string& code, const std::string& message) {
    keep_alive_ = false;
    linger_ = true;
    HttpResponse r;
    r.status = status;
    r.body = ErrorJson(code, message);
    Write(std::move(r));
  }

  // Closing a socket with unread bytes sends a reset, and a client still sending its body (a
  // 2 MiB POST answered 413 after its headers) then loses the answer to EPIPE. So stop sending,
  // and read and drop what still comes, for a bounded time and amount, before closing.
  void LingerAndClose() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.expires_after(std::chrono::seconds(kLingerSeconds));
    Drain();
  }
  void Drain() {
    if (!drain_) drain_ = std::make_unique<std::array<char, 16384>>();
    stream_.async_read_some(asio::buffer(*drain_),
                            [self = shared_from_this()](beast::error_code ec, size_t n) {
                              self->drained_ += n;
                              if (ec || self->drained_ > kMaxLingerBytes) return self->Close();
                              self->Drain();
                            });
  }

  void Close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
  }

  Front& front_;
  beast::tcp_stream stream_;
  std::string peer_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<http::response<http::string_body>> res_;
  bool keep_alive_ = true;
  bool linger_ = false;  // the request was not read to its end: drain before closing
  std::unique_ptr<std::array<char, 16384>> drain_;
  size_t drained_ = 0;
};

class Listener : public std::enable_shared_from_this<Listener> {
 public:
  Listener(Front& front, tcp::acceptor acceptor)
      : front_(front), acceptor_(std::move(acceptor)), retry_(front.ioc) {}
  void Accept() {
    acceptor_.async_accept(asio::make_strand(front_.ioc),
                           [self = shared_from_this()](beast::error_code ec, tcp::socket s) {
                             self->OnAccept(ec, std::move(s));
                           });
  }

 private:
  void OnAccept(beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;
    if (ec) {
      // Out of file descriptors or the like: back off instead of spinning on accept.
      retry_.expires_after(std::chrono::milliseconds(50));
      retry_.async_wait([self = shared_from_this()](beast::error_code) { self->Accept(); });
      return;
    }
    beast::error_code ignored;
    auto remote = socket.remote_endpoint(ignored);
    std::string peer = ignored ? std::string("?") : remote.address().to_string();
    if (front_.limiter.Admit(peer)) {
      socket.set_option(tcp::no_delay(true), ignored);
      std::make_shared<Session>(front_, std::move(socket), peer)->Start();
    } else {
      socket.close(ignored);
    }
    Accept();
  }

  Front& front_;
  tcp::acceptor acceptor_;
  asio::steady_timer retry_;
};

// Connections cost a descriptor each: take what the hard limit allows.
void RaiseDescriptorLimit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
}

}  // namespace

Status Serve(Daemon& d, const std::string& host, int port, const ApiOptions& o,
             const std::atomic<bool>& stop, const std::function<void(int)>& on_listening) {
  RaiseDescriptorLimit();
  Front front(d, o);
  beast::error_code ec;
  auto address = asio::ip::make_address(host == "localhost" ? "127.0.0.1" : host, ec);
  if (ec) {
    return InvalidArgument(fmt::format("'{}' is not an IP address", host), {}, "listen");
  }
  tcp::endpoint endpoint(address, static_cast<unsigned short>(port));
  tcp::acceptor acceptor(front.ioc);
  auto fail = [&](const char* what) {
    return InvalidArgument(
        fmt::format("cannot listen on {}:{}: {}: {}", host, port, what, ec.message()), {},
        "listen");
  };
  if (acceptor.open(endpoint.protocol(), ec)) return fail("socket");
  // SO_REUSEADDR only (rebinding past TIME_WAIT after a restart). Never SO_REUSEPORT: with it a
  // second daemon binds the same port silently and takes half the requests.
  if (acceptor.set_option(asio::socket_base::reuse_address(true), ec)) return fail("option");
  if (acceptor.bind(endpoint, ec)) return fail("bind");
  if (acceptor.listen(asio::socket_base::max_listen_connections, ec)) return fail("listen");
  const int bound = acceptor.local_endpoint(ec).port();
  std::make_shared<Listener>(front, std::move(acceptor))->Accept();
  if (on_listening) on_listening(bound);
  std::vector<std::thread> threads;
  for (int i = 0; i < kNetworkThreads; ++i) threads.emplace_back([&] { front.ioc.run(); });
  while (!stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  front.ioc.stop();
  for (auto& t : threads) t.join();
  front.handlers.join();
  front.planners.join();
  return Status::Ok();
}

}  // namespace frenzy::server
