"""Whether a built shared object is whole, read from its ELF headers without loading it.

A truncated extension crashes the process that loads it (SIGBUS when the loader touches a
page past the end of the file), so the C ladder's extensions are checked before they are
imported: every segment the program headers map, and the section header table, must lie
within the file.
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

_MAGIC = b"\x7fELF"


def damage(path: Path) -> str:
    """Why the shared object at ``path`` cannot be loaded safely; "" where it is whole (or
    not an ELF platform's, which this does not judge)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        return f"{path} cannot be read: {exc.strerror or exc}"
    if data[:4] != _MAGIC:
        return f"{path} is not an ELF shared object" if sys.platform.startswith("linux") \
            else ""
    if len(data) < 64 or data[4] not in (1, 2) or data[5] not in (1, 2):
        return f"{path} is truncated (its ELF header is incomplete)"
    wide, order = data[4] == 2, "<" if data[5] == 1 else ">"
    if wide:
        phoff, shoff = struct.unpack_from(order + "QQ", data, 32)
        phentsize, phnum, shentsize, shnum = struct.unpack_from(order + "HHHH", data, 54)
        entry, offset_at, size_at = order + "IIQQQQQQ", 8, 32
    else:
        phoff, shoff = struct.unpack_from(order + "II", data, 28)
        phentsize, phnum, shentsize, shnum = struct.unpack_from(order + "HHHH", data, 42)
        entry, offset_at, size_at = order + "IIIIIIII", 4, 16
    if shoff + shentsize * shnum > len(data) or phoff + phentsize * phnum > len(data):
        return f"{path} is truncated ({len(data)} bytes; its headers reach past the end)"
    for index in range(phnum):
        start = phoff + index * phentsize
        if start + struct.calcsize(entry) > len(data):
            return f"{path} is truncated (program header {index} is incomplete)"
        offset = struct.unpack_from(order + ("Q" if wide else "I"), data, start + offset_at)[0]
        filesz = struct.unpack_from(order + ("Q" if wide else "I"), data, start + size_at)[0]
        if offset + filesz > len(data):
            return (f"{path} is truncated ({len(data)} bytes; a segment reaches byte "
                    f"{offset + filesz})")
    return ""
