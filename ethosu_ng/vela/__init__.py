# SPDX-License-Identifier: BSD-3-Clause
"""The Vela stage: TOSA flatbuffer -> Ethos-U command stream, run in child processes with a time
limit (``process``) and read back (``compiler``)."""
