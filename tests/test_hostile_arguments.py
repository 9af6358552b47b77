"""Wrong types and junk into the compile spec and the CLI: a clear ValueError/TypeError or a
one-line CLI error with a non-zero exit, never a traceback or another exception type."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ethosu_ng import TARGETS, EthosUNGCompileSpec
from ethosu_ng.tools.cli import main

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


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12), max_size=4)
)
def test_cli_junk_arguments(capsys, argv):
    argv = ["compile", "timm:__no_such_model__"] + argv
    try:
        code = main(argv)
    except SystemExit as e:  # argparse usage errors exit 2 with a usage line
        code = e.code
    err = capsys.readouterr().err
    assert code != 0
    assert "Traceback" not in err
