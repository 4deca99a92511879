#include "server/http/http_server.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/core/detect_ssl.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "server/http/http_status.h"

namespace hpo::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

std::string UrlDecode(const std::string& s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else if (plus_is_space && s[i] == '+') {
      out += ' ';
    } else {
      out += s[i];
    }
  }
  return out;
}

void ParseRequestTarget(const std::string& target, HttpRequest& req) {
  const auto q = target.find('?');
  req.path = UrlDecode(target.substr(0, q), false);
  if (q == std::string::npos) return;
  const std::string query = target.substr(q + 1);
  size_t start = 0;
  while (start <= query.size()) {
    size_t end = query.find('&', start);
    if (end == std::string::npos) end = query.size();
    const std::string pair = query.substr(start, end - start);
    if (!pair.empty()) {
      const auto eq = pair.find('=');
      req.query[UrlDecode(pair.substr(0, eq), true)] =
          eq == std::string::npos ? "" : UrlDecode(pair.substr(eq + 1), true);
    }
    start = end + 1;
  }
}

namespace {

const char* Reason(int status) {
  return http::obsolete_reason(static_cast<http::status>(status)).data();
}

// Raises the calling thread's nice value by `increment`, once per thread (a
// pool's threads call it before each task). On Linux the nice value is per
// thread, and raising it needs no privilege; a failure leaves the thread at
// its priority, which only costs the writes some CPU under load.
void LowerThisThreadsPriority(int increment) {
  thread_local bool lowered = false;
  if (lowered || increment <= 0) return;
  lowered = true;
  const auto tid = static_cast<id_t>(gettid());
  errno = 0;
  const int now = getpriority(PRIO_PROCESS, tid);
  if (errno == 0) setpriority(PRIO_PROCESS, tid, std::min(19, now + increment));
}

constexpr const char* kTls12Ciphers =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-RSA-AES256-GCM-SHA384";

// The server's TLS context from PEM files; errors name the file and say
// what is wrong with it.
Result<std::unique_ptr<ssl::context>> ServerTlsContext(const std::string& cert_file,
                                                       const std::string& key_file) {
  for (const auto* file : {&cert_file, &key_file}) {
    std::ifstream in(*file);
    if (!in) {
      return Status::InvalidArgument(std::string("cannot read TLS ") +
                                     (file == &cert_file ? "certificate" : "key") + " file '" +
                                     *file + "': " + std::strerror(errno));
    }
  }
  auto ctx = std::make_unique<ssl::context>(ssl::context::tls_server);
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                   ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                   ssl::context::single_dh_use);
  // TLS 1.2 offers what gRPC's TLS offers: forward secrecy (ECDHE) with
  // AEAD ciphers (AES-GCM) only; no RSA key exchange, no CBC, no SHA-1
  // MACs. TLS 1.3's suites are all AEAD with forward secrecy already.
  if (SSL_CTX_set_cipher_list(ctx->native_handle(), kTls12Ciphers) != 1) {
    return Status::Internal("this OpenSSL offers none of the TLS 1.2 ciphers " +
                            std::string(kTls12Ciphers));
  }
  SSL_CTX_set_options(ctx->native_handle(), SSL_OP_CIPHER_SERVER_PREFERENCE);
  beast::error_code ec;
  ctx->use_certificate_chain_file(cert_file, ec);
  if (ec) {
    return Status::InvalidArgument("TLS certificate file '" + cert_file +
                                   "' holds no usable PEM certificate: " + ec.message());
  }
  ctx->use_private_key_file(key_file, ssl::context::pem, ec);
  if (ec) {
    return Status::InvalidArgument("TLS key file '" + key_file +
                                   "' holds no usable PEM private key: " + ec.message());
  }
  if (SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
    return Status::InvalidArgument("TLS key file '" + key_file +
                                   "' does not match the certificate in '" + cert_file + "'");
  }
  return ctx;
}

// A parse error of the request itself (as opposed to the connection
// ending): the client gets 400 with what was wrong.
// The most a connection's read buffer holds: headers (8 KiB at most), a
// chunk-size line, and what one read brings of a body on its way into the
// request (Beast reads up to 64 KiB at a time).
constexpr size_t kReadBufferBytes = size_t{128} * 1024;

bool IsMalformedRequest(const beast::error_code& ec) {
  static const auto& http_category = http::make_error_code(http::error::bad_version).category();
  return ec.category() == http_category && ec != http::error::end_of_stream &&
         ec != http::error::partial_message;
}

}  // namespace

// One open connection, as the server's bookkeeping sees it.
class HttpConnection {
 public:
  virtual ~HttpConnection() = default;
  virtual void Start() = 0;
  // Closes the connection on its own strand; with only_if_idle, only when
  // it is (still) waiting for the first byte of a request.
  virtual void PostClose(bool only_if_idle) = 0;

  // Waiting for a request to begin: what may be closed to admit a new
  // connection at the cap, or at once on Shutdown.
  std::atomic<bool> idle{false};
  std::atomic<Clock::rep> idle_since{0};
  std::list<std::weak_ptr<HttpConnection>>::iterator self;  // in Impl::connections
};

struct HttpServer::Impl {
  HttpServerOptions options;
  Handler handler;
  std::unique_ptr<ssl::context> tls;  // null: plain HTTP
  std::atomic<bool> stopping{false};
  // Request bodies admitted and not yet handled (see ReserveBody).
  std::atomic<size_t> buffered_request_bytes{0};

  // Response bytes produced and not yet sent, in all and per peer address.
  Mutex budget_mu;
  size_t pending_response_bytes HPO_GUARDED_BY(budget_mu) = 0;
  std::map<std::string, size_t> pending_by_peer HPO_GUARDED_BY(budget_mu);

  // Declared before io: pending handlers that io's destructor drops may
  // hold the last reference to a connection, whose destructor locks mu.
  Mutex mu;
  CondVar cv;
  std::list<std::weak_ptr<HttpConnection>> connections HPO_GUARDED_BY(mu);
  int active HPO_GUARDED_BY(mu) = 0;   // open connections
  int streams HPO_GUARDED_BY(mu) = 0;  // streaming responses running

  net::io_context io;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  tcp::acceptor acceptor{net::make_strand(io)};
  net::steady_timer accept_retry{acceptor.get_executor()};
  uint16_t port = 0;
  std::vector<std::thread> io_threads;
  std::unique_ptr<net::thread_pool> handlers;       // writes
  std::unique_ptr<net::thread_pool> read_handlers;  // GET and HEAD, at options.read_nice
  std::once_flag shutdown_once;

  void Register(const std::shared_ptr<HttpConnection>& c) {
    MutexLock lock(mu);
    c->self = connections.insert(connections.end(), c);
    ++active;
  }
  void Unregister(HttpConnection& c) {
    MutexLock lock(mu);
    connections.erase(c.self);
    --active;
    cv.NotifyAll();
  }
  bool BeginStream() {
    MutexLock lock(mu);
    if (streams >= options.max_streams) return false;
    ++streams;
    return true;
  }
  void EndStream() {
    MutexLock lock(mu);
    --streams;
    cv.NotifyAll();
  }
  // The live connections, taken under the lock and used after it: dropping
  // the last reference to one locks mu again.
  std::vector<std::shared_ptr<HttpConnection>> Snapshot() {
    std::vector<std::shared_ptr<HttpConnection>> out;
    MutexLock lock(mu);
    for (auto& w : connections) {
      if (auto c = w.lock()) out.push_back(std::move(c));
    }
    return out;
  }

  // Whether `peer` may not have another response queued: the server's
  // budget, or the peer's share of it, is spent.
  bool SendBudgetSpent(const std::string& peer) {
    MutexLock lock(budget_mu);
    if (pending_response_bytes >= options.max_pending_response_bytes) return true;
    const auto it = pending_by_peer.find(peer);
    return it != pending_by_peer.end() && it->second >= options.max_pending_response_bytes_per_peer;
  }
  void AddPending(const std::string& peer, size_t n) {
    if (n == 0) return;
    MutexLock lock(budget_mu);
    pending_response_bytes += n;
    pending_by_peer[peer] += n;
  }
  void SubtractPending(const std::string& peer, size_t n) {
    if (n == 0) return;
    MutexLock lock(budget_mu);
    pending_response_bytes -= n;
    const auto it = pending_by_peer.find(peer);
    if (it != pending_by_peer.end() && (it->second -= n) == 0) pending_by_peer.erase(it);
  }
  // Room for a body of n bytes among those being received and handled.
  bool ReserveBody(size_t n) {
    size_t now = buffered_request_bytes.load();
    do {
      if (now + n > options.max_buffered_request_bytes) return false;
    } while (!buffered_request_bytes.compare_exchange_weak(now, now + n));
    return true;
  }

  HttpResponse Call(const HttpRequest& req) {
    try {
      return handler(req);
    } catch (const std::exception&) {
      // A handler that throws is a bug: 500, through the one conversion.
      return ErrorResponse(Status::Internal("unexpected error"));
    }
  }

  void DoAccept();
  void OnAccept(const beast::error_code& ec, tcp::socket socket);
  void RefuseBusy(tcp::socket socket);
  void ShutdownNow();
};

namespace {

template <typename Stream>
class Session final : public HttpConnection, public std::enable_shared_from_this<Session<Stream>> {
  static constexpr bool kTls = std::is_same_v<Stream, beast::ssl_stream<beast::tcp_stream>>;

 public:
  Session(HttpServer::Impl& impl, tcp::socket socket, std::string remote)
      : impl_(impl), stream_(MakeStream(impl, std::move(socket))), remote_(std::move(remote)) {}
  ~Session() override {
    ReleaseBody();
    impl_.Unregister(*this);
  }

  void Start() override {
    // Everything up to the end of the first request's headers (TLS
    // detection and handshake included) shares one deadline.
    Lowest().expires_after(impl_.options.header_timeout);
    if constexpr (kTls) {
      beast::async_detect_ssl(
          Lowest(), buffer_, [self = Self()](beast::error_code ec, bool is_tls) {
            if (ec) return self->Close();
            if (!is_tls) return self->RefusePlainHttp();
            self->stream_.async_handshake(ssl::stream_base::server, self->buffer_.data(),
                                          [self](beast::error_code handshake_ec, size_t used) {
                                            if (handshake_ec) return self->Close();
                                            self->buffer_.consume(used);
                                            self->WaitForRequest(true);
                                          });
          });
    } else {
      WaitForRequest(true);
    }
  }

  void PostClose(bool only_if_idle) override {
    net::post(stream_.get_executor(), [self = Self(), only_if_idle] {
      if (!only_if_idle || self->idle) self->Close();
    });
  }

 private:
  class Writer final : public StreamWriter {
   public:
    explicit Writer(std::shared_ptr<Session> session) : session_(std::move(session)) {}
    bool Write(const std::string& data) override {
      if (stopping()) return false;
      auto done = std::make_shared<std::promise<bool>>();
      auto chunk = std::make_shared<std::string>(data);
      net::post(session_->stream_.get_executor(), [s = session_, done, chunk] {
        if (s->closed_) return done->set_value(false);
        s->Lowest().expires_after(s->impl_.options.write_timeout);
        net::async_write(s->stream_, net::buffer(*chunk),
                         [s, done, chunk](beast::error_code ec, size_t) {
                           if (ec) {
                             s->Close();
                           } else {
                             s->Lowest().expires_never();  // the stream may be quiet for a while
                           }
                           done->set_value(!ec);
                         });
      });
      return done->get_future().get();
    }
    bool stopping() const override { return session_->impl_.stopping; }

   private:
    std::shared_ptr<Session> session_;
  };

  static Stream MakeStream(HttpServer::Impl& impl, tcp::socket socket) {
    if constexpr (kTls) {
      return Stream(std::move(socket), *impl.tls);
    } else {
      return Stream(std::move(socket));
    }
  }
  std::shared_ptr<Session> Self() { return this->shared_from_this(); }
  beast::tcp_stream& Lowest() { return beast::get_lowest_layer(stream_); }

  // Waits for the first byte of the next request: under the connection's
  // first deadline for the first request, under idle_timeout for a later
  // one, whose header_timeout then starts with that byte.
  void WaitForRequest(bool first) {
    if (impl_.stopping && !first) return Close();
    if (buffer_.size() > 0) {  // pipelined, or read with the TLS detection
      if (!first) Lowest().expires_after(impl_.options.header_timeout);
      return ReadHeader();
    }
    if (!first) Lowest().expires_after(impl_.options.idle_timeout);
    idle_since = Clock::now().time_since_epoch().count();
    idle = true;
    stream_.async_read_some(buffer_.prepare(4096),
                            [self = Self(), first](beast::error_code ec, size_t n) {
                              self->idle = false;
                              if (ec) return self->Close();
                              self->buffer_.commit(n);
                              if (!first)
                                self->Lowest().expires_after(self->impl_.options.header_timeout);
                              self->ReadHeader();
                            });
  }

  void ReadHeader() {
    parser_.emplace();
    parser_->body_limit(impl_.options.max_body_bytes);
    http::async_read_header(
        stream_, buffer_, *parser_, [self = Self()](beast::error_code ec, size_t) {
          if (ec) return self->OnReadError(ec);
          self->TakeHeaders();
          if (self->parser_->is_done()) return self->Dispatch();
          if (auto refused = self->Admit()) return self->Respond(std::move(*refused), false);
          const auto& msg = self->parser_->get();
          if (beast::iequals(msg[http::field::expect], "100-continue")) {
            static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
            self->Lowest().expires_after(self->impl_.options.write_timeout);
            return net::async_write(self->stream_, net::buffer(kContinue),
                                    [self](beast::error_code write_ec, size_t) {
                                      if (write_ec) return self->Close();
                                      self->ReadBody();
                                    });
          }
          self->ReadBody();
        });
  }

  void ReadBody() {
    Lowest().expires_after(impl_.options.body_timeout);
    http::async_read(stream_, buffer_, *parser_, [self = Self()](beast::error_code ec, size_t) {
      if (ec) return self->OnReadError(ec);
      self->Dispatch();
    });
  }

  void OnReadError(const beast::error_code& ec) {
    head_ = false;
    if (ec == http::error::body_limit) {
      return Respond(ErrorResponse(Status::ResourceExhausted(
                                       "request body is larger than " +
                                       std::to_string(impl_.options.max_body_bytes) + " bytes"),
                                   HttpCause::kBodyTooLarge),
                     false);
    }
    if (ec == http::error::header_limit) {
      return Respond(
          ErrorResponse(Status::ResourceExhausted("request headers are larger than 8192 bytes"),
                        HttpCause::kHeadersTooLarge),
          false);
    }
    if (ec == http::error::buffer_overflow) {
      return Respond(ErrorResponse(Status::InvalidArgument(
                         "malformed HTTP request: a chunk-size line or trailer longer than " +
                         std::to_string(kReadBufferBytes) + " bytes")),
                     false);
    }
    if (IsMalformedRequest(ec)) {
      return Respond(
          ErrorResponse(Status::InvalidArgument("malformed HTTP request: " + ec.message())), false);
    }
    Close();  // the client went away or took too long
  }

  // The request as far as its headers go, into req_.
  void TakeHeaders() {
    const auto& msg = parser_->get();
    req_ = HttpRequest{};
    req_.method = std::string(msg.method_string());
    ParseRequestTarget(std::string(msg.target()), req_);
    for (const auto& field : msg) {
      std::string name(field.name_string());
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      req_.headers[name] = std::string(field.value());
    }
    req_.remote = remote_;
    req_.tls = kTls;
    head_ = false;
  }

  // Before any byte of a body is read: the caller's admit, then room for
  // the body among those the server holds. A response refuses the request.
  std::optional<HttpResponse> Admit() {
    if (impl_.options.admit) {
      if (auto refused = impl_.options.admit(req_)) return refused;
    }
    // Beast has refused a Content-Length over max_body_bytes already (413);
    // a chunked body may grow to it.
    const auto length = parser_->content_length();
    const size_t need = length ? static_cast<size_t>(*length) : impl_.options.max_body_bytes;
    if (!impl_.ReserveBody(need)) {
      return ErrorResponse(
          Status::Unavailable("the server is busy receiving other requests; retry later"));
    }
    reserved_body_ = need;
    return std::nullopt;
  }
  void ReleaseBody() {
    impl_.buffered_request_bytes -= reserved_body_;
    reserved_body_ = 0;
  }

  void Dispatch() {
    http::request<http::string_body> msg = parser_->release();
    parser_.reset();
    HttpRequest req = std::move(req_);
    req.body = std::move(msg.body());
    keep_alive_ = msg.keep_alive();
    head_ = msg.method() == http::verb::head;
    const bool probe = impl_.options.is_probe && impl_.options.is_probe(req);
    if (!probe && impl_.SendBudgetSpent(remote_)) {
      return Respond(ErrorResponse(Status::Unavailable(
                         "the server is busy sending other responses; retry later")),
                     false);
    }
    const bool read =
        impl_.options.is_read ? impl_.options.is_read(req) : req.method == "GET" || head_;
    net::post(
        read ? *impl_.read_handlers : *impl_.handlers, [self = Self(), req = std::move(req), read] {
          if (read) LowerThisThreadsPriority(self->impl_.options.read_nice);
          HttpResponse res = self->impl_.Call(req);
          net::post(self->stream_.get_executor(),
                    [self, res = std::move(res)]() mutable { self->OnResponse(std::move(res)); });
        });
  }

  void OnResponse(HttpResponse res) {
    ReleaseBody();        // the handler has returned, and its request with it
    if (closed_) return;  // closed by Shutdown while the handler ran
    if (res.stream && !head_) return StartStream(std::move(res));
    Respond(std::move(res), keep_alive_ && !impl_.stopping);
  }

  template <typename Body>
  static void SetHead(http::response<Body>& m, const HttpResponse& r, bool keep_alive) {
    m.set(http::field::server, "hpo-server");
    m.set(http::field::content_type, r.content_type);
    for (const auto& [k, v] : r.headers) m.set(k, v);
    m.keep_alive(keep_alive);
  }

  void Respond(HttpResponse r, bool keep_alive) {
    if (!r.file.empty() && r.body.empty() && !head_) return SendFile(std::move(r), keep_alive);
    res_.emplace(static_cast<http::status>(r.status), 11);
    SetHead(*res_, r, keep_alive);
    if (head_) {
      // What the GET would send, but not the bytes.
      std::error_code size_ec;
      const auto size =
          r.file.empty() ? r.body.size() : std::filesystem::file_size(r.file, size_ec);
      res_->content_length(size_ec ? 0 : size);
    } else {
      res_->body() = std::move(r.body);
      res_->prepare_payload();
    }
    response_bytes_ = res_->body().size();
    impl_.AddPending(remote_, response_bytes_);
    Lowest().expires_after(impl_.options.write_timeout);
    http::async_write(stream_, *res_, [self = Self(), keep_alive](beast::error_code ec, size_t) {
      self->impl_.SubtractPending(self->remote_, self->response_bytes_);
      self->response_bytes_ = 0;
      self->res_.reset();
      self->AfterResponse(ec, keep_alive);
    });
  }

  // A file body, read from disk a few KiB at a time as the socket takes it:
  // it holds no memory against the send budget, however slowly it is read.
  void SendFile(HttpResponse r, bool keep_alive) {
    http::file_body::value_type file;
    beast::error_code ec;
    file.open(r.file.c_str(), beast::file_mode::scan, ec);
    if (ec) return Respond(ErrorResponse(Status::NotFound("no such file")), keep_alive);
    file_res_.emplace(static_cast<http::status>(r.status), 11);
    SetHead(*file_res_, r, keep_alive);
    file_res_->body() = std::move(file);
    file_res_->prepare_payload();
    Lowest().expires_after(impl_.options.write_timeout);
    http::async_write(stream_, *file_res_,
                      [self = Self(), keep_alive](beast::error_code write_ec, size_t) {
                        self->file_res_.reset();
                        self->AfterResponse(write_ec, keep_alive);
                      });
  }

  void AfterResponse(const beast::error_code& ec, bool keep_alive) {
    if (ec) return Close();
    if (!keep_alive) return CloseGracefully();
    WaitForRequest(false);
  }

  void StartStream(HttpResponse r) {
    if (!impl_.BeginStream()) {
      return Respond(ErrorResponse(Status::Unavailable("too many open event streams; retry later")),
                     false);
    }
    std::string head = "HTTP/1.1 " + std::to_string(r.status) + " " + Reason(r.status) +
                       "\r\nServer: hpo-server\r\nContent-Type: " + r.content_type +
                       "\r\nCache-Control: no-cache\r\nConnection: close\r\n";
    for (const auto& [k, v] : r.headers) head.append(k).append(": ").append(v).append("\r\n");
    head += "\r\n";
    auto text = std::make_shared<std::string>(std::move(head));
    Lowest().expires_after(impl_.options.write_timeout);
    net::async_write(
        stream_, net::buffer(*text),
        [self = Self(), text, stream = std::move(r.stream)](beast::error_code ec, size_t) {
          if (ec) {
            self->Close();
            self->impl_.EndStream();
            return;
          }
          self->Lowest().expires_never();
          // The stream blocks between events: a thread of its own.
          std::thread([self, stream]() mutable {
            HttpServer::Impl& impl = self->impl_;
            {
              Writer writer(self);
              stream(writer);
            }
            net::post(self->stream_.get_executor(), [self] { self->Close(); });
            self.reset();
            impl.EndStream();
          }).detach();
        });
  }

  // After an answer that ends the connection: stop sending, and read what
  // the client still sends (up to 64 MiB, for up to 2 s) so that closing
  // with unread data does not reset the connection before the client has
  // read an early answer such as 413.
  void CloseGracefully() {
    if constexpr (!kTls) {
      beast::error_code ignored;
      Lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
    }
    Lowest().expires_after(std::chrono::seconds(2));
    Drain();
  }
  void Drain() {
    if (drained_ >= (size_t{64} << 20)) return Close();
    drain_buffer_.resize(64 << 10);
    stream_.async_read_some(net::buffer(drain_buffer_),
                            [self = Self()](beast::error_code ec, size_t n) {
                              self->drained_ += n;
                              if (ec) return self->Close();
                              self->Drain();
                            });
  }

  // A plain HTTP request to an HTTPS server: a plain answer.
  void RefusePlainHttp() {
    auto res = std::make_shared<http::response<http::string_body>>(http::status::bad_request, 11);
    res->set(http::field::content_type, "text/plain");
    res->body() = "this server speaks HTTPS only: use https://\n";
    res->keep_alive(false);
    res->prepare_payload();
    Lowest().expires_after(impl_.options.write_timeout);
    http::async_write(Lowest(), *res, [self = Self(), res](beast::error_code ec, size_t) {
      if (ec) return self->Close();
      beast::error_code ignored;
      self->Lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
      self->Lowest().expires_after(std::chrono::seconds(2));
      self->DrainPlain();
    });
  }
  void DrainPlain() {
    drain_buffer_.resize(4096);
    Lowest().async_read_some(net::buffer(drain_buffer_),
                             [self = Self()](beast::error_code ec, size_t n) {
                               self->drained_ += n;
                               if (ec || self->drained_ >= (size_t{1} << 20)) return self->Close();
                               self->DrainPlain();
                             });
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    idle = false;
    beast::error_code ignored;
    Lowest().socket().shutdown(tcp::socket::shutdown_both, ignored);
    Lowest().close();  // pending operations end with operation_aborted
  }

  HttpServer::Impl& impl_;
  Stream stream_;
  std::string remote_;
  // Bounded: a body's bytes leave it as they are parsed, but Beast keeps a
  // chunk-size line or trailers there until they end, so without a bound one
  // unauthenticated connection could grow it without end (a chunk size
  // followed by gigabytes without CRLF). Full, the read fails with
  // buffer_overflow and the client gets a 400.
  beast::flat_buffer buffer_{kReadBufferBytes};
  std::optional<http::request_parser<http::string_body>> parser_;
  HttpRequest req_;           // from the headers on, until it goes to the handler
  size_t reserved_body_ = 0;  // of Impl::buffered_request_bytes
  std::optional<http::response<http::string_body>> res_;     // while it is written
  std::optional<http::response<http::file_body>> file_res_;  // while it is written
  size_t response_bytes_ = 0;
  bool keep_alive_ = false;
  bool head_ = false;
  bool closed_ = false;
  size_t drained_ = 0;
  std::vector<char> drain_buffer_;
};

}  // namespace

void HttpServer::Impl::DoAccept() {
  acceptor.async_accept(net::make_strand(io), [this](beast::error_code ec, tcp::socket socket) {
    OnAccept(ec, std::move(socket));
  });
}

void HttpServer::Impl::OnAccept(const beast::error_code& ec, tcp::socket socket) {
  if (stopping) return;
  if (ec) {
    if (ec == net::error::operation_aborted) return;
    // Out of descriptors (EMFILE, ENFILE): accepting again at once would
    // spin; connections closing will free some.
    accept_retry.expires_after(std::chrono::milliseconds(50));
    accept_retry.async_wait([this](beast::error_code wait_ec) {
      if (!wait_ec && !stopping) DoAccept();
    });
    return;
  }
  beast::error_code ignored;
  const auto peer = socket.remote_endpoint(ignored);
  std::string remote = ignored ? "" : peer.address().to_string();
  // At the cap, the connection that has waited longest for a request makes
  // room: a crowd of idle sockets cannot lock everyone else out.
  std::shared_ptr<HttpConnection> victim;
  bool full = false;
  {
    MutexLock lock(mu);
    full = active >= options.max_connections;
  }
  if (full) {
    for (auto& c : Snapshot()) {
      if (c->idle && (!victim || c->idle_since < victim->idle_since)) victim = c;
    }
  }
  if (full && !victim) {
    RefuseBusy(std::move(socket));
  } else {
    if (victim) {
      victim->idle = false;  // not chosen twice
      victim->PostClose(false);
      victim.reset();
    }
    std::shared_ptr<HttpConnection> session;
    if (tls) {
      session = std::make_shared<Session<beast::ssl_stream<beast::tcp_stream>>>(
          *this, std::move(socket), std::move(remote));
    } else {
      session =
          std::make_shared<Session<beast::tcp_stream>>(*this, std::move(socket), std::move(remote));
    }
    Register(session);
    session->Start();
  }
  DoAccept();
}

void HttpServer::Impl::RefuseBusy(tcp::socket socket) {
  auto stream = std::make_shared<beast::tcp_stream>(std::move(socket));
  if (tls) {  // a plain answer means nothing to a TLS client
    stream->close();
    return;
  }
  const HttpResponse r = ErrorResponse(Status::Unavailable("too many connections; retry later"));
  auto res =
      std::make_shared<http::response<http::string_body>>(static_cast<http::status>(r.status), 11);
  res->set(http::field::content_type, r.content_type);
  for (const auto& [name, value] : r.headers) res->set(name, value);
  res->body() = r.body;
  res->keep_alive(false);
  res->prepare_payload();
  stream->expires_after(std::chrono::seconds(2));
  http::async_write(*stream, *res, [stream, res](beast::error_code, size_t) {
    beast::error_code ignored;
    stream->socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream->close();
  });
}

HttpServer::HttpServer(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { Shutdown(); }

uint16_t HttpServer::port() const { return impl_->port; }

Result<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                      Handler handler) {
  auto impl = std::make_shared<Impl>();
  impl->options = options;
  impl->handler = std::move(handler);
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return Status::InvalidArgument("HTTPS needs both a certificate file and a key file");
  }
  if (options.io_threads < 1 || options.handler_threads < 1 || options.read_handler_threads < 1 ||
      options.max_connections < 1) {
    return Status::InvalidArgument(
        "the HTTP server needs at least one I/O thread, handler thread, read handler thread and "
        "connection");
  }
  if (options.read_nice < 0 || options.read_nice > 19) {
    return Status::InvalidArgument("read_nice: " + std::to_string(options.read_nice) +
                                   " is not a nice increment from 0 to 19");
  }
  if (!options.tls_cert_file.empty()) {
    HPO_ASSIGN_OR_RETURN(impl->tls, ServerTlsContext(options.tls_cert_file, options.tls_key_file));
  }
  // Each connection is a descriptor; leave some for the store, gRPC and files.
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY) {
    const auto usable = static_cast<int64_t>(nofile.rlim_cur) - 256;
    impl->options.max_connections =
        static_cast<int>(std::max<int64_t>(16, std::min<int64_t>(options.max_connections, usable)));
  }
  const std::string where = options.address + ":" + std::to_string(options.port);
  beast::error_code ec;
  const auto address = net::ip::make_address(options.address, ec);
  if (ec)
    return Status::InvalidArgument("http address '" + options.address + "' is not an IP address");
  tcp::endpoint endpoint{address, options.port};
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return Status::Unavailable("cannot listen on " + where + ": " + ec.message());
  impl->port = impl->acceptor.local_endpoint().port();
  impl->handlers = std::make_unique<net::thread_pool>(options.handler_threads);
  impl->read_handlers = std::make_unique<net::thread_pool>(options.read_handler_threads);
  impl->work.emplace(impl->io.get_executor());
  Impl* raw = impl.get();
  net::post(impl->acceptor.get_executor(), [raw] { raw->DoAccept(); });
  for (int i = 0; i < options.io_threads; ++i)
    impl->io_threads.emplace_back([raw] { raw->io.run(); });
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

void HttpServer::Shutdown() {
  if (!impl_) return;
  std::call_once(impl_->shutdown_once, [this] { impl_->ShutdownNow(); });
}

void HttpServer::Impl::ShutdownNow() {
  stopping = true;
  {
    std::promise<void> closed;
    net::post(acceptor.get_executor(), [this, &closed] {
      beast::error_code ignored;
      accept_retry.cancel();
      acceptor.close(ignored);
      closed.set_value();
    });
    closed.get_future().wait();
  }
  // Idle connections go now; the others after their response (keep-alive
  // is off while stopping), or at the drain deadline.
  for (auto& c : Snapshot()) c->PostClose(true);
  {
    MutexLock lock(mu);
    const auto deadline = Clock::now() + options.drain_timeout;
    while ((active != 0 || streams != 0) && cv.WaitUntil(mu, deadline)) {
    }
  }
  for (auto& c : Snapshot()) c->PostClose(false);
  handlers->join();  // the handlers in flight return; their connections are closed
  read_handlers->join();
  {
    MutexLock lock(mu);
    while (streams != 0) cv.Wait(mu);  // they see stopping() and return
    // Closed connections go once their aborted operations have run.
    const auto deadline = Clock::now() + std::chrono::seconds(2);
    while (active != 0 && cv.WaitUntil(mu, deadline)) {
    }
  }
  work.reset();
  io.stop();
  for (auto& t : io_threads) t.join();
}

}  // namespace hpo::server
