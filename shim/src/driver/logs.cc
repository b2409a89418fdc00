// The driver API's error log management (cuLogs*): this process's error log (error_log.h).
// The runtime's cudaLogs* are these (`via=` entries of cudart.api).
#include "driver/driver.h"
#include "error_log.h"
#include "export.h"
#include "process.h"

using namespace remora;
using namespace remora::shim;
using namespace remora::shim::driver;

namespace {
ErrorLog& Log() { return Process::Get().error_log(); }
}  // namespace

REMORA_API CUresult cuLogsCurrent(CUlogIterator* iterator_out, unsigned int flags) {
  if (iterator_out == nullptr) return Invalid("cuLogsCurrent", "iterator_out cannot be NULL");
  if (flags != 0) return Invalid("cuLogsCurrent", "flags must be 0");
  *iterator_out = Log().Current();
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuLogsDumpToMemory(CUlogIterator* iterator, char* buffer, size_t* size, unsigned int flags) {
  if (flags != 0) return Invalid("cuLogsDumpToMemory", "flags must be 0");
  return FromStatus(Log().DumpToMemory(iterator, buffer, size), "cuLogsDumpToMemory");
}

REMORA_API CUresult cuLogsDumpToFile(CUlogIterator* iterator, const char* pathToFile, unsigned int flags) {
  if (flags != 0) return Invalid("cuLogsDumpToFile", "flags must be 0");
  return FromStatus(Log().DumpToFile(iterator, pathToFile), "cuLogsDumpToFile");
}

REMORA_API CUresult cuLogsRegisterCallback(CUlogsCallback callbackFunc, void* userData, CUlogsCallbackHandle* callback_out) {
  return FromStatus(Log().Register(callbackFunc, userData, callback_out), "cuLogsRegisterCallback");
}

REMORA_API CUresult cuLogsUnregisterCallback(CUlogsCallbackHandle callback) {
  return FromStatus(Log().Unregister(callback), "cuLogsUnregisterCallback");
}
