"""The Vela stage: TOSA flatbuffer -> Ethos-U command stream, run in child processes with a time
limit (``process``) and read back (``compiler``)."""
