// A minimal TCP key-value store for Gloo rendezvous across hosts (the MASTER_ADDR /
// MASTER_PORT model of PyTorch's TCPStore): rank 0 runs a TcpStoreServer on a background
// thread, every rank (rank 0 included) talks to it through a TcpStoreClient.
//
// Wire protocol (all integers little-endian u32):
//   request  = cmd:u8  keyLen:u32  key  [valueLen:u32 value]   (value only for SET)
//   SET  -> status:u8 (1 = stored, 0 = key already exists)
//   GET  -> found:u8  [valueLen:u32 value]
//   CHECK-> found:u8
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gloo/rendezvous/store.h>

namespace sslzoo {

/** Serves the store on host:port until destroyed. Throws std::runtime_error on bind failure. */
class TcpStoreServer {
 public:
  TcpStoreServer(const std::string& host, int port);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

 private:
  void run();
  bool serveOne(int fd);

  int listenFd_ = -1;
  int wakePipe_[2] = {-1, -1};
  std::thread thread_;
  std::map<std::string, std::vector<char>> data_;
};

/** A gloo Store backed by a TcpStoreServer. Connecting retries until `connectTimeout`. */
class TcpStoreClient : public gloo::rendezvous::Store {
 public:
  TcpStoreClient(const std::string& host, int port, std::chrono::milliseconds connectTimeout);
  ~TcpStoreClient() override;

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override {
    wait(keys, gloo::rendezvous::Store::kDefaultTimeout);
  }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  bool check(const std::string& key);
  std::mutex mutex_;
  int fd_ = -1;
  std::string endpoint_;
};

}  // namespace sslzoo
