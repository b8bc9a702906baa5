"""Grading an SWE episode in a fresh container, trusting nothing the agent left behind.

1. Take the agent's diff out of its container (``git diff`` against the base).
2. Start a fresh container from the task image and apply the diff with a
   fallback chain: ``git apply``, ``git apply --3way``, ``git apply --reject``,
   ``patch --fuzz=5``, resetting the tree between tries.
3. Restore every test file to the base (test directories, ``test_*.py``,
   ``*_test.py``, ``conftest.py``, ``*.test.js``, pytest/tox configs), whether
   the agent changed, deleted or added it, then apply the hidden ``test_patch``.
   Editing or deleting tests therefore cannot help.
4. Run the test command with a timeout, its report written to a path with a
   random name; read per-test statuses from that report. A suite that never
   ran (no report, no tests) is an error, not a pass.
5. Resolved = every FAIL_TO_PASS and every PASS_TO_PASS test passes (a
   missing test counts as failing).
"""

from __future__ import annotations

import re
import secrets
import shlex

from ...core import Grade
from ...sandbox import DockerProvider, Sandbox, SandboxConfig
from ...tasks import SWETask
from .parsers import PASSING, get_parser

__all__ = ["agent_diff", "grade_diff", "APPLY_CHAIN", "TEST_FILE", "run_tests"]

WORKDIR = "/testbed"
TEST_TIMEOUT = 900.0

TEST_FILE = re.compile(
    r"(^|/)(tests?|testing|__tests__)/"
    r"|(^|/)test_[^/]*\.py$|_test\.py$|(^|/)conftest\.py$"
    r"|\.(test|spec)\.[cm]?[jt]s$"
    r"|(^|/)(pytest\.ini|tox\.ini)$"
)

APPLY_CHAIN = [
    ("git apply", "git apply --verbose {p}"),
    ("git apply --3way", "git apply --verbose --3way {p}"),
    ("git apply --reject", "git apply --verbose --reject {p}"),
    ("patch --fuzz=5", "patch --batch --fuzz=5 -p1 -i {p}"),
]
_RESET = "git reset -q --hard HEAD && git clean -fdq"


async def agent_diff(sandbox: Sandbox) -> str:
    """Everything the agent changed under /testbed, as a binary-safe diff against the base."""
    result = await sandbox.exec(
        "git add -A >/dev/null 2>&1; git -c core.quotepath=false diff --cached --binary HEAD",
        cwd=WORKDIR,
        timeout=120,
        output_limit=64 << 20,
    )
    if result.exit_code != 0 or result.truncated:
        raise RuntimeError(f"could not take the diff out (exit {result.exit_code}): {result.output[-300:]}")
    return result.output


async def _apply(sb: Sandbox, diff: str) -> str | None:
    """The name of the first method of the chain that applied ``diff``, or None."""
    await sb.write_file("/tmp/agent.patch", diff)
    for name, cmd in APPLY_CHAIN:
        result = await sb.exec(cmd.format(p="/tmp/agent.patch"), cwd=WORKDIR, timeout=120)
        if result.exit_code == 0:
            return name
        await sb.exec(_RESET, cwd=WORKDIR, timeout=120)
    return None


def _patch_files(patch: str) -> list[str]:
    files = []
    for line in patch.splitlines():
        if line.startswith("diff --git "):
            parts = line.split(" b/", 1)
            if len(parts) == 2:
                files.append(parts[1].strip())
    return files


async def _restore_tests(sb: Sandbox, test_patch: str) -> None:
    """Put every test file back as it was at the base, then apply the hidden tests."""
    changed = await sb.exec(
        "git add -A >/dev/null 2>&1; git -c core.quotepath=false diff --cached --name-only HEAD", cwd=WORKDIR, timeout=120
    )
    touched = [f for f in changed.output.splitlines() if TEST_FILE.search(f)]
    touched += _patch_files(test_patch)
    for path in dict.fromkeys(touched):
        q = shlex.quote(path)
        await sb.exec(
            f"git rm -q --cached --ignore-unmatch -- {q} >/dev/null; rm -rf -- {q}; "
            f"git cat-file -e HEAD:{q} 2>/dev/null && git checkout HEAD -- {q}; true",
            cwd=WORKDIR,
            timeout=60,
        )
    await sb.write_file("/tmp/test.patch", test_patch)
    applied = await sb.exec("git apply --verbose /tmp/test.patch", cwd=WORKDIR, timeout=120)
    if applied.exit_code != 0:
        raise RuntimeError(f"the hidden test patch did not apply: {applied.output[-400:]}")


async def run_tests(sb: Sandbox, task: SWETask, timeout: float = TEST_TIMEOUT) -> tuple[dict[str, str], dict]:
    """Run the task's test command; (statuses, facts). Statuses empty when the suite never ran."""
    config = task.install_config
    assert config is not None
    parser = get_parser(config.log_parser)
    nonce = secrets.token_hex(8)
    report = f"/tmp/sandgym-report-{nonce}"
    command = parser.command(config.test_cmd, report)
    result = await sb.exec(command, cwd=WORKDIR, timeout=timeout, output_limit=1 << 20)
    try:
        report_text = (await sb.read_file(report)).decode("utf-8", errors="replace")
    except FileNotFoundError:
        report_text = None
    facts = {
        "test_command": command,
        "test_exit_code": result.exit_code,
        "test_timed_out": result.timed_out,
        "test_duration": round(result.duration, 3),
        "log_tail": result.output[-2000:],
    }
    if report_text is None or result.timed_out:
        return {}, facts
    try:
        statuses = parser.parse(result.output, report_text)
    except Exception as exc:  # a malformed report is a suite that did not finish
        facts["parse_error"] = f"{type(exc).__name__}: {exc}"
        return {}, facts
    return statuses, facts


async def grade_diff(task: SWETask, diff: str, provider: DockerProvider, image: str) -> Grade:
    """Grade ``diff`` against ``task`` in a fresh container of ``image``."""
    async with provider.sandbox(image, SandboxConfig(workdir=WORKDIR, memory="4g", cpus=2.0)) as sb:
        details: dict = {"patch_bytes": len(diff.encode())}
        if diff.strip():
            method = await _apply(sb, diff)
            details["applied_with"] = method
            if method is None:
                return Grade(score=0.0, resolved=False, error="the patch did not apply", details=details)
        await _restore_tests(sb, task.test_patch)
        statuses, facts = await run_tests(sb, task)
        details.update(facts)
    if not statuses:
        return Grade(score=0.0, resolved=False, error="the test suite did not run", details=details)
    f2p = {t: statuses.get(t, "MISSING") for t in task.fail_to_pass}
    p2p = {t: statuses.get(t, "MISSING") for t in task.pass_to_pass}
    f2p_ok = sum(s in PASSING for s in f2p.values())
    p2p_ok = sum(s in PASSING for s in p2p.values())
    resolved = f2p_ok == len(f2p) and p2p_ok == len(p2p)
    details.update(
        {
            "tests_run": len(statuses),
            "fail_to_pass": f2p,
            "pass_to_pass_failed": {t: s for t, s in p2p.items() if s not in PASSING},
            "fail_to_pass_rate": f2p_ok / len(f2p) if f2p else 1.0,
            "pass_to_pass_rate": p2p_ok / len(p2p) if p2p else 1.0,
        }
    )
    return Grade(score=1.0 if resolved else 0.0, resolved=resolved, details=details)
