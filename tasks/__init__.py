"""Built-in task plugins, one module per task family. Each registers under its name here."""

BUILTIN_TASKS: dict[str, str] = {
    "refcoco": "tasks.refcoco:RefCOCO",
    "counting": "tasks.counting:Counting",
    "classification": "tasks.classification:Classification",
    "ocr": "tasks.ocr:OCR",
}
