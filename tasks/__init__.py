"""Built-in task plugins, one module per task family. Each registers under its name here."""

BUILTIN_TASKS: dict[str, str] = {
    "classification": "tasks.classification:Classification",
    "counting": "tasks.counting:Counting",
    "gui_action": "tasks.gui:GuiAction",
    "gui_grounding": "tasks.gui:GuiGrounding",
    "jigsaw": "tasks.jigsaw:Jigsaw",
    "ocr": "tasks.ocr:OCR",
    "refcoco": "tasks.refcoco:RefCOCO",
}
