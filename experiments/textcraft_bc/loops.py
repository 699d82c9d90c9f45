"""How a TextCraft clone's evaluation episodes go wrong: counted from its episode files.

    python experiments/textcraft_bc/loops.py experiments/textcraft_bc/runs/<run>/iter_001/eval/zero_shot

Per run: goals crafted, episodes that repeat one command 10 or more times in a row,
distinct commands per episode, steps the env answered "Could not ...", and commands
that are not among the task's valid actions (refused by grounding, or no COMMAND line).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from agentq.records.action import MISSING, REFUSED
from envs.textcraft.commands import LOOP, failed, longest_run


def summary(folder: Path) -> dict[str, float]:
    episodes = [json.loads(p.read_text())["trajectory"] for p in sorted(folder.glob("task_*.json"))]
    steps = [s for e in episodes for s in e["steps"]]
    loops = [e for e in episodes if longest_run([s["command"] for s in e["steps"]]) >= LOOP]
    refused = [s for s in steps if failed(s["observation"])]
    ungrounded = [s for s in steps if s.get("grounding") in (REFUSED, MISSING)]
    distinct = sorted(len({s["command"] for s in e["steps"]}) for e in episodes)
    return {
        "episodes": len(episodes),
        "crafted": sum(e["success"] for e in episodes),
        "steps": len(steps),
        f"loops of >= {LOOP}": len(loops),
        "distinct commands (min, median, max)": (distinct[0], distinct[len(distinct) // 2], distinct[-1]) if distinct else (),
        "steps answered 'Could not'": len(refused),
        "commands off the valid actions": len(ungrounded),
    }


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(arg)
        for key, value in summary(Path(arg)).items():
            print(f"  {key}: {value}")
