#include "remora/protocol/request_names.h"

namespace remora {

const char* RequestName(wire::Request::Which w) {
  using W = wire::Request::Which;
  switch (w) {
    case W::GET_DEVICES: return "getDevices";
    case W::MEM_ALLOC: return "memAlloc";
    case W::MEM_FREE: return "memFree";
    case W::MEMCPY_HTO_D: return "memcpyHtoD";
    case W::MEMCPY_DTO_H: return "memcpyDtoH";
    case W::MEMCPY_DTO_D: return "memcpyDtoD";
    case W::MEMSET: return "memset";
    case W::MEM_GET_INFO: return "memGetInfo";
    case W::DEVICE_SYNCHRONIZE: return "deviceSynchronize";
    case W::DEVICE_RESET: return "deviceReset";
    case W::GOODBYE: return "goodbye";
    case W::PING: return "ping";
    case W::MODULE_LOAD: return "moduleLoad";
    case W::GET_FUNCTION: return "getFunction";
    case W::GET_GLOBAL: return "getGlobal";
    case W::LAUNCH_KERNEL: return "launchKernel";
    case W::COPY3_D: return "copy3D";
    case W::MEMSET3_D: return "memset3D";
    case W::MALLOC_ASYNC: return "mallocAsync";
    case W::FREE_ASYNC: return "freeAsync";
    case W::HOST_FUNC: return "hostFunc";
    case W::CALLBACK_DONE: return "callbackDone";
    case W::REGISTER_HOST_REGION: return "registerHostRegion";
    case W::UNREGISTER_HOST_REGION: return "unregisterHostRegion";
    case W::LINK: return "link";
    default: return nullptr;
  }
}

}  // namespace remora
