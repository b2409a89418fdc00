// The sizes of the variables a code image defines, read from the symbol tables of its ELF
// cubins (a fat binary's uncompressed ELF entries, or an ELF cubin itself). The host-emulated
// backend has no driver to ask: this is how it learns a variable's size when only its name is
// known (cuModuleGetGlobal, cuLibraryGetGlobal). Compressed entries and PTX are skipped.
// Pure function of the bytes; never reads outside [image, image + size).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

namespace remora::worker {

// name -> size in bytes of every defined data object (STT_OBJECT) of the image's ELFs.
std::map<std::string, uint64_t> ImageVariables(const void* image, size_t size);

}  // namespace remora::worker
