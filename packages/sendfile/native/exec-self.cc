// execve(2) for a process that must change its environment before it runs:
// glibc reads MALLOC_ARENA_MAX when its allocator starts, before any thread
// exists, and V8's helper threads have taken their own arenas by the time a
// script could call mallopt. Replacing the process image keeps the pid, the
// open descriptors 0-2 and the parent; Node has no execve before 23.
#include "exec-self.h"

#include <cerrno>
#include <csignal>
#include <fcntl.h>
#include <string>
#include <unistd.h>
#include <vector>

namespace sluice {

namespace {

bool StringsOf(const Napi::Value& value, std::vector<std::string>& out) {
  if (!value.IsArray()) return false;
  Napi::Array array = value.As<Napi::Array>();
  for (uint32_t i = 0; i < array.Length(); i++) {
    Napi::Value item = array.Get(i);
    if (!item.IsString()) return false;
    out.push_back(item.As<Napi::String>().Utf8Value());
  }
  return true;
}

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

}  // namespace

// execSelf(file, argv, env): env as "NAME=value" strings. Returns only when
// execve failed: its errno (EINVAL for arguments that are not strings).
Napi::Value ExecSelf(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::vector<std::string> argv;
  std::vector<std::string> envp;
  if (info.Length() < 3 || !info[0].IsString() || !StringsOf(info[1], argv) || !StringsOf(info[2], envp) || argv.empty()) {
    return Napi::Number::New(env, EINVAL);
  }
  const std::string file = info[0].As<Napi::String>().Utf8Value();
  std::vector<char*> argvp = Pointers(argv);
  std::vector<char*> envpp = Pointers(envp);
  int flags[3];
  for (int fd = 0; fd < 3; fd++) {
    flags[fd] = fcntl(fd, F_GETFD);
    if (flags[fd] != -1 && (flags[fd] & FD_CLOEXEC) != 0) fcntl(fd, F_SETFD, flags[fd] & ~FD_CLOEXEC);
  }
  // A sampling profiler (node --cpu-prof) signals the main thread with
  // SIGPROF every few hundred microseconds. A signal pending at the execve
  // outlives the image whose handler it was meant for, and the new image's
  // default action for SIGPROF ends the process before it runs. Ignoring it
  // discards a pending one and any sent until the exec; the disposition
  // SIG_IGN carries over, and the new image's profiler installs its handler.
  struct sigaction ignore = {};
  struct sigaction previous = {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  const bool ignored = sigaction(SIGPROF, &ignore, &previous) == 0;
  execve(file.c_str(), argvp.data(), envpp.data());
  const int failed = errno;
  if (ignored) sigaction(SIGPROF, &previous, nullptr);
  for (int fd = 0; fd < 3; fd++) {
    if (flags[fd] != -1) fcntl(fd, F_SETFD, flags[fd]);
  }
  return Napi::Number::New(env, failed);
}

}  // namespace sluice
