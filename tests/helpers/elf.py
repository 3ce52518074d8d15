"""Reads what the dynamic loader reads from a shared library (64-bit little-endian ELF, as on
x86-64 and aarch64 Linux): the libraries it needs (DT_NEEDED) and the symbols it imports, so that
the tests can check the extension's dependencies without binutils."""

import struct
from dataclasses import dataclass

_SHT_DYNAMIC = 6
_SHT_DYNSYM = 11
_SHT_GNU_VERNEED = 0x6FFFFFFE
_DT_NULL = 0
_DT_NEEDED = 1
_SHN_UNDEF = 0
_STB_WEAK = 2


@dataclass(frozen=True)
class DynamicInfo:
    needed: tuple  # DT_NEEDED entries, in order
    imported: frozenset  # undefined, non-weak dynamic symbols (what must be found elsewhere)
    weak_imported: frozenset  # undefined weak ones (may stay unresolved)
    versions: dict  # library -> the symbol versions needed from it (GLIBC_2.17, GLIBCXX_3.4.21, ...)


def read(source) -> DynamicInfo:
    """``source``: a path or a binary file object."""
    if hasattr(source, "read"):
        data = source.read()
    else:
        with open(source, "rb") as f:
            data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError(f"{source} is not a 64-bit little-endian ELF file")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = []
    for i in range(shnum):
        # sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size, sh_link, sh_info, sh_addralign, sh_entsize
        sections.append(struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize))

    def string(table, offset):
        start = sections[table][4] + offset
        return data[start : data.index(b"\0", start)].decode()

    needed, imported, weak, versions = [], set(), set(), {}
    for _, kind, _, _, offset, size, link, _, _, entsize in sections:
        if kind == _SHT_DYNAMIC:
            for pos in range(offset, offset + size, entsize):
                tag, value = struct.unpack_from("<qQ", data, pos)
                if tag == _DT_NULL:
                    break
                if tag == _DT_NEEDED:
                    needed.append(string(link, value))
        elif kind == _SHT_DYNSYM:
            for pos in range(offset + entsize, offset + size, entsize):  # entry 0 is the null symbol
                name, info, _, shndx = struct.unpack_from("<IBBH", data, pos)
                if shndx == _SHN_UNDEF and name:
                    (weak if info >> 4 == _STB_WEAK else imported).add(string(link, name))
        elif kind == _SHT_GNU_VERNEED:
            entry = offset
            while True:
                _, count, library, aux, following = struct.unpack_from("<HHIII", data, entry)
                names = versions.setdefault(string(link, library), set())
                at = entry + aux
                for _ in range(count):
                    _, _, _, name, next_aux = struct.unpack_from("<IHHII", data, at)
                    names.add(string(link, name))
                    at += next_aux
                if not following:
                    break
                entry += following
    return DynamicInfo(
        tuple(needed), frozenset(imported), frozenset(weak), {lib: frozenset(v) for lib, v in versions.items()}
    )
