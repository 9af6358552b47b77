# SPDX-License-Identifier: BSD-3-Clause
"""Side by side: upstream executorch 1.5.1 EthosUPartitioner vs EthosUNGPartitioner.

Each model is quantized once (EthosUNGQuantizer = upstream's symmetric int8 config, same
calibration batches), exported, saved with ``torch.export.save``, and the same program is lowered
twice. Each lowering runs in a *spawned* child (a fresh interpreter that loads the saved program),
so a Vela segfault in upstream's in-process compile is reported as a crash instead of ending the
benchmark. Not forked: a fork taken after torch has started its OpenMP pool inherits a pool whose
threads do not exist in the child, and the child's first parallel tensor op waits for them forever
(unless ``OMP_NUM_THREADS=1``).

    python bench/compare_upstream.py timm:mobilenetv2_100 scenario:attention_bmm \
        --target ethos-u55-128
    python bench/compare_upstream.py timm:mobilevit_s --target ethos-u85-256 \
        --force-cpu aten.exp.default

Models: anything ``ethosu-ng compile`` accepts, plus ``scenario:attention_bmm`` (attention block,
bmm on the CPU), ``scenario:conv_split_bmm`` (conv -> split -> one branch into a CPU bmm) and
``scenario:reshape_attention`` (transformer blocks on a conv feature map written with the
view/permute/transpose of timm's ViT code; everything on the NPU).
Prints a markdown table (one row per model and partitioner, plus an ours/upstream ratio row).
"data movement" is the NPU cycles of Vela layers that only move or rescale bytes
(``module_profile.data_movement``). ``--tosa-optimize-off`` adds a row for ours with the TOSA
rewrites off (``EthosUNGCompileSpec(tosa_optimize=False)``).
``--repeat N`` lowers each model N times per partitioner, alternating, and reports the fastest
run of each (a shared or virtual machine only ever adds time).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import platform
import queue as queue_mod
import shutil
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

SCENARIO_CPU_OPS = {
    "attention_bmm": ["aten.bmm.default"],
    "conv_split_bmm": ["aten.bmm.default"],
    "reshape_attention": [],
}


def load(spec: str):
    if spec.startswith("scenario:"):
        import models  # tests/models.py

        name = spec.split(":", 1)[1]
        cls = {
            "attention_bmm": models.AttentionBlock,
            "conv_split_bmm": models.ConvSplitBmm,
            "reshape_attention": models.ReshapeAttention,
        }[name]
        torch.manual_seed(0)
        return cls().eval(), cls.example(), SCENARIO_CPU_OPS[name]
    from ethosu_ng.tools.model_source import load_model

    m = load_model(spec)
    return m.model, m.example_inputs, []


def measure(edge, t_lower, vela_summaries, moved):
    from ethosu_ng.ops import op_name
    from ethosu_ng.partitioning.boundary import float_boundary_tensors
    from ethosu_ng.tools.report import is_compute

    program = edge.exported_program()
    gm = program.graph_module
    delegated, cpu = 0, []
    partitions = 0
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        if n.target is torch.ops.higher_order.executorch_call_delegate:
            partitions += 1
            lm = getattr(gm, n.args[0].target)
            delegated += sum(
                1
                for m in lm.original_module.graph.nodes
                if m.op == "call_function" and is_compute(op_name(m.target))
            )
        elif is_compute(op_name(n.target)):
            cpu.append(op_name(n.target).replace("aten.", "").replace(".default", ""))
    cycles = sum(float(s.get("cycles_npu", 0) or 0) for s in vela_summaries)
    sram = sum(float(s.get("sram_memory_used", 0) or 0) for s in vela_summaries)
    return {
        "partitions": partitions,
        "delegated": delegated,
        "total": delegated + len(cpu),
        "cpu_ops": cpu,
        "float_boundary": len(float_boundary_tensors(program)),
        "cycles": cycles,
        "data_movement": moved["npu_cycles"],
        "data_movement_by_op": moved["by_op"],
        "sram_kib": sram,
        "lower_s": t_lower[0],
        "lower_cpu_s": t_lower[1],
    }


def _cpu_s() -> float:
    """CPU seconds of this process, its finished children and our Vela zygotes with their children
    (our Vela runs in child processes, upstream's in process): a lowering-cost figure that a busy
    machine distorts less than wall time."""
    from ethosu_ng.vela import process as vela_process

    t = os.times()
    return t.user + t.system + t.children_user + t.children_system + vela_process.cpu_seconds()


def lower_upstream(ep, target, force_cpu, tosa_by_blob=None):
    """``tosa_by_blob``: a dict to fill with each delegate's processed bytes -> the TOSA graph
    Vela compiled them from, so the program can be run on the TOSA reference model
    (``run_on_tosa_reference``)."""
    from executorch.backends.arm.ethosu import EthosUCompileSpec, EthosUPartitioner
    from executorch.backends.arm.ethosu.backend import EthosUBackend
    from executorch.exir import to_edge_transform_and_lower
    from torch.fx.passes.operator_support import OperatorSupportBase

    from ethosu_ng import EthosUNGCompileSpec, module_profile
    from ethosu_ng.ops import op_name
    from ethosu_ng.tosa_graph import tosa_ops
    from ethosu_ng.vela.compiler import compile_tosa

    class ForceCpu(OperatorSupportBase):
        def is_node_supported(self, submodules, node):
            return not (node.op == "call_function" and op_name(node.target) in force_cpu)

    # Keep each partition's TOSA as upstream hands it to Vela. (Upstream's artifact dump names a
    # file after the first delegation tag in the partition's graph, which can be a shared input's
    # tag: on a split program several partitions overwrite one file, and their cycles went
    # uncounted.)
    captured = []
    compile_flatbuffer = EthosUBackend._compile_tosa_flatbuffer

    def capture(tosa_flatbuffer, compile_spec):
        captured.append(bytes(tosa_flatbuffer))
        result = compile_flatbuffer(tosa_flatbuffer, compile_spec)
        if tosa_by_blob is not None:
            tosa_by_blob[bytes(result.processed_bytes)] = captured[-1]
        return result

    EthosUBackend._compile_tosa_flatbuffer = staticmethod(capture)
    spec = EthosUCompileSpec(target)
    t0, c0 = time.time(), _cpu_s()
    try:
        edge = to_edge_transform_and_lower(
            ep, partitioner=[EthosUPartitioner(spec, additional_checks=[ForceCpu()])]
        )
    finally:
        EthosUBackend._compile_tosa_flatbuffer = staticmethod(compile_flatbuffer)
    t = (time.time() - t0, _cpu_s() - c0)
    gm = edge.exported_program().graph_module
    delegates = sum(1 for n in gm._modules if n.startswith("lowered_module"))
    if delegates != len(captured):
        raise RuntimeError(f"upstream made {delegates} delegates, {len(captured)} TOSA graphs seen")
    # Upstream keeps no Vela figures; recompile its TOSA (outside the timing) to get them.
    summaries, layers = [], []
    for k, tosa in enumerate(captured):
        r = compile_tosa(tosa, EthosUNGCompileSpec(target), f"upstream_{k}")
        summaries.append(r.summary)
        layers += module_profile.attribute(r.layers, tosa_ops(tosa), [])
    return edge, t, summaries, module_profile.data_movement(layers)


def run_on_tosa_reference(edge, tosa_by_blob, inputs):
    """Run upstream's lowered program on the host: every Ethos-U delegate call executes the TOSA
    graph Vela compiled it from on the TOSA reference model (what our host runtime does for a
    U85 program's embedded TOSA graph), the rest of the program eagerly."""
    from executorch.backends.arm.ethosu import EthosUCompileSpec
    from executorch.backends.arm.test.runner_utils import run_tosa_graph
    from torch.overrides import TorchFunctionMode

    class Dispatch(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func is torch._higher_order_ops.executorch_call_delegate:
                lowered = args[0]
                spec = EthosUCompileSpec._from_list(lowered.compile_specs).tosa_spec
                out_node = lowered.original_module.graph.output_node()
                tosa = tosa_by_blob[bytes(lowered.processed_bytes)]
                return run_tosa_graph(tosa, spec, list(args[1:]), out_node)
            return func(*args, **(kwargs or {}))

    module = edge.exported_program().module()
    with torch.no_grad(), Dispatch():
        out = module(*inputs)
    return list(out) if isinstance(out, (tuple, list)) else [out]


def lower_ours(ep, target, force_cpu, tosa_optimize=True, embed_tosa=False):
    from executorch.exir import to_edge_transform_and_lower

    from ethosu_ng import EthosUNGCompileSpec, EthosUNGPartitioner, module_profile
    from ethosu_ng.vela import process as vela_process

    spec = EthosUNGCompileSpec(target, tosa_optimize=tosa_optimize, embed_tosa=embed_tosa)
    partitioner = EthosUNGPartitioner(spec, cpu_ops=force_cpu)
    # Vela's import (in our zygote) outside the timing, as upstream's is (at import).
    vela_process.prestart(wait=True)
    t0, c0 = time.time(), _cpu_s()
    edge = to_edge_transform_and_lower(ep, partitioner=[partitioner])
    t = (time.time() - t0, _cpu_s() - c0)
    gm = edge.exported_program().graph_module
    infos = [
        getattr(gm, n).meta["_delegate_info_meta"]
        for n in gm._modules
        if n.startswith("lowered_module")
    ]
    moved = module_profile.data_movement(layer for i in infos for layer in (i.layers or []))
    return edge, t, [i.vela_summary for i in infos], moved


def _child(which, program_path, target, force_cpu, queue):
    try:
        import ethosu_ng.ops  # noqa: F401 - defines the quantized_decomposed ops the program calls

        ep = torch.export.load(program_path)
        if which == "upstream":
            edge, t, summaries, moved = lower_upstream(ep, target, force_cpu)
        else:
            edge, t, summaries, moved = lower_ours(ep, target, force_cpu, which == OURS)
        metrics = measure(edge, t, summaries, moved)  # before serialization rewrites the graph
        metrics["pte"] = len(edge.to_executorch().buffer)
        queue.put(("ok", metrics))
    except BaseException as e:  # report, never hang the parent
        queue.put(
            ("error", f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}")
        )


@contextlib.contextmanager
def saved_program(q, example_inputs):
    """The quantized model exported and saved to a temporary .pt2 (what a spawned lowering
    child loads); removed on exit."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "program.pt2")
        torch.export.save(torch.export.export(q, tuple(example_inputs)), path)
        yield path


def run_isolated(which, program_path, target, force_cpu, timeout, child=None):
    """Lower the saved program in a spawned child: safe however many threads torch has started
    here, and a crash or hang of the child is a result, not the end of the benchmark."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    # ``child``: another lowering function with _child's arguments (bench/lowering_stages.py).
    p = ctx.Process(target=child or _child, args=(which, program_path, target, force_cpu, queue))
    p.start()
    deadline = time.monotonic() + timeout
    try:
        # Read while the child runs: a child with a large queued result only exits once it has
        # been consumed.
        while time.monotonic() < deadline:
            try:
                return queue.get(timeout=1)
            except queue_mod.Empty:
                if not p.is_alive() and queue.empty():
                    return (
                        "error",
                        f"crashed (exit code {p.exitcode}, "
                        f"signal {-p.exitcode if p.exitcode and p.exitcode < 0 else '-'})",
                    )
        return "error", f"timed out after {timeout} s"
    finally:
        p.join(5)
        if p.is_alive():
            p.kill()
            p.join()


def read_jsonl(path) -> list:
    """The rows of a resumable bench's results file (one JSON object per line); none if absent."""
    if not path or not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


OURS = "ethosu_ng"
OURS_OFF = "ethosu_ng, TOSA rewrites off"


def row(model, who, r):
    if isinstance(r, str):
        return f"| {model} | {who} | {r} |" + " |" * 9
    cpu = ", ".join(sorted(set(r["cpu_ops"]))) or "-"
    return (
        f"| {model} | {who} | {r['partitions']} | {r['delegated']}/{r['total']} | "
        f"{len(r['cpu_ops'])}: {cpu} | {r['float_boundary']} | {r['cycles']:,.0f} | "
        f"{r['data_movement']:,} | {r['sram_kib']:,.1f} | {r['pte']:,} | {r['lower_s']:.1f} | "
        f"{r['lower_cpu_s']:.1f} |"
    )


def main():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("models", nargs="+")
    ap.add_argument("--target", default="ethos-u55-128")
    ap.add_argument("--force-cpu", nargs="*", default=[], metavar="OP")
    ap.add_argument("--calibration", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="lowerings per partitioner, alternating; the fastest is reported",
    )
    ap.add_argument(
        "--tosa-optimize-off",
        action="store_true",
        help="also lower with our TOSA rewrites off (a third row per model)",
    )
    args = ap.parse_args()

    from ethosu_ng import EthosUNGCompileSpec
    from ethosu_ng.export import quantize

    print(
        f"target {args.target}; force-cpu {args.force_cpu or '-'}; torch {torch.__version__}; "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
        f"fastest of {max(1, args.repeat)} lowering(s) each\n"
    )
    print(
        "| model | partitioner | partitions | ops delegated/total | CPU ops (non-Q/DQ) | "
        "float boundary tensors | Vela NPU cycles | data movement NPU cycles | Vela SRAM KiB | "
        ".pte bytes | lowering s | lowering CPU s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    workdir = tempfile.mkdtemp(prefix="compare_upstream_")
    try:
        for spec_str in args.models:
            model, x, scenario_cpu = load(spec_str)
            force = list(args.force_cpu) + scenario_cpu
            g = torch.Generator().manual_seed(1)
            calib = [
                tuple(torch.randn(t.shape, generator=g) for t in x) for _ in range(args.calibration)
            ]
            q = quantize(model, x, EthosUNGCompileSpec(args.target), calibration=calib)
            program_path = os.path.join(workdir, f"{len(os.listdir(workdir))}.pt2")
            torch.export.save(torch.export.export(q, x), program_path)
            runs = {"upstream": [], OURS: []}
            if args.tosa_optimize_off:
                runs[OURS_OFF] = []
            for _ in range(max(1, args.repeat)):
                for who in runs:
                    status, r = run_isolated(who, program_path, args.target, force, args.timeout)
                    runs[who].append(r if status == "ok" else str(r))
            results = {}
            for who, rs in runs.items():
                errors = [r for r in rs if isinstance(r, str)]  # any failed run is what to report
                results[who] = errors[0] if errors else min(rs, key=lambda r: r["lower_cpu_s"])
                print(row(spec_str, who, results[who]), flush=True)
            up, ours = results["upstream"], results[OURS]
            if isinstance(up, dict) and isinstance(ours, dict):
                cyc = ours["cycles"] / up["cycles"] if up["cycles"] else float("nan")
                dm = ours["data_movement"] / up["data_movement"] if up["data_movement"] else 0.0
                tl = ours["lower_s"] / up["lower_s"] if up["lower_s"] else float("nan")
                tc = ours["lower_cpu_s"] / up["lower_cpu_s"] if up["lower_cpu_s"] else float("nan")
                print(
                    f"| {spec_str} | ratio ours/upstream | | | | | {cyc:.3f} | {dm:.3f} | | | "
                    f"{tl:.2f} | {tc:.2f} |",
                    flush=True,
                )
            for who, r in results.items():
                if isinstance(r, dict) and r["data_movement_by_op"]:
                    kinds = ", ".join(f"{k} {v:,}" for k, v in r["data_movement_by_op"].items())
                    print(f"<!-- {spec_str} {who} data movement: {kinds} -->", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
