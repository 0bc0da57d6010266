#pragma once
#include <napi.h>

namespace sluice {
Napi::Value MemoryPressure(const Napi::CallbackInfo& info);
Napi::Value LowMemory(const Napi::CallbackInfo& info);
}
