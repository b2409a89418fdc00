// What a code image defines, read from the symbol tables of its ELF cubins (a fat binary's
// uncompressed ELF entries, or an ELF cubin itself): its variables with their sizes and its
// kernels. The host-emulated backend has no driver to ask: this is how it learns a variable's
// size when only its name is known (cuModuleGetGlobal, cuLibraryGetGlobal) and which kernels
// a module has (cuModuleEnumerateFunctions), and which of its PTX variables are managed.
// Compressed entries are skipped.
// Pure function of the bytes; never reads outside [image, image + size).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace remora::worker {

struct ImageSymbols {
  std::map<std::string, uint64_t> variables;  // every defined data object (STT_OBJECT): bytes
  std::vector<std::string> kernels;           // entry functions (STT_FUNC marked STO_CUDA_ENTRY)
  std::set<std::string> managed;              // variables declared managed (PTX's .attribute(.managed))
};

ImageSymbols ReadImageSymbols(const void* image, size_t size);

}  // namespace remora::worker
