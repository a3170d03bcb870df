"""trainer.report_to: each tracker's scalars, sample tables and config, read back with the
tracker's own reader (TensorBoard's event accumulator, W&B's offline run file, MLflow's client)."""

from __future__ import annotations

import io
import json
import struct
import sys
from pathlib import Path

import pytest

from vlrl.cli import main
from vlrl.config import ConfigError, load_config
from vlrl.trainer import trackers
from vlrl.trainer.trackers import TrackedRun, open_trackers

CONFIG = {"trainer": {"lr": 1e-6, "report_to": ["jsonl"]}, "task": {"name": "refcoco", "rewards": {"iou": 1.0}}}
STEPS = [
    {"step": 1, "reward": 0.25, "accuracy": 0.5, "eval/acc@0.5": 0.125, "time_step": 1.5},
    {"step": 2, "reward": 0.75, "accuracy": 1.0, "eval/acc@0.5": 0.375, "time_step": 1.25},
]
SAMPLES = [
    {"id": "r7", "completion": "<answer>[1, 2, 3, 4]</answer>", "rewards": {"format": 1.0, "iou": 0.5}, "reward": 1.5},
    {"id": "r7", "completion": "no | box\nhere", "rewards": {"format": 0.0, "iou": 0.0}, "reward": 0.0},
]


def report(name: str, run: TrackedRun, steps=STEPS) -> None:
    opened = open_trackers([name], run)
    assert list(opened) == ["jsonl", name]
    for metrics in steps:
        for tracker in opened.values():
            tracker.log_metrics(metrics["step"], metrics)
            tracker.log_samples(metrics["step"], SAMPLES)
    for tracker in opened.values():
        tracker.close()


def test_tensorboard_event_files_hold_scalars_samples_and_hparams(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    report("tensorboard", TrackedRun(tmp_path, "trainer", CONFIG, 0))
    events = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("reward")] == [(1, 0.25), (2, 0.75)]
    assert [e.value for e in events.Scalars("eval/acc@0.5")] == [0.125, 0.375]
    assert "step" not in events.Tags()["scalars"]
    table = events.Tensors("samples/text_summary")[-1].tensor_proto.string_val[0].decode()
    assert table.splitlines()[0] == "| id | completion | reward | format | iou |"
    assert "| r7 | no \\| box<br>here | 0.0000 | 0.0000 | 0.0000 |" in table
    start = events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    hparams = plugin_data_pb2.HParamsPluginData.FromString(start).session_start_info.hparams
    assert hparams["trainer.lr"].number_value == 1e-6
    assert hparams["task.rewards.iou"].number_value == 1.0
    assert hparams["trainer.report_to"].string_value == '["jsonl"]'


def test_tensorboard_shows_a_resumed_step_once(tmp_path):
    """A run resumed from its step-1 checkpoint logs step 2 again: the earlier value is purged."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    report("tensorboard", TrackedRun(tmp_path, "trainer", CONFIG, 0))
    report("tensorboard", TrackedRun(tmp_path, "trainer", CONFIG, 1), [{"step": 2, "reward": 0.5}])
    events = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("reward")] == [(1, 0.25), (2, 0.5)]


def wandb_records(run_file):
    """The protobuf records of a W&B offline run file (LevelDB log format: 32 KiB blocks of
    records with a 7-byte header: crc32c, length, type FULL/FIRST/MIDDLE/LAST)."""
    from wandb.proto import wandb_internal_pb2

    data = run_file.read_bytes()
    position, pending = 7, b""  # after the file header (ident, magic, version)
    while position + 7 <= len(data):
        if 32768 - position % 32768 < 7:  # a block's tail too short for a header is padding
            position += 32768 - position % 32768
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        if kind == 0:
            break
        pending += data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):  # FULL or LAST: a whole record
            yield wandb_internal_pb2.Record.FromString(pending)
            pending = b""


def test_wandb_offline_run_holds_scalars_samples_and_config(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    report("wandb", TrackedRun(tmp_path / "my-run", "trainer", CONFIG, 0))
    import wandb

    wandb.teardown()  # finish() returns before W&B's service has flushed the run file; teardown (atexit in a run) waits
    (run_file,) = (tmp_path / "my-run" / "wandb").glob("offline-run-*/run-*.wandb")
    records = list(wandb_records(run_file))
    (run,) = [r.run for r in records if r.HasField("run")]
    assert run.display_name == "my-run" and run.project == "vlrl"
    assert run.run_id == json.loads((tmp_path / "my-run" / "trackers.json").read_text())["wandb"]
    config = {item.key: json.loads(item.value_json) for item in run.config.update}
    assert config["trainer"] == {"lr": 1e-6, "report_to": ["jsonl"]}
    history = [
        {(item.key or "/".join(item.nested_key)): json.loads(item.value_json) for item in r.history.item}
        for r in records
        if r.HasField("history")
    ]
    assert [(h["_step"], h["reward"], h["eval/acc@0.5"]) for h in history] == [(1, 0.25, 0.125), (2, 0.75, 0.375)]
    table_files = sorted((run_file.parent / "files" / "media" / "table").glob("samples_*.table.json"))
    table = json.loads(table_files[-1].read_text())
    assert table["columns"] == ["id", "completion", "reward", "format", "iou"]
    assert table["data"][1] == ["r7", "no | box\nhere", 0.0, 0.0, 0.0]


@pytest.fixture
def mlflow_store(tmp_path, monkeypatch):
    """MLflow's offline store: a local file store, which mlflow-skinny reads and writes."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"file:{tmp_path / 'mlruns'}")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "vlrl-test")


def test_mlflow_run_holds_scalars_samples_and_params(tmp_path, mlflow_store):
    from mlflow import MlflowClient

    run_dir = tmp_path / "my-run"
    report("mlflow", TrackedRun(run_dir, "sft", CONFIG, 0))
    run_id = json.loads((run_dir / "trackers.json").read_text())["mlflow"]
    client = MlflowClient()
    run = client.get_run(run_id)
    assert run.info.run_name == "my-run" and run.info.status == "FINISHED"
    assert client.get_experiment(run.info.experiment_id).name == "vlrl-test"
    assert run.data.params["trainer.lr"] == "1e-06" and run.data.params["task.rewards.iou"] == "1.0"
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "reward")] == [(1, 0.25), (2, 0.75)]
    # '@' is not allowed; a file store keeps eval/acc as a file in a folder eval (and reward/format
    # could not be a file in one beside a file reward): '/' is sent as '.' there
    assert [m.value for m in client.get_metric_history(run_id, "eval.acc_0.5")] == [0.125, 0.375]
    assert trackers.mlflow_key("eval/acc@0.5") == "eval/acc_0.5"  # a tracking server's key
    stores = [
        "mlruns",
        "/abs/mlruns",
        "file:./mlruns",
        "file:///abs/mlruns",
        "sqlite:///m.db",
        "http://h:5000",
        "databricks",
    ]
    assert [trackers.is_file_store(uri) for uri in stores] == [True, True, True, True, False, False, False]
    local = client.download_artifacts(run_id, "samples/step-0000002.json", str(tmp_path))
    table = json.loads(Path(local).read_text())
    assert table["columns"] == ["id", "completion", "reward", "format", "iou"]
    assert table["data"][0] == ["r7", "<answer>[1, 2, 3, 4]</answer>", 1.5, 1.0, 0.5]


def test_a_resumed_run_continues_the_same_tracked_run(tmp_path, mlflow_store):
    from mlflow import MlflowClient

    report("mlflow", TrackedRun(tmp_path, "trainer", CONFIG, 0), STEPS[:1])
    first = json.loads((tmp_path / "trackers.json").read_text())["mlflow"]
    report("mlflow", TrackedRun(tmp_path, "trainer", CONFIG, 1), STEPS[1:])
    assert json.loads((tmp_path / "trackers.json").read_text())["mlflow"] == first
    assert [m.step for m in MlflowClient().get_metric_history(first, "reward")] == [1, 2]
    report("mlflow", TrackedRun(tmp_path, "trainer", CONFIG, 0), STEPS[:1])  # a fresh run: a new tracked run
    assert json.loads((tmp_path / "trackers.json").read_text())["mlflow"] != first


def test_a_resumed_mlflow_run_is_running_again_until_it_ends_finished_or_failed(tmp_path, mlflow_store):
    from mlflow import MlflowClient

    client = MlflowClient()
    report("mlflow", TrackedRun(tmp_path, "trainer", CONFIG, 0), STEPS[:1])
    run_id = json.loads((tmp_path / "trackers.json").read_text())["mlflow"]
    assert client.get_run(run_id).info.status == "FINISHED"
    for failed, status in ((True, "FAILED"), (False, "FINISHED")):
        resumed = open_trackers(["mlflow"], TrackedRun(tmp_path, "trainer", CONFIG, 1))["mlflow"]
        assert resumed.run_id == run_id and client.get_run(run_id).info.status == "RUNNING"
        resumed.close(failed=failed)
        assert client.get_run(run_id).info.status == status


def test_databricks_tracking_uris_without_a_scheme_are_no_file_store():
    for uri in ("databricks", "databricks-uc", "uc"):
        assert not trackers.is_file_store(uri), uri
    assert trackers.is_file_store("uc-runs") and trackers.is_file_store("./databricks")  # folders of those names


def test_mlflow_params_are_cut_at_its_6000_character_limit(tmp_path, mlflow_store, monkeypatch):
    """An MLflow client that does not cut a longer value itself (an older one, or a recent one with
    MLFLOW_TRUNCATE_LONG_VALUES=false) refuses it: vlrl cuts it first, so the run opens under any."""
    from mlflow import MlflowClient

    monkeypatch.setenv("MLFLOW_TRUNCATE_LONG_VALUES", "false")
    config = {**CONFIG, "task": {"name": "refcoco", "prompt": "ab" * 3001 + "c", "rewards": {"iou": 1.0}}}
    report("mlflow", TrackedRun(tmp_path, "trainer", config, 0), STEPS[:1])
    params = MlflowClient().get_run(json.loads((tmp_path / "trackers.json").read_text())["mlflow"]).data.params
    assert params["task.prompt"] == "ab" * 3000 and params["task.name"] == "refcoco"


@pytest.mark.parametrize(
    "name,module", [("wandb", "wandb"), ("mlflow", "mlflow"), ("tensorboard", "torch.utils.tensorboard")]
)
def test_a_missing_tracker_package_is_named_with_how_to_install_it(
    name, module, tmp_path, monkeypatch, capsys, rec_data
):
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if it were not installed

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded before the missing tracker was reported")

    monkeypatch.setattr("vlrl.trainer.run.load_model", no_model)
    args = [
        "train",
        "--task",
        "refcoco",
        "model.path=tiny:qwen2_5_vl",
        f"data.train={rec_data}",
        f"trainer.output_dir={tmp_path}",
    ]
    assert main([*args, f"trainer.report_to=[{name}]"]) == 2
    out = capsys.readouterr().out
    assert f"trainer.report_to names '{name}'" in out and f"pip install 'vlrl[{name}]'" in out


def test_sample_tables_show_the_prompt_and_target_when_the_rows_have_them():
    rows = [{**row, "prompt": "Where is the red square?", "target": [1, 2, 3, 4]} for row in SAMPLES]
    columns, data = trackers.sample_table(rows)
    assert columns == ["id", "prompt", "target", "completion", "reward", "format", "iou"]
    assert data[0][:3] == ["r7", "Where is the red square?", "[1, 2, 3, 4]"]


def test_report_to_names_only_known_trackers():
    with pytest.raises(
        ConfigError, match=r"trainer.report_to\[1\] must be one of 'jsonl', 'tensorboard', 'wandb', 'mlflow'"
    ):
        load_config(None, ["trainer.report_to=[jsonl, comet]"])


def test_a_tracker_that_fails_mid_run_is_switched_off_and_jsonl_keeps_every_step(tmp_path, monkeypatch):
    from rich.console import Console

    from vlrl.trainer.logs import RunLog

    closed = []

    class Flaky:
        def __init__(self, run):
            pass

        def log_metrics(self, step, metrics):
            raise OSError("connection reset")

        def log_samples(self, step, rows):
            pass

        def close(self, failed=False):
            closed.append(failed)

    monkeypatch.setitem(trackers.TRACKERS, "wandb", Flaky)
    console = Console(file=io.StringIO(), width=200)
    t = load_config(None, ["trainer.report_to=[wandb]"]).trainer
    logs = RunLog(TrackedRun(tmp_path, "trainer", CONFIG, 0), t, console, enabled=True)
    for metrics in STEPS:
        logs.log(metrics, SAMPLES)
    logs.close()
    printed = console.file.getvalue()
    assert printed.count("warning: wandb failed at step 1 (OSError: connection reset)") == 1
    assert [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    assert len((tmp_path / "samples.jsonl").read_text().splitlines()) == 4
    assert closed == [True]  # closed when switched off, as a failed run, and not again


def test_a_failure_to_write_metrics_jsonl_stops_the_run_instead_of_switching_it_off(tmp_path):
    from rich.console import Console

    from vlrl.trainer.logs import RunLog

    class FullDisk:
        def log_metrics(self, step, metrics):
            raise OSError("No space left on device")

    t = load_config(None, []).trainer
    logs = RunLog(TrackedRun(tmp_path, "trainer", CONFIG, 0), t, Console(file=io.StringIO()), enabled=True)
    logs.trackers["jsonl"].close()
    logs.trackers["jsonl"] = FullDisk()
    with pytest.raises(OSError, match="No space left on device"):
        logs.log(STEPS[0])
    assert "jsonl" in logs.trackers


def test_a_run_reports_each_step_to_the_trackers_of_report_to(tmp_path, rec_data, tiny_qwen25):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from tests.trainer.test_sft import sft_overrides
    from vlrl.trainer.sft import train_sft

    run_dir = tmp_path / "sft"
    train_sft(load_config(None, sft_overrides(run_dir, rec_data, **{"sft.steps": 3, "sft.report_to": "[tensorboard]"})))
    logged = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("loss")] == [
        (r["step"], pytest.approx(r["loss"], rel=1e-6)) for r in logged
    ]


FAILING = {  # case -> what fails as a bug would, on which call: the first before the loop, the second at step 2
    "sft": ("vlrl.trainer.sft", "token_weights", 2),
    "train": ("vlrl.trainer.rl", "compute_advantages", 2),
    "train setup": ("vlrl.trainer.rl", "logprobs_exact", 1),  # as an engine that fails to start
}


@pytest.mark.parametrize("case", list(FAILING))
def test_a_run_ended_by_an_error_closes_its_tracked_run_as_failed_with_the_steps_it_logged(
    case, tmp_path, rec_data, tiny_qwen25, mlflow_store, monkeypatch
):
    from mlflow import MlflowClient

    from tests.trainer.test_sft import sft_overrides
    from tests.trainer.test_train import tiny_overrides

    module, name, failing_call = FAILING[case]
    original, calls = getattr(__import__(module, fromlist=[name]), name), []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == failing_call:
            raise RuntimeError("a bug")
        return original(*args, **kwargs)

    monkeypatch.setattr(f"{module}.{name}", failing)
    run_dir = tmp_path / "run"
    if case == "sft":
        args = ["sft", *sft_overrides(run_dir, rec_data, **{"sft.steps": 3, "sft.report_to": "[mlflow]"})]
    else:
        args = ["train", *tiny_overrides(run_dir, rec_data, **{"trainer.report_to": "[mlflow]"})]
    with pytest.raises(RuntimeError, match="a bug"):
        main(args)
    client = MlflowClient()
    (run,) = client.search_runs([client.get_experiment_by_name("vlrl-test").experiment_id])
    assert run.info.status == "FAILED"  # not RUNNING for ever, nor FINISHED
    logged = [m.step for m in client.get_metric_history(run.info.run_id, "time_step")]
    assert logged == ([] if failing_call == 1 else [1])


def test_a_tracker_that_cannot_start_is_a_config_error_naming_report_to(tmp_path, monkeypatch):
    import wandb

    def no_key(**kwargs):
        raise wandb.errors.UsageError("No API key configured. Use `wandb login` to log in.")

    monkeypatch.setattr(wandb, "init", no_key)
    with pytest.raises(ConfigError, match=r"trainer.report_to wandb: W&B did not start \(UsageError: No API key"):
        open_trackers(["wandb"], TrackedRun(tmp_path, "trainer", CONFIG, 0))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "nowhere://store")
    with pytest.raises(ConfigError, match=r"sft.report_to mlflow: MLflow's tracking store 'nowhere://store' did not"):
        open_trackers(["mlflow"], TrackedRun(tmp_path, "sft", CONFIG, 0))


def test_closing_closes_every_tracker_then_raises_the_first_failure(tmp_path):
    from rich.console import Console

    from vlrl.trainer.logs import RunLog

    closed = []

    class Tracker:
        def __init__(self, fails):
            self.fails = fails

        def close(self, failed=False):
            closed.append(self.fails)
            if self.fails:
                raise OSError("lost mount")

    t = load_config(None, []).trainer
    logs = RunLog(TrackedRun(tmp_path, "trainer", CONFIG, 0), t, Console(file=io.StringIO()), enabled=True)
    logs.trackers["jsonl"].close()
    logs.trackers = {"a": Tracker(True), "b": Tracker(False)}
    with pytest.raises(OSError, match="lost mount"):
        logs.close()
    assert closed == [True, False] and logs.trackers == {}


def test_a_resumed_run_cuts_its_log_back_to_the_checkpoints_step_keeping_lines_without_a_step(tmp_path):
    path = tmp_path / "metrics.jsonl"
    assert trackers.drop_steps_after(path, 2) == []  # no log yet: nothing to cut
    lines = [{"step": 1, "reward": 0.5}, {"note": "no step"}, {"step": 2}, {"step": 3}, {"step": 4}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines) + '{"step": 5, "rew\n')
    reports = trackers.drop_steps_after(path, 2)
    assert [json.loads(line) for line in path.read_text().splitlines()] == lines[:3]
    assert reports == [
        f"{path}:6: dropped a line that is not a whole JSON record (torn by a stop mid-write?)",
        f"{path}: dropped the lines of steps 3-4, which no checkpoint holds (they are trained again)",
    ]
    assert trackers.drop_steps_after(path, 1) == [
        f"{path}: dropped the lines of step 2, which no checkpoint holds (they are trained again)"
    ]


def test_a_value_that_is_not_a_number_is_logged_as_null(tmp_path):
    log = trackers.JsonlLog(tmp_path / "metrics.jsonl")
    log.write({"step": 1, "loss": float("nan"), "kl": float("inf"), "reward": 0.5})
    log.close()
    assert json.loads((tmp_path / "metrics.jsonl").read_text()) == {"step": 1, "loss": None, "kl": None, "reward": 0.5}


def test_the_scalars_of_a_metrics_line_are_its_numbers_without_its_step_or_flags():
    line = {"step": 3, "reward": 1, "loss": 0.5, "stopped": True, "note": "x"}
    assert trackers.scalars(line) == {"reward": 1.0, "loss": 0.5}


def test_a_sample_table_has_a_column_any_row_needs_and_json_where_a_row_lacks_its_text():
    rows = [
        {"id": 3, "prompt": "p", "completion": "c", "reward": 1.0, "rewards": {"a": 1.0}},
        {"id": 4, "completion": "d", "reward": 0.0, "rewards": {"b": 0.5}},
    ]
    columns, data = trackers.sample_table(rows)
    assert columns == ["id", "prompt", "completion", "reward", "a", "b"]
    assert data == [["3", "p", "c", 1.0, 1.0, None], ["4", "null", "d", 0.0, None, 0.5]]


def test_a_tracked_runs_id_is_kept_beside_the_others_and_read_back_only_when_resuming(tmp_path):
    fresh, resumed = TrackedRun(tmp_path, "trainer", CONFIG, 0), TrackedRun(tmp_path, "trainer", CONFIG, 3)
    trackers.remember_id(fresh, "wandb", "abc")
    trackers.remember_id(fresh, "mlflow", "def")
    assert json.loads((tmp_path / "trackers.json").read_text()) == {"wandb": "abc", "mlflow": "def"}
    assert trackers.previous_id(fresh, "wandb") is None  # a fresh run in the same folder starts a new one
    assert trackers.previous_id(resumed, "wandb") == "abc" and trackers.previous_id(resumed, "mlflow") == "def"


def test_mlflow_names_keep_dots_and_slashes_and_a_file_store_gets_dots_for_slashes():
    assert trackers.mlflow_key("eval/acc@0.5") == "eval/acc_0.5"
    assert trackers.mlflow_key("eval/acc@0.5", file_store=True) == "eval.acc_0.5"
    assert trackers.is_file_store("file:/tmp/mlruns") and trackers.is_file_store("/tmp/mlruns")
    assert not trackers.is_file_store("databricks") and not trackers.is_file_store("http://host:5000")


def test_a_wandb_run_ended_by_an_error_exits_non_zero_and_resumes_under_its_id(tmp_path, monkeypatch):
    import wandb

    started, finished = [], []

    class FakeRun:
        id = "w1"

        def finish(self, exit_code=0):
            finished.append(exit_code)

    def init(**kwargs):
        started.append((kwargs["project"], kwargs["id"]))
        return FakeRun()

    monkeypatch.setattr(wandb, "init", init)
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    trackers.WandbTracker(TrackedRun(tmp_path, "trainer", CONFIG, 0)).close(failed=True)
    trackers.WandbTracker(TrackedRun(tmp_path, "trainer", CONFIG, 2)).close()
    assert started == [("vlrl", None), ("vlrl", "w1")] and finished == [1, 0]


def test_samples_jsonl_holds_each_completion_with_the_step_it_was_logged_at(tmp_path):
    tracker = trackers.JsonlTracker(TrackedRun(tmp_path, "trainer", CONFIG, 0))
    tracker.log_samples(7, SAMPLES[:1])
    tracker.close()
    assert json.loads((tmp_path / "samples.jsonl").read_text()) == {"step": 7, **SAMPLES[0]}
