"""Built-in task plugins, one module per task family. Each registers under its name here."""

BUILTIN_TASKS: dict[str, str] = {
    "classification": "tasks.classification:Classification",
    "counting": "tasks.counting:Counting",
    "detection": "tasks.detection:Detection",
    "gui_action": "tasks.gui:GuiAction",
    "gui_grounding": "tasks.gui:GuiGrounding",
    "jigsaw": "tasks.jigsaw:Jigsaw",
    "ocr": "tasks.ocr:OCR",
    "refcoco": "tasks.refcoco:RefCOCO",
    "refcoco+": "tasks.refcoco:RefCOCOPlus",
    "refcocog": "tasks.refcoco:RefCOCOg",
    "video_qa": "tasks.video_qa:VideoQA",
}

# Other names a task answers to (the data format's name, for instance).
TASK_ALIASES: dict[str, str] = {"coco": "detection", "video_r1": "video_qa"}
