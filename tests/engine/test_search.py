"""tools.tool_search: ranking, exact names, the 12 KiB answer, skills, bad queries."""

from __future__ import annotations

import re

import pytest

from engine import CodeMode
from engine._search import MAX_QUERY, SkillInfo, ToolIndex
from engine._skills import Skill
from engine._tools import Tool, ToolCallError, unique_tools
from engine.languages.javascript._declarations import BUDGET
from tests.engine.corpus import load_corpus

CORPUS = load_corpus()
SKILLS = [
    SkillInfo(
        "triage",
        "Triage incoming support tickets: label them and file Jira issues.\nMore detail.",
        ("jira__create_issue", "slack__post_message"),
    ),
    SkillInfo(
        "release", "Cut a release: tag the repository and announce it.", ("github__list_prs",)
    ),
]
INDEX = ToolIndex(CORPUS, SKILLS)


def ranked(query: str) -> list[str]:
    return [t.name for t in INDEX.rank(query)]


def declared(answer: str) -> list[str]:
    """The tools declared in the answer's TypeScript block, in order."""
    block = re.search(r"```ts\n(.*?)```", answer, flags=re.S)
    assert block is not None, answer
    return re.findall(r"^  (\w+)\(input", block.group(1), flags=re.M)


@pytest.mark.parametrize(
    ("query", "first"),
    [
        ("send message slack", "slack__post_message"),
        ("listing prs", "github__list_prs"),
        ("list pull requests", "github__list_prs"),
        ("reviews of a pull request", "github__get_reviews"),
        ("run sql query", "postgres__query"),
        ("weather forecast", "get_weather"),
        ("refund a payment", "stripe__create_refund"),
        ("directory tree", "filesystem__directory_tree"),
        ("free slots calendar", "calendar__find_free_time"),
        ("2fa code", "_2fa_verify"),
        ("kubernetes pod logs", "kubernetes__get_logs"),
        ("geocode an address", "maps__geocode"),
        ("emoji reaction", "slack__add_reaction"),
        ("reply to a comment thread", "forum__post_comment"),
        ("créer une note", "creer_note"),
    ],
)
def test_ranking_finds_the_obvious_tool_first(query: str, first: str) -> None:
    """Words of the name and the description, stemmed, find the tool a person would pick."""
    assert ranked(query)[0] == first


def test_name_matches_beat_description_only_matches() -> None:
    """A tool whose name holds the word ranks above one that only mentions it."""
    name_only = Tool("archive_message", description="Move it out of the inbox.")
    text_only = Tool(
        "move_item", description="Move an item; works for a message, a file or a folder."
    )
    index = ToolIndex([text_only, name_only])
    assert [t.name for t in index.rank("message")] == ["archive_message", "move_item"]


def test_parameter_names_count() -> None:
    """A parameter's name and description are searched too."""
    assert "calendar__create_event" in ranked("attendees")[:1]
    assert "stripe__create_payment_intent" in ranked("currency")[:2]


def test_ties_break_by_name() -> None:
    """Equal scores come out in name order, so answers are stable."""
    tools = [Tool(name, description="Same words.") for name in ("b_tool", "c_tool", "a_tool")]
    assert [t.name for t in ToolIndex(tools).rank("same words")] == ["a_tool", "b_tool", "c_tool"]


def test_a_search_for_a_tools_name_finds_its_declaration_first() -> None:
    """A name inside a longer query ranks that tool first."""
    assert ranked("how do I use slack__add_reaction here")[0] == "slack__add_reaction"
    answer = INDEX.search("stripe__list_charges please")
    assert declared(answer)[0] == "stripe__list_charges"


def test_a_name_of_one_plain_word_is_a_word_of_the_query() -> None:
    """A tool named by one plain word ("search", "delete") is not named by that word in a
    sentence: "search the web" found notion__search first (an exact name's bonus), and
    "delete a warehouse" redis__delete; a name of more words still ranks its tool first."""
    index = ToolIndex(
        [
            Tool("notion__search", description="Search pages in the Notion workspace."),
            Tool("confluence__search", description="Search Confluence pages."),
            Tool("web__web_search", description="Search the web."),
            Tool("redis__delete", description="Delete keys."),
            Tool("erp__delete_warehouse", description="Delete a warehouse."),
            Tool("kubernetes__get_logs", description="A pod's logs."),
            Tool("docker__container_logs", description="A container's logs."),
        ]
    )

    def first(query: str) -> str:
        return index.rank(query)[0].name

    assert first("search the web") == "web__web_search"
    assert first("delete a warehouse") == "erp__delete_warehouse"
    assert first("container logs with get_logs") == "kubernetes__get_logs"
    assert first("search") == "confluence__search"  # two tools: ranked, by name at a tie


def test_answer_has_header_declarations_others_and_skills() -> None:
    """Header, a block with whole descriptions, the other matches by name, then skills."""
    answer = INDEX.search("send message slack", limit=2)
    assert answer.startswith('9 tools match "send message slack", best first.')
    assert declared(answer) == ["slack__post_message", "slack__update_message"]
    assert (
        "   * Use blocks for rich layouts; text is the fallback shown in notifications.\n" in answer
    )
    others = re.search(r"^Other matches: (.*)\.$", answer, flags=re.M)
    assert others is not None
    assert others.group(1).split(", ")[0] == "slack__get_thread_replies"
    assert len(others.group(1).split(", ")) == 7
    assert "tool_search(" not in answer  # a search answer declares what matched, only


def test_exact_names_answer_just_those_tools() -> None:
    """A query of exact names (comma or space separated, declared or original names)
    answers just those, in the query's order."""
    answer = INDEX.search("get_audience, find_customers")
    assert declared(answer) == ["crm__get_audience", "crm__find_customers"]
    assert answer.startswith("The declarations of crm__get_audience, crm__find_customers:")
    assert "Other matches" not in answer
    assert declared(INDEX.search("github__list_prs slack__post_message")) == [
        "github__list_prs",
        "slack__post_message",
    ]
    assert declared(INDEX.search("get-weather")) == ["get_weather"]


def test_an_ambiguous_original_name_is_not_an_exact_query() -> None:
    """`create_issue` is a GitHub and a Jira tool: both come back, ranked, not just one."""
    answer = INDEX.search("create_issue")
    assert not answer.startswith("The declarations of")
    assert set(declared(answer)[:2]) == {"github__create_issue", "jira__create_issue"}


def test_the_answer_block_holds_12_kib_and_always_declares_the_first() -> None:
    """Many matches stop at 12 KiB; a first match larger than that is still declared."""
    answer = INDEX.search("list get create search", limit=50)
    block = re.search(r"```ts\n(.*?)```", answer, flags=re.S)
    assert block is not None and len(block.group(1).encode()) <= BUDGET
    assert 1 < len(declared(answer)) < 50
    huge = Tool(
        "export_everything",
        description="Export every record.",
        input_schema={
            "type": "object",
            "properties": {f"column_{i}": {"type": "string"} for i in range(1500)},
        },
    )
    index = ToolIndex([huge, *CORPUS[:5]])
    answer = index.search("export_everything")
    assert declared(answer) == ["export_everything"]
    assert len(answer.encode()) > BUDGET


def test_deferred_tools_are_found() -> None:
    """Deferred tools are left out of run_code but searched like any other."""
    hidden = Tool("rotate_keys", description="Rotate the API keys of a project.", deferred=True)
    index = ToolIndex([*CORPUS, hidden])
    assert declared(index.search("rotate api keys"))[0] == "rotate_keys"


def test_no_match_lists_the_tools() -> None:
    """With nothing matching, the answer says so and lists the tools, bounded."""
    answer = INDEX.search("zzzz qqqq")
    assert answer.startswith('No tool matches "zzzz qqqq". The tools are: calendar__create_event,')
    many = ToolIndex([Tool(f"tool_{i:03d}") for i in range(200)])
    answer = many.search("nothing here")
    assert "and 120 more" in answer
    assert len(answer) < 2000


def test_skills_that_match_say_how_to_load_them() -> None:
    """Matching skills follow the tools, with their tools and the call that loads them."""
    answer = INDEX.search("support tickets")
    assert answer.startswith('No tool matches "support tickets".')
    assert (
        "- skill triage: Triage incoming support tickets: label them and file Jira issues. "
        "(tools: jira__create_issue, slack__post_message) — load it with "
        'await tools.skill({ name: "triage" })'
    ) in answer
    assert "The tools are" not in answer  # skills matched, so no list of every tool
    assert "skill release" in INDEX.search("release announcement")


async def test_a_skills_description_is_cut_as_a_tools_is() -> None:
    """A skill's description in a search answer is cut where a tool's is (MAX_DESCRIPTION
    characters, its control characters as spaces): a one-line description of 100,000
    characters was shown whole, in every answer that matched the skill."""
    from engine import CodeMode, Skill
    from engine.languages._dialect import MAX_DESCRIPTION
    from tests.engine.conftest import InProcessRunner

    long = "Rotate the keys\x1b[31m of a vault. " + "Then check each key. " * 5000
    skill = Skill("vault:rotate", long, "Rotate them.", tools=("list_prs",))

    def list_prs(repo: str) -> list[int]:
        """List the open pull requests of a repository."""
        return []

    engine = CodeMode([list_prs], skills=[skill], runner=InProcessRunner(), type_check="off")
    try:
        answer = engine.search("rotate vault keys")
    finally:
        await engine.aclose()
    (line,) = [x for x in answer.splitlines() if x.startswith("- skill vault:rotate: ")]
    summary = line.removeprefix("- skill vault:rotate: ").split(" (tools: list_prs) — ")[0]
    assert summary.startswith("Rotate the keys [31m of a vault. Then check each key."), summary[:80]
    assert summary.endswith("...") and len(summary) <= MAX_DESCRIPTION, len(summary)
    assert line.endswith('load it with await tools.skill({ name: "vault:rotate" })'), line[-80:]
    assert len(answer) < MAX_DESCRIPTION + 1000, len(answer)


def test_queries_are_bounded() -> None:
    """An empty, overlong or badly limited query is refused with a message for the model,
    as the ToolCallError its call fails with."""
    for query in ("   ", None, 5):
        with pytest.raises(ToolCallError, match="needs a query"):
            INDEX.search(query)
    with pytest.raises(ToolCallError, match=f"over the {MAX_QUERY:,}"):
        INDEX.search("a" * (MAX_QUERY + 1))
    for limit in (0, 51, True, "8"):
        with pytest.raises(ToolCallError, match="limit must be a whole number"):
            INDEX.search("slack", limit=limit)


def test_answers_are_deterministic() -> None:
    """The same query over the same tools gives the same bytes, index rebuilt or not."""
    assert INDEX.search("list issues") == ToolIndex(load_corpus(), SKILLS).search("list issues")


def test_tools_described_in_other_scripts_are_found_by_their_words() -> None:
    """A description in Cyrillic, Greek or Japanese is searched as a Latin one: by its words,
    and for Han and kana, which put no space between words, by two characters at a time."""
    index = ToolIndex(
        [
            *CORPUS,
            Tool("sozdat_zadachu", description="Создать задачу в трекере."),
            Tool("zapasy", description="在庫を一覧表示する。"),
            Tool("kairos", description="Πρόγνωση καιρού για μια πόλη."),  # noqa: RUF001
        ]
    )
    assert declared(index.search("создать задачу"))[0] == "sozdat_zadachu"
    assert declared(index.search("在庫"))[0] == "zapasy"
    assert declared(index.search("καιρου"))[0] == "kairos"  # accents dropped, as in Latin


def test_a_query_costs_the_tools_its_words_are_in() -> None:
    """Ranking a query goes through the tools each of its words is in, not every tool for
    every word: a script's 500-word query over 5,000 tools held the host's event loop a
    tenth of a second a search. Counted in lines of this module run (not timed): a query of
    a hundred words no tool has, over 2,000 tools, runs few."""
    import sys
    from types import FrameType
    from typing import Any

    import engine._search as module

    index = ToolIndex([Tool(f"tool_{i}", description=f"Does thing {i}.") for i in range(2000)])
    query = " ".join(f"zz{chr(97 + i // 26)}{chr(97 + i % 26)}" for i in range(100))
    lines = 0

    def count(frame: FrameType, event: str, _arg: Any) -> Any:
        nonlocal lines
        if frame.f_code.co_filename != module.__file__:
            return None
        if event == "line":
            lines += 1
        return count

    before = sys.gettrace()  # a coverage run's, put back after
    sys.settrace(count)
    try:
        found = index.rank(query)
    finally:
        sys.settrace(before)
    assert found == []
    assert lines < 2000, lines  # one a tool was 200,000


def test_an_index_that_follows_another_keeps_its_work_for_the_same_tools() -> None:
    """Each skill a host added made the engine's index again, every tool's words found
    again: 2 s of the event loop a skill with 5,000 tools (20 s for ten), and as much for an
    MCP server's change of one tool. An index that follows another keeps the ranking of the
    same tools, and each entry of a tool it had (asserted by what is kept, not in seconds);
    its answers are those of an index made afresh."""
    tools = [Tool(f"tool_{i}", description=f"Does thing {i} with widgets") for i in range(200)]
    index = ToolIndex(tools)
    skilled = ToolIndex(tools, [SkillInfo("guide", "All about widgets")], before=index)
    assert skilled._tools is index._tools
    assert "skill guide" in skilled.search("widgets") and "skill" not in index.search("widgets")
    added = Tool("gadget", description="Does gadgets")
    changed = ToolIndex([*tools[1:], added], before=skilled)
    assert all(changed._entries[t] is index._entries[t] for t in tools[1:])
    for query in ("gadgets", "widgets thing 7", "tool_3, gadget"):
        assert changed.search(query) == ToolIndex([*tools[1:], added]).search(query)
    engine = CodeMode(tools=tools)
    kept = engine._index._tools
    engine.add_skill(Skill(name="guide", description="All about widgets", instructions="i"))
    assert engine._index._tools is kept and "skill guide" in engine.search("widgets")


def test_renamed_tools_keep_their_work_when_an_mcp_servers_tools_change() -> None:
    """Tools whose names sanitize alike (Chinese names: each is tool_ and a hash) are renamed,
    and each change of an MCP server's tools renamed them afresh, new objects, so the index
    that follows kept none of their entries (0 of 5,001: each change found every tool's words
    again). The same tool renamed to the same name is the same object, its entry kept."""
    own = [Tool(f"工具{chr(0x4E00 + i)}", description=f"Does thing {i}") for i in range(50)]
    engine = CodeMode(tools=own)
    tools, index = list(engine.tools), engine._index
    assert all(t.name.startswith("tool_") and t not in own for t in tools)
    engine._mcp_tools_changed([Tool("ping", source="srv")])
    assert engine.tools[:50] == tools  # the same objects: a Tool is equal to itself alone
    kept = sum(engine._index._entries[t] is index._entries[t] for t in tools)
    assert kept == len(tools)
    assert unique_tools(own, before=tools) == tools
