"""Prints a run directory's scalars as TensorBoard's own reader loads them, as JSON:
{tag: [[step, value], ...]}, every scalar kept (no reservoir sampling).

    python tb_scalars.py RUN_DIR
"""
import json
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})
acc.Reload()
print(json.dumps({tag: [[s.step, s.value] for s in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}))
