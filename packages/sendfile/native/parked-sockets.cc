// Parked sockets: connections whose request waits for data, held outside
// Node's HTTP objects (see README.md, "Parked sockets").
//
// A parked connection is a dup() of its socket's descriptor and one poll
// registration that watches for the peer leaving, nothing else: the caller
// destroys Node's socket right after `park`, which closes Node's descriptor
// while the dup keeps the connection open. The answer is written here
// (writev, non-blocking, resumed on writability), and the descriptor is then
// handed back to JS to be adopted by a new Node socket, or closed.
//
// Ids are never reused (a counter), so an id that JS still holds after its
// connection went cannot name another connection.
#include "parked-sockets.h"

#include <uv.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include <unordered_map>

namespace sluice {
namespace {

class Parking;

struct Parked {
  uv_poll_t poll;
  Parking* owner = nullptr;
  double id = 0;
  int fd = -1;
  // Set once an answer is being written.
  bool answering = false;
  bool keep_open = false;
  Napi::Reference<Napi::Buffer<uint8_t>> head;
  Napi::Reference<Napi::Buffer<uint8_t>> body;
  size_t head_length = 0;
  size_t body_length = 0;
  const uint8_t* head_data = nullptr;
  const uint8_t* body_data = nullptr;
  // Bytes of head then body already written.
  size_t written = 0;
  Napi::FunctionReference callback;
};

int PendingSocketError(int fd) {
  int error = 0;
  socklen_t size = sizeof(error);
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) != 0) return errno;
  return error != 0 ? error : EPIPE;
}

void FreeHandle(uv_handle_t* handle) { delete static_cast<Parked*>(handle->data); }

class Parking : public Napi::ObjectWrap<Parking> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "Parking",
                       {InstanceMethod<&Parking::Park>("park"), InstanceMethod<&Parking::Answer>("answer"),
                        InstanceMethod<&Parking::Drop>("drop"), InstanceMethod<&Parking::Written>("written"),
                        InstanceAccessor<&Parking::Size>("size")});
  }

  // new Parking(onGone(id)): onGone is called when a parked connection's peer leaves (it is closed then).
  explicit Parking(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Parking>(info), async_context_(info.Env(), "sluice.parking") {
    Napi::Env env = info.Env();
    if (info.Length() < 1 || !info[0].IsFunction()) {
      Napi::TypeError::New(env, "Parking(onGone): a function is required").ThrowAsJavaScriptException();
      return;
    }
    on_gone_ = Napi::Persistent(info[0].As<Napi::Function>());
    if (napi_get_uv_event_loop(env, &loop_) != napi_ok) Napi::Error::New(env, "no libuv loop").ThrowAsJavaScriptException();
  }

  ~Parking() override {
    // Reached when JS dropped the object: every connection still held goes.
    for (auto& entry : parked_) Release(entry.second, true);
    parked_.clear();
  }

  // park(fd): the id of the parked connection. Throws when the descriptor cannot be held.
  Napi::Value Park(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (info.Length() < 1 || !info[0].IsNumber()) {
      Napi::TypeError::New(env, "park(fd): a descriptor number is required").ThrowAsJavaScriptException();
      return env.Undefined();
    }
    int socket_fd = info[0].As<Napi::Number>().Int32Value();
    int flags = fcntl(socket_fd, F_GETFL);
    if (flags < 0 || (flags & O_NONBLOCK) == 0) {
      Napi::Error::New(env, flags < 0 ? std::string("fcntl(F_GETFL): ") + strerror(errno) : "the socket is not in non-blocking mode")
          .ThrowAsJavaScriptException();
      return env.Undefined();
    }
    int fd = fcntl(socket_fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) {
      Napi::Error::New(env, std::string("dup: ") + strerror(errno)).ThrowAsJavaScriptException();
      return env.Undefined();
    }
    auto* parked = new Parked();
    parked->owner = this;
    parked->fd = fd;
    parked->poll.data = parked;
    int rc = uv_poll_init(loop_, &parked->poll, fd);
    if (rc != 0) {
      ::close(fd);
      delete parked;
      Napi::Error::New(env, std::string("uv_poll_init: ") + uv_strerror(rc)).ThrowAsJavaScriptException();
      return env.Undefined();
    }
    rc = uv_poll_start(&parked->poll, UV_DISCONNECT, OnPoll);
    if (rc != 0) {
      Release(parked, true);
      Napi::Error::New(env, std::string("uv_poll_start: ") + uv_strerror(rc)).ThrowAsJavaScriptException();
      return env.Undefined();
    }
    parked->id = ++last_id_;
    parked_.emplace(parked->id, parked);
    return Napi::Number::New(env, parked->id);
  }

  // answer(id, head, body | null, keepOpen, callback(errno, fd)): false when the id is not parked (its peer left).
  // The callback gets 0 and the descriptor (keepOpen) or -1 once every byte is written, or an errno and -1.
  Napi::Value Answer(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (info.Length() < 5 || !info[0].IsNumber() || !info[1].IsBuffer() || !(info[2].IsBuffer() || info[2].IsNull()) ||
        !info[3].IsBoolean() || !info[4].IsFunction()) {
      Napi::TypeError::New(env, "answer(id, head, body | null, keepOpen, callback)").ThrowAsJavaScriptException();
      return env.Undefined();
    }
    auto found = parked_.find(info[0].As<Napi::Number>().DoubleValue());
    if (found == parked_.end() || found->second->answering) return Napi::Boolean::New(env, false);
    Parked* parked = found->second;
    auto head = info[1].As<Napi::Buffer<uint8_t>>();
    parked->head = Napi::Persistent(head);
    parked->head_data = head.Data();
    parked->head_length = head.Length();
    if (info[2].IsBuffer()) {
      auto body = info[2].As<Napi::Buffer<uint8_t>>();
      parked->body = Napi::Persistent(body);
      parked->body_data = body.Data();
      parked->body_length = body.Length();
    }
    parked->keep_open = info[3].As<Napi::Boolean>().Value();
    parked->callback = Napi::Persistent(info[4].As<Napi::Function>());
    parked->answering = true;
    Write(parked, false);
    return Napi::Boolean::New(env, true);
  }

  // drop(id): closes a parked connection unanswered (nothing when the id is not parked).
  Napi::Value Drop(const Napi::CallbackInfo& info) {
    if (info.Length() < 1 || !info[0].IsNumber()) return info.Env().Undefined();
    auto found = parked_.find(info[0].As<Napi::Number>().DoubleValue());
    if (found == parked_.end()) return info.Env().Undefined();
    Parked* parked = found->second;
    parked_.erase(found);
    // An answer under way is cut too; its callback is never called.
    Release(parked, true);
    return info.Env().Undefined();
  }

  // written(id): bytes of the answer under way already in the socket; -1 when the id is not parked.
  Napi::Value Written(const Napi::CallbackInfo& info) {
    if (info.Length() < 1 || !info[0].IsNumber()) return Napi::Number::New(info.Env(), -1);
    auto found = parked_.find(info[0].As<Napi::Number>().DoubleValue());
    return Napi::Number::New(info.Env(), found == parked_.end() ? -1 : static_cast<double>(found->second->written));
  }

  Napi::Value Size(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), static_cast<double>(parked_.size())); }

 private:
  static void OnPoll(uv_poll_t* handle, int status, int /*events*/) {
    Parked* parked = static_cast<Parked*>(handle->data);
    Parking* self = parked->owner;
    Napi::HandleScope scope(self->Env());
    if (parked->answering) {
      // Writable again, or a failed poll (a hang-up shows as writable): the next write says which.
      self->Write(parked, status < 0);
      return;
    }
    // Parked: the peer left (or the socket failed). The connection goes, and JS hears of it.
    self->parked_.erase(parked->id);
    double id = parked->id;
    self->Release(parked, true);
    self->on_gone_.MakeCallback(self->Value(), {Napi::Number::New(self->Env(), id)}, self->async_context_);
  }

  // Writes what is left of the answer: until done, EAGAIN (then waits for writability) or an error.
  void Write(Parked* parked, bool after_poll_error) {
    const size_t total = parked->head_length + parked->body_length;
    int error = 0;
    while (parked->written < total) {
      iovec parts[2];
      int count = 0;
      if (parked->written < parked->head_length) {
        parts[count].iov_base = const_cast<uint8_t*>(parked->head_data + parked->written);
        parts[count].iov_len = parked->head_length - parked->written;
        count++;
        if (parked->body_length > 0) {
          parts[count].iov_base = const_cast<uint8_t*>(parked->body_data);
          parts[count].iov_len = parked->body_length;
          count++;
        }
      } else {
        size_t at = parked->written - parked->head_length;
        parts[count].iov_base = const_cast<uint8_t*>(parked->body_data + at);
        parts[count].iov_len = parked->body_length - at;
        count++;
      }
      // MSG_NOSIGNAL: a peer gone is an EPIPE here, never a SIGPIPE for the process.
      msghdr message{};
      message.msg_iov = parts;
      message.msg_iovlen = static_cast<size_t>(count);
      ssize_t n = ::sendmsg(parked->fd, &message, MSG_NOSIGNAL);
      if (n > 0) {
        parked->written += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      error = n < 0 ? errno : EPIPE;
      if ((error == EAGAIN || error == EWOULDBLOCK) && after_poll_error) error = PendingSocketError(parked->fd);
      break;
    }
    if (parked->written == total) return Finish(parked, 0);
    if (error != EAGAIN && error != EWOULDBLOCK) return Finish(parked, error);
    // Writability alone: a peer that only half-closed may still read, and the poll is level-triggered, so
    // watching for its disconnect here would wake the loop for ever while the socket buffer stays full.
    int rc = uv_poll_start(&parked->poll, UV_WRITABLE, OnPoll);
    if (rc != 0) Finish(parked, -rc);
  }

  void Finish(Parked* parked, int error) {
    parked_.erase(parked->id);
    Napi::FunctionReference callback = std::move(parked->callback);
    const bool hand_back = error == 0 && parked->keep_open;
    int fd = hand_back ? parked->fd : -1;
    // Handed back: the poll goes (uv_close takes the descriptor out of epoll at once), the descriptor stays open.
    Release(parked, !hand_back);
    Napi::Env env = Env();
    callback.MakeCallback(Value(), {Napi::Number::New(env, error), Napi::Number::New(env, fd)}, async_context_);
  }

  // Stops watching the connection (the handle's memory goes in its close callback), and closes it if asked.
  void Release(Parked* parked, bool close_descriptor) {
    parked->head.Reset();
    parked->body.Reset();
    parked->callback.Reset();
    // uv_close first: it takes the descriptor out of epoll, which must happen while the number is still ours.
    uv_close(reinterpret_cast<uv_handle_t*>(&parked->poll), FreeHandle);
    if (close_descriptor) ::close(parked->fd);
    parked->fd = -1;
  }

  uv_loop_t* loop_ = nullptr;
  double last_id_ = 0;
  std::unordered_map<double, Parked*> parked_;
  Napi::FunctionReference on_gone_;
  Napi::AsyncContext async_context_;
};

}  // namespace

Napi::Function DefineParking(Napi::Env env) { return Parking::Define(env); }

}  // namespace sluice
