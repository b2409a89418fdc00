// HttpClient over libcurl's easy interface, loaded at run time (http.h says why).
#include <curl/curl.h>
#include <dlfcn.h>

#include <mutex>

#include "pool/http.h"
#include "remora/base/util.h"

namespace remora::pool {
namespace {

// The few libcurl functions used, resolved once.
struct CurlApi {
  CURLcode (*global_init)(long);
  CURL* (*easy_init)();
  CURLcode (*easy_setopt)(CURL*, CURLoption, ...);
  CURLcode (*easy_perform)(CURL*);
  CURLcode (*easy_getinfo)(CURL*, CURLINFO, ...);
  void (*easy_cleanup)(CURL*);
  const char* (*easy_strerror)(CURLcode);
  curl_slist* (*slist_append)(curl_slist*, const char*);
  void (*slist_free_all)(curl_slist*);
};

Result<const CurlApi*> LoadCurl() {
  static std::once_flag once;
  static CurlApi api;
  static std::string error;
  std::call_once(once, [] {
    void* h = nullptr;
    for (const char* name : {"libcurl.so.4", "libcurl-gnutls.so.4"})
      if ((h = ::dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    if (h == nullptr) {
      error = "the pool's store is reached through libcurl, and neither libcurl.so.4 nor libcurl-gnutls.so.4 can be "
              "loaded (install Debian's libcurl4)";
      return;
    }
    auto sym = [&](const char* name) {
      void* p = ::dlsym(h, name);
      if (p == nullptr && error.empty()) error = std::string("libcurl lacks ") + name;
      return p;
    };
    api.global_init = reinterpret_cast<decltype(api.global_init)>(sym("curl_global_init"));
    api.easy_init = reinterpret_cast<decltype(api.easy_init)>(sym("curl_easy_init"));
    api.easy_setopt = reinterpret_cast<decltype(api.easy_setopt)>(sym("curl_easy_setopt"));
    api.easy_perform = reinterpret_cast<decltype(api.easy_perform)>(sym("curl_easy_perform"));
    api.easy_getinfo = reinterpret_cast<decltype(api.easy_getinfo)>(sym("curl_easy_getinfo"));
    api.easy_cleanup = reinterpret_cast<decltype(api.easy_cleanup)>(sym("curl_easy_cleanup"));
    api.easy_strerror = reinterpret_cast<decltype(api.easy_strerror)>(sym("curl_easy_strerror"));
    api.slist_append = reinterpret_cast<decltype(api.slist_append)>(sym("curl_slist_append"));
    api.slist_free_all = reinterpret_cast<decltype(api.slist_free_all)>(sym("curl_slist_free_all"));
    if (error.empty() && api.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) error = "curl_global_init failed";
  });
  if (!error.empty()) return Status(Err::kInitializationError, error);
  return &api;
}

// One transfer: a fresh easy handle (connections are not reused across calls: the store is
// asked a few times a second at most, and a fresh connection never lands on a dead socket).
class Transfer {
 public:
  Transfer(const CurlApi& api, const TlsFiles& tls) : api_(api), h_(api.easy_init()) {
    if (h_ == nullptr) return;
    headers_ = api_.slist_append(nullptr, "Content-Type: application/json");
    // No "Expect: 100-continue" round trip before bodies over 1 KiB (a server's record).
    headers_ = api_.slist_append(headers_, "Expect:");
    api_.easy_setopt(h_, CURLOPT_HTTPHEADER, headers_);
    api_.easy_setopt(h_, CURLOPT_NOSIGNAL, 1L);
    api_.easy_setopt(h_, CURLOPT_PROTOCOLS_STR, "http,https");
    if (!tls.ca.empty()) api_.easy_setopt(h_, CURLOPT_CAINFO, tls.ca.c_str());
    if (!tls.cert.empty()) api_.easy_setopt(h_, CURLOPT_SSLCERT, tls.cert.c_str());
    if (!tls.key.empty()) api_.easy_setopt(h_, CURLOPT_SSLKEY, tls.key.c_str());
  }
  ~Transfer() {
    if (h_ != nullptr) api_.easy_cleanup(h_);
    if (headers_ != nullptr) api_.slist_free_all(headers_);
  }
  Transfer(const Transfer&) = delete;
  Transfer& operator=(const Transfer&) = delete;
  CURL* get() const { return h_; }

 private:
  const CurlApi& api_;
  CURL* h_;
  curl_slist* headers_ = nullptr;
};

struct StreamState {
  const std::function<bool(std::string_view)>* on_data;
  const std::atomic<bool>* stop;
  uint64_t last_data_ns;
  uint64_t idle_ns;
  bool ended_by_us = false;
  bool idle = false;
};

size_t AppendBody(char* p, size_t size, size_t n, void* user) {
  static_cast<std::string*>(user)->append(p, size * n);
  return size * n;
}

size_t StreamBody(char* p, size_t size, size_t n, void* user) {
  auto* s = static_cast<StreamState*>(user);
  s->last_data_ns = MonotonicNanos();
  if (!(*s->on_data)(std::string_view(p, size * n))) {
    s->ended_by_us = true;
    return 0;  // aborts the transfer
  }
  return size * n;
}

int StreamProgress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* s = static_cast<StreamState*>(user);
  if (s->stop != nullptr && s->stop->load()) {
    s->ended_by_us = true;
    return 1;
  }
  if (MonotonicNanos() - s->last_data_ns > s->idle_ns) {
    s->idle = true;
    return 1;
  }
  return 0;
}

class CurlHttpClient final : public HttpClient {
 public:
  CurlHttpClient(const CurlApi& api, TlsFiles tls) : api_(api), tls_(std::move(tls)) {}

  Result<HttpResponse> Post(const std::string& url, const std::string& body, int timeout_ms) override {
    Transfer t(api_, tls_);
    if (t.get() == nullptr) return Error(Err::kMemoryAllocation, "curl_easy_init failed");
    HttpResponse out;
    api_.easy_setopt(t.get(), CURLOPT_URL, url.c_str());
    api_.easy_setopt(t.get(), CURLOPT_POSTFIELDS, body.c_str());
    api_.easy_setopt(t.get(), CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
    api_.easy_setopt(t.get(), CURLOPT_TIMEOUT_MS, static_cast<long>(timeout_ms));
    api_.easy_setopt(t.get(), CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(timeout_ms));
    api_.easy_setopt(t.get(), CURLOPT_WRITEFUNCTION, &AppendBody);
    api_.easy_setopt(t.get(), CURLOPT_WRITEDATA, &out.body);
    CURLcode rc = api_.easy_perform(t.get());
    if (rc != CURLE_OK) return Error(Err::kDevicesUnavailable, "{}: {}", url, api_.easy_strerror(rc));
    api_.easy_getinfo(t.get(), CURLINFO_RESPONSE_CODE, &out.status);
    return out;
  }

  Status PostStream(const std::string& url, const std::string& body, int connect_timeout_ms, int idle_ms,
                    const std::function<bool(std::string_view)>& on_data, const std::atomic<bool>* stop) override {
    Transfer t(api_, tls_);
    if (t.get() == nullptr) return Error(Err::kMemoryAllocation, "curl_easy_init failed");
    StreamState s{&on_data, stop, MonotonicNanos(), uint64_t(idle_ms) * 1'000'000};
    api_.easy_setopt(t.get(), CURLOPT_URL, url.c_str());
    api_.easy_setopt(t.get(), CURLOPT_POSTFIELDS, body.c_str());
    api_.easy_setopt(t.get(), CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
    api_.easy_setopt(t.get(), CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(connect_timeout_ms));
    api_.easy_setopt(t.get(), CURLOPT_WRITEFUNCTION, &StreamBody);
    api_.easy_setopt(t.get(), CURLOPT_WRITEDATA, &s);
    api_.easy_setopt(t.get(), CURLOPT_NOPROGRESS, 0L);
    api_.easy_setopt(t.get(), CURLOPT_XFERINFOFUNCTION, &StreamProgress);
    api_.easy_setopt(t.get(), CURLOPT_XFERINFODATA, &s);
    CURLcode rc = api_.easy_perform(t.get());
    if (s.ended_by_us) return Status::Ok();
    if (s.idle) return Error(Err::kTimeout, "{}: nothing heard for {} ms", url, idle_ms);
    if (rc != CURLE_OK) return Error(Err::kDevicesUnavailable, "{}: {}", url, api_.easy_strerror(rc));
    long status = 0;
    api_.easy_getinfo(t.get(), CURLINFO_RESPONSE_CODE, &status);
    return Error(Err::kDevicesUnavailable, "{}: the server ended the stream (HTTP {})", url, status);
  }

 private:
  const CurlApi& api_;
  TlsFiles tls_;
};

}  // namespace

Result<std::unique_ptr<HttpClient>> NewCurlHttpClient(const TlsFiles& tls) {
  ASSIGN_OR_RETURN(const CurlApi* api, LoadCurl());
  return std::unique_ptr<HttpClient>(std::make_unique<CurlHttpClient>(*api, tls));
}

}  // namespace remora::pool
