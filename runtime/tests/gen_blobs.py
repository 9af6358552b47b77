"""Write test blobs with the Python writer (ethosu_ng/blob.py) for the C++ parser test.

Usage: gen_blobs.py OUT_DIR. Writes good_*.blob (the C++ reader must decode exactly the fields
listed in manifest.txt) and bad_*.blob (byte-level corruptions both readers must reject), so the
C++ reader is checked against the real producer of the format.
"""

import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from ethosu_ng.blob import DTYPE_CODES, HEADER, MAX_RANK, SECTION_ENTRY, DelegateBlob  # noqa: E402  # noqa: E402
from ethosu_ng.tensor_spec import TensorSpec  # noqa: E402


def good_blobs():
    conv = DelegateBlob(
        inputs=[TensorSpec(torch.int8, (1, 3, 8, 8), (0, 1, 2, 3), 0.01953125, -11, 1, 512)],
        outputs=[TensorSpec(torch.int8, (1, 8, 6, 10), (0, 2, 3, 1), 0.00518798828125, -128, 1, 0)],
        command_stream=bytes(range(256)) * 4 + b"\x01\x02\x03",
        weights=bytes(400),
        scratch_size=704,
        tosa=b"TOSA" * 91,
    )
    mixed = DelegateBlob(
        inputs=[
            TensorSpec(torch.uint8, (1, 4, 5, 3), (0, 2, 3, 1), 0.5, 128, 1, 0),
            TensorSpec(torch.int16, (7, 9), (1, 0), None, None, 1, 64),
            TensorSpec(torch.int32, (), (), None, None, 1, 192),
        ],
        outputs=[
            TensorSpec(torch.int32, (10,), (0,), 0.25, 3, 1, 208),
            TensorSpec(torch.uint16, (1, 2, 3, 2, 2, 2), (5, 3, 1, 0, 2, 4), None, None, 1, 256),
        ],
        command_stream=b"\xaa" * 17,
        weights=b"",
        scratch_size=400,
        fast_scratch_size=4096,
    )
    empty = DelegateBlob(
        inputs=[], outputs=[], command_stream=b"\x00" * 16, weights=b"\x11", scratch_size=0
    )
    return {"conv": conv, "mixed": mixed, "empty": empty}


def corrupt(raw: bytes):
    """(name, bytes) pairs, each violating one rule of docs/blob-format.md."""
    hdr = list(HEADER.unpack_from(raw, 0))
    io_off, n_in, n_sec, sec_off = hdr[6], hdr[4], hdr[8], hdr[9]

    def with_header(**kw):
        fields = [
            "magic",
            "version",
            "header_size",
            "total",
            "n_in",
            "n_out",
            "io_off",
            "io_entry_size",
            "n_sec",
            "sec_off",
            "scratch",
            "fast",
            "flags",
        ]
        h = list(hdr)
        for k, v in kw.items():
            h[fields.index(k)] = v
        return HEADER.pack(*h) + raw[HEADER.size :]

    def patch(off, fmt, *vals):
        b = bytearray(raw)
        struct.pack_into(fmt, b, off, *vals)
        return bytes(b)

    first_io = io_off
    sec = [SECTION_ENTRY.unpack_from(raw, sec_off + 16 * k) for k in range(n_sec)]
    out = {
        "magic": with_header(magic=b"EUNH"),
        "version": with_header(version=2),
        "header_size": with_header(header_size=48),
        "io_entry_size": with_header(io_entry_size=32),
        "total_size": with_header(total=hdr[3] + 16),
        "truncated": raw[:-16],
        "io_table_misaligned": with_header(io_off=io_off + 8),
        "io_table_range": with_header(n_in=n_in + 4000),
        "section_table_range": with_header(n_sec=n_sec + 500),
        "tosa_flag": with_header(flags=hdr[12] ^ 1),
        "dtype": patch(first_io, "<B", 9),
        "rank": patch(first_io + 1, "<B", 7),
        "elem_size": patch(first_io + 2, "<B", 2),
        "byte_size": patch(first_io + 8, "<I", 1),
        "dim_order": patch(first_io + 44, "<B", 1),
        "scratch_range": patch(first_io + 4, "<I", hdr[10]),
        "section_misaligned": patch(sec_off + 4, "<I", sec[0][1] + 4),
        "section_range": patch(sec_off + 8, "<I", len(raw)),
        "section_overflow": patch(sec_off + 4, "<II", sec[0][1], 0xFFFFFFF0),
        "section_kind": patch(sec_off, "<I", 7),
        "section_duplicate": patch(sec_off + 16, "<I", sec[0][0]),
    }
    for name, b in out.items():
        try:
            DelegateBlob.from_bytes(b)
        except ValueError:
            continue
        raise AssertionError(f"python reader accepted corrupted blob {name!r}")
    return out


def main(out_dir: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    lines = []
    goods = good_blobs()
    for name, blob in goods.items():
        raw = blob.to_bytes()
        assert DelegateBlob.from_bytes(raw).inputs == blob.inputs
        with open(os.path.join(out_dir, f"good_{name}.blob"), "wb") as f:
            f.write(raw)
        tosa = -1 if blob.tosa is None else len(blob.tosa)
        lines.append(
            f"blob good_{name}.blob {len(blob.inputs)} {len(blob.outputs)} {blob.scratch_size} "
            f"{blob.fast_scratch_size} {tosa} {len(blob.command_stream)} {len(blob.weights)}"
        )
        for s in blob.inputs + blob.outputs:
            rank = len(s.shape)
            shape = list(s.shape) + [0] * (MAX_RANK - rank)
            order = list(s.dim_order) + [0] * (MAX_RANK - rank)
            # The scale as the f32 the blob stores, printed exactly.
            scale = struct.unpack("<f", struct.pack("<f", 0.0 if s.scale is None else s.scale))[0]
            lines.append(
                f"io {DTYPE_CODES[s.dtype]} {rank} {s.elem_size} {s.region} {s.offset} "
                f"{s.byte_size} "
                f"{0 if s.zero_point is None else s.zero_point} {scale.hex()} "
                + " ".join(map(str, shape))
                + " "
                + " ".join(map(str, order))
            )
    for base in ("conv", "mixed"):
        for name, raw in corrupt(goods[base].to_bytes()).items():
            fname = f"bad_{base}_{name}.blob"
            with open(os.path.join(out_dir, fname), "wb") as f:
                f.write(raw)
            lines.append(f"bad {fname}")
    with open(os.path.join(out_dir, "manifest.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
