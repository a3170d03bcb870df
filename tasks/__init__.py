"""Built-in task plugins, one module per task family. Each registers under its name here."""

BUILTIN_TASKS: dict[str, str] = {
    "jigsaw": "tasks.jigsaw:Jigsaw",
    "refcoco": "tasks.refcoco:RefCOCO",
}
