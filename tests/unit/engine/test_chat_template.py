"""The chat-template sandbox is bounded in work, time and memory (issue 15, item 7).

Hostile templates end with ``InvalidRequest`` (never a hang, never a raw ``MemoryError``);
real templates, with long conversations, tools and the usual formatting, still render.

The hostile templates run in a child process whose address space is capped at 1 GiB above
what it needs to import the sandbox, and each gets a 60 s alarm: if the bounds ever regress,
these tests fail instead of taking the machine's memory (an unbounded run took 19.5 GB).
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import threading
from pathlib import Path

import gguf
import pytest

from app import jinja_sandbox
from app.engine.chat_template import CHATML_TEMPLATE, render_chat_template
from app.engine.errors import InvalidRequest
from app.jinja_sandbox import MAX_RENDER_STEPS

MESSAGES = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]

HOSTILE = {
    # the two of the issue
    "nested ranges": "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}",
    "huge repetition": "{{ 'a' * 10**13 }}",
    # more of the same kind
    "nested filtered loops": "{% for i in range(99999) if i %}{% for j in range(99999) if j %}{% endfor %}{% endfor %}",
    "list repetition": "{{ [0] * 10**9 }}",
    "doubling": "{% set ns = namespace(s='a') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
    "power": "{{ 2 ** 1000000000 }}",
    "center filter": "{{ 'x'|center(10**10) }}",
    "str.ljust": "{{ 'x'.ljust(10**10) }}",
    "format width": "{{ '{:>10000000000}'.format('x') }}",
    "nested format width": "{{ '{:>{}}'.format('x', 10**10) }}",
    "percent width": "{{ '%10000000000s' % 'x' }}",
    "percent star": "{{ '%*s' % (10**10, 'x') }}",
    "format filter": "{{ '%*s'|format(10**10, 'x') }}",
    "batch padding": "{{ [1]|batch(10**9, 0)|list }}",
    "slice": "{{ [1]|slice(10**9)|list }}",
    "indent": "{{ 'a\nb'|indent(10**10) }}",
    "replace": "{% set s = 'a' * 100000 %}{{ s.replace('a', s) }}",
    "join filter": "{% set s = 'a' * 4000000 %}{{ ([s] * 1000)|join }}",
    "str.join": "{% set s = 'a' * 4000000 %}{{ ''.join([s] * 1000) }}",
    "expandtabs": "{{ ('\t' * 1000000).expandtabs(100000) }}",
    "tojson indent": "{{ messages|tojson(indent=10**10) }}",
    "wordwrap on a long text": "{% set s = 'a ' * 100000 %}{{ s|wordwrap(1) }}",
    "output": "{% for i in range(99999) %}{{ 'x' * 9999 }}{% endfor %}",
    "recursive macro": "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
    "recursive loop": "{% for x in [1] recursive %}{{ loop(range(99999)) }}{% endfor %}",
    "lipsum": "{{ lipsum(n=10**9) }}",
    "division by zero": "{{ 1 / 0 }}",
    "deep nesting": "{{ " + "(" * 50000 + "1" + ")" * 50000 + " }}",
    "sandbox escape": "{{ messages.__class__.__mro__[1].__subclasses__() }}",
    "mutation": "{% set x = messages.append(1) %}",
    "syntax": "{% if %}",
    "raise_exception": "{{ raise_exception('no') }}",
    "huge source": "{# " + "x" * (2 * 1024 * 1024) + " #}",
    # issue 26: one C call holding the GIL, huge ints, doubling with ~, a replace filter blow-up
    "sum holds the GIL": "{{ ([[0]*1000]*100000)|sum(start=[])|length }}",
    "power of a power": "{{ ((2**4096)**4096)**4096 }}",
    "int squaring": "{% set ns = namespace(n=3) %}{% for i in range(64) %}{% set ns.n = ns.n * ns.n %}{% endfor %}",
    "tilde doubling": "{% set ns = namespace(s='a') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
    "macro doubling": "{% macro d(s, n) %}{% if n %}{{ d(s ~ s, n - 1) }}{% endif %}{% endmacro %}{{ d('a', 64) }}",
    "replace filter": "{{ ('a' * 40000)|replace('a', 'b' * 40000) }}",
}


_CHILD = """
import json, resource, signal, sys
from app.engine.chat_template import render_chat_template
from app.engine.errors import InvalidRequest
page = resource.getpagesize()
vsz = int(open("/proc/self/statm").read().split()[0]) * page
resource.setrlimit(resource.RLIMIT_AS, (vsz + 2**30, resource.getrlimit(resource.RLIMIT_AS)[1]))

def alarm(*_):
    raise TimeoutError("still rendering after 60 s")

signal.signal(signal.SIGALRM, alarm)
cases, messages = json.load(sys.stdin)
out = {}
for name, source in cases.items():
    signal.alarm(60)
    try:
        render_chat_template(source, messages)
        out[name] = "rendered"
    except InvalidRequest:
        out[name] = "InvalidRequest"
    except BaseException as exc:
        out[name] = f"{type(exc).__name__}: {str(exc)[:200]}"
    finally:
        signal.alarm(0)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def hostile_results() -> dict[str, str]:
    root = Path(__file__).resolve().parents[3]
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD], input=json.dumps([HOSTILE, MESSAGES]), capture_output=True,
        text=True, cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, timeout=len(HOSTILE) * 61,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    results: dict[str, str] = json.loads(proc.stdout)
    return results


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_template_is_invalid_request(name, hostile_results):
    assert hostile_results[name] == "InvalidRequest"


@pytest.mark.timeout(300)
def test_many_small_loops_are_counted_not_just_nested_ones(monkeypatch):
    """No output, no nested range: the step count alone ends it, whatever the CPU. The render
    runs in this process with the wall-clock bound lifted, so a slow or loaded machine cannot
    end it by time first (it did: 'more than 5.0 s' with six test runs sharing two cores)."""
    monkeypatch.setattr(jinja_sandbox, "MAX_RENDER_SECONDS", 3600.0)
    inner = MAX_RENDER_STEPS // 99999 + 1  # small loops, but more steps than the budget in all
    src = f"{{% for i in range(99999) %}}{{% for j in range({inner}) %}}{{% endfor %}}{{% endfor %}}"
    with pytest.raises(jinja_sandbox.Refused, match="steps"):
        jinja_sandbox.render(src, MESSAGES)


def test_fan_out_macro_is_bounded():
    src = "{% macro f(n) %}{% if n %}{{ f(n-1) }}{{ f(n-1) }}{% endif %}{% endmacro %}{{ f(40) }}"
    with pytest.raises(InvalidRequest, match="runs away"):
        render_chat_template(src, MESSAGES)


def test_the_loop_guard_cannot_be_renamed_away(monkeypatch):
    """In this process with the wall-clock bound lifted, as above: only the step count may end it."""
    monkeypatch.setattr(jinja_sandbox, "MAX_RENDER_SECONDS", 3600.0)
    src = "{% set loop_guard = range %}{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}"
    with pytest.raises(jinja_sandbox.Refused, match="steps"):
        jinja_sandbox.render(src, MESSAGES)


def _gguf_template(path: Path) -> str:
    """The template string of a GGUF's metadata (gguf.GGUFReader parses the whole 49k-token
    vocabulary first, which takes seconds)."""
    data = path.read_bytes()
    at = data.index(b"tokenizer.chat_template") + len(b"tokenizer.chat_template")
    value_type, length = struct.unpack_from("<IQ", data, at)
    assert value_type == gguf.GGUFValueType.STRING
    return data[at + 12 : at + 12 + length].decode()


def test_real_templates_still_render(tiny_model_path):
    """SmolLM2's own template (copied into the tiny model) over a long conversation."""
    smol = _gguf_template(tiny_model_path)
    long_chat = [{"role": ("user", "assistant")[i % 2], "content": f"turn {i} " * 50} for i in range(2000)]
    text = render_chat_template(smol, long_chat)
    assert text.count("<|im_start|>") == 2002  # its default system prompt, 2,000 turns, the reply
    assert text.endswith("turn 1999 <|im_end|>\n<|im_start|>assistant\n")
    assert render_chat_template(CHATML_TEMPLATE, MESSAGES) == (
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>assistant\n"
    )


def test_ordinary_formatting_is_allowed():
    src = (
        "{{ '%s: %5d' % ('n', 42) }}|{{ '{:>6}'.format('r') }}|{{ 'Call 123456789 {}'.format('x') }}|"
        "{{ messages|tojson(indent=2)|length > 0 }}|{{ 'x'|center(5) }}|{{ (['ab'] * 3)|join('-') }}|"
        "{{ 'a,b'.split(',')|length }}|{{ messages|map(attribute='role')|join(',') }}|{{ 2 ** 10 }}|"
        "{{ messages[-1].content|upper }}|{{ 'abc'.replace('b', 'XY') }}|{{ [1, 2, 3]|batch(2)|list|length }}"
    )
    assert render_chat_template(src, MESSAGES) == (
        "n:    42|     r|Call 123456789 x|True|  x  |ab-ab-ab|2|user,assistant|1024|HELLO!|aXYc|2"
    )


def test_each_thread_has_its_own_budget():
    """Renders on several threads at once: one runaway does not fail the others."""
    results: dict[str, object] = {}

    def run(name: str, src: str) -> None:
        try:
            results[name] = render_chat_template(src, MESSAGES)
        except InvalidRequest as exc:
            results[name] = exc

    threads = [threading.Thread(target=run, args=("bad", HOSTILE["nested ranges"]))]
    threads += [threading.Thread(target=run, args=(f"ok{i}", CHATML_TEMPLATE)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert isinstance(results["bad"], InvalidRequest)
    assert all(results[f"ok{i}"] == render_chat_template(CHATML_TEMPLATE, MESSAGES) for i in range(4))
