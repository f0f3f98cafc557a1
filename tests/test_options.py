"""Inputs declared once: the config fields carry their help, flag, kind and choices
(``gpucap.options``), the command line is made from them (``gpucap.cli.fields``), and the flat
``estimate(**knobs)`` routes keywords to the fields they name."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

import gpucap
from gpucap.cli import estimate as estimate_cli
from gpucap.cli.fields import add_options, flag_of, values
from gpucap.config import SLO, Deployment, EngineConfig, Workload
from gpucap.options import option, options_of, route

# a value other than the default for each kind, as typed on the command line and as parsed
TYPED = {
    "positive_int": ("3", 3),
    "positive_float": ("0.5", 0.5),
    "float": ("0.25", 0.25),
    "str": ("x.csv", "x.csv"),
    "int": ("-2", -2),
    "count": ("0", 0),
    "non_negative_float": ("0", 0.0),
    "names": ("a,b", ("a", "b")),
    "positive_ints": ("2,3", (2, 3)),
    "duration": ("2m", 120.0),  # two minutes, in seconds
}


def typed_value(meta: dict, default: object) -> tuple[list[str], object]:
    """The words after the flag that set an option to something other than its default, and the
    value they give."""
    if meta["kind"] in ("switch", "no_switch"):
        return [], meta["kind"] == "switch"
    if meta["choices"]:
        pick = next(c for c in meta["choices"] if c != default)
        return [pick], pick
    if meta["kind"] == "image_size":
        return ["1080x1920"], (1080, 1920)
    text, value = TYPED[meta["kind"]]
    if meta["nargs"] in ("append", "+"):
        return [text], (value,)
    return [text], value


@pytest.mark.parametrize("cls", [Deployment, Workload, EngineConfig, SLO], ids=lambda c: c.__name__)
def test_every_declared_field_round_trips_through_the_command_line(cls: type) -> None:
    declared = options_of(cls)
    assert declared, f"{cls.__name__} declares no options"
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    for name, meta in declared.items():
        parser = argparse.ArgumentParser()
        add_options(parser, cls, (name,))
        words, expected = typed_value(meta, defaults[name])
        parsed = parser.parse_args([flag_of(name, meta), *words])
        assert values(parsed, cls, (name,)) == {name: expected}, name


def test_gpucap_estimate_offers_every_deployment_and_workload_field() -> None:
    """A field added to Deployment or Workload with ``option`` is an option of ``gpucap
    estimate`` without touching the command line: its parser has a flag for each."""
    parser = argparse.ArgumentParser()
    estimate_cli.add_parser(parser.add_subparsers())
    sub = parser._subparsers._group_actions[0].choices["estimate"]  # type: ignore[union-attr]
    dests = {a.dest for a in sub._actions}
    for cls in (Deployment, Workload, EngineConfig):
        missing = set(options_of(cls)) - dests
        assert not missing, f"{cls.__name__}: {missing}"


def test_command_line_builds_the_config_objects() -> None:
    parser = argparse.ArgumentParser()
    estimate_cli.add_parser(parser.add_subparsers())
    a = parser.parse_args(
        ["estimate", "--model", "Qwen/Qwen3-30B-A3B", "--gpu", "H100-SXM-80GB", "--tp", "2", "--routing-skew", "0.5",
         "--input-len", "1000", "--output-len", "200", "--turns", "3", "--no-cuda-graphs", "--enable-eplb"]
    )  # fmt: skip
    dep, work = estimate_cli.deployment(a), estimate_cli.workload(a)
    assert (dep.tp, dep.routing_skew, dep.kv_dtype) == (2, 0.5, "auto")
    assert isinstance(dep.engine, EngineConfig) and not dep.engine.cuda_graphs and dep.engine.eplb
    assert dep.engine.sampler == "logits"  # no start-up log: the field's default
    assert (work.input_len, work.output_len, work.turns) == (1000.0, 200.0, 3)


def test_keywords_are_routed_to_the_field_they_name() -> None:
    dep, work = route({"tp": 2, "turns": 3, "routing_skew": 0.1}, Deployment, Workload)
    assert dep == {"tp": 2, "routing_skew": 0.1} and work == {"turns": 3}
    with pytest.raises(TypeError, match="unknown keyword 'tpp'.*tp,"):
        route({"tpp": 2}, Deployment, Workload)
    with pytest.raises(TypeError, match="unknown keyword 'tpp'"):
        gpucap.estimate("meta-llama/Llama-3.1-8B", "H100-SXM-80GB", input_len=100, output_len=10, tpp=2)


def test_flat_estimate_and_config_objects_agree() -> None:
    flat = gpucap.estimate(
        "Qwen/Qwen3-30B-A3B", "H100-SXM-80GB", input_len=2000, output_len=300, tp=2, routing_skew=0.5, turns=2
    )
    objects = gpucap.estimate_for(
        Deployment("Qwen/Qwen3-30B-A3B", "H100-SXM-80GB", tp=2, routing_skew=0.5),
        Workload(2000, 300, turns=2),
    )
    assert flat.recommended_concurrency == objects.recommended_concurrency
    assert flat.saturation_output_tokens_per_s == objects.saturation_output_tokens_per_s
    assert flat.hw == objects.hw


def test_a_field_declared_with_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="kind must be one of"):
        option(1, kind="integer", help="x")


def command_option_classes() -> list[type]:
    """The dataclasses whose fields make the commands' own options."""
    from gpucap.cli import calibrate, common, errors, estimate, frontier, plan, simulate, telemetry, validate

    modules = (calibrate, common, errors, estimate, frontier, plan, simulate, telemetry, validate)
    return [
        cls
        for m in modules
        for cls in vars(m).values()
        if isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == m.__name__ and options_of(cls)
    ]


@pytest.mark.parametrize("cls", command_option_classes(), ids=lambda c: c.__name__)
def test_every_command_option_round_trips_through_the_command_line(cls: type) -> None:
    """The commands' own options (positional, repeated, durations) parse to their fields' values."""
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    for name, meta in options_of(cls).items():
        parser = argparse.ArgumentParser()
        add_options(parser, cls, (name,))
        words, expected = typed_value(meta, defaults[name])
        flag = [] if meta["flag"] == "" else [flag_of(name, meta)]
        assert values(parser.parse_args([*flag, *words]), cls, (name,)) == {name: expected}, name


def test_a_repeated_flag_keeps_every_value_and_a_missing_one_is_empty() -> None:
    from gpucap.cli.calibrate import CalibrateOptions

    parser = argparse.ArgumentParser()
    add_options(parser, CalibrateOptions, ("fix",))
    given = parser.parse_args(["--fix", "u_hbm=0.8", "--fix", "overlap=0"])
    assert values(given, CalibrateOptions, ("fix",)) == {"fix": ("u_hbm=0.8", "overlap=0")}
    assert values(parser.parse_args([]), CalibrateOptions, ("fix",)) == {"fix": ()}


def test_a_duration_takes_units_and_refuses_what_is_not_one(capsys: pytest.CaptureFixture[str]) -> None:
    from gpucap.cli.telemetry import Sampling

    parser = argparse.ArgumentParser()
    add_options(parser, Sampling, ("every", "for_s"))
    a = parser.parse_args(["--every", "500ms", "--for", "1h"])
    assert (a.every, a.for_s) == (0.5, 3600.0)
    with pytest.raises(SystemExit):
        parser.parse_args(["--every", "soon"])
    assert "'soon' is not a duration" in capsys.readouterr().err


def test_the_command_line_writes_no_option_by_hand() -> None:
    """Every option of every command comes from a declared field: the only ``add_argument`` calls
    in gpucap/cli are ``add_options``' own and ``--version``."""
    from pathlib import Path

    import gpucap.cli

    folder = Path(gpucap.cli.__file__).parent
    calls = {f.name: f.read_text().count(".add_argument(") for f in folder.glob("*.py")}
    assert {k: v for k, v in calls.items() if v} == {"fields.py": 3, "main.py": 1}


def test_an_option_with_unknown_nargs_is_refused() -> None:
    with pytest.raises(ValueError, match="nargs must be"):
        option(1, nargs="*", help="x")
