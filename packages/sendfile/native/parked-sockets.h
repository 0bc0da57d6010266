#pragma once
#include <napi.h>

namespace sluice {
// The `Parking` class (parked-sockets.cc): connections held by descriptor while their request waits.
Napi::Function DefineParking(Napi::Env env);
}  // namespace sluice
