"""poolctl's habits: --version, shell completion and a man page, all generated
from its own argparse parser, so a verb or flag added to a group appears in
them without anyone editing a script."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler.ctl import main

BIN = Path(sys.executable).parent


def poolctl(*args: str) -> str:
    done = subprocess.run([str(BIN / "poolctl"), *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def complete(script: Path, *words: str) -> list[str]:
    """What bash offers after `poolctl WORDS` (the last word being completed)."""
    line = " ".join(f"'{w}'" for w in ("poolctl", *words))
    done = subprocess.run(["bash", "-c", f'source "{script}"; COMP_WORDS=({line}); COMP_CWORD={len(words)}; '
                           '_poolctl; printf "%s\\n" "${COMPREPLY[@]}"'], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completion_offers_verbs_sub_verbs_and_flags(tmp_path):
    script = tmp_path / "poolctl.bash"
    script.write_text(poolctl("completion", "bash"))
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    assert set(complete(script, "")) >= set(main.VERBS) | {"--version", "-o"}
    assert complete(script, "cl") == ["claims"]
    assert "use-context" in complete(script, "config", "")
    assert set(complete(script, "claims", "--")) >= {"--scheduler", "--context", "--timeout", "--state"}
    assert complete(script, "claims", "-o", "") == ["table", "json"]


def test_zsh_completion_loads_the_same_function_through_bashcompinit():
    script = poolctl("completion", "zsh")
    assert script.startswith("#compdef poolctl\n") and "bashcompinit" in script
    assert "complete -o default -o bashdefault -F _poolctl poolctl" in script


def test_the_man_page_covers_every_verb():
    page = poolctl("man")
    assert page.startswith(".TH POOLCTL 1 ")
    for verb in main.VERBS:
        assert f"\n.SS {verb}\n" in page
    assert "\n.SS config use-context\n" in page and "--context" in page
    if shutil.which("man") and shutil.which("groff"):
        rendered = subprocess.run(["man", "-l", "-"], input=page, capture_output=True, text=True, timeout=60,
                                  env={"MANWIDTH": "100", "PATH": "/usr/bin:/bin"})
        assert rendered.returncode == 0 and "COMMANDS" in rendered.stdout
