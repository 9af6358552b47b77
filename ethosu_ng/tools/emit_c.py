# SPDX-License-Identifier: BSD-3-Clause
"""``ethosu-ng compile ... --emit-c DIR``: the .pte and its memory plan as C for a firmware build.

Writes ``DIR/<name>.h`` (``#define`` for every pool of the memory plan, the IO contract of every
program input and output: dtype, shape, layout, scale and zero point; the array's declaration)
and ``DIR/<name>.c`` (the .pte as a 16-byte aligned ``const uint8_t`` array: the runtime uses the
delegate blobs in place and rejects a misaligned program). C99 with GCC/Clang's ``aligned``
attribute, C11 ``_Alignas`` elsewhere.
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, Optional, Tuple

_BYTES_PER_LINE = 16


def c_name(name: str) -> str:
    """A C identifier from a file name: ``mobilenet-v2.pte`` -> ``mobilenet_v2``."""
    base = re.sub(r"[^0-9A-Za-z_]", "_", os.path.splitext(os.path.basename(name))[0])
    if not base or base[0].isdigit():
        base = "model_" + base
    return base


def _defines(prefix: str, plan: Dict[str, Any]) -> Tuple[str, ...]:
    p = prefix.upper()
    lines = [
        f"#define {p}_PTE_SIZE {plan['pte_bytes']}u",
        f"#define {p}_ALIGNMENT {plan['alignment']}u",
        "",
        "/* ExecuTorch planned memory: one HierarchicalAllocator buffer per mem_id (1, 2, ...). */",
        f"#define {p}_PLANNED_ARENA_COUNT {len(plan['planned_arenas'])}u",
    ]
    lines += [
        f"#define {p}_PLANNED_ARENA_{k}_SIZE {n}u" for k, n in enumerate(plan["planned_arenas"])
    ]
    lines += [
        "",
        "/* Temp allocator: NPU scratch of the largest delegate (reset after every call). */",
        f"#define {p}_TEMP_ALLOCATOR_SIZE {plan['temp_allocator']}u",
        "/* ... when no fast-scratch area is registered (ethosu_ng_set_fast_scratch). */",
        f"#define {p}_TEMP_ALLOCATOR_WITHOUT_FAST_AREA_SIZE "
        f"{plan['temp_allocator_without_fast_area']}u",
        f"#define {p}_FAST_SCRATCH_SIZE {plan['fast_scratch']}u",
    ]
    if plan.get("method_allocator") is not None:
        lines += [
            "",
            f"/* Method allocator: {plan['method_allocator_note']}. */",
            f"#define {p}_METHOD_ALLOCATOR_SIZE {plan['method_allocator']}u",
        ]
    io = plan["io_buffers"]
    lines += [
        "",
        "/* Program IO bytes; inside the planned arenas when *_INPUTS/OUTPUTS_PLANNED is 1. */",
        f"#define {p}_INPUTS_PLANNED {int(io['inputs_planned'])}",
        f"#define {p}_OUTPUTS_PLANNED {int(io['outputs_planned'])}",
        f"#define {p}_INPUT_COUNT {len(io['inputs'])}u",
    ]
    lines += [f"#define {p}_INPUT_{k}_SIZE {n}u" for k, n in enumerate(io["inputs"])]
    lines += [f"#define {p}_OUTPUT_COUNT {len(io['outputs'])}u"]
    lines += [f"#define {p}_OUTPUT_{k}_SIZE {n}u" for k, n in enumerate(io["outputs"])]
    return tuple(lines)


# ExecuTorch ScalarType codes (executorch/runtime/core/portable_type/scalar_type.h).
_SCALAR_TYPE = {
    "uint8": 0,
    "int8": 1,
    "int16": 2,
    "int32": 3,
    "float32": 6,
    "bool": 11,
    "uint16": 27,
}


def _io_contract(prefix: str, io: Optional[Dict[str, Any]]) -> Tuple[str, ...]:
    """Per program input/output: what firmware fills or reads (ExecuTorch ScalarType code, rank,
    sizes in the program's logical NCHW order, layout of the bytes, quantization)."""
    if not io:
        return ()
    p = prefix.upper()
    lines = [
        "",
        "/* IO contract. DTYPE: ExecuTorch ScalarType (0 Byte=uint8, 1 Char=int8, 6 Float,",
        " * 11 Bool: one byte, 0 or 1);",
        " * DIM_k: logical sizes (N, C, H, W for rank 4); DIM_ORDER_k: the order the bytes are",
        " * laid out in (0,1,2,3 NCHW; 0,2,3,1 NHWC: channels interleaved, as a camera has them);",
        " * SCALE / ZERO_POINT: real = SCALE * (q - ZERO_POINT), integer tensors only. */",
    ]
    for what, key in (("INPUT", "inputs"), ("OUTPUT", "outputs")):
        for k, t in enumerate(io[key]):
            n = f"{p}_{what}_{k}"
            code = _SCALAR_TYPE.get(t["dtype"])
            lines.append(f"/* {what.lower()} {k}: {t['name']} */")
            lines.append(f"#define {n}_DTYPE {code if code is not None else -1}")
            lines.append(f"#define {n}_RANK {len(t['shape'])}u")
            lines += [f"#define {n}_DIM_{d} {s}u" for d, s in enumerate(t["shape"])]
            order = t.get("dim_order") or list(range(len(t["shape"])))
            lines += [f"#define {n}_DIM_ORDER_{d} {o}u" for d, o in enumerate(order)]
            if len(t["shape"]) == 4 and t.get("layout"):
                lines.append(f"#define {n}_LAYOUT_{t['layout'].upper()} 1")
            if t.get("scale") is not None:
                lines.append(f"#define {n}_SCALE {float(t['scale'])!r}f")
                lines.append(f"#define {n}_ZERO_POINT {int(t['zero_point'])}")
    return tuple(lines)


def header_text(
    name: str, plan: Dict[str, Any], source: str = "", io: Optional[Dict[str, Any]] = None
) -> str:
    guard = f"ETHOSU_NG_{name.upper()}_H"
    return "\n".join(
        [
            f"/* Generated by ethosu-ng compile --emit-c{f' from {source}' if source else ''}. */",
            f"#ifndef {guard}",
            f"#define {guard}",
            "",
            "#include <stdint.h>",
            "",
            *_defines(name, plan),
            *_io_contract(name, io),
            "",
            "#ifdef __cplusplus",
            'extern "C" {',
            "#endif",
            "",
            f"/* The .pte, {name.upper()}_ALIGNMENT-byte aligned, for a BufferDataLoader. */",
            f"extern const uint8_t {name}_pte[{name.upper()}_PTE_SIZE];",
            "",
            "#ifdef __cplusplus",
            "}",
            "#endif",
            "",
            f"#endif /* {guard} */",
            "",
        ]
    )


def source_text(name: str, pte: bytes) -> str:
    rows = []
    for k in range(0, len(pte), _BYTES_PER_LINE):
        chunk = pte[k : k + _BYTES_PER_LINE]
        rows.append("  " + "".join(f"0x{b:02x}," for b in chunk))
    return "\n".join(
        [
            "/* Generated by ethosu-ng compile --emit-c. */",
            f'#include "{name}.h"',
            "",
            "#if defined(__GNUC__) || defined(__clang__)",
            f"__attribute__((aligned({name.upper()}_ALIGNMENT)))",
            f"const uint8_t {name}_pte[{name.upper()}_PTE_SIZE] = {{",
            "#else",
            f"_Alignas({name.upper()}_ALIGNMENT) const uint8_t {name}_pte[{name.upper()}_PTE_SIZE]"
            " = {",
            "#endif",
            *rows,
            "};",
            "",
        ]
    )


def emit_c(
    out_dir: str,
    name: str,
    pte: bytes,
    plan: Dict[str, Any],
    source: str = "",
    io: Optional[Dict[str, Any]] = None,
):
    """Write ``out_dir/name.h`` and ``out_dir/name.c``; return their paths. ``io``: the report's
    ``program_io`` (the header's IO contract)."""
    if plan["pte_bytes"] != len(pte):
        raise ValueError(
            f"memory plan is for a {plan['pte_bytes']}-byte program, the .pte has {len(pte)}"
        )
    os.makedirs(out_dir, exist_ok=True)
    h = os.path.join(out_dir, f"{name}.h")
    c = os.path.join(out_dir, f"{name}.c")
    with open(h, "w") as f:
        f.write(header_text(name, plan, source, io))
    with open(c, "w") as f:
        f.write(source_text(name, pte))
    return h, c
