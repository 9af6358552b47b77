# SPDX-License-Identifier: BSD-3-Clause
"""Wrong types and junk into the compile spec and the CLI: a clear ValueError/TypeError or a
one-line CLI error with exit code 2 (bad input), never a traceback or another exception type.
Each CLI case has exactly one thing wrong."""

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ethosu_ng import TARGETS, EthosUNGCompileSpec
from ethosu_ng.ops import resolve_op_names
from ethosu_ng.tools.cli import EXIT_BAD_INPUT, main

FACTORY = os.path.join(os.path.dirname(__file__), "data", "tiny_factory.py")

junk = st.one_of(
    st.none(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.binary(max_size=8),
    st.lists(st.integers(), max_size=3),
    st.booleans(),
)


@settings(max_examples=200, deadline=None)
@given(
    target=st.one_of(junk, st.sampled_from(TARGETS)),
    system_config=junk,
    memory_mode=junk,
    flags=st.one_of(junk, st.lists(st.one_of(st.text(max_size=8), st.integers()), max_size=3)),
    embed=junk,
    timeout=junk,
)
def test_compile_spec_rejects_junk_cleanly(
    target, system_config, memory_mode, flags, embed, timeout
):
    kwargs = dict(
        system_config=system_config,
        memory_mode=memory_mode,
        embed_tosa=embed,
        vela_timeout_s=timeout,
    )
    if flags is not None:
        kwargs["extra_vela_flags"] = flags
    try:
        spec = EthosUNGCompileSpec(target, **kwargs)
    except (ValueError, TypeError) as e:
        assert str(e)
        return
    assert spec.target in TARGETS and isinstance(spec.embed_tosa, bool)


TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)


def _not_an_op(text):
    try:
        resolve_op_names([text])
    except (ValueError, TypeError):
        return True
    return False


def _not_an_int(text):
    try:
        int(text)
    except ValueError:
        return True
    return False


# One hostile argument per case, appended to an otherwise valid compile command (the tiny model
# test_cli.py compiles): the only thing wrong, so the exit code and message are about it.
HOSTILE = st.one_of(
    st.tuples(st.just("--target"), TEXT.filter(lambda t: t not in TARGETS)),
    st.tuples(st.just("--cpu-op"), TEXT.filter(_not_an_op)),
    st.tuples(st.just("--calibration"), TEXT.filter(_not_an_int)),
    st.tuples(st.just("--input-dtype"), TEXT.filter(lambda t: t not in ("float", "int8", "uint8"))),
    st.tuples(
        st.just("--output-dtype"), TEXT.filter(lambda t: t not in ("float", "int8", "uint8"))
    ),
    st.tuples(st.just("option"), TEXT.map(lambda t: f"--junk-{t}")),
    st.tuples(st.just("positional"), TEXT.filter(lambda t: not t.startswith("-"))),
)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(HOSTILE)
def test_cli_junk_argument(capsys, tmp_path_factory, case):
    where, junk = case
    out = str(tmp_path_factory.mktemp("junk") / "x.pte")
    argv = ["compile", f"{FACTORY}:make", "-o", out]
    argv += [junk] if where in ("option", "positional") else [f"{where}={junk}"]
    try:
        code = main(argv)
    except SystemExit as e:  # argparse usage errors exit 2 with a usage line
        code = e.code
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT, (argv, code, err)
    assert "Traceback" not in err and "[1/4]" not in err  # rejected before any stage starts
    assert "error:" in err and (junk in err or repr(junk) in err or where in err), (argv, err)


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(TEXT.filter(lambda t: not t.startswith("-") and not os.path.exists(t.partition(":")[0])))
def test_cli_junk_model(capsys, model):
    """The model argument the only thing wrong: a one-line error, before any stage starts."""
    try:
        code = main(["compile", model])
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT, (model, code, err)
    assert len(err.splitlines()) == 1 and err.startswith("ethosu-ng: error:"), err
