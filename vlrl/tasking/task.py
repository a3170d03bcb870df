"""The Task interface: the one plugin point between a perception task and the engine.

A task is a small class with a name, a record parser, a prompt, reward components, a
prediction parser and metrics. The trainer, the scorer and the evaluator use tasks only
through this class, so a task written outside the package (entry point, `module:Class`
or `path/to/file.py:Class`) is as capable as a built-in one. An evaluation-only task (a
public benchmark, `eval_only`) has no rewards and cannot be trained on.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from vlrl.config import ConfigError, build
from vlrl.data.records import FrameSpec, MediaRules, RecordContext, Split, load_split
from vlrl.data.sample import Sample
from vlrl.tasking.config_rewards import ConfigReward, is_reward_spec, load_reward

if TYPE_CHECKING:
    from vlrl.data.tables import Column, ImageJoin

# A reward component: completions and their samples in, one float per completion out.
RewardFn = Callable[[Sequence[str], Sequence[Sample]], list[float]]


@dataclass
class NoOptions:
    """A task without variants."""


def check_template(key: str, template: str, placeholders: tuple[str, ...]) -> None:
    """A str.format template whose every field is one of `placeholders` (by name: no attribute
    or index access) and whose braces pair up; else a ConfigError naming `key`."""
    literal = "a literal brace is written {{ or }}"
    try:
        fields = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    except ValueError as err:
        raise ConfigError(f"config: {key} is not a template ({err}); {literal}") from err
    for name in fields:
        if name not in placeholders:
            allowed = ", ".join(f"{{{p}}}" for p in placeholders)
            raise ConfigError(
                f"config: {key} has the placeholder {{{name}}}; it may use {allowed} ({literal}; a task that "
                "fills in others lists them in its option_templates)"
            )


class Task:
    """Base class of every task. Subclasses set `name` and implement the methods below."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    Options: ClassVar[type] = NoOptions
    default_rewards: ClassVar[dict[str, float]] = {}
    data_suffix: ClassVar[str] = ".json"  # file extension of the task's public data format
    # Where the task's data comes from and the command converting it, said when a data file is
    # missing ("{path}" is the file the config names); empty: docs/tasks.md.
    data_source: ClassVar[str] = ""
    eval_only: ClassVar[bool] = False  # a benchmark: no rewards, never trained on
    # Published tables (parquet / arrow, vlrl.data.tables): the columns the task reads, checked on
    # every file, and the split it evaluates; empty: the task's data is its own format. Images
    # published as a config of their own are joined to the rows by `image_join`.
    columns: ClassVar[tuple[Column, ...]] = ()
    split: ClassVar[str] = ""
    image_join: ClassVar[ImageJoin | None] = None
    # The evaluation metric, a mean over samples, that says a completion is right (`correct`):
    # training logs its mean over the sampled completions as `accuracy`. "": none.
    accuracy_metric: ClassVar[str] = "accuracy"
    # The metrics a summary shows (held-out lines, vlrl plot) unless eval.headline names others;
    # empty: accuracy_metric. The mean reward follows.
    headline: ClassVar[tuple[str, ...]] = ()
    max_new_tokens: ClassVar[int] = 0  # the generation length its public evaluation uses (0: the config's)
    # Its completions state coordinates in the model's frame (boxes, points): `vlrl score` says
    # which frame it reads them in. False for tasks whose answers are text, numbers or choices.
    states_coordinates: ClassVar[bool] = True
    # Option defaults by model family (vlrl/models/), where that family's recipe differs from
    # the task's defaults (a prompt that states the family's coordinates, say); task.options
    # given in the config override them.
    family_options: ClassVar[dict[str, dict[str, Any]]] = {}
    # The options filled in with str.format (a prompt, the SFT target's reasoning) and the
    # placeholders each is given: checked when the task is built, so a misspelt one is a config
    # error naming the option, not a KeyError once a sample is rendered.
    option_templates: ClassVar[dict[str, tuple[str, ...]]] = {}

    def __init__(self, options: dict[str, Any] | None = None, rewards: dict[str, float] | None = None):
        self.options = build(self.Options, dict(options or {}), prefix="task.options.")
        for option, placeholders in self.option_templates.items():
            check_template(f"task.options.{option}", getattr(self.options, option), placeholders)
        available = self.reward_functions()
        given = dict(rewards or {})
        own = {key: weight for key, weight in given.items() if not is_reward_spec(key)}
        weights = own or dict(self.default_weights())  # reward functions alone add to the task's defaults
        for key in own:
            if key not in available:
                raise ConfigError(
                    f"config: task.rewards.{key} is not a reward of task {self.name!r}; "
                    f"available: {', '.join(sorted(available))} (or a function of yours: FILE.py:FUNCTION)"
                )
        # Reward functions named in the config (config_rewards.py), by their component name.
        self.config_rewards: dict[str, ConfigReward] = {}
        for spec in (key for key in given if is_reward_spec(key)):
            reward = load_reward(spec)
            if reward.name in available or reward.name in self.config_rewards:
                taken = self.config_rewards[reward.name].spec if reward.name in self.config_rewards else self.name
                raise ConfigError(
                    f"config: task.rewards.{spec}: its name {reward.name!r} is already a reward of {taken}; "
                    "rename the function (its name is how it is logged: reward/NAME)"
                )
            self.config_rewards[reward.name] = reward
            weights[reward.name] = given[spec]
        if not weights and not self.eval_only:
            raise ConfigError(f"config: task {self.name!r} has no reward components selected")
        self.reward_weights: dict[str, float] = weights

    def default_weights(self) -> dict[str, float]:
        """The reward weights when the config names none of the task's own (self.options is
        built): `default_rewards`, unless a variant's recipe trains with others."""
        return self.default_rewards

    def scorers(self) -> dict[str, RewardFn]:
        """The reward components in use, by name: the task's own and the config's functions."""
        own = self.reward_functions()
        return {
            name: self.config_rewards[name].fn if name in self.config_rewards else own[name]
            for name in self.reward_weights
        }

    # -- data -----------------------------------------------------------------------------
    def build_sample(self, record: dict[str, Any], ctx: RecordContext) -> Sample:
        """One record of the task's data format -> Sample; raise ctx.error(...) on bad input."""
        raise NotImplementedError

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        """The samples one table row holds (one, unless a benchmark asks several questions a row)."""
        return [self.build_sample(record, ctx)]

    def table_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        """The samples of a table row as a run reads them: `build_samples`' (a benchmark also
        keeps what its reference logs of the row)."""
        return self.build_samples(record, ctx)

    def logged_target(self, sample: Sample) -> Any:
        """What the evaluation's samples file logs as the sample's `target`: its solution."""
        return sample.solution

    def load(
        self,
        path: str | Path,
        frame_spec: FrameSpec,
        image_root: str | Path = "",
        strict: bool = False,
        limit: int = 0,
        require_images: bool = True,
        media: MediaRules = MediaRules(),
    ) -> Split:
        """Read a split. Tasks whose public format is not one record per item override this."""
        return load_split(path, self.build_sample, frame_spec, image_root, strict, limit, require_images, media)

    def synthesize(self, path: str | Path, size: int, seed: int) -> None:
        """Write a synthetic dataset of `size` records in the task's public format at `path`."""
        raise NotImplementedError(f"task {self.name!r} has no synthetic data generator")

    # -- prompting ------------------------------------------------------------------------
    def messages(self, sample: Sample) -> list[dict[str, Any]]:
        """Chat messages for the sample; image entries ({"type": "image"}) follow sample.images in order."""
        raise NotImplementedError

    def target(self, sample: Sample) -> str:
        """The ideal completion in the model's frame (cold-start SFT target)."""
        raise NotImplementedError

    def has_temporal_variant(self) -> bool:
        """Whether the task gives T-GRPO a shuffled-frame variant of its samples."""
        return type(self).temporal_variant is not Task.temporal_variant

    def temporal_variant(self, sample: Sample) -> Sample | None:
        """The same question over shuffled frames (`shuffle_frames` set), for T-GRPO; None where
        order carries nothing. The trainer mixes a draw from the run's generator into the seed, so
        each visit has an order of its own."""
        return None

    # -- scoring --------------------------------------------------------------------------
    def reward_functions(self) -> dict[str, RewardFn]:
        """Every reward component the task offers, by the name used in configs and logs.
        Each returns values in [0, 1] for any completion, and never raises on model output."""
        raise NotImplementedError

    def predict(self, completion: str, sample: Sample) -> Any:
        """The prediction a completion states, in the ground truth's frame (None if unparseable)."""
        raise NotImplementedError

    def metrics(self, samples: Sequence[Sample], completions: Sequence[str]) -> dict[str, float]:
        """Evaluation metrics of a split, as the task's public evaluation defines them."""
        raise NotImplementedError

    def correct(self, completions: Sequence[str], samples: Sequence[Sample]) -> list[float]:
        """How right each completion is, in [0, 1]: its value of the evaluation metric
        `accuracy_metric` (the metric is the mean of these), so that training's logged `accuracy`
        is the evaluation's, on the sampled completions. Override where it is cheaper to compute
        directly; set `accuracy_metric = ""` where the task has no such metric (nothing is logged)."""
        return [float(self.metrics([s], [c])[self.accuracy_metric]) for c, s in zip(completions, samples, strict=True)]
