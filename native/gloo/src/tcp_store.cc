#include "tcp_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <gloo/common/error.h>

namespace sslzoo {
namespace {

enum Command : uint8_t { kSet = 1, kGet = 2, kCheck = 3 };
constexpr uint32_t kMaxLen = 64u << 20;  // sanity bound on key/value lengths

std::string errnoText(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

// Reads exactly n bytes; false on EOF or error.
bool readAll(int fd, void* buf, size_t n) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, 0);
    if (r == 0) return false;
    if (r < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool writeAll(int fd, const void* buf, size_t n) {
  auto* p = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool writeU32(int fd, uint32_t v) {
  uint8_t b[4] = {uint8_t(v), uint8_t(v >> 8), uint8_t(v >> 16), uint8_t(v >> 24)};
  return writeAll(fd, b, 4);
}

bool readU32(int fd, uint32_t* v) {
  uint8_t b[4];
  if (!readAll(fd, b, 4)) return false;
  *v = uint32_t(b[0]) | uint32_t(b[1]) << 8 | uint32_t(b[2]) << 16 | uint32_t(b[3]) << 24;
  return true;
}

bool readString(int fd, std::string* out) {
  uint32_t len = 0;
  if (!readU32(fd, &len) || len > kMaxLen) return false;
  out->resize(len);
  return len == 0 || readAll(fd, &(*out)[0], len);
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Server

TcpStoreServer::TcpStoreServer(const std::string& /*host*/, int port) {
  // Listen on every interface (like PyTorch's TCPStore): MASTER_ADDR is how the *other*
  // hosts reach rank 0, which need not be an address rank 0 can bind to (NAT, aliases).
  int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  bool v6 = fd >= 0;
  if (!v6) fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(errnoText("TCP store: socket"));
  int one = 1, zero = 0;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  int rv;
  if (v6) {
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    sockaddr_in6 addr{};
    addr.sin6_family = AF_INET6;
    addr.sin6_addr = in6addr_any;
    addr.sin6_port = htons(static_cast<uint16_t>(port));
    rv = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  } else {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    rv = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  }
  if (rv != 0 || ::listen(fd, 128) != 0) {
    std::string msg = errnoText("TCP store: cannot listen on port " + std::to_string(port) +
                                " (is MASTER_PORT already in use?)");
    ::close(fd);
    throw std::runtime_error(msg);
  }
  if (::pipe2(wakePipe_, O_CLOEXEC) != 0) {
    ::close(fd);
    throw std::runtime_error(errnoText("TCP store: pipe"));
  }
  listenFd_ = fd;
  thread_ = std::thread([this] { run(); });
}

TcpStoreServer::~TcpStoreServer() {
  if (wakePipe_[1] >= 0) {
    char c = 0;
    (void)!::write(wakePipe_[1], &c, 1);
  }
  if (thread_.joinable()) thread_.join();
  if (listenFd_ >= 0) ::close(listenFd_);
  for (int fd : wakePipe_) {
    if (fd >= 0) ::close(fd);
  }
}

void TcpStoreServer::run() {
  std::vector<pollfd> fds;
  fds.push_back({wakePipe_[0], POLLIN, 0});
  fds.push_back({listenFd_, POLLIN, 0});
  for (;;) {
    int n = ::poll(fds.data(), fds.size(), -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[0].revents != 0) break;  // shutdown requested
    if (fds[1].revents & POLLIN) {
      int client = ::accept4(listenFd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client >= 0) {
        int one = 1;
        ::setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        fds.push_back({client, POLLIN, 0});
      }
    }
    for (size_t i = 2; i < fds.size();) {
      if (fds[i].revents != 0 && !serveOne(fds[i].fd)) {
        ::close(fds[i].fd);
        fds.erase(fds.begin() + static_cast<long>(i));
        continue;
      }
      fds[i].revents = 0;
      ++i;
    }
  }
  for (size_t i = 2; i < fds.size(); ++i) ::close(fds[i].fd);
}

bool TcpStoreServer::serveOne(int fd) {
  uint8_t cmd = 0;
  std::string key;
  if (!readAll(fd, &cmd, 1) || !readString(fd, &key)) return false;
  switch (cmd) {
    case kSet: {
      std::string value;
      if (!readString(fd, &value)) return false;
      bool fresh = data_.find(key) == data_.end();
      if (fresh) data_[key] = std::vector<char>(value.begin(), value.end());
      uint8_t status = fresh ? 1 : 0;
      return writeAll(fd, &status, 1);
    }
    case kGet: {
      auto it = data_.find(key);
      uint8_t found = it != data_.end() ? 1 : 0;
      if (!writeAll(fd, &found, 1)) return false;
      if (!found) return true;
      return writeU32(fd, static_cast<uint32_t>(it->second.size())) &&
             (it->second.empty() || writeAll(fd, it->second.data(), it->second.size()));
    }
    case kCheck: {
      uint8_t found = data_.count(key) ? 1 : 0;
      return writeAll(fd, &found, 1);
    }
    default:
      return false;
  }
}

// ---------------------------------------------------------------------------------------
// Client

TcpStoreClient::TcpStoreClient(const std::string& host, int port,
                               std::chrono::milliseconds connectTimeout)
    : endpoint_(host + ":" + std::to_string(port)) {
  const auto deadline = std::chrono::steady_clock::now() + connectTimeout;
  std::string lastError = "no address";
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
    if (gai != 0) {
      lastError = std::string("cannot resolve host: ") + ::gai_strerror(gai);
    } else {
      for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
        int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) continue;
        if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
          fd_ = fd;
          break;
        }
        lastError = errnoText("connect");
        ::close(fd);
      }
      ::freeaddrinfo(res);
    }
    if (fd_ >= 0) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      throw ::gloo::IoException("TCP store: cannot reach " + endpoint_ + " within " +
                                std::to_string(connectTimeout.count()) +
                                " ms (is rank 0 running and MASTER_ADDR/MASTER_PORT right?): " +
                                lastError);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // A store request is answered at once by rank 0's server thread; a silent server means
  // rank 0's process is gone or frozen.
  timeval tv{};
  tv.tv_sec = 30;
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

TcpStoreClient::~TcpStoreClient() {
  if (fd_ >= 0) ::close(fd_);
}

void TcpStoreClient::set(const std::string& key, const std::vector<char>& data) {
  std::lock_guard<std::mutex> lock(mutex_);
  uint8_t cmd = kSet, status = 0;
  bool ok = writeAll(fd_, &cmd, 1) && writeU32(fd_, static_cast<uint32_t>(key.size())) &&
            writeAll(fd_, key.data(), key.size()) &&
            writeU32(fd_, static_cast<uint32_t>(data.size())) &&
            (data.empty() || writeAll(fd_, data.data(), data.size())) &&
            readAll(fd_, &status, 1);
  if (!ok) throw ::gloo::IoException("TCP store " + endpoint_ + ": connection lost (set)");
  if (status != 1) {
    throw ::gloo::IoException("TCP store " + endpoint_ + ": key '" + key +
                              "' already set (two ranks with the same rank number?)");
  }
}

bool TcpStoreClient::check(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  uint8_t cmd = kCheck, found = 0;
  bool ok = writeAll(fd_, &cmd, 1) && writeU32(fd_, static_cast<uint32_t>(key.size())) &&
            writeAll(fd_, key.data(), key.size()) && readAll(fd_, &found, 1);
  if (!ok) throw ::gloo::IoException("TCP store " + endpoint_ + ": connection lost (check)");
  return found == 1;
}

std::vector<char> TcpStoreClient::get(const std::string& key) {
  wait({key});
  std::lock_guard<std::mutex> lock(mutex_);
  uint8_t cmd = kGet, found = 0;
  bool ok = writeAll(fd_, &cmd, 1) && writeU32(fd_, static_cast<uint32_t>(key.size())) &&
            writeAll(fd_, key.data(), key.size()) && readAll(fd_, &found, 1);
  if (!ok) throw ::gloo::IoException("TCP store " + endpoint_ + ": connection lost (get)");
  if (!found) throw ::gloo::IoException("TCP store " + endpoint_ + ": key '" + key + "' vanished");
  uint32_t len = 0;
  std::vector<char> value;
  ok = readU32(fd_, &len) && len <= kMaxLen;
  if (ok) {
    value.resize(len);
    ok = len == 0 || readAll(fd_, value.data(), len);
  }
  if (!ok) throw ::gloo::IoException("TCP store " + endpoint_ + ": connection lost (get)");
  return value;
}

void TcpStoreClient::wait(const std::vector<std::string>& keys,
                          const std::chrono::milliseconds& timeout) {
  const auto start = std::chrono::steady_clock::now();
  for (const auto& key : keys) {
    while (!check(key)) {
      if (timeout != ::gloo::kNoTimeout && std::chrono::steady_clock::now() - start > timeout) {
        throw ::gloo::IoException("Wait timeout for key '" + key + "' in TCP store " + endpoint_);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

}  // namespace sslzoo
