# SPDX-License-Identifier: BSD-3-Clause
"""The Ethos-U55/U65 register table of docs/npu-model.md, the code and the model in step.

- The table lists exactly the cmd0/cmd1 opcodes of Vela's installed ``ethos_u55_regs.py``, with
  their numbers, and exactly the opcodes ``registers.h`` declares (so a register added to either
  side without the other fails here).
- Every opcode is known to the decoder; every "checked" row's rejected example is refused with
  an error naming the command index and the register; every "ignored" / "not modelled" register
  set to any value leaves a real stream's output bit-identical.
- Field range: every field of every register (widths from ``ethos_u55_regs.py``'s structures)
  set to a value drawn over its full range in a real stream: the model executes it or refuses
  it with an error naming a command and its opcode (a reserved field that is set names the
  register); it never crashes.

Streams are the committed fuzz seeds (tests/runtime/corpus_npu_model/seeds/: real Vela payloads
with their weights), so no compile is needed.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest
from ethosu.vela.ethos_u55_regs import ethos_u55_regs as vela_regs
from hypothesis import given, settings
from hypothesis import strategies as st
from npu_payload import build_payload, cmd_stream

from ethosu_ng import runtime as rt

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "npu-model.md"
REGISTERS_H = REPO / "runtime" / "ethosu_ng" / "npu_model" / "registers.h"
SEEDS = REPO / "tests" / "runtime" / "corpus_npu_model" / "seeds"
# U55-128 and U65-256 payloads: a convolution stream and an elementwise one.
SEED_NAMES = [
    "conv_relu_ethos-u55-128_0.bin",
    "add_ethos-u55-128_0.bin",
    "conv_wide_ethos-u65-256_0.bin",
]
HANDLINGS = {"implemented", "checked", "ignored", "not modelled"}
ROW = re.compile(
    r"^\| (NPU_\w+) \| (cmd[01]) 0x([0-9A-F]{3}) \| ([a-z ]+) \| "
    r"(?:`(\w+)=(0x[0-9a-f]+)`)? \| .+ \|$"
)
NO_FIELDS = {"cmd_code", "must_be_zero", "must_be_zero0", "payload_size"}


class Row:
    def __init__(self, name, kind, code, handling, ex_field, ex_value):
        self.name, self.kind, self.code, self.handling = name, kind, code, handling
        self.example: Optional[Tuple[str, int]] = (
            (ex_field, int(ex_value, 16)) if ex_field else None
        )

    @property
    def short(self) -> str:
        """The name the model's messages use: OP_POOL, ACC_FORMAT, IFM_BASE0, ..."""
        return self.name[len("NPU_SET_") :] if self.name.startswith("NPU_SET_") else self.name[4:]


def table_rows() -> List[Row]:
    text = DOC.read_text()
    section = text[text.index("## Registers (Ethos-U55/U65)") :]
    section = section[: section.index("\n## ", 1)]
    rows = []
    for line in section.splitlines():
        if line.startswith("| NPU_"):
            m = ROW.match(line)
            assert m, f"malformed register table row in docs/npu-model.md: {line}"
            name, kind, code, handling, ex_field, ex_value = m.groups()
            assert handling in HANDLINGS, line
            assert (handling == "checked") == (ex_field is not None), line
            rows.append(Row(name, kind, int(code, 16), handling, ex_field, ex_value))
    return rows


def vela_opcodes() -> Dict[str, Tuple[str, int]]:
    return {
        m.name: (enum.__name__, m.value) for enum in (vela_regs.cmd0, vela_regs.cmd1) for m in enum
    }


def code_opcodes() -> Dict[str, Tuple[str, int]]:
    """Opcodes registers.h declares (enum Cmd0 / Cmd1), as Vela names them."""
    text = REGISTERS_H.read_text()
    out = {}
    for enum, kind in (("Cmd0", "cmd0"), ("Cmd1", "cmd1")):
        body = re.search(rf"enum {enum} : uint16_t \{{(.*?)\}};", text, re.S).group(1)
        for name, value in re.findall(r"(\w+) = (0x[0-9A-Fa-f]+),", body):
            out["NPU_" + name] = (kind, int(value, 16))
    return out


def test_table_lists_exactly_velas_opcodes_and_the_codes():
    rows = table_rows()
    table = {r.name: (r.kind, r.code) for r in rows}
    assert len(table) == len(rows), "a register listed twice"
    vela = vela_opcodes()
    assert table == vela, (
        f"missing from the table: {sorted(set(vela) - set(table))}; not in Vela: "
        f"{sorted(set(table) - set(vela))}; numbers differ: "
        f"{sorted(n for n in set(vela) & set(table) if vela[n] != table[n])}"
    )
    code = code_opcodes()
    assert code == table, (
        f"in registers.h, not in the table: {sorted(set(code) - set(table))}; in the table, not "
        f"in registers.h: {sorted(set(table) - set(code))}; numbers differ: "
        f"{sorted(n for n in set(code) & set(table) if code[n] != table[n])}"
    )


# ---------------------------------------------------------------- streams
def _seed(name: str):
    data = (SEEDS / name).read_bytes()
    payload_len, weights_len, scratch_len, fast_len = struct.unpack_from("<4I", data)
    payload = data[16 : 16 + payload_len]
    weights = data[16 + payload_len : 16 + payload_len + weights_len]
    # Layout of runtime/fuzz/fuzz_npu_model.cpp: the low 20 / 16 bits are the region sizes.
    return payload, weights, scratch_len % (1 << 20), fast_len % (1 << 16)


def _command(row_kind: str, code: int, param: int = 0, data: int = 0) -> List[int]:
    word = code | (param << 16)
    return [word | 0x4000, data] if row_kind == "cmd1" else [word]


def _rewritten(payload: bytes, kind: str, code: int, fn, insert: bool) -> bytes:
    """The payload with every command `code` replaced by fn(param, data) -> (param, data), and,
    with `insert`, one more such command (fn(0, 0)) at the start of the command stream."""
    start, words = cmd_stream(payload)
    out: List[int] = []
    if insert:
        out += _command(kind, code, *fn(0, 0))
    i = 0
    while i < len(words):
        w = words[i]
        is1 = (w >> 14) & 3 == 1
        op = w & 0x3FF
        if is1:
            if kind == "cmd1" and op == code:
                out += _command(kind, code, *fn(w >> 16, words[i + 1]))
            else:
                out += words[i : i + 2]
            i += 2
        else:
            if kind == "cmd0" and op == code:
                out += _command(kind, code, *fn(w >> 16, 0))
            else:
                out.append(w)
            i += 1
    head = list(struct.unpack(f"<{start}I", payload[: 4 * start]))
    n = len(out)
    head[-1] = (head[-1] & 0xFF) | ((n >> 16) & 0xFF) << 8 | (n & 0xFFFF) << 16
    tail = payload[4 * (start + len(words)) :]
    return struct.pack(f"<{start + n}I", *(head + out)) + tail


def _run(payload: bytes, weights: bytes, scratch_len: int, fast_len: int) -> Tuple[str, bytes]:
    """(error message or "", scratch and fast scratch afterwards); both start as a pattern."""
    scratch = bytearray((i * 131 + 7) & 0xFF for i in range(scratch_len))
    fast = bytearray((i * 29 + 3) & 0xFF for i in range(fast_len)) if fast_len else None
    try:
        rt.npu_model_run(payload, weights, scratch, fast)
        msg = ""
    except rt.NpuModelError as e:
        msg = str(e)
    return msg, bytes(scratch) + bytes(fast or b"")


def test_the_seeds_run_clean():
    for name in SEED_NAMES:
        msg, _ = _run(*_seed(name))
        assert msg == "", (name, msg)


@pytest.mark.parametrize("row", table_rows(), ids=lambda r: r.name)
def test_every_opcode_is_known_to_the_decoder(row):
    if row.name == "NPU_OP_STOP":
        return
    cmds = _command(row.kind, row.code) + [0x0000]  # the command, then NPU_OP_STOP
    try:
        rt.npu_model_run(build_payload(cmds), bytes(64), bytearray(256))
        msg = ""
    except rt.NpuModelError as e:
        msg = str(e)
    assert "unknown" not in msg, msg


@pytest.mark.parametrize(
    "row", [r for r in table_rows() if r.handling == "checked"], ids=lambda r: r.name
)
def test_every_checked_register_rejects_its_example_naming_it(row):
    field, value = row.example

    def bad(param, data):
        return (value, data) if field == "param" else (param, value)

    payload, *regions = _seed(SEED_NAMES[0])
    msg, _ = _run(_rewritten(payload, row.kind, row.code, bad, insert=True), *regions)
    assert msg, f"{row.name} {field}={value:#x} was accepted"
    assert re.search(r"command \d+ \(NPU_", msg), msg
    assert row.short in msg, f"{row.name}: the error does not name the register: {msg}"


@pytest.mark.parametrize(
    "row",
    [r for r in table_rows() if r.handling in ("ignored", "not modelled")],
    ids=lambda r: r.name,
)
@settings(max_examples=6, deadline=None)
@given(data=st.data())
def test_ignored_registers_cannot_change_the_output(row, data):
    seed = data.draw(st.sampled_from(SEED_NAMES), label="seed")
    param = data.draw(st.integers(0, 0xFFFF), label="param")
    value = data.draw(st.integers(0, 0xFFFFFFFF), label="data")
    payload, *regions = _seed(seed)
    want_msg, want = _run(payload, *regions)
    changed = _rewritten(payload, row.kind, row.code, lambda p, d: (param, value), insert=True)
    msg, got = _run(changed, *regions)
    assert msg == want_msg == "", (row.name, msg)
    assert got == want, f"{row.name} = {param:#x}/{value:#x} changed the output of {seed}"


def _fields() -> List[Tuple[str, str, int, str, int, int]]:
    """(name, kind, code, field, bit offset, width) of every field in the command's parameter
    (bits 16..31 of the command word) or payload word, from ethos_u55_regs.py's structures."""
    out = []
    for name, (kind, code) in vela_opcodes().items():
        struct_t = getattr(vela_regs, name.lower() + "_t")
        bit = 0
        for field, _, width in struct_t._fields_:
            if field not in NO_FIELDS:
                out.append((name, kind, code, field, bit, width))
            bit += width
    return out


FIELDS = _fields()


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_every_field_over_its_full_range_executes_or_names_the_rule(data):
    name, kind, code, field, bit, width = data.draw(st.sampled_from(FIELDS), label="field")
    value = data.draw(
        st.one_of(st.integers(0, (1 << width) - 1), st.sampled_from([0, (1 << width) - 1])),
        label="value",
    )
    seed = data.draw(st.sampled_from(SEED_NAMES), label="seed")
    insert = data.draw(st.booleans(), label="insert") and name != "NPU_OP_STOP"
    payload, *regions = _seed(seed)
    mask = ((1 << width) - 1) << bit

    def set_field(param, payload_word):
        word = param << 16 | payload_word << 32  # the command as a 64-bit little-endian value
        word = (word & ~mask) | (value << bit)
        return (word >> 16) & 0xFFFF, (word >> 32) & 0xFFFFFFFF

    msg, _ = _run(_rewritten(payload, kind, code, set_field, insert), *regions)
    if msg:
        assert re.search(r"command \d+ \((NPU_\w+) 0x[0-9a-f]{3}", msg), msg
        assert "unknown" not in msg, msg
    short = name[len("NPU_SET_") :] if name.startswith("NPU_SET_") else name[4:]
    if field.startswith("reserved") and value and insert and kind == "cmd0":
        # Reserved bits of a value-structured cmd0 register are refused where they are set.
        structured = [f for f, _, _ in getattr(vela_regs, name.lower() + "_t")._fields_]
        if "param" not in structured and not name.startswith("NPU_OP_"):
            assert short in msg, (name, field, value, msg)


@pytest.mark.parametrize("seed", SEED_NAMES)
def test_activation_clip_ranges_are_the_four_the_hardware_has(seed):
    """ACTIVATION bits 12..15 pick the range the result is clamped to, one of Vela's
    ``clip_range`` codes (the OFM's precision, uint8, int8, int16); every other code is reserved
    and refused naming the command. On the seeds' int8 OFMs, clamping to the OFM's precision,
    int8 or int16 gives the same output."""
    payload, *regions = _seed(seed)
    _, want = _run(payload, *regions)
    _, code = vela_opcodes()["NPU_SET_ACTIVATION"]
    clips = vela_regs.clip_range
    same = {clips.OFM_PRECISION.value, clips.FORCE_INT8.value, clips.FORCE_INT16.value}
    for clip in range(16):

        def set_clip(param, data, clip=clip):
            return (param & 0x0FFF) | (clip << 12), data

        msg, got = _run(_rewritten(payload, "cmd0", code, set_clip, insert=False), *regions)
        if clip in {c.value for c in clips}:
            assert msg == "", (clip, msg)
            if clip in same:
                assert got == want, f"clip range {clip} changed the output of {seed}"
        else:
            assert "ACTIVATION" in msg and f"reserved clip range {clip}" in msg, (clip, msg)
