// What the host backend reads from a code image (server/worker/backend/host/image_symbols.h): variables
// and kernels of PTX and of an ELF cubin inside a fat binary, and nothing - never a read out
// of bounds - from truncated or garbage images.
#include "worker/backend/host/image_symbols.h"

#include <elf.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace remora::worker {
namespace {

const char kPtx[] =
    ".version 8.0\n.target sm_90\n.address_size 64\n"
    ".visible .global .align 4 .b8 table[64];\n"
    ".visible .global .attribute(.managed) .align 8 .u64 counters[2][3];\n"
    ".global .f32 scale;\n"
    ".visible .entry first(.param .u64 p)\n{\n ret;\n}\n"
    ".entry second()\n{\n ret;\n}\n";

TEST(ImageSymbols, PtxVariablesAndKernels) {
  ImageSymbols s = ReadImageSymbols(kPtx, sizeof(kPtx));
  EXPECT_EQ(s.variables.at("table"), 64u);
  EXPECT_EQ(s.variables.at("counters"), 48u);
  EXPECT_EQ(s.variables.at("scale"), 4u);
  EXPECT_EQ(s.kernels, (std::vector<std::string>{"first", "second"}));
  EXPECT_EQ(s.managed, (std::set<std::string>{"counters"}));  // .attribute(.managed)
}

// A minimal ELF64 cubin: a symbol table with one variable and one kernel (STO_CUDA_ENTRY).
std::vector<unsigned char> Cubin() {
  const char strtab[] = "\0var\0kern\0helper";
  std::vector<Elf64_Sym> syms(4);
  syms[1].st_name = 1, syms[1].st_info = ELF64_ST_INFO(STB_GLOBAL, STT_OBJECT), syms[1].st_shndx = 1, syms[1].st_size = 24;
  syms[2].st_name = 5, syms[2].st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC), syms[2].st_other = 0x10, syms[2].st_shndx = 1;
  syms[3].st_name = 10, syms[3].st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC), syms[3].st_shndx = 1;  // not a kernel
  size_t strtab_off = sizeof(Elf64_Ehdr), sym_off = strtab_off + sizeof(strtab);
  size_t sh_off = sym_off + syms.size() * sizeof(Elf64_Sym);
  std::vector<unsigned char> elf(sh_off + 3 * sizeof(Elf64_Shdr));
  Elf64_Ehdr eh{};
  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_shoff = sh_off;
  eh.e_shentsize = sizeof(Elf64_Shdr);
  eh.e_shnum = 3;
  std::memcpy(elf.data(), &eh, sizeof(eh));
  std::memcpy(elf.data() + strtab_off, strtab, sizeof(strtab));
  std::memcpy(elf.data() + sym_off, syms.data(), syms.size() * sizeof(Elf64_Sym));
  Elf64_Shdr sh[3]{};
  sh[1].sh_type = SHT_STRTAB, sh[1].sh_offset = strtab_off, sh[1].sh_size = sizeof(strtab);
  sh[2].sh_type = SHT_SYMTAB, sh[2].sh_offset = sym_off, sh[2].sh_size = syms.size() * sizeof(Elf64_Sym);
  sh[2].sh_link = 1, sh[2].sh_entsize = sizeof(Elf64_Sym);
  std::memcpy(elf.data() + sh_off, sh, sizeof(sh));
  return elf;
}

// The cubin as a fat binary's one ELF entry.
std::vector<unsigned char> Fatbin(const std::vector<unsigned char>& elf) {
  std::vector<unsigned char> entry(0x48 + elf.size(), 0);
  uint16_t kind = 2;
  uint32_t header = 0x48;
  uint64_t size = elf.size();
  std::memcpy(entry.data(), &kind, 2);
  std::memcpy(entry.data() + 4, &header, 4);
  std::memcpy(entry.data() + 8, &size, 8);
  std::memcpy(entry.data() + 0x48, elf.data(), elf.size());
  std::vector<unsigned char> fb(16 + entry.size(), 0);
  uint32_t magic = 0xBA55ED50;
  uint16_t version = 1, fb_header = 16;
  uint64_t total = entry.size();
  std::memcpy(fb.data(), &magic, 4);
  std::memcpy(fb.data() + 4, &version, 2);
  std::memcpy(fb.data() + 6, &fb_header, 2);
  std::memcpy(fb.data() + 8, &total, 8);
  std::memcpy(fb.data() + 16, entry.data(), entry.size());
  return fb;
}

TEST(ImageSymbols, CubinInAFatBinary) {
  for (const auto& image : {Cubin(), Fatbin(Cubin())}) {
    ImageSymbols s = ReadImageSymbols(image.data(), image.size());
    ASSERT_EQ(s.variables.size(), 1u);
    EXPECT_EQ(s.variables.at("var"), 24u);
    EXPECT_EQ(s.kernels, std::vector<std::string>{"kern"});
  }
}

// An entry whose size reaches past the fat binary's end but not past the bytes the header
// declares (found by fuzz_image_symbols: the check of the entry's bounds wrapped around):
// nothing is read from it.
TEST(ImageSymbols, EntryLongerThanWhatIsLeft) {
  std::vector<unsigned char> fb = Fatbin(Cubin());
  uint64_t total = 0;
  std::memcpy(&total, fb.data() + 8, 8);
  uint64_t payload = total + 8;  // less than the bytes given, more than are left after the header
  std::memcpy(fb.data() + 16 + 8, &payload, 8);
  ImageSymbols s = ReadImageSymbols(fb.data(), fb.size());
  EXPECT_TRUE(s.variables.empty());
  EXPECT_TRUE(s.kernels.empty());
}

// Every prefix, and random corruptions, of both forms: never a read outside the bytes given
// (checked under the sanitizer builds), never a crash.
TEST(ImageSymbols, TruncatedAndCorruptImages) {
  std::mt19937 rng(7);
  for (const auto& full : {Cubin(), Fatbin(Cubin())}) {
    for (size_t n = 0; n < full.size(); n++) {
      std::vector<unsigned char> cut(full.begin(), full.begin() + static_cast<long>(n));
      (void)ReadImageSymbols(cut.data(), cut.size());
    }
    for (int round = 0; round < 2000; round++) {
      std::vector<unsigned char> bad = full;
      for (int k = 0; k < 4; k++) bad[rng() % bad.size()] = static_cast<unsigned char>(rng());
      (void)ReadImageSymbols(bad.data(), bad.size());
    }
  }
  SUCCEED();
}

}  // namespace
}  // namespace remora::worker
