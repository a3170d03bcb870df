"""Built-in task plugins, one module per task family. Each registers under its name here."""

BUILTIN_TASKS: dict[str, str] = {
    "refcoco": "tasks.refcoco:RefCOCO",
    "refcoco+": "tasks.refcoco:RefCOCOPlus",
    "refcocog": "tasks.refcoco:RefCOCOg",
}
