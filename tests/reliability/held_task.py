"""A task whose reward waits while a "hold" file exists: a test can keep a step in flight for as
long as it needs to send signals into it, without guessing how long a step takes."""

import os
import time
from pathlib import Path

from tasks.refcoco import RefCOCO


class HeldGrounding(RefCOCO):
    name = "held_grounding"
    description = "refcoco whose reward waits on $VLRL_TEST_HOLD (tests)"

    def reward_functions(self):
        functions = super().reward_functions()
        iou = functions["iou"]

        def held_iou(completions, samples):
            hold = Path(os.environ.get("VLRL_TEST_HOLD", "/nonexistent"))
            if hold.exists():
                hold.with_suffix(".entered").touch()  # the step is in flight now
                deadline = time.monotonic() + 60
                while hold.exists() and time.monotonic() < deadline:
                    time.sleep(0.02)
            return iou(completions, samples)

        return {**functions, "iou": held_iou}
