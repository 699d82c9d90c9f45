"""The composite action of Agent Q (docs/method.md §2) and a parser that never raises.

A composite action is what the policy writes at each step::

    PLAN:            (first step only)
    1. ...
    THOUGHT: ...
    COMMAND: <the environment action>
    EXPLANATION: ...
    STATUS: CONTINUE | SUCCESS | FAILURE | ASK_USER

Only COMMAND touches the environment; the whole text is what the policy is
trained on (Agent Q, Eq. 1: the joint likelihood of all parts).

Small models write this format loosely: markdown bold, lower case, a missing
colon, the command in backticks or a code fence, fields in another order, a
second COMMAND. The parser accepts all of that, keeps the first non-empty COMMAND, and
records what it had to forgive in ``errors`` instead of raising.
"""

from __future__ import annotations

import re

from agentq.records.action import CompositeAction

FIELDS = ("PLAN", "THOUGHT", "COMMAND", "EXPLANATION", "STATUS")
STATUSES = ("CONTINUE", "SUCCESS", "FAILURE", "ASK_USER")

# A field header at the start of a line: optional markdown decoration ("**", "#",
# "-"), the field name, optional decoration, then ":" or "-" or just a space.
LEAD_CHARS, TRAIL_CHARS = r" \t>*#_\-", r"*_ \t"  # regex class bodies (constrained.py writes regexes from them too)
COMMAND_NAMES = ("COMMAND", "ACTION")  # the headers the parser reads as the COMMAND field
_LEAD, _TRAIL = f"[{LEAD_CHARS}]*", f"[{TRAIL_CHARS}]*"
_HEADER = re.compile(
    rf"^{_LEAD}(?P<name>PLAN|THOUGHTS?|COMMAND|ACTION|EXPLANATION|STATUS){_TRAIL}(?::|-|\s){_TRAIL}",
    re.IGNORECASE | re.MULTILINE,
)
# A line that is, so far, exactly a COMMAND header followed by ":" or "-" (for
# decoders that must know where the command starts: agentq.agent.constrained).
COMMAND_HEADER_LINE = re.compile(rf"^{_LEAD}(?:{'|'.join(COMMAND_NAMES)}){_TRAIL}[:\-]{_TRAIL}$", re.IGNORECASE)
_ALIASES = {"THOUGHTS": "THOUGHT", "ACTION": "COMMAND"}
_FENCE = re.compile(r"^```[a-zA-Z]*\s*$|^```\s*|\s*```$", re.MULTILINE)
_QUOTES = "`'\"“”"
_PLAN_STEP = re.compile(r"^\s*(?:\d+[.)]|[-*])\s*")
MAX_COMMAND_CHARS = 500


def parse_composite(text: object) -> CompositeAction:
    """Parse model output into a :class:`CompositeAction`; never raises."""
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    raw = text
    errors: list[str] = []
    body = _FENCE.sub("", text.replace("\r\n", "\n")).strip()

    sections: dict[str, str] = {}
    headers = list(_HEADER.finditer(body))
    for i, match in enumerate(headers):
        name = match.group("name").upper()
        name = _ALIASES.get(name, name)
        end = headers[i + 1].start() if i + 1 < len(headers) else len(body)
        value = body[match.end() : end].strip()
        if sections.get(name):  # an earlier empty header ("COMMAND\n") does not count
            if name == "COMMAND":
                errors.append("more than one COMMAND; kept the first")
            continue
        sections[name] = value

    command = _clean_command(sections.get("COMMAND", ""))
    if not command and sections.get("PLAN"):
        # A small model often spends its whole budget on the plan; its first
        # step is the action it meant to take next.
        command = _clean_command(_PLAN_STEP.sub("", sections["PLAN"], count=1))
        if command:
            errors.append("no COMMAND; took the first PLAN step")
    if not command and not headers and body:
        # No field headers at all: a bare one-line answer is most likely the command.
        first_line = body.splitlines()[0]
        command = _clean_command(first_line)
        errors.append("no field headers; took the first line as COMMAND")
    if not command:
        errors.append("no COMMAND")
        command = None

    status = sections.get("STATUS", "").strip().upper().replace(" ", "_")
    status = next((s for s in STATUSES if status.startswith(s)), None)
    if status is None:
        if "STATUS" in sections:
            errors.append(f"unknown STATUS {sections['STATUS'][:40]!r}")
        status = "CONTINUE"

    return CompositeAction(
        raw=raw,
        command=command,
        plan=sections.get("PLAN", ""),
        thought=sections.get("THOUGHT", ""),
        explanation=sections.get("EXPLANATION", ""),
        status=status,
        errors=tuple(errors),
    )


def _clean_command(value: str) -> str:
    """The command is the first non-empty line, without quotes or markdown."""
    for line in value.splitlines():
        line = line.strip().strip("*_").strip().strip(_QUOTES).strip()
        if line:
            return " ".join(line.split())[:MAX_COMMAND_CHARS]
    return ""


def format_composite(
    command: str,
    *,
    thought: str = "",
    explanation: str = "",
    plan: str = "",
    status: str = "CONTINUE",
) -> str:
    """Render a composite action in the canonical format (for prompts and tests)."""
    parts = []
    if plan:
        parts.append(f"PLAN:\n{plan}")
    parts.append(f"THOUGHT: {thought}")
    parts.append(f"COMMAND: {command}")
    parts.append(f"EXPLANATION: {explanation}")
    parts.append(f"STATUS: {status}")
    return "\n".join(parts)
