"""The Python mirror (src/pmm/kernel/uapi.py) matches the C header (kmod/uapi/pmm.h):
a C program compiled against the header prints every struct size, field
offset, ioctl number and constant, and each is compared with the mirror."""

from __future__ import annotations

import ctypes
import subprocess
from enum import IntEnum
from pathlib import Path

import pytest

from pmm.kernel import uapi

TOP = Path(__file__).resolve().parents[2]
HEADER_DIR = TOP / "kmod" / "uapi"

# Python names whose C name is PMM_<name>; ioctls, structs and enums are listed apart.
CONSTANTS = [
    "ABI_VERSION", "COMM_LEN", "MAX_FRAMES", "SITE_FILE_LEN", "SITE_FUNC_LEN", "MAX_BATCH",
    "MAX_READ", "OP_NR", "REC_F_FAILED", "REC_F_FREED", "REC_F_TAGGED", "REC_F_PREV_FREED",
    "REC_F_OLDER",
    "REC_F_ALL", "ALLOC_TAG_BITS", "SITE_F_SOURCE", "SITE_F_ALL",
    "CFG_INTERVAL", "CFG_SCAN", "CFG_START_PID", "CFG_STOP_PID", "CFG_MAX_PIDS",
    "CFG_MAX_BLOCKS", "CFG_MAX_SITES", "CFG_MAX_SAMPLES", "CFG_MAX_PIDS_PER_UID",
    "CFG_EXITED_TTL", "CFG_ALL", "INTERVAL_MIN_MS", "INTERVAL_MAX_MS", "MAX_PIDS_LIMIT",
    "MAX_BLOCKS_LIMIT", "MAX_SITES_LIMIT", "MAX_SAMPLES_LIMIT", "EXITED_TTL_MIN_S",
    "EXITED_TTL_MAX_S", "STATE_RUNNING", "STATE_EXITED", "SIZE_BUCKETS", "IOC_MAGIC",
    "GENL_VERSION", "CLOCK_OFFSET", "CLOCK_SIZE", "LOC_OBJ_SHIFT", "MAX_OBJECTS",
    "BUILD_ID_MAX", "OBJ_PATH_LEN", "OBJ_F_BUILD_ID", "OBJ_F_PATH_CUT", "OBJ_F_DELETED",
    "OBJ_F_ALL", "ALLOC_NONE", "ALLOC_GLIBC", "ALLOC_JEMALLOC", "ALLOC_NR", "HEAP_MAX_BYTES",
    "SAMPLE_F_MEMCG", "SAMPLE_F_ALL",
]
LOC = 4095 << 48 | 0x7F123456789A  # a pmm_site_stats.loc: object 4095, file offset
ENUMS: dict[type[IntEnum], str] = {uapi.Op: "PMM_OP_", uapi.Cmd: "PMM_CMD_", uapi.Attr: "PMM_A_"}


def c_program() -> str:
    lines = ["#include <stdio.h>", "#include <stddef.h>", "#include <errno.h>",
             '#include "pmm.h"', "int main(void) {"]
    for cname, struct in uapi.STRUCTS.items():
        lines.append(f'printf("size {cname} %zu\\n", sizeof(struct {cname}));')
        for field in struct._fields_:
            fname = field[0]
            lines.append(
                f'printf("offset {cname}.{fname} %zu\\n", offsetof(struct {cname}, {fname}));'
            )
    for name in uapi.IOCTLS:
        lines.append(f'printf("ioctl {name} %lu\\n", (unsigned long){name});')
    for name in CONSTANTS:
        lines.append(f'printf("const {name} %llu\\n", (unsigned long long)(PMM_{name}));')
    for enum, prefix in ENUMS.items():
        for member in enum:
            lines.append(
                f'printf("enum {prefix}{member.name} %d\\n", (int){prefix}{member.name});'
            )
    lines.append('printf("const ENOTMONITORED %d\\n", PMM_ENOTMONITORED_ERRNO);')
    lines.append(f'printf("loc helpers %u %llu\\n", PMM_LOC_OBJ({LOC}ULL), '
                 f'(unsigned long long)PMM_LOC_OFFSET({LOC}ULL));')
    lines.append('printf("str GENL_NAME %s\\n", PMM_GENL_NAME);')
    lines.append('printf("str GENL_MCGRP_EVENTS %s\\n", PMM_GENL_MCGRP_EVENTS);')
    lines.append('printf("str DEVICE_NAME %s\\n", PMM_DEVICE_NAME);')
    lines += ["return 0;", "}"]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def c_values(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("abi")
    src = tmp / "abi.c"
    src.write_text(c_program())
    exe = tmp / "abi"
    subprocess.run(["cc", "-Wall", "-Werror", "-I", str(HEADER_DIR), "-o", str(exe), str(src)],
                   check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    values: dict[str, str] = {}
    for line in out.splitlines():
        kind, name, value = line.split(" ", 2)
        values[f"{kind} {name}"] = value
    return values


@pytest.mark.parametrize("cname", list(uapi.STRUCTS))
def test_struct_layout(c_values: dict[str, str], cname: str) -> None:
    struct = uapi.STRUCTS[cname]
    assert int(c_values[f"size {cname}"]) == ctypes.sizeof(struct)
    for field in struct._fields_:
        fname = field[0]
        assert int(c_values[f"offset {cname}.{fname}"]) == getattr(struct, fname).offset, fname


def test_struct_sizes_are_multiples_of_8() -> None:
    # 32- and 64-bit callers must see one layout: no implicit tail padding.
    for cname, struct in uapi.STRUCTS.items():
        assert ctypes.sizeof(struct) % 8 == 0, cname


@pytest.mark.parametrize("name", list(uapi.IOCTLS))
def test_ioctl_numbers(c_values: dict[str, str], name: str) -> None:
    assert int(c_values[f"ioctl {name}"]) == uapi.IOCTLS[name]


def test_constants(c_values: dict[str, str]) -> None:
    for name in CONSTANTS:
        assert int(c_values[f"const {name}"]) == getattr(uapi, name), name
    assert int(c_values["const ENOTMONITORED"]) == uapi.ENOTMONITORED
    assert c_values["str GENL_NAME"] == uapi.GENL_NAME
    assert c_values["str GENL_MCGRP_EVENTS"] == uapi.GENL_MCGRP_EVENTS
    assert c_values["str DEVICE_NAME"] == uapi.DEVICE_NAME


def test_loc_helpers(c_values: dict[str, str]) -> None:
    assert c_values["loc helpers"] == f"{uapi.loc_obj(LOC)} {uapi.loc_offset(LOC)}"
    assert (uapi.loc_obj(LOC), uapi.loc_offset(LOC)) == (4095, 0x7F123456789A)


def test_enums(c_values: dict[str, str]) -> None:
    for enum, prefix in ENUMS.items():
        for member in enum:
            assert int(c_values[f"enum {prefix}{member.name}"]) == member.value, member


def test_every_header_define_is_mirrored() -> None:
    # A new #define in the header must reach the mirror (or this list of exceptions).
    # PMM_LOC_OBJ/PMM_LOC_OFFSET are uapi.loc_obj/loc_offset (test_loc_helpers)
    not_mirrored = {"_UAPI_LINUX_PMM_H", "PMM_ENOTMONITORED_ERRNO", "PMM_CMD_MAX", "PMM_A_MAX",
                    "PMM_LOC_OBJ(loc)", "PMM_LOC_OFFSET(loc)",
                    "PMM_GENL_NAME", "PMM_GENL_MCGRP_EVENTS", "PMM_DEVICE_NAME"}
    mirrored = {f"PMM_{n}" for n in CONSTANTS} | set(uapi.IOCTLS)
    for line in (HEADER_DIR / "pmm.h").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "#define":
            assert parts[1] in mirrored | not_mirrored, parts[1]
