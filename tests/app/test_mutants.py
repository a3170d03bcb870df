"""bench/mutants.py's mutations stay applicable: each names a test file that exists and an
original text that occurs exactly once in its file (the code moves; the list must follow)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


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
