#include "raw_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sodium.h>
#include <sys/socket.h>

#include <cstring>

#include "remora/protocol/message.h"

namespace remora::security {

Result<std::unique_ptr<RawSession>> RawSession::Open(const std::string& url, const std::string& token,
                                                     ConnectOptions options) {
  ASSIGN_OR_RETURN(Endpoint ep, ParseEndpoint(url));
  if (!token.empty()) {
    ASSIGN_OR_RETURN(Token t, ParseToken(token));
    options.token = t;
  }
  ASSIGN_OR_RETURN(Connected c, Connect(ep, options));
  auto s = std::make_unique<RawSession>();
  s->conn_ = std::move(c.connection);
  s->session_ = c.session;
  return s;
}

Status RawSession::Send(Build build, ConstBytes bulk, int device) {
  ScratchMessage msg;
  auto req = msg.InitRoot<wire::Request>();
  req.setDevice(device);
  req.setThread(1);
  build(req);
  OutFrame f;
  f.kind = FrameKind::kRequest;
  f.flags = kFlagExpectsReply;
  f.tag = next_tag_++;
  f.body = msg.Flatten();
  return conn_->Send(f, bulk);
}

Status RawSession::Post(Build build, ConstBytes bulk, int device) {
  ScratchMessage msg;
  auto req = msg.InitRoot<wire::Request>();
  req.setDevice(device);
  req.setThread(1);
  build(req);
  OutFrame f;
  f.kind = FrameKind::kRequest;
  f.tag = next_tag_++;
  f.body = msg.Flatten();
  return conn_->Send(f, bulk);
}

Result<RawReply> RawSession::Call(Build build, ConstBytes bulk, int device, int timeout_ms) {
  uint64_t tag = next_tag_;
  RETURN_IF_ERROR(Send(std::move(build), bulk, device));
  for (;;) {
    ASSIGN_OR_RETURN(InFrame f, conn_->Receive(timeout_ms));
    RawReply r;
    r.body.assign(f.body.begin(), f.body.end());
    if (f.header.bulk_bytes > 0) {
      r.bulk.resize(f.header.bulk_bytes);
      RETURN_IF_ERROR(conn_->ReceiveBulk(r.bulk));
    }
    if (f.kind() != FrameKind::kReply || f.header.tag != tag) continue;  // notices, older replies
    Status st = GuardDecode("reply", [&]() -> Status {
      BodyReader reader(f.body);
      auto rep = reader.Root<wire::Reply>();
      r.error = static_cast<Err>(rep.getError());
      r.message = rep.getMessage().cStr();
      return Status::Ok();
    });
    RETURN_IF_ERROR(st);
    return r;
  }
}

Fd TcpConnectForTest(uint16_t port) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  struct sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) fd.reset();
  return fd;
}

std::vector<uint8_t> ModuleHash(const std::vector<std::byte>& bytes) {
  std::vector<uint8_t> h(crypto_generichash_BYTES);
  crypto_generichash(h.data(), h.size(), reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), nullptr, 0);
  return h;
}

std::vector<std::byte> FakeFatbin(size_t size, uint8_t seed) {
  std::vector<std::byte> image(size);
  for (size_t i = 0; i < size; i++) image[i] = static_cast<std::byte>((i * 131 + seed * 7 + (i >> 8)) & 0xff);
  uint32_t magic = 0xBA55ED50;
  std::memcpy(image.data(), &magic, sizeof(magic));
  image[4] = static_cast<std::byte>(seed);
  return image;
}

Result<RawReply> ApiCall(RawSession& s, uint32_t function, const api::ArgWriter& args, int device) {
  return s.Call([&](wire::Request::Builder& q) {
    auto a = q.initApiCall();
    a.setLibrary(1);  // the driver API
    a.setFunction(function);
    const auto& b = args.bytes();
    a.setArgs(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(b.data()), b.size()));
  }, {}, device);
}

namespace {

Created Create(RawSession& s, uint32_t function, const api::ArgWriter& args, int device) {
  Created c;
  auto r = ApiCall(s, function, args, device);
  if (!r.ok()) {
    c.message = r.status().ToString();
    return c;
  }
  c.error = r->error;
  c.message = r->message;
  if (c.error == Err::kSuccess)
    c.handle = r->Decode([](wire::Reply::Reader x) -> uint64_t {
      if (!x.isApiResult() || x.getApiResult().size() != sizeof(uint64_t)) return 0;
      uint64_t h = 0;
      std::memcpy(&h, x.getApiResult().begin(), sizeof(h));
      return h;
    });
  return c;
}

}  // namespace

Created CreateStream(RawSession& s, unsigned flags, int device) {
  api::ArgWriter args;
  args.Put<unsigned>(flags);
  args.Put<int>(0);
  return Create(s, 48, args, device);  // cuStreamCreateWithPriority
}

Created CreateEvent(RawSession& s, unsigned flags, int device) {
  api::ArgWriter args;
  args.Put<unsigned>(flags);
  return Create(s, 65, args, device);  // cuEventCreate
}

ModuleAnswer LoadModule(RawSession& s, const std::vector<uint8_t>& hash, const std::vector<std::byte>* image,
                        uint64_t size) {
  ModuleAnswer a;
  auto r = s.Call([&](wire::Request::Builder& req) {
    auto m = req.initModuleLoad();
    m.setHash(capnp::Data::Reader(hash.data(), hash.size()));
    m.setSize(size);
    m.setHasImage(image != nullptr);
  }, image != nullptr ? ConstBytes(image->data(), image->size()) : ConstBytes());
  if (!r.ok()) {
    a.error = r.status().code();
    a.message = r.status().message();
    return a;
  }
  a.error = r->error;
  a.message = r->message;
  if (a.error == Err::kSuccess) {
    r->Decode([&](wire::Reply::Reader rep) {
      if (rep.isModule()) {
        a.handle = rep.getModule().getHandle();
        a.need_image = rep.getModule().getNeedImage();
      }
      return 0;
    });
  }
  return a;
}

}  // namespace remora::security
