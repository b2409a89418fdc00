// HTTP for the pool's store client (etcd's JSON gateway): POST a JSON body, read the answer
// whole or as a stream. One interface; libcurl, loaded with dlopen, implements it.
//
// Why dlopen: remora-server runs after a plain copy onto a GPU host (its other libraries are
// linked statically), and only a server started with --pool needs HTTP. A server without
// --pool never loads libcurl; one with --pool on a host without it fails at start with a
// message naming the library.
//
// Thread-safety: an HttpClient may be used from several threads at once (each call uses a
// transfer handle of its own).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "remora/base/status.h"

namespace remora::pool {

// TLS towards the store (etcd's --cert-file/--trusted-ca-file): all empty for plain http://.
struct TlsFiles {
  std::string ca;    // PEM CA bundle that signed the store's certificates
  std::string cert;  // this client's certificate (etcd --client-cert-auth)
  std::string key;   // its private key
};

struct HttpResponse {
  long status = 0;
  std::string body;
};

class HttpClient {
 public:
  virtual ~HttpClient() = default;
  // POSTs `body` (JSON) to `url` and returns the whole answer; fails (kDevicesUnavailable,
  // naming the URL) when the server cannot be reached or the exchange takes longer than
  // timeout_ms. Any HTTP status is a response.
  virtual Result<HttpResponse> Post(const std::string& url, const std::string& body, int timeout_ms) = 0;
  // POSTs `body` and hands the answer's bytes to `on_data` as they arrive, for as long as the
  // server keeps the answer open, until on_data returns false, `*stop` becomes true (checked
  // at least every 100 ms), or no byte arrived for idle_ms. Returns Ok when ended by on_data
  // or stop; an error otherwise (the server closed, or fell silent).
  virtual Status PostStream(const std::string& url, const std::string& body, int connect_timeout_ms, int idle_ms,
                            const std::function<bool(std::string_view)>& on_data, const std::atomic<bool>* stop) = 0;
};

// libcurl's client (libcurl.so.4, else libcurl-gnutls.so.4). kInitializationError, naming
// the library, when neither can be loaded.
Result<std::unique_ptr<HttpClient>> NewCurlHttpClient(const TlsFiles& tls);

}  // namespace remora::pool
