"""Built-in task plugins, one module per task family. Each registers under its name here."""

BUILTIN_TASKS: dict[str, str] = {
    "refcoco": "tasks.refcoco:RefCOCO",
    "detection": "tasks.detection:Detection",
    "coco": "tasks.detection:Detection",  # alias: the data format's name
}
