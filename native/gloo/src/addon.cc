// ssl-zoo's Gloo binding: one process group (a gloo::rendezvous::Context over Gloo's TCP
// transport) per JS `GlooContext`, with BLOCKING collectives on Float32Array.
//
// JS API (see src/distributed/gloo.ts for the typed wrapper):
//   connect({ rank, size, store: 'file'|'redis'|'tcp', path?, host?, port?, prefix,
//             hostname?, iface?, timeoutMs, connectTimeoutMs }) -> Promise<GlooContext>
//   ctx.allreduce(data: Float32Array, op: 'sum'|'max'|'avg')        in place
//   ctx.allgather(input: Float32Array, output: Float32Array)       output.length = W * input.length
//   ctx.reduceScatter(input: Float32Array, output: Float32Array)   input.length = W * output.length
//   ctx.broadcast(data: Float32Array, root: number)                in place
//   ctx.barrier()
//   ctx.close()
//
// Every collective gets the group timeout; when it expires, or a peer's connection drops,
// the call throws a JS Error naming the operation and the rank, the connections are closed
// (so that every other rank fails fast too) and the group refuses further work.
#include <napi.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/redis_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include "tcp_store.h"

namespace {

using Millis = std::chrono::milliseconds;

// Slot prefix for our ring reduce-scatter; Gloo's own collectives use 0x01..0x08.
constexpr uint8_t kReduceScatterSlotPrefix = 0x30;

struct ConnectOptions {
  int rank = 0;
  int size = 1;
  std::string store;  // file | redis | tcp
  std::string path;   // file
  std::string host;   // redis | tcp
  int port = 0;       // redis | tcp
  std::string prefix;
  std::string hostname;  // TCP transport: address to bind (used when iface is empty)
  std::string iface;     // TCP transport: network interface name
  Millis timeout{0};
  Millis connectTimeout{0};
};

// Applies the rendezvous timeout to get() too (Gloo's stores wait 30 s there by default).
class TimeoutStore : public gloo::rendezvous::Store {
 public:
  TimeoutStore(gloo::rendezvous::Store& inner, Millis timeout) : inner_(inner), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override { inner_.set(key, data); }
  std::vector<char> get(const std::string& key) override {
    inner_.wait({key}, timeout_);
    return inner_.get(key);
  }
  void wait(const std::vector<std::string>& keys) override { inner_.wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const Millis& timeout) override {
    inner_.wait(keys, timeout);
  }

 private:
  gloo::rendezvous::Store& inner_;
  Millis timeout_;
};

/** Everything one process group owns. */
struct Group {
  ConnectOptions opts;
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> ctx;
  uint32_t tag = 0;

  uint32_t nextTag() { return tag++; }
};

std::string describeRendezvous(const ConnectOptions& o) {
  if (o.store == "file") return "file://" + o.path;
  return o.store + "://" + o.host + ":" + std::to_string(o.port);
}

void barrierOn(Group& g, Millis timeout) {
  gloo::BarrierOptions opts(g.ctx);
  opts.setTag(g.nextTag());
  opts.setTimeout(timeout);
  gloo::barrier(opts);
}

/** Rendezvous and full-mesh connection; runs on a libuv worker thread. */
std::unique_ptr<Group> connectGroup(const ConnectOptions& o) {
  auto g = std::make_unique<Group>();
  g->opts = o;

  std::unique_ptr<sslzoo::TcpStoreServer> server;  // rank 0 of a tcp:// rendezvous
  std::unique_ptr<gloo::rendezvous::Store> base;
  if (o.store == "file") {
    base = std::make_unique<gloo::rendezvous::FileStore>(o.path);
  } else if (o.store == "redis") {
    base = std::make_unique<gloo::rendezvous::RedisStore>(o.host, o.port);
  } else if (o.store == "tcp") {
    if (o.rank == 0) server = std::make_unique<sslzoo::TcpStoreServer>(o.host, o.port);
    base = std::make_unique<sslzoo::TcpStoreClient>(o.host, o.port, o.connectTimeout);
  } else {
    throw std::invalid_argument("unknown rendezvous store '" + o.store + "'");
  }
  gloo::rendezvous::PrefixStore prefixed(o.prefix, *base);
  TimeoutStore store(prefixed, o.connectTimeout);

  gloo::transport::tcp::attr attr;
  if (!o.iface.empty()) {
    attr.iface = o.iface;
  } else {
    attr.hostname = o.hostname;
  }
  g->device = gloo::transport::tcp::CreateDevice(attr);
  g->ctx = std::make_shared<gloo::rendezvous::Context>(o.rank, o.size);
  g->ctx->setTimeout(o.connectTimeout);
  g->ctx->connectFullMesh(store, g->device);
  g->ctx->setTimeout(o.timeout);
  // Once every rank has passed this barrier, every rank has finished connectFullMesh, so
  // nobody needs the store any more (rank 0 may shut its TCP store server down).
  barrierOn(*g, o.connectTimeout);
  return g;
}

// ---------------------------------------------------------------------------------------
// Argument helpers

Napi::Float32Array float32Arg(const Napi::CallbackInfo& info, size_t i, const char* op,
                              const char* name) {
  if (info.Length() <= i || !info[i].IsTypedArray() ||
      info[i].As<Napi::TypedArray>().TypedArrayType() != napi_float32_array) {
    throw Napi::TypeError::New(info.Env(), std::string("ssl-zoo gloo: ") + op + ": " + name +
                                               " must be a Float32Array");
  }
  return info[i].As<Napi::Float32Array>();
}

std::string stringField(const Napi::Object& obj, const char* key, bool required) {
  Napi::Value v = obj.Get(key);
  if (v.IsUndefined() && !required) return "";
  if (!v.IsString()) {
    throw Napi::TypeError::New(obj.Env(),
                               std::string("ssl-zoo gloo: connect: '") + key + "' must be a string");
  }
  return v.As<Napi::String>().Utf8Value();
}

int64_t intField(const Napi::Object& obj, const char* key, bool required, int64_t fallback = 0) {
  Napi::Value v = obj.Get(key);
  if (v.IsUndefined() && !required) return fallback;
  if (!v.IsNumber()) {
    throw Napi::TypeError::New(obj.Env(),
                               std::string("ssl-zoo gloo: connect: '") + key + "' must be a number");
  }
  return v.As<Napi::Number>().Int64Value();
}

// ---------------------------------------------------------------------------------------
// GlooContext

class GlooContext : public Napi::ObjectWrap<GlooContext> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(
        env, "GlooContext",
        {
            InstanceAccessor<&GlooContext::Rank>("rank"),
            InstanceAccessor<&GlooContext::Size>("size"),
            InstanceMethod<&GlooContext::AllReduce>("allreduce"),
            InstanceMethod<&GlooContext::AllGather>("allgather"),
            InstanceMethod<&GlooContext::ReduceScatter>("reduceScatter"),
            InstanceMethod<&GlooContext::Broadcast>("broadcast"),
            InstanceMethod<&GlooContext::Barrier>("barrier"),
            InstanceMethod<&GlooContext::Close>("close"),
        });
  }

  explicit GlooContext(const Napi::CallbackInfo& info) : Napi::ObjectWrap<GlooContext>(info) {
    if (info.Length() != 1 || !info[0].IsExternal()) {
      throw Napi::TypeError::New(info.Env(),
                                 "ssl-zoo gloo: GlooContext is created by connect(), not new");
    }
    group_.reset(info[0].As<Napi::External<Group>>().Data());
    rank_ = group_->opts.rank;
    size_ = group_->opts.size;
  }

 private:
  Napi::Value Rank(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), rank_); }
  Napi::Value Size(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), size_); }

  /** Runs one collective, turning any Gloo failure into a clear JS Error. */
  template <typename F>
  void run(Napi::Env env, const char* op, F&& body) {
    if (!group_) {
      throw Napi::Error::New(env, std::string("ssl-zoo gloo: ") + op + " on rank " +
                                      std::to_string(rank_) + ": the process group is closed");
    }
    if (!broken_.empty()) {
      throw Napi::Error::New(env, std::string("ssl-zoo gloo: ") + op + " on rank " +
                                      std::to_string(rank_) +
                                      ": the process group is unusable after an earlier failure (" +
                                      broken_ + ")");
    }
    try {
      body(*group_);
    } catch (const std::exception& e) {
      std::ostringstream msg;
      msg << "ssl-zoo gloo: " << op << " failed on rank " << rank_ << " of " << size_
          << " (timeout " << group_->opts.timeout.count()
          << " ms): a peer process died, stalled or issued a different collective: " << e.what();
      broken_ = msg.str();
      // Close every connection so that the other ranks fail now rather than at their timeout.
      try {
        group_->ctx->closeConnections();
      } catch (...) {
      }
      throw Napi::Error::New(env, broken_);
    }
  }

  void AllReduce(const Napi::CallbackInfo& info) {
    auto data = float32Arg(info, 0, "allreduce", "data");
    std::string op = info.Length() > 1 && info[1].IsString()
                         ? info[1].As<Napi::String>().Utf8Value()
                         : std::string("sum");
    if (op != "sum" && op != "max" && op != "avg") {
      throw Napi::TypeError::New(info.Env(), "ssl-zoo gloo: allreduce: op must be 'sum', 'avg' or 'max', got '" + op + "'");
    }
    float* ptr = data.Data();
    size_t n = data.ElementLength();
    run(info.Env(), "allreduce", [&](Group& g) {
      uint32_t tag = g.nextTag();
      if (n == 0 || g.opts.size == 1) return;
      gloo::AllreduceOptions opts(g.ctx);
      opts.setOutput<float>(ptr, n);
      using ReduceFn = void (*)(void*, const void*, const void*, size_t);
      ReduceFn sumFn = &gloo::sum<float>;
      ReduceFn maxFn = &gloo::max<float>;
      opts.setReduceFunction(op == "max" ? maxFn : sumFn);
      opts.setTag(tag);
      opts.setTimeout(g.opts.timeout);
      gloo::allreduce(opts);
      if (op == "avg") {
        const float w = static_cast<float>(g.opts.size);
        for (size_t i = 0; i < n; ++i) ptr[i] /= w;
      }
    });
  }

  void AllGather(const Napi::CallbackInfo& info) {
    auto in = float32Arg(info, 0, "allgather", "input");
    auto out = float32Arg(info, 1, "allgather", "output");
    size_t n = in.ElementLength();
    if (out.ElementLength() != n * static_cast<size_t>(size_)) {
      throw Napi::RangeError::New(info.Env(), "ssl-zoo gloo: allgather: output length must be world size x input length");
    }
    float* inPtr = in.Data();
    float* outPtr = out.Data();
    run(info.Env(), "allgather", [&](Group& g) {
      uint32_t tag = g.nextTag();
      if (n == 0) return;
      if (g.opts.size == 1) {
        std::memcpy(outPtr, inPtr, n * sizeof(float));
        return;
      }
      gloo::AllgatherOptions opts(g.ctx);
      opts.setInput<float>(inPtr, n);
      opts.setOutput<float>(outPtr, n * g.opts.size);
      opts.setTag(tag);
      opts.setTimeout(g.opts.timeout);
      gloo::allgather(opts);
    });
  }

  /**
   * Ring reduce-scatter (sum): W-1 steps; in step s rank r sends its partial sum of chunk
   * (r-s-1) mod W to rank r+1 and receives the partial sum of chunk (r-s-2) mod W from rank
   * r-1, adding its own input chunk. After the last step chunk r is complete. Each rank sends
   * (W-1)/W of the data, half of what all-reduce + slice would.
   */
  void ReduceScatter(const Napi::CallbackInfo& info) {
    auto in = float32Arg(info, 0, "reduceScatter", "input");
    auto out = float32Arg(info, 1, "reduceScatter", "output");
    size_t n = out.ElementLength();
    if (in.ElementLength() != n * static_cast<size_t>(size_)) {
      throw Napi::RangeError::New(info.Env(), "ssl-zoo gloo: reduceScatter: input length must be world size x output length");
    }
    const float* inPtr = in.Data();
    float* outPtr = out.Data();
    run(info.Env(), "reduceScatter", [&](Group& g) {
      uint32_t tag = g.nextTag();
      const int W = g.opts.size;
      const int r = g.opts.rank;
      if (n == 0) return;
      if (W == 1) {
        std::memcpy(outPtr, inPtr, n * sizeof(float));
        return;
      }
      const size_t bytes = n * sizeof(float);
      const auto slot = gloo::Slot::build(kReduceScatterSlotPrefix, tag);
      const int right = (r + 1) % W;
      const int left = (r - 1 + W) % W;
      const Millis timeout = g.opts.timeout;

      std::vector<float> recv(n), accA(n), accB(n);
      // Input is only read; the first step sends straight from it.
      auto inBuf = g.ctx->createUnboundBuffer(const_cast<float*>(inPtr), n * W * sizeof(float));
      auto recvBuf = g.ctx->createUnboundBuffer(recv.data(), bytes);
      auto accABuf = g.ctx->createUnboundBuffer(accA.data(), bytes);
      auto accBBuf = g.ctx->createUnboundBuffer(accB.data(), bytes);

      gloo::transport::UnboundBuffer* sendBuf = inBuf.get();
      size_t sendOffset = static_cast<size_t>((r - 1 + W) % W) * bytes;
      for (int s = 0; s < W - 1; ++s) {
        const int recvChunk = ((r - s - 2) % W + 2 * W) % W;
        recvBuf->recv(left, slot, 0, bytes);
        sendBuf->send(right, slot, sendOffset, bytes);
        recvBuf->waitRecv(timeout);
        const bool last = s == W - 2;
        // The buffer we fill now is the one we send next step; alternate A and B so that
        // the send in flight is never overwritten.
        float* dst = last ? outPtr : (s % 2 == 0 ? accA.data() : accB.data());
        const float* mine = inPtr + static_cast<size_t>(recvChunk) * n;
        const float* got = recv.data();
        for (size_t i = 0; i < n; ++i) dst[i] = mine[i] + got[i];
        sendBuf->waitSend(timeout);
        sendBuf = s % 2 == 0 ? accABuf.get() : accBBuf.get();
        sendOffset = 0;
      }
    });
  }

  void Broadcast(const Napi::CallbackInfo& info) {
    auto data = float32Arg(info, 0, "broadcast", "data");
    int root = info.Length() > 1 && info[1].IsNumber() ? info[1].As<Napi::Number>().Int32Value() : 0;
    if (root < 0 || root >= size_) {
      throw Napi::RangeError::New(info.Env(), "ssl-zoo gloo: broadcast: root must be a rank in [0, world size)");
    }
    float* ptr = data.Data();
    size_t n = data.ElementLength();
    run(info.Env(), "broadcast", [&](Group& g) {
      uint32_t tag = g.nextTag();
      if (n == 0 || g.opts.size == 1) return;
      gloo::BroadcastOptions opts(g.ctx);
      opts.setOutput<float>(ptr, n);
      opts.setRoot(root);
      opts.setTag(tag);
      opts.setTimeout(g.opts.timeout);
      gloo::broadcast(opts);
    });
  }

  void Barrier(const Napi::CallbackInfo& info) {
    run(info.Env(), "barrier", [&](Group& g) {
      if (g.opts.size == 1) {
        g.nextTag();
        return;
      }
      barrierOn(g, g.opts.timeout);
    });
  }

  void Close(const Napi::CallbackInfo&) { group_.reset(); }

  std::unique_ptr<Group> group_;
  std::string broken_;
  int rank_ = 0;
  int size_ = 1;
};

// ---------------------------------------------------------------------------------------
// connect()

class ConnectWorker : public Napi::AsyncWorker {
 public:
  ConnectWorker(Napi::Env env, ConnectOptions opts)
      : Napi::AsyncWorker(env, "ssl-zoo:gloo-connect"), opts_(std::move(opts)), deferred_(env) {}

  Napi::Promise Promise() { return deferred_.Promise(); }

 protected:
  void Execute() override {
    try {
      group_ = connectGroup(opts_);
    } catch (const std::exception& e) {
      std::ostringstream msg;
      msg << "ssl-zoo gloo: rendezvous failed on rank " << opts_.rank << " of " << opts_.size
          << " via " << describeRendezvous(opts_) << " (connect timeout "
          << opts_.connectTimeout.count() << " ms): " << e.what();
      const std::string what = e.what();
      if (what.find("already") != std::string::npos) {
        msg << " -- the store holds keys from an earlier run: use a fresh directory, a "
               "new prefix or an empty Redis database";
      }
      SetError(msg.str());
    }
  }

  void OnOK() override {
    Napi::Env env = Env();
    Napi::HandleScope scope(env);
    auto* ctor = env.GetInstanceData<Napi::FunctionReference>();
    Napi::Object obj = ctor->New({Napi::External<Group>::New(env, group_.release())});
    deferred_.Resolve(obj);
  }

  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  ConnectOptions opts_;
  Napi::Promise::Deferred deferred_;
  std::unique_ptr<Group> group_;
};

Napi::Value Connect(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsObject()) {
    throw Napi::TypeError::New(env, "ssl-zoo gloo: connect(options) needs an options object");
  }
  Napi::Object o = info[0].As<Napi::Object>();
  ConnectOptions opts;
  opts.rank = static_cast<int>(intField(o, "rank", true));
  opts.size = static_cast<int>(intField(o, "size", true));
  if (opts.size < 1 || opts.rank < 0 || opts.rank >= opts.size) {
    throw Napi::RangeError::New(env, "ssl-zoo gloo: connect: need 0 <= rank < size");
  }
  opts.store = stringField(o, "store", true);
  opts.path = stringField(o, "path", false);
  opts.host = stringField(o, "host", false);
  opts.port = static_cast<int>(intField(o, "port", false));
  opts.prefix = stringField(o, "prefix", false);
  opts.hostname = stringField(o, "hostname", false);
  opts.iface = stringField(o, "iface", false);
  opts.timeout = Millis(intField(o, "timeoutMs", true));
  opts.connectTimeout = Millis(intField(o, "connectTimeoutMs", false, opts.timeout.count()));
  if (opts.timeout.count() <= 0 || opts.connectTimeout.count() <= 0) {
    throw Napi::RangeError::New(env, "ssl-zoo gloo: connect: timeouts must be positive");
  }
  if (opts.hostname.empty() && opts.iface.empty()) opts.hostname = "127.0.0.1";
  if (opts.prefix.empty()) opts.prefix = "ssl-zoo";
  auto* worker = new ConnectWorker(env, std::move(opts));
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  Napi::Function ctor = GlooContext::Define(env);
  env.SetInstanceData<Napi::FunctionReference>(new Napi::FunctionReference(Napi::Persistent(ctor)));
  exports.Set("connect", Napi::Function::New(env, Connect, "connect"));
  exports.Set("GlooContext", ctor);
  std::ostringstream version;
  version << GLOO_VERSION_MAJOR << "." << GLOO_VERSION_MINOR << "." << GLOO_VERSION_PATCH;
  exports.Set("glooVersion", Napi::String::New(env, version.str()));
  exports.Set("hasRedis", Napi::Boolean::New(env, GLOO_USE_REDIS != 0));
  return exports;
}

}  // namespace

NODE_API_MODULE(ssl_zoo_gloo, Init)
