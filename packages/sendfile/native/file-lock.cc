// flock(2) for the storage directory's writer lock. The kernel releases the
// lock when the last descriptor of the open file is closed, which happens when
// its holder exits however it exits (SIGKILL included): unlike a pid written
// in a file, it can never name a process that is gone or still going away.
#include "file-lock.h"

#include <cerrno>
#include <cstring>
#include <sys/file.h>

namespace sluice {

// lockFile(fd, exclusive): true when the lock is taken, false when another open
// file holds it; never waits. Any other failure throws with its errno name.
Napi::Value LockFile(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsNumber() || !info[1].IsBoolean()) {
    Napi::TypeError::New(env, "lockFile(fd: number, exclusive: boolean)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  const int fd = info[0].As<Napi::Number>().Int32Value();
  const int op = (info[1].As<Napi::Boolean>().Value() ? LOCK_EX : LOCK_SH) | LOCK_NB;
  int rc;
  do {
    rc = flock(fd, op);
  } while (rc != 0 && errno == EINTR);
  if (rc == 0) return Napi::Boolean::New(env, true);
  if (errno == EWOULDBLOCK) return Napi::Boolean::New(env, false);
  const int err = errno;
  Napi::Error error = Napi::Error::New(env, std::string("flock: ") + std::strerror(err));
  error.Set("errno", Napi::Number::New(env, err));
  error.ThrowAsJavaScriptException();
  return env.Undefined();
}

}  // namespace sluice
