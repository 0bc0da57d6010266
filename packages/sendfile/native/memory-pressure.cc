// V8's memory pressure notification. A server whose shapes expire by the
// thousand turns a large live heap into garbage at once, then goes quiet: V8
// collects when allocation asks it to, so an idle process keeps the dead heap
// resident indefinitely. Node has no API for this short of --expose-gc; the
// notification is V8's own supported way to say "free what you can now".
// Node-API does not reach the isolate, so this one file uses V8's headers.
#include "memory-pressure.h"

#include <v8.h>

namespace sluice {

// memoryPressure(critical): moderate starts incremental marking that shrinks
// the heap when it finishes (no long pause); critical collects at once.
Napi::Value MemoryPressure(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  v8::Isolate* isolate = v8::Isolate::GetCurrent();
  if (isolate == nullptr) return Napi::Boolean::New(env, false);
  const bool critical = info.Length() > 0 && info[0].IsBoolean() && info[0].As<Napi::Boolean>().Value();
  isolate->MemoryPressureNotification(critical ? v8::MemoryPressureLevel::kCritical : v8::MemoryPressureLevel::kModerate);
  return Napi::Boolean::New(env, true);
}

// lowMemory(): V8's low memory notification, for a heap whose garbage is
// known to be most of it: full collections, compacting, repeated (two to
// seven) until one frees nothing more, after the compilation cache is
// cleared. The pause is that of marking what is live, a few times.
Napi::Value LowMemory(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  v8::Isolate* isolate = v8::Isolate::GetCurrent();
  if (isolate == nullptr) return Napi::Boolean::New(env, false);
  isolate->LowMemoryNotification();
  return Napi::Boolean::New(env, true);
}

}  // namespace sluice
