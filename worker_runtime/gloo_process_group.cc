// Gloo backend. See gloo_process_group.h for the contract and the choice of all_reduce path.
#include "worker_runtime/gloo_process_group.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/broadcast.h>
#include <gloo/gather.h>
#include <gloo/math.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/scatter.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <deque>
#include <map>
#include <tuple>
#include <mutex>
#include <cstring>
#include <vector>

#include "worker_runtime/gloo_store_adapter.h"
#include "worker_runtime/mesh_collectives.h"
#include "worker_runtime/op_queue.h"
#include "worker_runtime/tcp_mesh.h"

namespace crun::rt {
namespace {

using Func = std::function<void(void*, const void*, const void*, std::size_t)>;
using Clock = std::chrono::steady_clock;

// bfloat16 stored as uint16_t; each element computed in float and rounded back.
template <typename F>
void bf16_apply(void* c, const void* a, const void* b, std::size_t n, F f) {
  auto* pc = static_cast<std::uint16_t*>(c);
  auto* pa = static_cast<const std::uint16_t*>(a);
  auto* pb = static_cast<const std::uint16_t*>(b);
  for (std::size_t i = 0; i < n; ++i) pc[i] = float_to_bf16(f(bf16_to_float(pa[i]), bf16_to_float(pb[i])));
}

Func bf16_func(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return [](void* c, const void* a, const void* b, std::size_t n) { bf16_apply(c, a, b, n, [](float x, float y) { return x + y; }); };
    case ReduceOp::kProd:
      return [](void* c, const void* a, const void* b, std::size_t n) { bf16_apply(c, a, b, n, [](float x, float y) { return x * y; }); };
    case ReduceOp::kMin:
      return [](void* c, const void* a, const void* b, std::size_t n) { bf16_apply(c, a, b, n, [](float x, float y) { return x < y ? x : y; }); };
    case ReduceOp::kMax:
      return [](void* c, const void* a, const void* b, std::size_t n) { bf16_apply(c, a, b, n, [](float x, float y) { return x > y ? x : y; }); };
  }
  throw CollectiveError("unknown reduce op");
}

template <typename T>
Func typed_func(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return static_cast<void (*)(void*, const void*, const void*, std::size_t)>(&gloo::sum<T>);
    case ReduceOp::kProd: return static_cast<void (*)(void*, const void*, const void*, std::size_t)>(&gloo::product<T>);
    case ReduceOp::kMin: return static_cast<void (*)(void*, const void*, const void*, std::size_t)>(&gloo::min<T>);
    case ReduceOp::kMax: return static_cast<void (*)(void*, const void*, const void*, std::size_t)>(&gloo::max<T>);
  }
  throw CollectiveError("unknown reduce op");
}

template <typename T>
const gloo::ReductionFunction<T>* ring_func(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return gloo::ReductionFunction<T>::sum;
    case ReduceOp::kProd: return gloo::ReductionFunction<T>::product;
    case ReduceOp::kMin: return gloo::ReductionFunction<T>::min;
    case ReduceOp::kMax: return gloo::ReductionFunction<T>::max;
  }
  throw CollectiveError("unknown reduce op");
}

// Calls f.template operator()<T>() with the storage type of `t` (bfloat16 -> uint16_t).
template <typename F>
void dispatch(DType t, F&& f) {
  switch (t) {
    case DType::kFloat32: f.template operator()<float>(); return;
    case DType::kFloat64: f.template operator()<double>(); return;
    case DType::kInt32: f.template operator()<std::int32_t>(); return;
    case DType::kInt64: f.template operator()<std::int64_t>(); return;
    case DType::kFloat16: f.template operator()<gloo::float16>(); return;
    case DType::kBFloat16: f.template operator()<std::uint16_t>(); return;
    case DType::kUInt8: throw CollectiveError("uint8 is not a reduction type");
  }
}

// avg = sum / size, in the element type.
void divide(void* data, std::size_t n, DType t, int size) {
  switch (t) {
    case DType::kFloat32: { auto* p = static_cast<float*>(data); for (std::size_t i = 0; i < n; ++i) p[i] /= static_cast<float>(size); return; }
    case DType::kFloat64: { auto* p = static_cast<double*>(data); for (std::size_t i = 0; i < n; ++i) p[i] /= size; return; }
    case DType::kInt32: { auto* p = static_cast<std::int32_t*>(data); for (std::size_t i = 0; i < n; ++i) p[i] /= size; return; }
    case DType::kInt64: { auto* p = static_cast<std::int64_t*>(data); for (std::size_t i = 0; i < n; ++i) p[i] /= size; return; }
    case DType::kFloat16: { auto* p = static_cast<std::uint16_t*>(data); for (std::size_t i = 0; i < n; ++i) p[i] = float_to_half(half_to_float(p[i]) / static_cast<float>(size)); return; }
    case DType::kBFloat16: { auto* p = static_cast<std::uint16_t*>(data); for (std::size_t i = 0; i < n; ++i) p[i] = float_to_bf16(bf16_to_float(p[i]) / static_cast<float>(size)); return; }
    case DType::kUInt8: return;
  }
}

std::string describe(const char* op, std::size_t count, DType t) {
  return std::string("gloo ") + op + "(" + dtype_name(t) + " x " + std::to_string(count) + ")";
}

class P2PWork final : public Work {
 public:
  P2PWork(std::unique_ptr<gloo::transport::UnboundBuffer> buf, bool is_send, Millis timeout, std::string name)
      : buf_(std::move(buf)), is_send_(is_send), timeout_(timeout), name_(std::move(name)) {}
  void wait() override {
    std::lock_guard lk(mu_);
    if (done_) {
      if (!error_.empty()) throw CollectiveError(error_);
      return;
    }
    done_ = true;
    try {
      bool ok = is_send_ ? buf_->waitSend(nullptr, timeout_) : buf_->waitRecv(nullptr, timeout_);
      if (!ok) throw std::runtime_error("aborted");
    } catch (const std::exception& e) {
      error_ = name_ + " failed: " + e.what();
      throw CollectiveError(error_);
    }
  }
  bool is_completed() override {
    std::lock_guard lk(mu_);
    return done_;
  }

 private:
  std::mutex mu_;
  std::unique_ptr<gloo::transport::UnboundBuffer> buf_;
  bool is_send_;
  Millis timeout_;
  std::string name_;
  bool done_ = false;
  std::string error_;
};

class GlooProcessGroup final : public ProcessGroup {
 public:
  GlooProcessGroup(std::shared_ptr<gloo::rendezvous::Context> ctx, std::unique_ptr<TcpMesh> mesh, GlooOptions options)
      : ctx_(std::move(ctx)), mesh_(std::move(mesh)), options_(std::move(options)) {
    scratch_.chunk_bytes = options_.mesh_scratch_bytes / static_cast<std::size_t>(std::max(1, size() - 1));
  }
  ~GlooProcessGroup() override { queue_.reset(); }

  int rank() const override { return ctx_->rank; }
  int size() const override { return ctx_->size; }
  std::string backend() const override { return "gloo"; }
  Millis default_timeout() const override { return options_.timeout; }

  WorkPtr all_reduce(void* data, std::size_t count, DType type, ReduceOp op, Millis timeout) override {
    return queue_->submit(describe("all_reduce", count, type) + " " + reduce_op_name(op),
                          all_reduce_op(data, count, type, op, timeout));
  }

  void all_reduce_now(void* data, std::size_t count, DType type, ReduceOp op, Millis timeout) override {
    queue_->run(describe("all_reduce", count, type) + " " + reduce_op_name(op),
                all_reduce_op(data, count, type, op, timeout));
  }

  WorkPtr broadcast(void* data, std::size_t count, DType type, int root, Millis timeout) override {
    check_rank(root, "broadcast root");
    const Millis t = deadline(timeout);
    const uint32_t tag = next_tag();
    return queue_->submit(describe("broadcast", count, type), [=, this] {
      if (size() == 1 || count == 0) return;
      gloo::BroadcastOptions o(ctx_);
      o.setOutput(static_cast<std::uint8_t*>(data), count * dtype_size(type));
      o.setRoot(root);
      o.setTag(tag);
      o.setTimeout(t);
      gloo::broadcast(o);
    });
  }

  WorkPtr reduce(void* data, std::size_t count, DType type, ReduceOp op, int root, Millis timeout) override {
    check_rank(root, "reduce root");
    const Millis t = deadline(timeout);
    const uint32_t tag = next_tag();
    return queue_->submit(describe("reduce", count, type) + " " + reduce_op_name(op), [=, this] {
      check_reduction(type);
      if (count == 0) return;
      if (size() > 1) {
        // Gloo's reduce writes into the output on every rank (as scratch); keep non-roots' data.
        std::vector<std::uint8_t> scratch;
        void* out = data;
        if (rank() != root) {
          scratch.assign(static_cast<std::uint8_t*>(data), static_cast<std::uint8_t*>(data) + count * dtype_size(type));
          out = scratch.data();
        }
        gloo::ReduceOptions o(ctx_);
        dispatch(type, [&]<typename T>() { o.setOutput(static_cast<T*>(out), count); });
        o.setReduceFunction(func(type, op));
        o.setRoot(root);
        o.setTag(tag);
        o.setTimeout(t);
        gloo::reduce(o);
      }
      if (op == ReduceOp::kAvg && rank() == root) divide(data, count, type, size());
    });
  }

  WorkPtr all_gather(const void* input, void* output, std::size_t count, DType type, Millis timeout) override {
    const Millis t = deadline(timeout);
    const uint32_t tag = next_tag();
    return queue_->submit(describe("all_gather", count, type), [=, this] {
      const std::size_t bytes = count * dtype_size(type);
      if (size() == 1 || bytes == 0) {
        if (bytes) std::memmove(output, input, bytes);
        return;
      }
      gloo::AllgatherOptions o(ctx_);
      o.setInput(const_cast<std::uint8_t*>(static_cast<const std::uint8_t*>(input)), bytes);
      o.setOutput(static_cast<std::uint8_t*>(output), bytes * size());
      o.setTag(tag);
      o.setTimeout(t);
      gloo::allgather(o);
    });
  }

  WorkPtr gather(const void* input, void* output, std::size_t count, DType type, int root, Millis timeout) override {
    check_rank(root, "gather root");
    const Millis t = deadline(timeout);
    const uint32_t tag = next_tag();
    return queue_->submit(describe("gather", count, type), [=, this] {
      const std::size_t bytes = count * dtype_size(type);
      if (size() == 1 || bytes == 0) {
        if (bytes) std::memmove(output, input, bytes);
        return;
      }
      gloo::GatherOptions o(ctx_);
      o.setInput(const_cast<std::uint8_t*>(static_cast<const std::uint8_t*>(input)), bytes);
      if (rank() == root) o.setOutput(static_cast<std::uint8_t*>(output), bytes * size());
      o.setRoot(root);
      o.setTag(tag);
      o.setTimeout(t);
      gloo::gather(o);
    });
  }

  WorkPtr scatter(const void* input, void* output, std::size_t count, DType type, int root, Millis timeout) override {
    check_rank(root, "scatter root");
    const Millis t = deadline(timeout);
    const uint32_t tag = next_tag();
    return queue_->submit(describe("scatter", count, type), [=, this] {
      const std::size_t bytes = count * dtype_size(type);
      if (size() == 1 || bytes == 0) {
        if (bytes) std::memmove(output, input, bytes);
        return;
      }
      gloo::ScatterOptions o(ctx_);
      if (rank() == root) {
        std::vector<std::uint8_t*> ptrs;
        auto* base = const_cast<std::uint8_t*>(static_cast<const std::uint8_t*>(input));
        for (int r = 0; r < size(); ++r) ptrs.push_back(base + r * bytes);
        o.setInputs(ptrs, bytes);
      }
      o.setOutput(static_cast<std::uint8_t*>(output), bytes);
      o.setRoot(root);
      o.setTag(tag);
      o.setTimeout(t);
      gloo::scatter(o);
    });
  }

  // Over the mesh: each rank receives only its slice from every peer, (N-1)/N of the input each
  // way. (Gloo 0.5's only reduce-scatter, ReduceScatterHalvingDoubling, is a bound-buffer
  // algorithm; see the header on mixing those with the unbound collectives.)
  WorkPtr reduce_scatter(const void* input, void* output, std::size_t count, DType type, ReduceOp op,
                         Millis timeout) override {
    const Millis t = deadline(timeout);
    return queue_->submit(describe("reduce_scatter", count, type) + " " + reduce_op_name(op), [=, this] {
      check_reduction(type);
      mesh_reduce_scatter(*mesh_, input, output, count, dtype_size(type), func(type, op), Clock::now() + t, scratch_);
      if (op == ReduceOp::kAvg && size() > 1) divide(output, count, type, size());
    });
  }

  WorkPtr barrier(Millis timeout) override {
    const Millis t = deadline(timeout);
    return queue_->submit("gloo barrier", [=, this] { mesh_barrier(*mesh_, Clock::now() + t); });
  }

  // send/recv are posted at once from the caller's thread (Gloo pairs are thread-safe) and
  // waited for in wait(), so a send never blocks the collective queue waiting for its receiver.
  WorkPtr send(const void* data, std::size_t count, DType type, int dst, std::uint32_t tag, Millis timeout) override {
    check_peer(dst, "send destination");
    auto buf = ctx_->createUnboundBuffer(const_cast<void*>(data), count * dtype_size(type));
    buf->send(dst, p2p_slot(tag));
    return std::make_shared<P2PWork>(std::move(buf), true, deadline(timeout),
                                     describe("send", count, type) + " to " + std::to_string(dst));
  }

  WorkPtr recv(void* data, std::size_t count, DType type, int src, std::uint32_t tag, Millis timeout) override {
    check_peer(src, "recv source");
    auto buf = ctx_->createUnboundBuffer(data, count * dtype_size(type));
    buf->recv(src, p2p_slot(tag));
    return std::make_shared<P2PWork>(std::move(buf), false, deadline(timeout),
                                     describe("recv", count, type) + " from " + std::to_string(src));
  }

 private:
  // The operation all_reduce and all_reduce_now run; the path it takes depends only on inputs
  // that are the same on every rank.
  std::function<void()> all_reduce_op(void* data, std::size_t count, DType type, ReduceOp op, Millis timeout) {
    using Algo = GlooOptions::AllreduceAlgo;
    const bool ring_wanted = options_.allreduce == Algo::kRingChunked || options_.allreduce == Algo::kRing;
    const bool ring = ring_wanted && type != DType::kBFloat16 && (timeout.count() <= 0 || timeout == options_.timeout) &&
                      count <= INT_MAX;
    // Small: one exchange of whole buffers over the mesh ((size - 1) x bytes sent per rank).
    // Bigger, 2 ranks: the mesh's reduce-scatter + all-gather (a ring's bytes, half the
    // reductions). Bigger, more ranks: Gloo's ring. The inputs of this choice are the same on
    // every rank, so every rank takes the same path.
    const std::size_t traffic = count * dtype_size(type) * static_cast<std::size_t>(size() - 1);
    const bool direct = options_.allreduce == Algo::kDirect ||
                        (options_.allreduce == Algo::kAuto && traffic <= options_.direct_max_bytes);
    const bool sliced = options_.allreduce == Algo::kSliced || (options_.allreduce == Algo::kAuto && !direct && size() == 2);
    const Millis t = deadline(timeout);
    const uint32_t tag = next_tag();
    return [=, this] {
      check_reduction(type);
      if (count == 0) return;
      if (size() == 1) {
        // nothing to combine
      } else if (direct) {
        mesh_all_reduce(*mesh_, data, count, dtype_size(type), func(type, op), Clock::now() + t, scratch_);
      } else if (sliced) {
        mesh_all_reduce_sliced(*mesh_, data, count, dtype_size(type), func(type, op), Clock::now() + t, scratch_);
      } else if (ring) {
        dispatch(type, [&]<typename T>() {
          if constexpr (!std::is_same_v<T, std::uint16_t>) run_ring<T>(static_cast<T*>(data), count, type, op);
        });
      } else {
        gloo::AllreduceOptions o(ctx_);
        dispatch(type, [&]<typename T>() { o.setOutput(static_cast<T*>(data), count); });
        o.setReduceFunction(func(type, op));
        o.setTag(tag);
        o.setTimeout(t);
        if (options_.segment_bytes > 0) o.setMaxSegmentSize(options_.segment_bytes);
        gloo::allreduce(o);
      }
      if (op == ReduceOp::kAvg && size() > 1) divide(data, count, type, size());
    };
  }

  // Ring all_reduce through a cache of Gloo algorithm objects keyed by (dtype, op, count).
  // Building a ring is expensive (it mallocs two full-size inboxes, whose pages then fault in,
  // and registers buffers with both neighbours), so a persistent instance with its own buffer is
  // kept per key; the user's data is copied in and out. The key never contains a pointer, so
  // every rank (issuing the same collectives in the same order) makes the same hit/miss/evict
  // decisions and Gloo's slot numbers stay in step. Queue thread only.
  template <typename T>
  void run_ring(T* data, std::size_t count, DType type, ReduceOp op) {
    const std::size_t bytes = count * sizeof(T);
    const auto key = std::make_tuple(static_cast<int>(type), static_cast<int>(op), count);
    auto it = ring_cache_.find(key);
    if (it == ring_cache_.end()) {
      while (!ring_lru_.empty() && ring_cache_bytes_ + bytes > kRingCacheBytes) {
        auto victim = ring_cache_.find(ring_lru_.front());
        ring_cache_bytes_ -= victim->second.buf.size();
        ring_cache_.erase(victim);
        ring_lru_.pop_front();
      }
      CachedRing c;
      c.buf.resize(bytes);
      std::vector<T*> ptrs{reinterpret_cast<T*>(c.buf.data())};
      if (options_.allreduce == GlooOptions::AllreduceAlgo::kRing) {
        c.algo = std::make_unique<gloo::AllreduceRing<T>>(ctx_, ptrs, static_cast<int>(count), ring_func<T>(op));
      } else {
        c.algo = std::make_unique<gloo::AllreduceRingChunked<T>>(ctx_, ptrs, static_cast<int>(count), ring_func<T>(op));
      }
      ring_cache_bytes_ += bytes;
      ring_lru_.push_back(key);
      it = ring_cache_.emplace(key, std::move(c)).first;
    } else {
      ring_lru_.erase(std::find(ring_lru_.begin(), ring_lru_.end(), key));
      ring_lru_.push_back(key);
    }
    std::memcpy(it->second.buf.data(), static_cast<const void*>(data), bytes);
    it->second.algo->run();
    std::memcpy(static_cast<void*>(data), it->second.buf.data(), bytes);
  }

  using RingKey = std::tuple<int, int, std::size_t>;
  struct CachedRing {
    std::vector<std::uint8_t> buf;
    std::unique_ptr<gloo::Algorithm> algo;
  };
  static constexpr std::size_t kRingCacheBytes = 512u << 20;
  std::map<RingKey, CachedRing> ring_cache_;
  std::deque<RingKey> ring_lru_;
  std::size_t ring_cache_bytes_ = 0;

  static uint64_t p2p_slot(std::uint32_t tag) { return gloo::Slot::build(0x70, tag); }
  Millis deadline(Millis t) const { return t.count() > 0 ? t : options_.timeout; }
  uint32_t next_tag() { return tag_++; }
  void check_rank(int r, const char* what) const {
    if (r < 0 || r >= size()) throw CollectiveError(std::string("gloo: ") + what + " " + std::to_string(r) + " out of range");
  }
  void check_peer(int r, const char* what) const {
    check_rank(r, what);
    if (r == rank()) throw CollectiveError(std::string("gloo: ") + what + " is this rank");
  }
  static void check_reduction(DType t) {
    if (t == DType::kUInt8) throw CollectiveError("uint8 is not a reduction type");
  }
  static Func func(DType t, ReduceOp op) {
    if (t == DType::kBFloat16) return bf16_func(op);
    Func f;
    dispatch(t, [&]<typename T>() {
      if constexpr (!std::is_same_v<T, std::uint16_t>) f = typed_func<T>(op);
    });
    return f;
  }

  std::shared_ptr<gloo::rendezvous::Context> ctx_;
  std::unique_ptr<TcpMesh> mesh_;
  // The mesh collectives' receive slots, kept between calls (fresh pages cost ~4 ms per MiB to
  // fault in on this VM); rounds of at most chunk_bytes per peer keep them near
  // options_.mesh_scratch_bytes.
  MeshScratch scratch_;
  GlooOptions options_;
  uint32_t tag_ = 1;
  std::unique_ptr<OpQueue> queue_ = std::make_unique<OpQueue>(/*inline_only=*/ctx_->size == 1);
};

}  // namespace

std::unique_ptr<ProcessGroup> make_gloo_process_group(crun::Store& store, int rank, int size,
                                                      const GlooOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw InitError("gloo: rank " + std::to_string(rank) + " of world size " + std::to_string(size) + " is invalid");
  }
  gloo::transport::tcp::attr attr;
  if (!options.iface.empty()) {
    attr.iface = options.iface;
  } else if (!options.hostname.empty()) {
    attr.hostname = options.hostname;
  } else if (options.loopback) {
    attr.hostname = "127.0.0.1";
  } else {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    attr.hostname = host;
  }
  try {
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    ctx->setTimeout(options.timeout);
    GlooStoreAdapter adapter(store, options.timeout);
    ctx->connectFullMesh(adapter, dev);
    auto mesh = TcpMesh::connect(store, "crun_mesh/", rank, size, attr.hostname, attr.iface, options.timeout);
    return std::make_unique<GlooProcessGroup>(std::move(ctx), std::move(mesh), options);
  } catch (const std::exception& e) {
    throw InitError("gloo: connecting rank " + std::to_string(rank) + " of " + std::to_string(size) + " via " +
                    (attr.iface.empty() ? attr.hostname : "interface " + attr.iface) + " failed: " + e.what());
  }
}

}  // namespace crun::rt
