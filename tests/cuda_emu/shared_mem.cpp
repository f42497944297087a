/* Each kernel's static __shared__ bytes, as a GPU's compiler knows them: read
 * once from the emulated plugin's own symbol table. A __shared__ variable is
 * a function-local thread_local there ("KERNEL(ARGS)::NAME", an STT_TLS
 * symbol), so the sizes of a kernel's are summed under its name. */
#include "emu.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace cuemu {

/* The whole file at path, or empty. */
static std::vector<char> read_file(const char *path) {
    std::vector<char> data;
    FILE *f = fopen(path, "rb");
    if (!f) return data;
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) data.insert(data.end(), buf, buf + n);
    fclose(f);
    return data;
}

/* kernel name -> static shared bytes, from the ELF64 .symtab of the file. */
static void scan(const std::vector<char> &elf, std::map<std::string, size_t> *out) {
    if (elf.size() < sizeof(Elf64_Ehdr) || memcmp(elf.data(), ELFMAG, SELFMAG) != 0) return;
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)elf.data();
    if (eh->e_shoff + (size_t)eh->e_shnum * sizeof(Elf64_Shdr) > elf.size()) return;
    const Elf64_Shdr *sh = (const Elf64_Shdr *)(elf.data() + eh->e_shoff);
    for (int i = 0; i < eh->e_shnum; i++) {
        if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= eh->e_shnum) continue;
        const Elf64_Shdr &strs = sh[sh[i].sh_link];
        if (sh[i].sh_offset + sh[i].sh_size > elf.size() ||
            strs.sh_offset + strs.sh_size > elf.size())
            return;
        const Elf64_Sym *sym = (const Elf64_Sym *)(elf.data() + sh[i].sh_offset);
        const size_t n = sh[i].sh_size / sizeof(Elf64_Sym);
        for (size_t k = 0; k < n; k++) {
            if (ELF64_ST_TYPE(sym[k].st_info) != STT_TLS || sym[k].st_name >= strs.sh_size)
                continue;
            int status = 0;
            char *d = abi::__cxa_demangle(elf.data() + strs.sh_offset + sym[k].st_name, nullptr,
                                          nullptr, &status);
            if (!d) continue;
            std::string s = d;
            free(d);
            const size_t local = s.find(")::"), paren = s.find('(');
            if (status == 0 && local != std::string::npos && paren < local)
                (*out)[s.substr(0, paren)] += sym[k].st_size;
        }
    }
}

size_t static_shared_bytes(const char *kernel) {
    static std::map<std::string, size_t> sizes;
    static std::once_flag once;
    std::call_once(once, [] {
        Dl_info info;
        if (dladdr((void *)&static_shared_bytes, &info) && info.dli_fname)
            scan(read_file(info.dli_fname), &sizes);
    });
    auto it = sizes.find(kernel);
    return it == sizes.end() ? 0 : it->second;
}

}  // namespace cuemu
