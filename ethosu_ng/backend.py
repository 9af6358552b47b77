# SPDX-License-Identifier: BSD-3-Clause
"""EthosUNGBackend: ExecuTorch's entry point for turning partitions into DelegateBlobs.

The stages live in ``partition_compiler``. Usually the partitioner has compiled every partition
already (it must, to fall back to the CPU when Vela fails), and ``preprocess`` only takes the
result from that partitioner's cache (``compiled_cache``), keyed by compile spec and fingerprint;
otherwise (a program tagged by someone else, or a fingerprint miss) it
compiles here, all partitions of a program together so Vela runs in parallel workers.
"""

from __future__ import annotations

import logging
from typing import Dict, List, final

from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.compile_spec_schema import CompileSpec
from torch.export import ExportedProgram

from ethosu_ng.blob import DelegateBlob
from ethosu_ng.compile_spec import EthosUNGCompileSpec
from ethosu_ng.compiler.compiled_cache import attached
from ethosu_ng.compiler.pipeline import CompiledPartition, compile_partitions, partition_name
from ethosu_ng.memory_plan import check_delegate_budget
from ethosu_ng.partitioning.partition_program import fingerprint

logger = logging.getLogger(__name__)


def _result(c: CompiledPartition) -> PreprocessResult:
    return PreprocessResult(processed_bytes=c.blob, _delegate_info_meta=c.io)


def _compile_all(
    programs: List[ExportedProgram], spec: EthosUNGCompileSpec
) -> List[PreprocessResult]:
    out: List[PreprocessResult] = [None] * len(programs)  # type: ignore[list-item]
    todo = []
    for k, program in enumerate(programs):
        cache = attached(program)
        hit = cache.take(cache.key(spec, fingerprint(program))) if cache is not None else None
        if hit is not None:
            out[k] = _result(hit)
        else:
            todo.append(k)
    if todo:
        logger.debug("compiling %d partition(s) the partitioner had not compiled", len(todo))
        compiled = compile_partitions(
            [(partition_name(programs[k]), programs[k]) for k in todo], spec
        )
        for k, c in zip(todo, compiled):
            if isinstance(c, Exception):
                raise c
            out[k] = _result(c)
    for program, r in zip(programs, out):
        blob = DelegateBlob.from_bytes(r.processed_bytes)
        check_delegate_budget(
            partition_name(program), blob.scratch_size, blob.fast_scratch_size, spec
        )
    return out


@final
class EthosUNGBackend(BackendDetails):
    @staticmethod
    def preprocess(
        edge_program: ExportedProgram, compile_specs: List[CompileSpec]
    ) -> PreprocessResult:
        spec = EthosUNGCompileSpec.from_compile_specs(compile_specs)
        return _compile_all([edge_program], spec)[0]

    @classmethod
    def preprocess_multimethod(
        cls,
        edge_programs: Dict[str, List[ExportedProgram]],
        compile_specs: Dict[str, List[List[CompileSpec]]],
    ) -> Dict[str, List[PreprocessResult]]:
        results: Dict[str, List[PreprocessResult]] = {}
        for method, programs in edge_programs.items():
            specs = [EthosUNGCompileSpec.from_compile_specs(c) for c in compile_specs[method]]
            results[method] = [None] * len(programs)  # type: ignore[list-item]
            # Partitions of one method normally share one spec; group them so Vela runs in parallel.
            for spec in dict.fromkeys(specs):
                ks = [k for k, s in enumerate(specs) if s == spec]
                for k, r in zip(ks, _compile_all([programs[k] for k in ks], spec)):
                    results[method][k] = r
        return results
