// For stubs.cc, which cannot see cudaError_t: NotSupported() as a plain int.
#pragma once

namespace remora::shim {
int NotSupportedCode(const char* call);
}  // namespace remora::shim
