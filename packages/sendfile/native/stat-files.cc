// Many files' sizes and inodes in one call, for the storage engine's open
// after a clean stop: it checks every log's files against the heads file,
// three files a log, which through fs.statSync costs a JS Stats object (and
// its Date objects) and a whole-path lookup per file. Here each lookup is
// relative to one open base directory and the results go into one typed array.
#include "stat-files.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <utility>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace sluice {

namespace {

Napi::Value ThrowErrno(Napi::Env env, const std::string& what, int err) {
  Napi::Error error = Napi::Error::New(env, what + ": " + std::strerror(err));
  error.Set("errno", Napi::Number::New(env, err));
  error.ThrowAsJavaScriptException();
  return env.Undefined();
}

bool StringList(const Napi::Value& value, std::vector<std::string>& out) {
  if (!value.IsArray()) return false;
  Napi::Array array = value.As<Napi::Array>();
  const uint32_t n = array.Length();
  out.reserve(n);
  for (uint32_t i = 0; i < n; i++) {
    Napi::Value item = array.Get(i);
    if (!item.IsString()) return false;
    out.push_back(item.As<Napi::String>().Utf8Value());
  }
  return true;
}

// The directories of `joined`, each followed by a NUL (a byte no path holds).
std::vector<std::string> SplitJoined(const std::string& joined) {
  std::vector<std::string> out;
  size_t from = 0;
  for (size_t at = joined.find('\0'); at != std::string::npos; at = joined.find('\0', from)) {
    out.emplace_back(joined, from, at - from);
    from = at + 1;
  }
  return out;
}

// Every file's size and inode into `slots`; returns 0, or the errno of opening `base`.
int StatAll(const std::string& base, const std::vector<std::string>& dirs, const std::vector<std::string>& names, double* slots) {
  int baseFd;
  do {
    baseFd = open(base.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  } while (baseFd < 0 && errno == EINTR);
  if (baseFd < 0) return errno;
  std::string path;
  size_t at = 0;
  for (const std::string& dir : dirs) {
    for (const std::string& name : names) {
      path.assign(dir).append(1, '/').append(name);
      struct stat st;
      if (fstatat(baseFd, path.c_str(), &st, 0) == 0) {
        slots[at] = static_cast<double>(st.st_size);
        slots[at + 1] = static_cast<double>(st.st_ino);
      } else {
        slots[at] = -1;
        slots[at + 1] = errno;
      }
      at += 2;
    }
  }
  close(baseFd);
  return 0;
}

// The same on a pool thread: `out` is held until the callback, which gets
// null or an Error (with `errno`) when `base` could not be opened.
class StatTask : public Napi::AsyncWorker {
 public:
  StatTask(Napi::Function callback, std::string base, std::vector<std::string> dirs, std::string joined, std::vector<std::string> names, Napi::Float64Array out)
      : Napi::AsyncWorker(callback, "sluice.statFiles"),
        base_(std::move(base)),
        dirs_(std::move(dirs)),
        joined_(std::move(joined)),
        names_(std::move(names)),
        out_(Napi::Persistent(out)),
        slots_(out.Data()) {}

  void Execute() override {
    // Joined directories are split here, on the pool thread, not on the event loop.
    if (!joined_.empty()) dirs_ = SplitJoined(joined_);
    error_ = StatAll(base_, dirs_, names_, slots_);
  }

  void OnOK() override {
    Napi::Env env = Env();
    out_.Reset();
    if (error_ == 0) {
      Callback().Call({env.Null()});
      return;
    }
    Napi::Error error = Napi::Error::New(env, "statFiles: open " + base_ + ": " + std::strerror(error_));
    error.Set("errno", Napi::Number::New(env, error_));
    Callback().Call({error.Value()});
  }

 private:
  const std::string base_;
  std::vector<std::string> dirs_;
  const std::string joined_;
  const std::vector<std::string> names_;
  Napi::Reference<Napi::Float64Array> out_;
  double* const slots_;
  int error_ = 0;
};

}  // namespace

// statFiles(base, dirs, names, out[, callback]): for each dir of `dirs`
// (relative to `base`) and each name of `names`, writes the file's size and
// inode at out[2 * (d * names.length + n)] and the next slot; a file that
// cannot be stat'ed gets size -1 and its errno in the inode's slot. Without a
// callback it runs now and throws when `base` cannot be opened; with one it
// runs on the libuv pool and calls back once `out` is filled. `dirs` is an
// array of strings, or one string holding each directory followed by a NUL:
// one conversion instead of one per directory (2 µs each, on the event loop,
// which at 100k directories was a tenth of an open).
Napi::Value StatFiles(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::vector<std::string> dirs;
  std::string joined;
  std::vector<std::string> names;
  const bool async = info.Length() >= 5 && info[4].IsFunction();
  const bool isJoined = info.Length() >= 2 && info[1].IsString();
  if (isJoined) joined = info[1].As<Napi::String>().Utf8Value();
  if (info.Length() < 4 || !info[0].IsString() || (!isJoined && !StringList(info[1], dirs)) || !StringList(info[2], names) ||
      !info[3].IsTypedArray() || info[3].As<Napi::TypedArray>().TypedArrayType() != napi_float64_array) {
    Napi::TypeError::New(env, "statFiles(base: string, dirs: string[] | string, names: string[], out: Float64Array, callback?)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  if (isJoined && (joined.empty() || joined.back() != '\0')) {
    Napi::TypeError::New(env, "statFiles: joined dirs must each end with a NUL").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  // Counted here for the bound check; split on the pool thread when async.
  const size_t dirCount = isJoined ? static_cast<size_t>(std::count(joined.begin(), joined.end(), '\0')) : dirs.size();
  Napi::Float64Array out = info[3].As<Napi::Float64Array>();
  if (out.ElementLength() < dirCount * names.size() * 2) {
    Napi::RangeError::New(env, "statFiles: out holds fewer than 2 * dirs.length * names.length numbers").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  std::string base = info[0].As<Napi::String>().Utf8Value();
  if (async) {
    (new StatTask(info[4].As<Napi::Function>(), std::move(base), std::move(dirs), std::move(joined), std::move(names), out))->Queue();
    return env.Undefined();
  }
  if (isJoined) dirs = SplitJoined(joined);
  const int err = StatAll(base, dirs, names, out.Data());
  if (err != 0) return ThrowErrno(env, "statFiles: open " + base, err);
  return env.Undefined();
}

}  // namespace sluice
