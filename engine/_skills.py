"""Skills: instructions for a kind of task, the tools they are about, and files.

In code mode a skill holds back no tools: its ``tools`` only say which tools it is about.
``await tools.skill({ name })`` answers with the skill's instructions, then the declarations
of the tools it names, so the model can call them in its next script without a search. A
skill's other files are files the script reads as ``<skill>/<path>``; the script's first
step records their blobs, so a skill that changes while the script runs does not change
what it reads.
"""

from __future__ import annotations

import mimetypes
import unicodedata
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine._files import MAX_ATTACHMENT_ID, NOT_A_LINE, Attachment
from engine._search import SkillInfo
from engine._tools import Tool, ToolCallError, ToolDefinitionError
from engine.languages import dialect
from engine.languages._dialect import BUDGET, MAX_DESCRIPTION
from engine.languages._walk import first_line, printable
from engine.log import NOT_KEPT
from sandbox.names import closest_names, spelled_otherwise

# The longest skill name. A name is a line of the skills' listing, a file id's prefix, and
# what a script asks for: a longer one is no skill's, and is not compared with the skills'
# names (that costs time in its length, on the host's event loop).
MAX_SKILL_NAME = 256


@dataclass(frozen=True)
class Skill:
    """A skill: ``name`` (as ``"runbooks:respond"``), what it is for, its instructions, the
    tools it is about, and its other files (path -> bytes or a path on disk)."""

    name: str
    description: str
    instructions: str
    tools: tuple[str, ...] = ()
    files: Mapping[str, bytes | str | Path] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip() or "/" in self.name:
            raise ToolDefinitionError(
                f"a skill needs a name without '/', as \"runbooks:respond\", not {self.name!r}"
            )
        if len(self.name) > MAX_SKILL_NAME or _not_a_line(self.name):
            raise ToolDefinitionError(
                f"skill name {self.name!r:.80} must be one line of text, at most "
                f"{MAX_SKILL_NAME} characters, without control characters or lone surrogates"
            )
        for what in ("description", "instructions"):
            text = getattr(self, what)
            if not isinstance(text, str):
                raise ToolDefinitionError(f"skill {self.name}: its {what} must be a string")
            if NOT_KEPT.search(text):
                # A lone surrogate no log keeps and no model API takes: every load of the
                # skill, and every search that found it, failed. A NUL is no text either.
                raise ToolDefinitionError(
                    f"skill {self.name}: its {what} has a NUL or a lone surrogate; give text"
                )
        if (
            isinstance(self.tools, str)
            or not isinstance(self.tools, Iterable)
            or not all(isinstance(t, str) for t in self.tools)
        ):
            raise ToolDefinitionError(
                f'skill {self.name}: tools is a list of tool names, as ("list_prs",), not '
                f"{self.tools!r}"[:300]
            )
        object.__setattr__(self, "tools", tuple(self.tools))
        twice = sorted({t for t in self.tools if self.tools.count(t) > 1})
        if twice:
            # Each load of the skill failed on it ("two tools are called ..."), for the model.
            raise ToolDefinitionError(
                f"skill {self.name}: tools names {twice[0]!r} more than once; name each once"
            )
        if not isinstance(self.files, Mapping):
            raise ToolDefinitionError(
                f"skill {self.name}: files maps each file's path to its bytes or a path on "
                f'disk, as {{"guide.md": b"..."}}, not {type(self.files).__name__}'
            )
        spelled: dict[str, str] = {}
        for path, content in self.files.items():
            if (
                not isinstance(path, str)
                or not path
                or path.startswith("/")
                or path.endswith("/")
                or any(part in ("", ".", "..") for part in path.split("/"))
                or _not_a_line(path)
            ):
                # One spelling per file: "a/./b.md" and "a//b.md" were other files than
                # "a/b.md", and a line break broke the skill's list of its files.
                raise ToolDefinitionError(
                    f"skill {self.name}: file path {path!r} must be relative, inside the skill, "
                    'its parts joined by single "/" (no empty, "." or ".." part), and text '
                    "(no control character, NUL or lone surrogate)"
                )
            twin = spelled.setdefault(unicodedata.normalize("NFC", path), path)
            if twin != path:
                # A script finds a file in either normalization: these were one name for two.
                raise ToolDefinitionError(
                    f"skill {self.name}: file paths {twin!r} and {path!r} are one path in two "
                    "Unicode normalizations; keep one of them"
                )
            if len(self.name) + 1 + len(path) > MAX_ATTACHMENT_ID:
                # Its id in the script ("<skill>/<path>") is an attachment's.
                raise ToolDefinitionError(
                    f"skill {self.name}: file path {path[:80]!r}... is too long: with the "
                    f"skill's name it must come to at most {MAX_ATTACHMENT_ID} characters"
                )
            if not isinstance(content, bytes | str | Path):
                raise ToolDefinitionError(
                    f"skill {self.name}: file {path!r} is {type(content).__name__}; give its "
                    "bytes or a path on disk"
                )
            if not isinstance(content, bytes) and not Path(content).is_file():
                # Read at each run_code: found then, it failed every script of the engine.
                raise ToolDefinitionError(
                    f"skill {self.name}: file {path!r} is to be read from {str(content)!r:.80}, "
                    "which is no file on disk; for the file's text, give "
                    "text.encode('utf-8')"
                )

    def info(self) -> SkillInfo:
        return SkillInfo(name=self.name, description=self.description, tools=self.tools)

    def attachments(self) -> list[Attachment]:
        """The skill's files as the script sees them: ``<skill>/<path>``, with ``skill`` set."""
        out = []
        for path, content in sorted(self.files.items()):
            mime, _ = mimetypes.guess_type(path)
            file_id = f"{self.name}/{path}"
            if isinstance(content, bytes):
                out.append(Attachment(file_id, data=content, mime=mime, skill=self.name))
            else:
                out.append(Attachment(file_id, path=Path(content), mime=mime, skill=self.name))
        return out


def _not_a_line(text: str) -> bool:
    """Whether ``text`` cannot be one line of what the model reads (see NOT_A_LINE), or is no
    text a log keeps (a NUL, a lone surrogate)."""
    return NOT_A_LINE.search(text) is not None or NOT_KEPT.search(text) is not None


def check_skills(skills: Iterable[Skill], tools: Sequence[Tool]) -> list[Skill]:
    """The skills, once each is known to name only tools that exist and no two share a name.

    A skill naming a tool the engine does not have would answer the model with a declaration
    that is missing, so it is refused when the host declares it: :class:`ToolDefinitionError`
    naming the skill, the tool, and the closest tool names.
    """
    if isinstance(skills, Skill):
        raise ToolDefinitionError(
            f"skills is a list of skills; pass [skill], not the skill {skills.name!r} alone"
        )
    result: list[Skill] = []
    names = [t.name for t in tools]
    known = set(names)
    for skill in skills:
        if not isinstance(skill, Skill):
            raise ToolDefinitionError(f"skills holds {type(skill).__name__}, not a Skill")
        same = named_as(skill.name, [s.name for s in result])
        if same is not None:
            raise ToolDefinitionError(
                f"two skills are named {skill.name!r}"
                + ("" if same == skill.name else " (one in another Unicode normalization)")
                + "; give each skill its own name"
            )
        for name in skill.tools:
            if name not in known:
                near = closest_names(str(name), names)
                hint = f"; the closest tools are {', '.join(near)}" if near else ""
                raise ToolDefinitionError(
                    f"skill {skill.name} names tool {name!r}, which the engine does not have"
                    f"{hint}; name tools as scripts call them"
                )
        result.append(skill)
    return result


def skill_answer(
    skill: Skill,
    tools: Sequence[Tool],
    budget: int = BUDGET,
    *,
    language: str = "javascript",
    attached: Collection[str] | None = None,
) -> str:
    """What ``tools.skill({ name })`` answers: the instructions, then the tools' declarations
    in ``language``'s types (the language of the script that asks), then its files: those of
    them not among ``attached`` (the ids of the asking script's files recorded as this
    skill's, :func:`recorded_of`, when given) are said to be for a later script."""
    by_name = {t.name: t for t in tools}
    named = [by_name[n] for n in skill.tools if n in by_name]
    parts = [
        f"Skill {skill.name}: {printable(skill.description)}".rstrip(": "),
        "",
        printable(skill.instructions).strip(),
    ]
    if named:
        speech = dialect(language)
        block, declared = speech.declare_tools(named, budget, full_descriptions=True)
        parts += ["", f"The tools it names, in {speech.name}:", speech.fenced(block).rstrip()]
        left = [t.name for t in named if t not in declared]
        if left:
            parts.append(
                "Not declared here (over the budget): "
                + ", ".join(left)
                + "; find them with tools.tool_search."
            )
    gone = [n for n in skill.tools if n not in by_name]
    if gone:
        # An MCP server's tools changed since the skill was checked: its instructions name
        # them still, and the model, told nothing, called a tool that does not exist.
        parts += ["", f"Not among the tools now (their server dropped them): {', '.join(gone)}."]
    ids = [f"{skill.name}/{path}" for path in sorted(skill.files)]
    # A skill added (add_skill) after the script started, or a file it has here that the
    # script's starting host had not: not recorded with the script, which read "no file" for
    # each file this answer told it to read. By NFC form, as the script finds a file by its
    # id in either normalization (each form made once: a skill of a thousand files asked by
    # a script of a thousand made a million).
    readable = None if attached is None else {unicodedata.normalize("NFC", i) for i in attached}
    later = [
        i for i in ids if readable is not None and unicodedata.normalize("NFC", i) not in readable
    ]
    if len(later) < len(ids):
        parts += ["", "Its files (read them with files.text, files.lines, ...):"]
        parts += [f"- {i}" for i in ids if i not in later]
    if later:
        parts += [
            "",
            "Its files that this script cannot read, as they came after it started (a script "
            "run after this one can):",
        ]
        parts += [f"- {i}" for i in later]
    return "\n".join(parts)


def recorded_of(skill: Skill, files: Iterable[Mapping[str, Any]]) -> set[str]:
    """The ids of ``files`` (a script's file records) recorded as ``skill``'s own files, its
    name compared in NFC. Not every id under its name: a host's upload may be
    ``rollback/steps.md`` while no skill ``rollback`` exists, and counted, a skill added while
    the script waited listed it as the skill's, whose bytes the script then read as such."""
    name = unicodedata.normalize("NFC", skill.name)
    return {
        f["id"]
        for f in files
        if isinstance(f.get("skill"), str) and unicodedata.normalize("NFC", f["skill"]) == name
    }


def named_as(name: str, names: Sequence[str]) -> str | None:
    """The one of the skills' ``names`` that ``name`` is, in either Unicode normalization
    (a name from a macOS folder has é as e and an accent mark; a model writes one), or None.
    So no two skills' names are one name: each is one skill's."""
    return name if name in names else spelled_otherwise(name, names)


def find_skill(skills: Sequence[Skill], name: object, language: str = "javascript") -> Skill:
    """The skill called ``name`` (in either Unicode normalization); a :class:`ToolCallError`
    naming the closest skills if none, or saying how a script in ``language`` names one."""
    if not isinstance(name, str):
        # A Python script was told to write { name: ... } too.
        call = dialect(language).skill_call("skill name")
        raise ToolCallError(f"tools.skill takes a skill's name as text, as {call}")
    names = [s.name for s in skills]
    if len(name) <= MAX_SKILL_NAME:
        found = named_as(name, names)
        if found is not None:
            return skills[names.index(found)]
    if not names:
        raise ToolCallError("tools.skill: this agent has no skills")
    if len(name) > MAX_SKILL_NAME:
        raise ToolCallError(
            f"tools.skill: no skill has a name of {len(name):,} characters (a name has at most "
            f"{MAX_SKILL_NAME}); the skills are {', '.join(names)}"
        )
    near = closest_names(name, names)
    hint = (
        f"; the closest are {', '.join(near)}" if near else f"; the skills are {', '.join(names)}"
    )
    raise ToolCallError(f"no skill {name!r}{hint}")


def skills_listing(skills: Sequence[Skill], language: str = "javascript") -> str:
    """The system-prompt text that lists each skill with the tools it names, for scripts in
    ``language``."""
    if not skills:
        return ""
    lines = [f"Skills (load one in a script with {dialect(language).skill_call()}):"]
    for skill in skills:
        # Its first line, cut, as tool_search gives it: a line break in a description listed
        # a skill there is not, and a long one took the prompt.
        description = first_line(skill.description, MAX_DESCRIPTION)
        if skill.tools and description and description[-1] not in ".!?":
            description += "."  # else the tools read as the description's last words
        about = f" Tools: {', '.join(skill.tools)}." if skill.tools else ""
        lines.append(f"- {skill.name}: {description}{about}")
    return "\n".join(lines)
