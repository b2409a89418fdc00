#include "worker/backend/host/image_symbols.h"

#include <elf.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <string_view>

namespace remora::worker {
namespace {

constexpr uint32_t kFatbinMagic = 0xBA55ED50;
constexpr uint16_t kFatbinPtx = 1;
constexpr uint16_t kFatbinElf = 2;
constexpr uint64_t kFatbinCompressed = 0x2000;
constexpr unsigned char kStoCudaEntry = 0x10;  // st_other of a kernel's symbol

template <typename T>
bool Read(const unsigned char* base, size_t size, uint64_t offset, T* out) {
  if (offset > size || sizeof(T) > size - offset) return false;
  std::memcpy(out, base + offset, sizeof(T));
  return true;
}

void ElfSymbols(const unsigned char* elf, size_t size, ImageSymbols* out) {
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
      int type = ELF64_ST_TYPE(sym.st_info);
      bool kernel = type == STT_FUNC && (sym.st_other & kStoCudaEntry) != 0;
      if ((type != STT_OBJECT && !kernel) || sym.st_shndx == SHN_UNDEF || sym.st_name >= strtab.sh_size) continue;
      const char* name = reinterpret_cast<const char*>(elf + strtab.sh_offset + sym.st_name);
      size_t n = strnlen(name, strtab.sh_size - sym.st_name);
      if (n == 0 || n == strtab.sh_size - sym.st_name) continue;  // unnamed, or not terminated inside the table
      if (kernel) {
        std::string k(name, n);
        if (std::find(out->kernels.begin(), out->kernels.end(), k) == out->kernels.end()) out->kernels.push_back(std::move(k));
      } else {
        out->variables.emplace(std::string(name, n), sym.st_size);
      }
    }
  }
}

bool IdentChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '.'; }

// The bytes of a PTX scalar type (.b8 ... .f64), or 0.
uint64_t PtxTypeBytes(std::string_view t) {
  if (t.size() < 3 || t[0] != '.') return 0;
  char k = t[1];
  if (k != 'b' && k != 'u' && k != 's' && k != 'f') return 0;
  std::string_view bits = t.substr(2);
  if (bits == "8") return 1;
  if (bits == "16") return 2;
  if (bits == "32") return 4;
  if (bits == "64") return 8;
  return 0;
}

// A PTX declaration `.global [.attribute(...)] [.align N] .TYPE NAME[[N]...]` at `at` (just
// past `.global`): the variable and its size, and whether its attributes make it managed.
void PtxGlobal(std::string_view text, size_t at, ImageSymbols* out) {
  size_t end = text.find_first_of(";={", at);
  if (end == std::string_view::npos) return;
  std::string_view decl = text.substr(at, end - at);
  uint64_t elem = 0;
  bool managed = false;
  size_t i = 0;
  while (i < decl.size()) {
    while (i < decl.size() && std::isspace(static_cast<unsigned char>(decl[i]))) i++;
    size_t b = i;
    while (i < decl.size() && IdentChar(decl[i])) i++;
    std::string_view tok = decl.substr(b, i - b);
    if (tok.empty()) return;
    if (tok == ".attribute") {  // .attribute( ... )
      size_t close = decl.find(')', i);
      if (close == std::string_view::npos) return;
      managed = managed || decl.substr(i, close - i).find(".managed") != std::string_view::npos;
      i = close + 1;
    } else if (tok == ".align") {
      while (i < decl.size() && std::isspace(static_cast<unsigned char>(decl[i]))) i++;
      while (i < decl.size() && std::isdigit(static_cast<unsigned char>(decl[i]))) i++;
    } else if (tok[0] == '.') {
      elem = PtxTypeBytes(tok);
      if (elem == 0) return;
    } else {
      if (elem == 0) return;
      uint64_t bytes = elem;
      for (size_t br = decl.find('[', i); br != std::string_view::npos; br = decl.find('[', br + 1)) {
        uint64_t n = 0;
        for (size_t d = br + 1; d < decl.size() && std::isdigit(static_cast<unsigned char>(decl[d])); d++) n = n * 10 + static_cast<uint64_t>(decl[d] - '0');
        if (n == 0 || n > (uint64_t{1} << 40) / bytes) return;
        bytes *= n;
      }
      out->variables.emplace(std::string(tok), bytes);
      if (managed) out->managed.emplace(tok);
      return;
    }
  }
}

// A PTX text's kernels (`.entry NAME`) and variables (`.global` declarations); the text is
// NUL-terminated or `size` long.
void PtxSymbols(const unsigned char* ptx, size_t size, ImageSymbols* out) {
  std::string_view text(reinterpret_cast<const char*>(ptx), strnlen(reinterpret_cast<const char*>(ptx), size));
  for (size_t at = text.find(".global"); at != std::string_view::npos; at = text.find(".global", at + 7)) {
    size_t after = at + 7;
    if (after < text.size() && (text[after] == ' ' || text[after] == '\t')) PtxGlobal(text, after, out);
  }
  for (size_t at = text.find(".entry"); at != std::string_view::npos; at = text.find(".entry", at + 6)) {
    size_t b = at + 6;
    if (b >= text.size() || (text[b] != ' ' && text[b] != '\t')) continue;
    while (b < text.size() && (text[b] == ' ' || text[b] == '\t')) b++;
    size_t e = b;
    while (e < text.size() && IdentChar(text[e])) e++;
    if (e == b) continue;
    std::string k(text.substr(b, e - b));
    if (std::find(out->kernels.begin(), out->kernels.end(), k) == out->kernels.end()) out->kernels.push_back(std::move(k));
  }
}

}  // namespace

ImageSymbols ReadImageSymbols(const void* image, size_t size) {
  ImageSymbols out;
  const auto* b = static_cast<const unsigned char*>(image);
  uint32_t magic = 0;
  if (!Read(b, size, 0, &magic)) return out;
  if (magic != kFatbinMagic) {
    if (size >= 4 && std::memcmp(b, ELFMAG, SELFMAG) == 0) ElfSymbols(b, size, &out);
    else PtxSymbols(b, size, &out);
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
    if (entry_header < 16 || payload > end - p || entry_header > end - p - payload) break;
    if (entry_header >= 0x38) (void)Read(b, size, p + 0x30, &flags);
    if ((flags & kFatbinCompressed) == 0) {
      if (kind == kFatbinElf) ElfSymbols(b + p + entry_header, payload, &out);
      else if (kind == kFatbinPtx) PtxSymbols(b + p + entry_header, payload, &out);
    }
    p += entry_header + payload;
  }
  return out;
}

}  // namespace remora::worker
