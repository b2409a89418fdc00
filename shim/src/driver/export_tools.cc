// The tools tables: where the runtime looks for profiling tools (CUPTI and the like) that the
// driver would have attached. Remora attaches none on the client, so the runtime is handed
// empty state: it runs as it does natively without a tool.
#include <cstddef>
#include <cstdint>

#include "driver/export_tables.h"
#include "remora/base/log.h"

namespace remora::shim::driver::exports {
namespace {

// ---- TOOLS_RUNTIME_CALLBACK_HOOKS (a094798c-2e74-2e74-93f2-0800200c0a66) ----------------------
// Asked for at initialisation, mandatory. Slots 2 and 6: (void** buffer, size_t* size) -> void,
// each called once: a process-wide buffer the runtime reads its tools' callback switches from
// (all zero: no callback is subscribed). The sizes are those the runtime was seen to need.
alignas(64) unsigned char hooks_a[1024];
alignas(64) unsigned char hooks_b[64];

void HooksBufferA(void** buffer, size_t* size) {
  LOG_DEBUG("CALLBACK_HOOKS[2]({}, {})", fmt::ptr(buffer), fmt::ptr(size));
  if (buffer != nullptr) *buffer = hooks_a;
  if (size != nullptr) *size = sizeof(hooks_a);
}

void HooksBufferB(void** buffer, size_t* size) {
  LOG_DEBUG("CALLBACK_HOOKS[6]({}, {})", fmt::ptr(buffer), fmt::ptr(size));
  if (buffer != nullptr) *buffer = hooks_b;
  if (size != nullptr) *size = 14;  // as the driver: the runtime checks the size it is given
}

constexpr size_t kHookSlots = 7;
const void* const kHooks[kHookSlots] = {
    SizeSlot(kHookSlots),
    Fn(&Declined<kCallbackHooks, 1>),  // seen on the host-function thread (callback_order passes)
    Fn(&HooksBufferA),
    Fn(&Unserved<kCallbackHooks, 3>),
    Fn(&Declined<kCallbackHooks, 4>),  // likewise
    Fn(&Unserved<kCallbackHooks, 5>),
    Fn(&HooksBufferB),
};

// ---- TOOLS_TLS (42d85a81-23f6-cb47-8298-f6e78a3aecdc) ---------------------------------------
// Asked for at initialisation. The runtime reads the size (slot 0); slot 2 (thread-local tool
// state) is called on its host-function thread and declined: the callbacks still run in stream
// order (app_static_callback_order). Slots 1 and 3 were never seen called.
constexpr size_t kTlsSlots = 4;
const void* const kTls[kTlsSlots] = {
    SizeSlot(kTlsSlots),
    Fn(&Unserved<kToolsTls, 1>),
    Fn(&Declined<kToolsTls, 2>),
    Fn(&Unserved<kToolsTls, 3>),
};

}  // namespace

const Table kCallbackHooks = {"TOOLS_RUNTIME_CALLBACK_HOOKS", MakeId("a094798c2e742e7493f20800200c0a66"), kHooks,
                              kHookSlots};
const Table kToolsTls = {"TOOLS_TLS", MakeId("42d85a8123f6cb478298f6e78a3aecdc"), kTls, kTlsSlots};

}  // namespace remora::shim::driver::exports
