"""ChartQAPro as lmms-eval evaluates it (commit 75571cf): `chartqapro`
(lmms_eval/tasks/chartqapro/{chartqapro.yaml, utils.py}) on ahmed-masry/ChartQAPro @ test: charts
and infographics with factoid, multiple-choice, conversational, fact-checking and hypothetical
questions.

- Prompt (the default kwargs): a conversational row with several questions as "Q1: ...",
  "A1: ..." lines up to its last question "Qn: ..."; any other row its last question stripped;
  "Context: " + the row's `Paragraph` + "\\n\\n" before it where it has one; then "\\nAnswer the
  question with a short phrase."; the image before it; 128 new tokens.
- Scored (chartqapro_process_results): the response and the last answer, each stripped, then
  stripped of "." and of newlines. The answer written as a bracketed list ("[a, b]") is read as
  one (its bare items quoted); either text that is a Python list literal is scored item by item
  (a missing item 0), anything else as one item; the score is the items' mean. An item is
  right, for Fact Checking and Multi Choice rows or where the row's `Year` flag says "YES", when
  both texts lower-cased and stripped are equal; else, when both read as floats (after "%" is
  stripped), when the response is within 5% of the answer (exactly 0 for 0); else by ANLS (the
  `anls` package's, threshold 0.5: one minus the normalized Levenshtein distance of the
  lower-cased, whitespace-joined texts, 0 from 0.5 on).
- Metrics: `relaxed_overall` (the mean score) and one per question type (`relaxed_factoid`,
  `relaxed_conversational`, `relaxed_hypothetical`, `relaxed_fact_checking`,
  `relaxed_multi_choice`) over its rows.

The reference reads the texts with `ast.literal_eval`; here rewards.text.python_literal, the same
parser, reads them.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from rewards.ocr import levenshtein
from rewards.text import MATCH_TIMEOUT_S, compile_pattern, python_literal, search
from tasks.benchmarks import LMMS_EVAL
from tasks.benchmarks.counting import dot_scenes
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import Column, image_cell
from vlrl.tasking.benchmark import Benchmark, mean, variants

POST_PROMPT = "\nAnswer the question with a short phrase."
METRICS = {"Factoid": "relaxed_factoid", "Conversational": "relaxed_conversational",
           "Hypothetical": "relaxed_hypothetical", "Fact Checking": "relaxed_fact_checking",
           "Multi Choice": "relaxed_multi_choice"}  # fmt: skip  # _SPLIT_TO_METRIC
EXACT_TYPES = ("Fact Checking", "Multi Choice")  # always_use_exact_match
BRACKETED = compile_pattern(r"^\[(.*)\]$")
BARE_ITEM = compile_pattern(r"(?<!['\w])(\w[^,]*?)(?!['\w])")
SCHEMA = pa.schema(
    [("Question", pa.list_(pa.string())), ("Answer", pa.list_(pa.string())), ("Question Type", pa.string()),
     ("Year", pa.list_(pa.string())), ("Paragraph", pa.string()), ("image", pa.binary())]
)  # fmt: skip


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def prompt_text(questions: list[str], answers: list[Any], question_type: str, paragraph: str) -> str:
    """chartqapro_doc_to_text (with _format_conversation)."""
    if question_type == "Conversational" and len(questions) > 1:
        lines = []
        for i, question in enumerate(questions[:-1]):
            lines.append(f"Q{i + 1}: {question.strip()}")
            if i < len(answers):
                lines.append(f"A{i + 1}: {str(answers[i]).strip()}")
        question = "\n".join([*lines, f"Q{len(questions)}: {questions[-1].strip()}"])
    else:
        question = questions[-1].strip()
    if paragraph := paragraph.strip():
        question = f"Context: {paragraph}\n\n{question}"
    return question + POST_PROMPT


def anls_score(prediction: str, gold: str, threshold: float = 0.5) -> float:
    """The anls package's anls_score (0.0.2) of one gold label: its distance is divided by the
    longer text's length upper-cased (which "ß" changes), and a distance from `threshold` on
    scores 0."""
    pred, true = " ".join(prediction.strip().lower().split()), " ".join(gold.strip().lower().split())
    length = max(len(pred.upper()), len(true.upper()))
    distance = 0.0 if length == 0 else levenshtein(pred, true, cap=None) / length
    return 1 - distance if distance < threshold else 0.0


def _listed(item: Any) -> Any:
    """_fix_list_format: a bracketed text's bare items quoted and read as a list; else as it is."""
    if not isinstance(item, str) or (match := search(BRACKETED, item.strip())) is None:
        return item
    try:
        quoted = BARE_ITEM.sub(r"'\1'", match.group(1), timeout=MATCH_TIMEOUT_S)
        return python_literal(f"[{quoted}]")
    except (ValueError, TimeoutError):
        return item


def _items(text: str) -> list[str] | None:
    """_parse_to_list: the text's items where it is a Python list literal."""
    try:
        value = python_literal(text)
    except ValueError:
        return None
    return [str(x).strip(" '") for x in value] if isinstance(value, list) else None


def _float(text: str) -> float | None:
    try:
        return float(text.strip().strip("%"))
    except ValueError:
        return None


def item_score(target: str, prediction: str, max_relative_change: float = 0.05) -> float:
    """_evaluate_single_answer."""
    t, p = target.strip().strip("%").strip(), prediction.strip().strip("%").strip()
    t_f, p_f = _float(t), _float(p)
    if t_f is not None and p_f is not None:
        if t_f == 0.0:
            return 1.0 if p_f == 0.0 else 0.0
        return 1.0 if abs(p_f - t_f) / abs(t_f) <= max_relative_change else 0.0
    return anls_score(p.lower(), t.lower())


def relaxed_score(target: str, prediction: str, year_flags: list[Any], exact: bool) -> float:
    """_relaxed_correctness_chartqapro."""
    targets = _items(str(_listed(target))) or [target]
    predictions = _items(prediction) or [prediction]
    if len(year_flags) < len(targets):
        year_flags = year_flags * len(targets)
    scores = []
    for i in range(max(len(targets), len(predictions))):
        if i >= len(targets) or i >= len(predictions):
            scores.append(0.0)
            continue
        flag = year_flags[i] if i < len(year_flags) else "NO"
        if (isinstance(flag, str) and flag.upper() == "YES") or exact:
            scores.append(1.0 if targets[i].strip().lower() == predictions[i].strip().lower() else 0.0)
        else:
            scores.append(item_score(targets[i], predictions[i]))
    return sum(scores) / len(scores) if scores else 0.0


class ChartQAPro(Benchmark):
    """lmms_eval/tasks/chartqapro/utils.py with the default kwargs."""

    reference = LMMS_EVAL
    columns = (Column("Question", "string|list<string>"), Column("Answer", "string|list<string>|number"),
               Column("Question Type", "string", required=False), Column("Paragraph", "string", required=False),
               Column("Year", "string|list<string>", required=False), Column("image", "image|image_bytes"))  # fmt: skip
    schema = SCHEMA
    max_new_tokens = 128

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        questions, answers = _as_list(record["Question"]), _as_list(record["Answer"])
        if not questions or not answers or not all(isinstance(q, str) for q in questions):
            raise ctx.error("keys 'Question' and 'Answer' must hold a question and an answer (lmms-eval fails on none)")
        question_type = record.get("Question Type") or ""
        year_flags = _as_list(record.get("Year") or [])
        if question_type == "Conversational" and year_flags:
            year_flags = year_flags[-1:]
        prompt = prompt_text(questions, answers, question_type, record.get("Paragraph") or "")
        truth = {"answer": str(answers[-1]), "type": question_type, "year": year_flags}
        return row_sample(self.name, ctx, prompt, truth, [record_image(record, ctx)])

    def doc_target(self, record: dict[str, Any], sample: Sample) -> Any:
        return sample.solution["answer"]  # chartqapro_doc_to_target: the last answer as text

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        truth = sample.solution
        prediction = completion.strip().strip(".").strip("\n")
        target = truth["answer"].strip().strip(".").strip("\n")
        score = relaxed_score(target, prediction, truth["year"], truth["type"] in EXACT_TYPES)
        metric = METRICS.get(truth["type"])
        return {"relaxed_overall": score} | ({metric: score} if metric else {})

    def aggregations(self):
        return {name: mean for name in ("relaxed_overall", *METRICS.values())}

    def synthetic_rows(self, size: int, seed: int):
        kinds = [*METRICS, "Unlisted"]
        for image, count, index in dot_scenes(size, seed, fill=(220, 90, 40)):
            kind = kinds[index % len(kinds)]
            answers = {"Factoid": [f"{count}%"], "Conversational": [" red ", f"[{count}, dots]"],
                       "Hypothetical": [("0", "20.0")[index % 2]], "Fact Checking": ["True"],
                       "Multi Choice": ["Option B"], "Unlisted": [f" {count} dots. "]}[kind]  # fmt: skip
            # a conversation's questions before its last; another kind's earlier questions go unasked
            asked = 2 if kind in ("Conversational", "Unlisted") else 1
            questions = ["What color are the dots?", "How many dots, and what are they?"][-asked:]
            yield {"Question": questions, "Answer": answers, "Question Type": kind,
                   "Year": [["NO"], ["YES"], [], ["NO", "YES"]][index % 4],
                   "Paragraph": ("", " A chart of dots. ", None)[index % 3],
                   "image": image_cell(image, f"{index}.png")["bytes"]}  # fmt: skip


BENCHMARKS = variants(ChartQAPro, [
    {"name": "chartqapro", "split": "test", "dataset": "ahmed-masry/ChartQAPro",
     "description": "ChartQAPro, lmms-eval's chartqapro: relaxed accuracy, item by item, ANLS for text"}])  # fmt: skip
