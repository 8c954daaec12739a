"""Results of a diagnosis: verdicts, links, one chain per target, and the exit code."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

EXIT_PASS = 0
EXIT_FAILED = 1
EXIT_COULD_NOT_RUN = 2
EXIT_WAITING = 3


class Verdict(StrEnum):
    """PASS: the boundary holds. FAIL: a stable failure. WAIT: an expected bootstrap delay.
    SKIP: not applicable here, or hidden (then `Link.hidden` says why)."""

    PASS = "PASS"
    FAIL = "FAIL"
    WAIT = "WAIT"
    SKIP = "SKIP"


#: How bad a verdict is when several pods' results are folded into one link.
SEVERITY = {Verdict.SKIP: 0, Verdict.PASS: 1, Verdict.WAIT: 2, Verdict.FAIL: 3}


@dataclass
class Link:
    """One boundary of the chain and what was seen there."""

    key: str
    title: str
    verdict: Verdict
    summary: str
    evidence: list[str] = field(default_factory=list)
    #: identifiers that tie this layer to the next (uids, node, pool/device, CDI ID ...)
    ids: dict[str, Any] = field(default_factory=dict)
    causes: list[str] = field(default_factory=list)
    next_command: str = ""
    #: set when RBAC hid what this link needs (the link could not be checked)
    hidden: str = ""

    @property
    def broken(self) -> bool:
        return self.verdict in (Verdict.FAIL, Verdict.WAIT)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key, "title": self.title, "verdict": self.verdict.value,
                               "summary": self.summary, "evidence": list(self.evidence), "ids": self.ids}
        if self.broken:
            out["causes"] = list(self.causes)
            out["nextCommand"] = self.next_command
        if self.hidden:
            out["hidden"] = self.hidden
        return out


@dataclass
class Chain:
    """The links of one ComputeDomain (or of the domain behind one pod), in the seed's order."""

    target: str  # "computedomain NS/NAME" or "pod NS/NAME"
    mode: str
    links: list[Link] = field(default_factory=list)

    @property
    def first_broken(self) -> Link | None:
        return next((link for link in self.links if link.broken), None)

    @property
    def exit_code(self) -> int:
        verdicts = {link.verdict for link in self.links}
        if Verdict.FAIL in verdicts:
            return EXIT_FAILED
        if any(link.hidden for link in self.links):
            return EXIT_COULD_NOT_RUN
        if Verdict.WAIT in verdicts:
            return EXIT_WAITING
        return EXIT_PASS

    def to_dict(self) -> dict[str, Any]:
        first = self.first_broken
        return {"target": self.target, "mode": self.mode, "exitCode": self.exit_code,
                "firstBroken": first.key if first else None,
                "links": [link.to_dict() for link in self.links]}


@dataclass
class Diagnosis:
    """Every chain diagnosed in one run, or why the run could not happen."""

    chains: list[Chain] = field(default_factory=list)
    error: str = ""

    @property
    def exit_code(self) -> int:
        if self.error:
            return EXIT_COULD_NOT_RUN
        codes = {chain.exit_code for chain in self.chains}
        for code in (EXIT_FAILED, EXIT_COULD_NOT_RUN, EXIT_WAITING):
            if code in codes:
                return code
        return EXIT_PASS

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"exitCode": self.exit_code, "chains": [c.to_dict() for c in self.chains]}
        if self.error:
            out["error"] = self.error
        return out


def fold(key: str, title: str, parts: list[Link]) -> Link:
    """One link from per-pod results: the worst verdict leads; evidence and ids are kept per pod."""
    if not parts:
        return Link(key, title, Verdict.SKIP, "no workload pod to check")
    worst = max(parts, key=lambda p: SEVERITY[p.verdict])
    evidence = list(dict.fromkeys(line for p in parts for line in p.evidence))
    same = sum(1 for p in parts if p.verdict == worst.verdict) - 1
    summary = worst.summary + (f" (and {same} more pod(s) {worst.verdict.value})" if same else "")
    ids: dict[str, Any] = {}
    for p in parts:
        ids.update(p.ids)
    hidden = next((p.hidden for p in parts if p.hidden), "")
    return Link(key, title, worst.verdict, summary, evidence, ids, worst.causes, worst.next_command, hidden)
