#pragma once
#include <napi.h>

namespace sluice {
Napi::Value ExecSelf(const Napi::CallbackInfo& info);
}
