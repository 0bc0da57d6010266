#pragma once
#include <napi.h>

namespace sluice {
Napi::Value LockFile(const Napi::CallbackInfo& info);
}
