"""Compiling partitions: TOSA lowering (through the Arm adapter), the declared == TOSA == Vela IO
check, Vela in worker processes, and the delegate blob."""
