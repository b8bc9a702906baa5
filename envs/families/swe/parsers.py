"""Test-output parsers, pluggable by name (``install_config.log_parser``).

A parser knows how to make a test command write a machine-readable report
to a path the grader chose (so that text a patched library prints cannot
pass for results), and how to read per-test statuses from that report (or,
for logs from elsewhere, from the console text).

Statuses: PASSED, FAILED, ERROR, SKIPPED, XFAIL.
"""

from __future__ import annotations

import json
import re
import shlex
import xml.etree.ElementTree as ET
from typing import Callable

__all__ = ["Parser", "PARSERS", "register_parser", "get_parser", "PASSING"]

PASSING = {"PASSED", "XFAIL"}


class Parser:
    """``command`` wires the report into a test command; ``parse`` reads statuses."""

    name: str = ""

    def command(self, test_cmd: str, report: str) -> str:
        return test_cmd

    def parse(self, log: str, report: str | None) -> dict[str, str]:
        raise NotImplementedError


PARSERS: dict[str, Parser] = {}


def register_parser(name: str) -> Callable[[type[Parser]], type[Parser]]:
    def deco(cls: type[Parser]) -> type[Parser]:
        instance = cls()
        instance.name = name
        PARSERS[name] = instance
        return cls

    return deco


def get_parser(name: str) -> Parser:
    try:
        return PARSERS[name]
    except KeyError:
        raise ValueError(f"unknown log parser {name!r} (known: {', '.join(sorted(PARSERS))})") from None


@register_parser("pytest")
class PytestParser(Parser):
    """pytest: a JUnit XML report (xunit1, which names each test's file); ``-rA`` lines for plain logs."""

    _LINE = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\S+?)(?: - .*)?$")

    def command(self, test_cmd: str, report: str) -> str:
        return f"{test_cmd} -o junit_family=xunit1 --junitxml={report}"

    def parse(self, log: str, report: str | None) -> dict[str, str]:
        if report is None:
            return self._parse_log(log)
        root = ET.fromstring(report)
        statuses: dict[str, str] = {}
        for case in root.iter("testcase"):
            statuses[self._node_id(case)] = self._status(case)
        return statuses

    @staticmethod
    def _node_id(case: ET.Element) -> str:
        file = case.get("file") or ""
        classname = case.get("classname") or ""
        name = case.get("name") or ""
        module = file[:-3].replace("/", ".") if file.endswith(".py") else ""
        if module and classname.startswith(module):
            rest = classname[len(module) :].lstrip(".")
        else:
            rest = ""
            if not file:
                parts = classname.split(".")
                file, rest = "/".join(parts) + ".py", ""
        parts = [file, *(rest.split(".") if rest else []), name]
        return "::".join(p for p in parts if p)

    @staticmethod
    def _status(case: ET.Element) -> str:
        tags = {child.tag for child in case}
        if "error" in tags:
            return "ERROR"
        if "failure" in tags:
            return "FAILED"
        if "skipped" in tags:
            skipped = case.find("skipped")
            return "XFAIL" if skipped is not None and skipped.get("type") == "pytest.xfail" else "SKIPPED"
        return "PASSED"

    def _parse_log(self, log: str) -> dict[str, str]:
        statuses: dict[str, str] = {}
        for line in log.splitlines():
            match = self._LINE.match(line.strip())
            if match:
                status = "PASSED" if match.group(1) == "XPASS" else match.group(1)
                statuses[match.group(2)] = status
        return statuses


# Runs `python -m unittest ARGS` with a result class that records each test's outcome
# and writes them as JSON to the report path (argv[1]) when the run ends.
_UNITTEST_RECORDER = """
import json, sys, unittest
report, args = sys.argv[1], sys.argv[2:]
class Recorder(unittest.TextTestResult):
    statuses = {}
    def _put(self, test, status, force=False):
        key = test.id()
        if force or self.statuses.get(key) not in ("FAILED", "ERROR"):
            self.statuses[key] = status
    def addSuccess(self, test):
        super().addSuccess(test); self._put(test, "PASSED")
    def addFailure(self, test, err):
        super().addFailure(test, err); self._put(test, "FAILED", True)
    def addError(self, test, err):
        super().addError(test, err); self._put(test, "ERROR", True)
    def addSkip(self, test, reason):
        super().addSkip(test, reason); self._put(test, "SKIPPED")
    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err); self._put(test, "XFAIL")
    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test); self._put(test, "FAILED", True)
    def addSubTest(self, test, subtest, outcome):
        super().addSubTest(test, subtest, outcome)
        if outcome is not None:
            failed = issubclass(outcome[0], test.failureException)
            self._put(test, "FAILED" if failed else "ERROR", True)
runner = unittest.TextTestRunner(resultclass=Recorder, verbosity=2)
program = unittest.main(module=None, argv=["python -m unittest", *args], testRunner=runner, exit=False)
with open(report, "w") as f:
    json.dump(Recorder.statuses, f)
sys.exit(not program.result.wasSuccessful())
"""


@register_parser("unittest")
class UnittestParser(Parser):
    """``python -m unittest``: a recording result class writes every outcome to the report as JSON.

    Test commands that are not ``python[3] -m unittest ...`` run as given, with
    stderr (where unittest prints its verbose lines) as the report; plain logs
    are parsed from ``-v`` text.
    """

    _COMMAND = re.compile(r"^\s*(?P<python>python3?|[\w/.-]*/python3?)\s+-m\s+unittest(?P<args>(\s.*)?)$", re.S)
    _RESULT = re.compile(
        r"^(?P<method>\w+) \((?P<id>[\w.]+)\)(?:\n(?!\w+ \()[^\n]*?)?(?: \.\.\. |\n\.\.\. )"
        r"(?P<status>ok|FAIL|ERROR|skipped|expected failure|unexpected success)",
        re.M,
    )
    _SUBTEST = re.compile(r"^\s+(?P<method>\w+) \((?P<id>[\w.]+)\) \(.*\) \.\.\. (?P<status>FAIL|ERROR)\s*$", re.M)
    _MAP = {"ok": "PASSED", "FAIL": "FAILED", "ERROR": "ERROR", "skipped": "SKIPPED",
            "expected failure": "XFAIL", "unexpected success": "FAILED"}

    def command(self, test_cmd: str, report: str) -> str:
        match = self._COMMAND.match(test_cmd)
        if match is None:
            return f"{test_cmd} 2>{report}"
        return f"{match.group('python')} -c {shlex.quote(_UNITTEST_RECORDER)} {shlex.quote(report)}{match.group('args') or ''}"

    def parse(self, log: str, report: str | None) -> dict[str, str]:
        if report is not None and report.lstrip().startswith("{"):
            return {str(k): str(v) for k, v in json.loads(report).items()}
        text = log if report is None else report
        statuses: dict[str, str] = {}
        for match in self._RESULT.finditer(text):
            statuses[self._test_id(match)] = self._MAP[match.group("status")]
        for match in self._SUBTEST.finditer(text):  # a failing subtest fails its test
            if statuses.get(self._test_id(match)) != "ERROR":
                statuses[self._test_id(match)] = self._MAP[match.group("status")]
        return statuses

    @staticmethod
    def _test_id(match: re.Match) -> str:
        """module.Class.method (Python < 3.11 prints only module.Class in the parentheses)."""
        test_id, method = match.group("id"), match.group("method")
        return test_id if test_id.endswith("." + method) else f"{test_id}.{method}"


@register_parser("tap")
class TapParser(Parser):
    """TAP (``node --test --test-reporter=tap``): top-level ``ok N - name`` / ``not ok N - name``."""

    _LINE = re.compile(r"^(not ok|ok) \d+ - (.*?)(?:\s+(?<!\\)#\s*(SKIP|TODO)\b.*)?$", re.I)
    _ESCAPE = re.compile(r"\\([\\#])")  # TAP escapes '#' and '\' in names

    def command(self, test_cmd: str, report: str) -> str:
        return f"{test_cmd} --test-reporter-destination={report}"

    def parse(self, log: str, report: str | None) -> dict[str, str]:
        text = log if report is None else report
        statuses: dict[str, str] = {}
        for line in text.splitlines():
            match = self._LINE.match(line)  # top level only: subtests are indented
            if not match:
                continue
            ok, directive = match.group(1).lower() == "ok", (match.group(3) or "").upper()
            name = self._ESCAPE.sub(r"\1", match.group(2).strip())
            if directive == "SKIP":
                statuses[name] = "SKIPPED"
            elif directive == "TODO":
                statuses[name] = "XFAIL" if not ok else "PASSED"
            else:
                statuses[name] = "PASSED" if ok else "FAILED"
        return statuses
