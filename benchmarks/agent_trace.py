"""B9's trace: two agent clients, each with a ≈1,500-token system prompt holding its tool
definitions, ten turns each (a task, then tool results coming back), replies appended, the
whole conversation re-sent every turn — what editor agents do against a local server.

Tool results are sent as user messages ("Tool result: …") and the tool definitions live in
the system prompt's text, so every server renders exactly the same prompt with the model's
own template (llama-server without ``--jinja`` rejects a ``tools`` field).
"""

from __future__ import annotations

import json
from typing import Any

N_TURNS = 10
RESTART_AFTER = 5
N_NEW = 48

_TOOLS = {
    "coder": [
        ("read_file", "Read a text file from the workspace and return its content with line numbers.",
         {"path": "string: path relative to the workspace root", "start_line": "integer: first line (1-based)",
          "end_line": "integer: last line, inclusive"}),
        ("write_file", "Replace the whole content of a file in the workspace; creates it if missing.",
         {"path": "string: path relative to the workspace root", "content": "string: the new content"}),
        ("apply_patch", "Apply a unified diff to the workspace; fails if a hunk does not match.",
         {"patch": "string: the unified diff, with a/ and b/ prefixes"}),
        ("list_dir", "List the entries of a directory, with sizes and modification times.",
         {"path": "string: directory relative to the workspace root", "depth": "integer: how deep to recurse"}),
        ("search_code", "Search the workspace for a regular expression; returns matching lines.",
         {"pattern": "string: a Python regular expression", "glob": "string: file glob such as *.py",
          "max_results": "integer: stop after this many matches"}),
        ("run_tests", "Run the project's test suite or a subset of it and return the report.",
         {"selector": "string: a pytest node id or -k expression", "timeout_s": "integer: seconds"}),
        ("run_command", "Run a shell command in the workspace and return stdout, stderr and the exit code.",
         {"command": "string: the command line", "cwd": "string: working directory", "timeout_s": "integer"}),
        ("git_diff", "Show the uncommitted changes in the workspace as a unified diff.",
         {"paths": "array of strings: limit the diff to these paths"}),
        ("find_references", "Find every place a Python name is used: definitions, imports and calls.",
         {"name": "string: a dotted name such as config.parse.parse_line", "include_tests": "boolean"}),
        ("format_code", "Format the given files with the project's formatter and return what changed.",
         {"paths": "array of strings: files to format", "check_only": "boolean: report, do not write"}),
    ],
    "ops": [
        ("get_metrics", "Fetch a time series from the monitoring system for one service.",
         {"service": "string: service name", "metric": "string: e.g. p99_latency_ms, error_rate",
          "window": "string: e.g. 15m, 1h, 24h"}),
        ("get_logs", "Fetch recent log lines of a service, newest first, optionally filtered.",
         {"service": "string", "level": "string: debug, info, warning or error", "limit": "integer"}),
        ("list_deploys", "List the recent deployments of a service with their versions and authors.",
         {"service": "string", "limit": "integer"}),
        ("rollback", "Roll a service back to a previous version; asks for confirmation first.",
         {"service": "string", "version": "string: the version to return to"}),
        ("page_oncall", "Page the on-call engineer of a team with a short message.",
         {"team": "string", "message": "string: one or two sentences", "severity": "string: low, high or critical"}),
        ("open_ticket", "Open a ticket in the issue tracker and return its id.",
         {"title": "string", "body": "string", "labels": "array of strings"}),
        ("query_db", "Run a read-only SQL query against the analytics replica.",
         {"sql": "string: a SELECT statement", "limit": "integer"}),
        ("status_page", "Post or update an incident on the public status page.",
         {"incident": "string: id, empty for a new one", "text": "string", "state": "string"}),
        ("get_alerts", "List the alerts that are firing now, with when they started and their severity.",
         {"service": "string: empty for every service", "severity": "string: low, high or critical"}),
        ("silence_alert", "Silence an alert for a while, with a reason that is shown to the whole team.",
         {"alert_id": "string", "minutes": "integer: at most 240", "reason": "string"}),
    ],
}

_RULES = {
    "coder": (
        "You are Forge, a careful coding agent working inside the user's repository. You plan "
        "before you act, and you act through tools only. You never invent file contents: you read "
        "a file before you change it. You keep every change as small as the task allows and you run "
        "the relevant tests after each change. When a test fails you read the failure, form one "
        "hypothesis, check it with a tool, and only then edit. You explain what you did in two or "
        "three plain sentences after each step. You do not reformat code you were not asked to touch. "
        "You keep the project's style: its naming, its imports, its comment habits. If the task is "
        "ambiguous you pick the most likely reading and say which one you chose. "
    ),
    "ops": (
        "You are Watch, an operations agent for a small web company. You help the engineer on call "
        "understand and fix incidents. You look at metrics and logs before you suggest anything, and "
        "you never roll back, page anyone or post to the status page without saying why first. You "
        "summarise what you found in short, factual sentences with numbers and times. You prefer the "
        "least risky action that stops the bleeding, then look for the cause. You keep a running "
        "timeline of the incident in your answers. When you are unsure you say so and propose the "
        "next check. You do not speculate about people. "
    ),
}

_CONVENTIONS = {
    "coder": (
        "\n\nConventions of this repository. Python 3.11, type hints everywhere, mypy in strict mode "
        "for the core packages. Tests live in tests/, mirroring src/, and run with pytest; a test "
        "never sleeps to wait for something, it waits for a condition with a deadline. Modules "
        "start with a docstring that says what the module owns. Comments explain why, not what. "
        "Errors that users can cause are raised as ConfigError or one of its subclasses, with a "
        "message that names the file and the line. Logging goes through logging.getLogger(__name__); "
        "there are no prints outside the command line entry points. Public functions have "
        "docstrings. Names: num_ for counts, is_ and has_ for predicates. Imports are sorted by ruff. "
        "Line length is 100. Commit messages say what changed and why in one sentence. Never commit "
        "generated files. The configuration format is line based: key = value, one per line; values "
        "may be quoted with double quotes, in which case a # inside the quotes is part of the value. "
        "The parser must keep line numbers exact so error messages point at the right line. "
        "When you are done with a task, say what you changed, which tests cover it, and anything "
        "you noticed and left alone."
    ),
    "ops": (
        "\n\nHow this company runs. Services: web, checkout, payments, search, accounts, mailer. "
        "Each has an owning team (web and search: frontend; checkout and payments: money; accounts "
        "and mailer: identity) and an on-call engineer. Severity: critical means customers cannot "
        "pay or log in; high means a feature is broken or slow for many; low is everything else. "
        "Critical incidents get a status page post within 15 minutes, then an update every 30 "
        "minutes until resolved. Rollbacks are allowed without approval for the last deploy of a "
        "service if the incident started within 30 minutes of it. Anything else needs the owning "
        "team's on-call. Tickets for incidents carry the labels incident and the service name, and "
        "their body has a timeline with times in UTC, the impact in numbers, the cause if known, "
        "and the follow-ups. The analytics replica lags up to five minutes behind production. "
        "Metrics are sampled every five minutes; p99 latency above 1,000 ms on checkout pages the "
        "money team. Logs are kept for seven days. Always write times as HH:MM in UTC, and always "
        "say which data you looked at before drawing a conclusion."
    ),
}

_TASKS = {
    "coder": [
        "The parser rejects empty lines in config files. Find where lines are parsed.",
        'Tool result: {"matches": [{"file": "src/config/parse.py", "line": 41, "text": "if not line: raise ParseError(\\"empty line\\", lineno)"}, {"file": "src/config/parse.py", "line": 88, "text": "for lineno, line in enumerate(fh, 1):"}]}',
        'Tool result: {"path": "src/config/parse.py", "lines": "38  def parse_line(line, lineno):\\n39      line = line.strip()\\n40      # blank lines used to be skipped by the caller\\n41      if not line: raise ParseError(\\"empty line\\", lineno)\\n42      key, _, value = line.partition(\\"=\\")\\n43      return key.strip(), value.strip()"}',
        "Make blank lines and lines starting with # be skipped instead of raising.",
        'Tool result: {"applied": true, "files": ["src/config/parse.py"], "hunks": 1}',
        'Tool result: {"passed": 212, "failed": 1, "report": "FAILED tests/test_parse.py::test_trailing_comment - AssertionError: expected (\\"a\\", \\"1\\") got (\\"a\\", \\"1 # one\\")"}',
        "Handle trailing comments too, but keep # inside quoted values.",
        'Tool result: {"applied": true, "files": ["src/config/parse.py", "tests/test_parse.py"], "hunks": 3}',
        'Tool result: {"passed": 214, "failed": 0, "duration_s": 9.4}',
        "Write a short changelog entry for this fix.",
    ],
    "ops": [
        "Checkout latency alerts are firing. What is going on?",
        'Tool result: {"service": "checkout", "metric": "p99_latency_ms", "points": [[\\"14:00\\", 310], [\\"14:05\\", 295], [\\"14:10\\", 1840], [\\"14:15\\", 2210], [\\"14:20\\", 2480]]}',
        'Tool result: {"deploys": [{"version": "v412", "at": "14:08", "author": "mia", "notes": "switch payment client to connection pool"}, {"version": "v411", "at": "11:52", "author": "sam"}]}',
        "Check the error logs around 14:10.",
        'Tool result: {"lines": ["14:10:02 ERROR pool exhausted: waited 2000 ms for a connection", "14:10:03 ERROR pool exhausted: waited 2000 ms for a connection", "14:10:05 WARNING retrying payment call (attempt 2)"]}',
        "Should we roll back v412?",
        'Tool result: {"rollback": "v411", "service": "checkout", "state": "done", "at": "14:31"}',
        'Tool result: {"service": "checkout", "metric": "p99_latency_ms", "points": [[\\"14:30\\", 2300], [\\"14:35\\", 420], [\\"14:40\\", 300]]}',
        "Draft the status page update.",
        "Summarise the incident timeline for the ticket.",
    ],
}


def tools(kind: str) -> list[dict[str, Any]]:
    """The agent's tool definitions as OpenAI ``tools`` entries (B9 writes them into its system
    prompt; B14 offers them as real tools)."""
    return [
        {"type": "function", "function": {
            "name": name, "description": desc,
            "parameters": {"type": "object", "properties": {
                p: {"type": t.split(":")[0].split(" ")[0], "description": t} for p, t in params.items()},
                "required": list(params)}}}
        for name, desc, params in _TOOLS[kind]
    ]  # fmt: skip


def rules(kind: str) -> str:
    """The agent's rules and its repository's conventions, without the tools."""
    return _RULES[kind] + _CONVENTIONS[kind]


def system_prompt(kind: str) -> str:
    """The agent's rules and its tool definitions (JSON), ≈1,500 tokens on SmolLM2's tokenizer."""
    text = rules(kind) + "\n\nYou can call these tools. Answer a call with <tool_call>{\"name\": …, " \
        "\"arguments\": {…}}</tool_call>.\n<tools>\n" + "\n".join(json.dumps(t) for t in tools(kind)) + "\n</tools>"
    return text


def tasks(kind: str) -> list[str]:
    return list(_TASKS[kind])


CLIENTS = ("coder", "ops")
