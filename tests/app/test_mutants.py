"""bench/mutants.py's mutations stay applicable: each names a test file that exists and an
original text that occurs exactly once in its file (the code moves; the list must follow). And
docs/option_tests.md gives every option of algo, trainer and rollout (with the built-in engines'
and strategies' own) the mutations tried on it and the tests they run."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
import typing
from pathlib import Path

from vlrl.config import AlgoConfig, RolloutConfig, TrainerConfig
from vlrl.parallel.fsdp2 import FSDP2
from vlrl.rollout.hf import HFEngine
from vlrl.rollout.vllm import VLLMEngine

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "option_tests.md"


def load_mutants():
    spec = importlib.util.spec_from_file_location("mutants", ROOT / "bench" / "mutants.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module


def test_every_mutation_applies_to_exactly_one_place_and_names_existing_tests():
    mutants = load_mutants()
    assert mutants.problems(mutants.MUTATIONS, ROOT) == []
    names = [m.name for m in mutants.MUTATIONS]
    assert len(set(names)) == len(names)
    for m in mutants.MUTATIONS:
        assert m.tests and all((ROOT / test.split("::")[0]).is_file() for test in m.tests), m.name
        for test in m.tests:  # a named test function exists in its file
            path, _, function = test.partition("::")
            assert not function or f"def {function.split('[')[0]}(" in (ROOT / path).read_text(), (m.name, test)


def test_the_issues_mutations_are_listed():
    names = " | ".join(m.name for m in load_mutants().MUTATIONS)
    for required in ("overlong never", "thinking never", "temporal never", "length never", "top_entropy_fraction ignored",
                     "dual_clip ignored", "KL term's sign flipped", "mask_truncated ignored", "kl_estimator fixed",
                     "old log-probs taken as the current ones", "old_logprobs=recompute ignored"):  # fmt: skip
        assert required in names


def option_names(cls, prefix: str) -> set[str]:
    """The dotted options of a config dataclass, its nested sections' included; not `options`
    (the plugins' sections, listed by their own classes)."""
    hints = typing.get_type_hints(cls)
    out = set()
    for field in dataclasses.fields(cls):
        if field.name == "options":
            continue
        kind = hints[field.name]
        nested = dataclasses.is_dataclass(kind)
        out |= option_names(kind, f"{prefix}.{field.name}") if nested else {f"{prefix}.{field.name}"}
    return out


def config_options() -> set[str]:
    plugins = [("rollout", HFEngine), ("rollout", VLLMEngine), ("trainer", FSDP2)]
    return (
        option_names(AlgoConfig, "algo")
        | option_names(TrainerConfig, "trainer")
        | option_names(RolloutConfig, "rollout")
        | {name for section, cls in plugins for name in option_names(cls.Options, f"{section}.{cls.options_key}")}
    )


def option_tests(names: list[str], by_name: dict) -> list[str]:
    """The tests that the mutations `names` run, in order, each once."""
    return list(dict.fromkeys(test for name in names for test in by_name[name].tests))


def doc_rows() -> dict[str, tuple[list[str], list[str]]]:
    """docs/option_tests.md's table: option -> (tests, mutation names)."""
    rows = {}
    for line in DOC.read_text().splitlines():
        if line.startswith("| `"):
            option, tests, names = (cell.strip() for cell in line.strip().strip("|").split(" | "))
            rows[option.strip("`")] = (tests.split("<br>"), names.split("; "))
    return rows


def test_every_option_has_a_row_naming_the_mutations_tried_on_it_and_the_tests_they_run():
    by_name = {m.name: m for m in load_mutants().MUTATIONS}
    rows = doc_rows()
    assert sorted(rows) == sorted(config_options())
    for option, (tests, names) in rows.items():
        assert names and all(name in by_name for name in names), option
        assert tests == option_tests(names, by_name), option
