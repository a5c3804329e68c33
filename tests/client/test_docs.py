"""docs/USER-GUIDE.md's Python section runs as printed, against a real
scheduler over mutual TLS, and prints what the guide says; its "Sending
again" table is pool_client/calls.py's."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

from pool_client import config
from pool_client.calls import RPCS

GUIDE = Path(__file__).parents[2] / "docs" / "USER-GUIDE.md"
TREE = """
[[tenants]]
name = "root"
guarantee_uj = 100_000_000_000
guarantee_mdev = 2000

[[tenants]]
name = "research"
parent = "root"
guarantee_uj = 40_000_000_000
guarantee_mdev = 1000
"""


def python_section() -> str:
    text = GUIDE.read_text()
    return text[text.index("## From Python"):]


def examples() -> list[tuple[str, str | None]]:
    """Each ```python block with the plain ``` block right after it (its output), if any."""
    blocks = re.findall(r"```(\w*)\n(.*?)```", python_section(), re.S)
    found = []
    for i, (lang, body) in enumerate(blocks):
        if lang == "python":
            following = blocks[i + 1] if i + 1 < len(blocks) else None
            found.append((body, following[1] if following and following[0] == "" else None))
    return found


def test_the_sending_again_table_is_the_librarys():
    rows = re.findall(r"^\| `(\w+)/(\w+)` \| (yes|no|with claim_ids) \| (.*) \|$", python_section(), re.M)
    assert rows == [(r.service, r.name, r.resend, r.why) for r in RPCS]


def test_the_python_examples_run_and_print_what_the_guide_says(cluster, tmp_path, monkeypatch):
    s = cluster(tree=TREE)
    s.register("w1")
    pki = str(s.pki.dir)
    s.pki.files("research")
    from e2e.conftest import free_port
    dead = f"127.0.0.1:{free_port()}"

    def here(text: str) -> str:
        return (text.replace("127.0.0.1:7071", dead).replace("127.0.0.1:7070", s.address)
                .replace("/tmp/pool-docs/pki", pki))
    monkeypatch.setenv("POOL_CONFIG", str(tmp_path / "config.toml"))
    monkeypatch.delenv("POOL_CONTEXT", raising=False)
    config.set_context("docs", scheduler=[s.address], ca=f"{pki}/ca.pem", cert=f"{pki}/research.pem",
                       key=f"{pki}/research.key", tenant="research")   # as the guide's `poolctl config` line

    found = examples()
    assert len(found) == 3
    namespace: dict = {}
    for code, expected in found:
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(here(code), str(GUIDE), "exec"), namespace)   # noqa: S102 - the guide's own code
        if expected is not None:
            assert printed.getvalue() == here(expected), code
