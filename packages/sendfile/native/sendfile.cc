// sendfile(2) from a file range to a connected, non-blocking socket, without
// blocking the event loop (see README.md, "How a send runs").
//
// A `Sender` owns a dup() of the socket's descriptor: libuv refuses a second
// poll handle on a descriptor it already watches (Node's own socket handle), and
// the dup lets us poll for writability independently. Each burst of sendfile
// calls runs on the libuv threadpool, so a page-cache miss stalls a pool thread,
// never the loop; a burst ends at EAGAIN (the socket buffer is full) and the
// next one is queued only once the socket is writable again, so a slow reader
// holds a poll registration, never a pool thread.
//
// Lifetime: JS calls close() exactly once. If a burst is still running on the
// pool then, the descriptor is closed when it returns (closing it under a
// running sendfile could send into a reused descriptor number).
#include <napi.h>

#include "exec-self.h"
#include "file-lock.h"
#include "memory-pressure.h"
#include "parked-sockets.h"
#include "stat-files.h"
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <uv.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fcntl.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace {

// One pool task sends at most this much before it gives its thread back, so a
// fast reader of a huge range cannot keep a pool thread (which other clients'
// file reads also need) for the whole transfer.
constexpr int64_t kMaxBytesPerTask = 4 * 1024 * 1024;

std::atomic<uint64_t> g_calls{0};
std::atomic<uint64_t> g_bytes{0};
std::atomic<int64_t> g_open_fds{0};
std::atomic<uint64_t> g_loop_bursts{0};
std::atomic<uint64_t> g_pool_bursts{0};

// cachestat(2): how many pages of a file range are in the page cache. Newer than
// glibc 2.36's headers; the number is the same on every architecture (new
// syscalls share one table).
#ifndef __NR_cachestat
#define __NR_cachestat 451
#endif
struct CachestatRange {
  uint64_t off;
  uint64_t len;
};
struct Cachestat {
  uint64_t nr_cache;
  uint64_t nr_dirty;
  uint64_t nr_writeback;
  uint64_t nr_evicted;
  uint64_t nr_recently_evicted;
};
// Set once the kernel says it has no cachestat: every burst then goes to the pool.
std::atomic<bool> g_no_cachestat{false};

// Whether every page of [position, position + length) is in the page cache, so
// sendfile will not wait for the disk. False when unknown. A page evicted
// between this answer and the sendfile costs one read on the loop, as it would
// in any server that sends files from its event loop.
bool Resident(int fd, int64_t position, int64_t length) {
  if (length <= 0 || g_no_cachestat.load(std::memory_order_relaxed)) return false;
  static const int64_t page = sysconf(_SC_PAGESIZE);
  CachestatRange range{static_cast<uint64_t>(position), static_cast<uint64_t>(length)};
  Cachestat stat{};
  if (syscall(__NR_cachestat, fd, &range, &stat, 0) != 0) {
    if (errno == ENOSYS) g_no_cachestat.store(true, std::memory_order_relaxed);
    return false;
  }
  int64_t pages = (position + length - 1) / page - position / page + 1;
  return static_cast<int64_t>(stat.nr_cache) >= pages;
}

int PendingSocketError(int fd) {
  int error = 0;
  socklen_t size = sizeof(error);
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) != 0) return errno;
  return error != 0 ? error : EIO;
}

// One burst: sendfile calls until `remaining` bytes (at most kMaxBytesPerTask)
// are sent, the socket buffer is full (EAGAIN) or an error. Returns the bytes
// sent; `*error` is 0 when the burst ended by its budget or by finishing.
int64_t Burst(int out_fd, int in_fd, int64_t position, int64_t remaining, bool after_poll_error, int* error) {
  int64_t budget = remaining < kMaxBytesPerTask ? remaining : kMaxBytesPerTask;
  int64_t sent = 0;
  *error = 0;
  while (budget > 0) {
    off_t offset = static_cast<off_t>(position + sent);
    ssize_t n = ::sendfile(out_fd, in_fd, &offset, static_cast<size_t>(budget));
    g_calls.fetch_add(1, std::memory_order_relaxed);
    if (n > 0) {
      sent += n;
      budget -= n;
      g_bytes.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
      continue;
    }
    if (n == 0) {
      // The file ends before the range does: the caller's span was wrong.
      *error = ENODATA;
      break;
    }
    if (errno == EINTR) continue;
    *error = errno;
    // libuv reports a socket error (EPOLLERR) as a failed poll; sendfile normally returns that
    // error itself, but should it still say EAGAIN the socket's pending error is the answer.
    if ((*error == EAGAIN || *error == EWOULDBLOCK) && after_poll_error) *error = PendingSocketError(out_fd);
    break;
  }
  return sent;
}

class Sender;

class SendTask : public Napi::AsyncWorker {
 public:
  SendTask(Napi::Env env, Sender* sender, int out_fd, int in_fd, int64_t position, int64_t remaining, bool after_poll_error)
      : Napi::AsyncWorker(env, "sluice.sendfile"),
        sender_(sender),
        out_fd_(out_fd),
        in_fd_(in_fd),
        position_(position),
        remaining_(remaining),
        after_poll_error_(after_poll_error) {}

  void Execute() override { sent_ = Burst(out_fd_, in_fd_, position_, remaining_, after_poll_error_, &error_); }

  void OnOK() override;

 private:
  Sender* const sender_;
  const int out_fd_;
  const int in_fd_;
  const int64_t position_;
  const int64_t remaining_;
  const bool after_poll_error_;
  int64_t sent_ = 0;
  int error_ = 0;
};

class Sender : public Napi::ObjectWrap<Sender> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "Sender", {InstanceMethod<&Sender::Send>("send"), InstanceMethod<&Sender::Close>("close"),
                                       InstanceMethod<&Sender::Remaining>("remaining")});
  }

  explicit Sender(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Sender>(info), async_context_(info.Env(), "sluice.sendfile") {
    Napi::Env env = info.Env();
    if (info.Length() < 1 || !info[0].IsNumber()) {
      Napi::TypeError::New(env, "Sender(socketFd): a descriptor number is required").ThrowAsJavaScriptException();
      return;
    }
    int socket_fd = info[0].As<Napi::Number>().Int32Value();
    int flags = fcntl(socket_fd, F_GETFL);
    if (flags < 0) {
      Napi::Error::New(env, std::string("fcntl(F_GETFL): ") + strerror(errno)).ThrowAsJavaScriptException();
      return;
    }
    // A blocking socket would make a burst wait for the reader on a pool thread.
    if ((flags & O_NONBLOCK) == 0) {
      Napi::Error::New(env, "the socket is not in non-blocking mode").ThrowAsJavaScriptException();
      return;
    }
    int fd = fcntl(socket_fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) {
      Napi::Error::New(env, std::string("dup: ") + strerror(errno)).ThrowAsJavaScriptException();
      return;
    }
    uv_loop_t* loop = nullptr;
    if (napi_get_uv_event_loop(env, &loop) != napi_ok) {
      ::close(fd);
      Napi::Error::New(env, "no libuv loop").ThrowAsJavaScriptException();
      return;
    }
    poll_ = new uv_poll_t;
    int rc = uv_poll_init(loop, poll_, fd);
    if (rc != 0) {
      delete poll_;
      poll_ = nullptr;
      ::close(fd);
      Napi::Error::New(env, std::string("uv_poll_init: ") + uv_strerror(rc)).ThrowAsJavaScriptException();
      return;
    }
    poll_->data = this;
    fd_ = fd;
    g_open_fds.fetch_add(1, std::memory_order_relaxed);
  }

  ~Sender() override {
    // Reached only if JS dropped a sender without close(); nothing can be running then
    // (a running send holds a reference).
    ReleaseDescriptor();
  }

  // send(inFd, position, length, callback(errno)): errno 0 once every byte is sent.
  Napi::Value Send(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (info.Length() < 4 || !info[0].IsNumber() || !info[1].IsNumber() || !info[2].IsNumber() || !info[3].IsFunction()) {
      Napi::TypeError::New(env, "send(inFd, position, length, callback)").ThrowAsJavaScriptException();
      return env.Undefined();
    }
    if (closed_ || fd_ < 0) {
      Napi::Error::New(env, "the sender is closed").ThrowAsJavaScriptException();
      return env.Undefined();
    }
    if (active_) {
      Napi::Error::New(env, "a send is already in progress").ThrowAsJavaScriptException();
      return env.Undefined();
    }
    double position = info[1].As<Napi::Number>().DoubleValue();
    double length = info[2].As<Napi::Number>().DoubleValue();
    if (position < 0 || length < 0) {
      Napi::RangeError::New(env, "position and length must be at least 0").ThrowAsJavaScriptException();
      return env.Undefined();
    }
    in_fd_ = info[0].As<Napi::Number>().Int32Value();
    position_ = static_cast<int64_t>(position);
    remaining_ = static_cast<int64_t>(length);
    callback_ = Napi::Persistent(info[3].As<Napi::Function>());
    active_ = true;
    Ref();
    NextBurst(false);
    return env.Undefined();
  }

  // remaining(): bytes of the send in progress not yet in the socket (0 when none is). Read on the loop,
  // where bursts are accounted (Advance), so it moves as the client takes the bytes.
  Napi::Value Remaining(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(active_ ? remaining_ : 0));
  }

  // close(): stops any send (its callback is never called) and closes the dup.
  Napi::Value Close(const Napi::CallbackInfo& info) {
    if (closed_) return info.Env().Undefined();
    closed_ = true;
    callback_.Reset();
    if (poll_ != nullptr) uv_poll_stop(poll_);
    if (!task_running_) {
      ReleaseDescriptor();
      if (active_) {
        active_ = false;
        Unref();
      }
    }
    return info.Env().Undefined();
  }

  void TaskDone(int64_t sent, int error) {
    task_running_ = false;
    if (closed_) {
      ReleaseDescriptor();
      active_ = false;
      Unref();
      return;
    }
    Advance(sent, error);
  }

 private:
  static void OnPoll(uv_poll_t* handle, int status, int /*events*/) {
    Sender* self = static_cast<Sender*>(handle->data);
    uv_poll_stop(handle);
    if (self->closed_) return;
    Napi::HandleScope scope(self->Env());
    // A disconnect shows as writable or as a failed poll (EPOLLERR): the next sendfile reports it.
    self->NextBurst(status < 0);
  }

  // The next burst: here on the loop when its whole range is in the page cache, else on the pool.
  void NextBurst(bool after_poll_error) {
    // Asked for what this burst may send, not the whole range: the kernel walks the page cache to answer.
    if (Resident(in_fd_, position_, remaining_ < kMaxBytesPerTask ? remaining_ : kMaxBytesPerTask)) {
      g_loop_bursts.fetch_add(1, std::memory_order_relaxed);
      int error = 0;
      int64_t sent = Burst(fd_, in_fd_, position_, remaining_, after_poll_error, &error);
      return Advance(sent, error);
    }
    g_pool_bursts.fetch_add(1, std::memory_order_relaxed);
    task_running_ = true;
    auto* task = new SendTask(Env(), this, fd_, in_fd_, position_, remaining_, after_poll_error);
    task->Queue();
  }

  void Advance(int64_t sent, int error) {
    position_ += sent;
    remaining_ -= sent;
    if (error == 0 && remaining_ == 0) return Finish(0);
    if (error != 0 && error != EAGAIN && error != EWOULDBLOCK) return Finish(error);
    // EAGAIN, or the burst's budget spent: the next burst once the socket is writable (at once after a
    // spent budget), so other clients get the loop and the pool in between.
    int rc = uv_poll_start(poll_, UV_WRITABLE | UV_DISCONNECT, OnPoll);
    if (rc != 0) Finish(-rc);
  }

  void Finish(int error) {
    active_ = false;
    Napi::FunctionReference callback = std::move(callback_);
    Napi::Env env = Env();
    // MakeCallback: called from a poll callback, outside any JS, the promise jobs it queues must run after it.
    if (!callback.IsEmpty()) callback.MakeCallback(env.Global(), {Napi::Number::New(env, error)}, async_context_);
    // After the call: the callback may start the next send, which takes its own reference.
    Unref();
  }

  void ReleaseDescriptor() {
    if (poll_ != nullptr) {
      // uv_close stops the poll and takes the descriptor out of epoll at once; the
      // handle's memory goes in its close callback.
      uv_close(reinterpret_cast<uv_handle_t*>(poll_), [](uv_handle_t* h) { delete reinterpret_cast<uv_poll_t*>(h); });
      poll_ = nullptr;
    }
    if (fd_ >= 0) {
      ::close(fd_);
      fd_ = -1;
      g_open_fds.fetch_sub(1, std::memory_order_relaxed);
    }
  }

  int fd_ = -1;
  uv_poll_t* poll_ = nullptr;
  bool closed_ = false;
  bool active_ = false;
  bool task_running_ = false;
  int in_fd_ = -1;
  int64_t position_ = 0;
  int64_t remaining_ = 0;
  Napi::FunctionReference callback_;
  Napi::AsyncContext async_context_;
};

void SendTask::OnOK() { sender_->TaskDone(sent_, error_); }

Napi::Value Stats(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object out = Napi::Object::New(env);
  out.Set("calls", Napi::Number::New(env, static_cast<double>(g_calls.load())));
  out.Set("bytes", Napi::Number::New(env, static_cast<double>(g_bytes.load())));
  out.Set("openDescriptors", Napi::Number::New(env, static_cast<double>(g_open_fds.load())));
  out.Set("loopBursts", Napi::Number::New(env, static_cast<double>(g_loop_bursts.load())));
  out.Set("poolBursts", Napi::Number::New(env, static_cast<double>(g_pool_bursts.load())));
  return out;
}

// glibc keeps freed memory in its heaps and gives back only the top of each:
// after a burst of large allocations (a huge transaction's buffers) the
// process stays that large. malloc_trim(0) returns every free page of every
// arena to the kernel. Node offers no way to call it; other C libraries
// (musl) return memory on their own, so there it is a no-op.
Napi::Value TrimHeap(const Napi::CallbackInfo& info) {
#ifdef __GLIBC__
  return Napi::Boolean::New(info.Env(), malloc_trim(0) == 1);
#else
  return Napi::Boolean::New(info.Env(), false);
#endif
}

// glibc gives each thread that allocates its own arena, up to 8 per core, and
// an arena's pages stay resident as long as any chunk in them is live:
// background threads (the thread pool's, V8's) that allocate in bursts leave
// each a few MiB resident for good. limitArenas(n) caps how many there are
// (mallopt M_ARENA_MAX); threads that already have an arena keep it, so it is
// worth calling only at start-up.
Napi::Value LimitArenas(const Napi::CallbackInfo& info) {
#ifdef __GLIBC__
  const int n = info.Length() > 0 && info[0].IsNumber() ? info[0].As<Napi::Number>().Int32Value() : 0;
  if (n < 1) return Napi::Boolean::New(info.Env(), false);
  return Napi::Boolean::New(info.Env(), mallopt(M_ARENA_MAX, n) == 1);
#else
  return Napi::Boolean::New(info.Env(), false);
#endif
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("Sender", Sender::Define(env));
  exports.Set("stats", Napi::Function::New(env, Stats));
  exports.Set("trimHeap", Napi::Function::New(env, TrimHeap));
  exports.Set("limitArenas", Napi::Function::New(env, LimitArenas));
  exports.Set("lockFile", Napi::Function::New(env, sluice::LockFile));
  exports.Set("memoryPressure", Napi::Function::New(env, sluice::MemoryPressure));
  exports.Set("lowMemory", Napi::Function::New(env, sluice::LowMemory));
  exports.Set("statFiles", Napi::Function::New(env, sluice::StatFiles));
  // This build takes `dirs` joined into one string (stat-files.cc); an older one only as an array.
  exports.Set("statFilesJoined", Napi::Boolean::New(env, true));
  exports.Set("execSelf", Napi::Function::New(env, sluice::ExecSelf));
  exports.Set("Parking", sluice::DefineParking(env));
  return exports;
}

}  // namespace

NODE_API_MODULE(sluice_sendfile, Init)
