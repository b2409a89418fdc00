#include "worker/image_symbols.h"

#include <elf.h>

#include <cstring>

namespace remora::worker {
namespace {

constexpr uint32_t kFatbinMagic = 0xBA55ED50;
constexpr uint16_t kFatbinElf = 2;
constexpr uint64_t kFatbinCompressed = 0x2000;

template <typename T>
bool Read(const unsigned char* base, size_t size, uint64_t offset, T* out) {
  if (offset > size || sizeof(T) > size - offset) return false;
  std::memcpy(out, base + offset, sizeof(T));
  return true;
}

void ElfVariables(const unsigned char* elf, size_t size, std::map<std::string, uint64_t>* out) {
  Elf64_Ehdr eh;
  if (!Read(elf, size, 0, &eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64) return;
  if (eh.e_shentsize != sizeof(Elf64_Shdr)) return;
  for (uint16_t i = 0; i < eh.e_shnum; i++) {
    Elf64_Shdr sh;
    if (!Read(elf, size, eh.e_shoff + uint64_t{i} * sizeof(Elf64_Shdr), &sh) || sh.sh_type != SHT_SYMTAB) continue;
    Elf64_Shdr strtab;
    if (sh.sh_entsize != sizeof(Elf64_Sym) || !Read(elf, size, eh.e_shoff + uint64_t{sh.sh_link} * sizeof(Elf64_Shdr), &strtab))
      continue;
    if (strtab.sh_offset > size || strtab.sh_size > size - strtab.sh_offset) continue;
    for (uint64_t k = 0; k < sh.sh_size / sizeof(Elf64_Sym); k++) {
      Elf64_Sym sym;
      if (!Read(elf, size, sh.sh_offset + k * sizeof(Elf64_Sym), &sym)) break;
      if (ELF64_ST_TYPE(sym.st_info) != STT_OBJECT || sym.st_shndx == SHN_UNDEF || sym.st_name >= strtab.sh_size) continue;
      const char* name = reinterpret_cast<const char*>(elf + strtab.sh_offset + sym.st_name);
      size_t n = strnlen(name, strtab.sh_size - sym.st_name);
      if (n == strtab.sh_size - sym.st_name) continue;  // not terminated inside the table
      out->emplace(std::string(name, n), sym.st_size);
    }
  }
}

}  // namespace

std::map<std::string, uint64_t> ImageVariables(const void* image, size_t size) {
  std::map<std::string, uint64_t> out;
  const auto* b = static_cast<const unsigned char*>(image);
  uint32_t magic = 0;
  if (!Read(b, size, 0, &magic)) return out;
  if (magic != kFatbinMagic) {
    ElfVariables(b, size, &out);
    return out;
  }
  // The fat binary: a 16-byte header {magic, version, header size, bytes of entries}, then
  // entries of {kind, _, header size, payload size, ...; flags at 0x30}.
  uint16_t header = 0;
  uint64_t total = 0;
  if (!Read(b, size, 6, &header) || !Read(b, size, 8, &total)) return out;
  uint64_t end = header + total < size ? header + total : size;
  for (uint64_t p = header; p + 16 <= end;) {
    uint16_t kind = 0;
    uint32_t entry_header = 0;
    uint64_t payload = 0, flags = 0;
    if (!Read(b, size, p, &kind) || !Read(b, size, p + 4, &entry_header) || !Read(b, size, p + 8, &payload)) break;
    if (entry_header < 16 || payload > end || entry_header > end - p - payload) break;
    if (entry_header >= 0x38) (void)Read(b, size, p + 0x30, &flags);
    if (kind == kFatbinElf && (flags & kFatbinCompressed) == 0) ElfVariables(b + p + entry_header, payload, &out);
    p += entry_header + payload;
  }
  return out;
}

}  // namespace remora::worker
