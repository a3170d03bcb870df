"""A rollout call that runs the GPU out of memory is made again in parts of half the rows that
failed, kept for the rest of the run (vlrl/rollout/parts.py, trainer.halve_on_oom). The error is
torch's own (torch.OutOfMemoryError), raised here where a CUDA allocation would fail: in the
prefill, or in a decoding step after the engine has drawn tokens."""

from __future__ import annotations

import pytest
import torch

from tests.models.test_policy import family_setup
from tests.rollout.test_hf_engine import assert_same_completions
from vlrl.rollout import Completion, Generation, SamplingParams
from vlrl.rollout.hf import HFEngine, HFOptions
from vlrl.rollout.parts import Part, RolloutRows, parts

CUDA_MESSAGE = "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB"


@pytest.mark.parametrize(
    "prompts, n, rows, expected",
    [
        (3, 4, None, [Part(0, 3, 4)]),  # not yet halved: one call
        (3, 4, 12, [Part(0, 3, 4)]),
        (3, 4, 11, [Part(0, 2, 4), Part(2, 3, 4)]),  # whole groups while one fits
        (3, 4, 4, [Part(0, 1, 4), Part(1, 2, 4), Part(2, 3, 4)]),
        # a group in pieces, each naming the group's completion it starts at
        (
            2,
            5,
            2,
            [
                Part(0, 1, 2, 0),
                Part(0, 1, 2, 2),
                Part(0, 1, 1, 4),
                Part(1, 2, 2, 0),
                Part(1, 2, 2, 2),
                Part(1, 2, 1, 4),
            ],
        ),
    ],
)
def test_a_calls_prompts_are_split_into_whole_groups_and_a_group_too_large_into_pieces(prompts, n, rows, expected):
    assert parts(prompts, n, rows) == expected
    assert all(part.rows <= (rows or prompts * n) for part in expected)


@pytest.mark.parametrize(
    "rows, start, first, expected",
    [
        (None, 1, 2, [Part(1, 2, 2, 2), Part(2, 3, 4)]),  # the rest of prompt 1's group, then the others at once
        (4, 1, 2, [Part(1, 2, 2, 2), Part(2, 3, 4)]),
        (1, 2, 3, [Part(2, 3, 1, 3)]),
        (8, 3, 0, []),  # nothing left
    ],
)
def test_the_rest_of_a_call_is_planned_from_the_part_that_failed(rows, start, first, expected):
    assert parts(3, 4, rows, start, first) == expected


class Engine:
    """Completions named by their prompt and their number among that prompt's; a call of more
    than `fits` rows runs out of memory."""

    device = torch.device("cpu")

    def __init__(self, fits: int, refused: frozenset[int] = frozenset(), fails=lambda prompts, params: False):
        self.fits, self.refused, self.fails = fits, refused, fails  # `fails`: also these calls run out
        self.calls: list[tuple[int, int]] = []  # (prompts, n)
        self.greedy: list[int] = []  # each call's SamplingParams.greedy
        self.events: list[str] = []
        self.given: dict[int, int] = {}

    def generate(self, prompts, params, generator=None):
        self.calls.append((len(prompts), params.n))
        self.greedy.append(params.greedy)
        if len(prompts) * params.n > self.fits or self.fails(prompts, params):
            raise torch.OutOfMemoryError(CUDA_MESSAGE)
        out = []
        for p in prompts:
            if p in self.refused:
                out.append(Generation([], rejected=f"prompt {p} too long"))
                continue
            first = self.given.get(p, 0)
            self.given[p] = first + params.n
            out.append(Generation([Completion([p, k], f"{p}.{k}", False) for k in range(first, first + params.n)]))
        return out

    def sleep(self):
        self.events.append("sleep")

    def wake(self):
        self.events.append("wake")


def texts(generations) -> list[list[str]]:
    return [[c.text for c in g.completions] for g in generations]


def test_a_call_that_runs_out_of_memory_is_made_again_in_halves_until_it_fits_and_the_run_keeps_them():
    engine, warnings, undone = Engine(fits=3), [], []
    rows = RolloutRows(True, lambda: undone.append(1), warnings.append)
    got = rows.generate(engine, [0, 1, 2, 3], SamplingParams(n=2))
    assert texts(got) == [[f"{p}.0", f"{p}.1"] for p in range(4)]
    # 8 rows failed, then 4 (two prompts) failed, then one prompt a call
    assert engine.calls == [(4, 2), (2, 2), (1, 2), (1, 2), (1, 2), (1, 2)]
    assert (
        rows.rows == 2 and len(warnings) == 2 and "out of memory" in warnings[0] and "of at most 4 rows" in warnings[0]
    )
    assert engine.events == ["sleep", "wake"] * 2 and undone == [1, 1]  # the engine's buffers freed before each retry
    engine.calls.clear()
    rows.generate(engine, [0, 1], SamplingParams(n=2))  # the next call starts in parts
    assert engine.calls == [(1, 2), (1, 2)] and len(warnings) == 2


def test_the_parts_decoded_before_the_one_that_failed_are_kept_and_the_rest_goes_on_from_it():
    """Prompts 0-1 decode; the call of prompts 2-3 fails: prompt 0's and 1's completions are not
    made again (the engine numbers each prompt's completions as it makes them), and the rest goes
    on at half the failed part's rows. Likewise within a group: its first piece is kept."""
    engine = Engine(fits=8, fails=lambda prompts, params: 3 in prompts and params.n * len(prompts) > 2)
    rows = RolloutRows(True, rows=4)
    assert texts(rows.generate(engine, [0, 1, 2, 3], SamplingParams(n=2))) == [[f"{p}.0", f"{p}.1"] for p in range(4)]
    assert engine.calls == [(2, 2), (2, 2), (1, 2), (1, 2)] and rows.rows == 2
    failed_once = []
    engine = Engine(
        fits=8, fails=lambda prompts, params: params.greedy == 1 and not failed_once and not failed_once.append(1)
    )
    got = RolloutRows(True, rows=2).generate(engine, [0], SamplingParams(n=5, greedy=3))
    assert texts(got) == [[f"0.{k}" for k in range(5)]]
    # pieces 0-1 (both greedy) kept; 2-3 failed; then 2, 3, 4 one a call, only 2 greedy
    assert engine.calls == [(1, 2), (1, 2), (1, 1), (1, 1), (1, 1)] and engine.greedy == [2, 1, 1, 0, 0]


def test_a_call_of_no_prompts_asks_the_engine_nothing():
    engine = Engine(fits=0)
    assert RolloutRows(True).generate(engine, [], SamplingParams(n=2)) == [] and engine.calls == []


def test_a_group_larger_than_the_rows_left_is_sampled_in_pieces_joined_in_order_and_refused_if_a_piece_is():
    engine = Engine(fits=3, refused=frozenset({1}))
    got = RolloutRows(True).generate(engine, [0, 1], SamplingParams(n=5))
    assert texts(got) == [[f"0.{k}" for k in range(5)], []]
    assert got[1].rejected == "prompt 1 too long"
    assert engine.calls[:4] == [(2, 5), (1, 5), (1, 2), (1, 2)]  # 10 rows, 5, then pieces of 2


def test_a_groups_greedy_rows_are_its_first_ones_whether_it_is_sampled_whole_or_in_pieces():
    """SamplingParams.greedy (ReMax's baseline rows): a call of whole groups keeps it, a group's
    pieces ask for the greedy rows only where the group's first completions are."""
    engine = Engine(fits=4)
    RolloutRows(True).generate(engine, [0, 1], SamplingParams(n=5, greedy=3))
    assert engine.calls == [(2, 5), (1, 5), (1, 2), (1, 2), (1, 1), (1, 2), (1, 2), (1, 1)]
    assert engine.greedy == [3, 3, 2, 1, 0, 2, 1, 0]


def test_with_halve_on_oom_off_running_out_of_memory_ends_the_rollout_at_the_first_call():
    engine = Engine(fits=5)
    with pytest.raises(torch.OutOfMemoryError, match="CUDA out of memory"):
        RolloutRows(False).generate(engine, [0, 1, 2, 3], SamplingParams(n=2))
    assert engine.calls == [(4, 2)]


def test_a_rollout_that_runs_out_of_memory_on_one_row_ends_with_advice():
    engine = Engine(fits=0)
    with pytest.raises(torch.OutOfMemoryError, match="decoding one row .*CUDA out of memory.*vlrl plan"):
        RolloutRows(True).generate(engine, [0, 1], SamplingParams(n=2))
    assert engine.calls == [(2, 2), (1, 2), (1, 1)]


@pytest.fixture(scope="module")
def qwen25(rec_data, video_qa_data):
    """The tiny Qwen2.5-VL, its processor, two image prompts and a video one."""
    return family_setup("qwen2_5_vl", rec_data, video_qa_data)


@pytest.mark.parametrize("static", [False, True], ids=["dynamic loop", "static step"])
@pytest.mark.parametrize("fails_at", [1, 4], ids=["in the prefill", "after three decoding steps"])
def test_an_hf_rollout_that_runs_out_of_memory_decodes_in_parts_as_they_would_from_where_its_stream_was(
    qwen25, static, fails_at
):
    """The first layer's query projection raises in its `fails_at`-th forward of the first call.
    The call is made again one prompt a call (the 12 rows halved to 6, whole groups of 4), and
    its completions are those of decoding in those parts from the generator's state when the
    error was raised: tokens exactly, log-probs and entropies to float rounding. The engine's
    buffers of the failed shape (the static step's) are made anew for the parts' shape."""
    model, processor, prompts = qwen25
    params = SamplingParams(n=4, max_new_tokens=8)
    engine = HFEngine(model, processor.tokenizer, options=HFOptions(static_cache=static))
    generator = torch.Generator().manual_seed(7)
    at_failure, forwards = [], []

    def fail(module, args):
        forwards.append(1)
        if len(forwards) == fails_at and not at_failure:
            at_failure.append(generator.get_state())
            raise torch.OutOfMemoryError(CUDA_MESSAGE)

    layer = model.model.language_model.layers[0].self_attn.q_proj  # a hook the lean step honours
    handle = layer.register_forward_pre_hook(fail)
    try:
        rows = RolloutRows(True)
        got = rows.generate(engine, prompts, params, generator)
    finally:
        handle.remove()
    assert at_failure and rows.rows == 6
    drawn = not torch.equal(at_failure[0], torch.Generator().manual_seed(7).get_state())
    assert drawn == (fails_at > 1)  # a failure in a decoding step spent the draws before it
    fresh = HFEngine(model, processor.tokenizer, options=HFOptions(static_cache=static))
    from_there = torch.Generator().set_state(at_failure[0])
    expected = RolloutRows(rows=6).generate(fresh, prompts, params, from_there)  # one prompt a call
    assert [len(g.completions) for g in got] == [4, 4, 4]
    assert_same_completions(got, expected)
