#pragma once
#include <napi.h>

namespace sluice {
Napi::Value StatFiles(const Napi::CallbackInfo& info);
}
