"""Text and JSON views of a diagnosis."""

from __future__ import annotations

import json

from cdriver.diagnose.model import EXIT_COULD_NOT_RUN, EXIT_FAILED, EXIT_PASS, EXIT_WAITING, Chain, Diagnosis

RESULT_WORDS = {EXIT_PASS: "all links PASS", EXIT_FAILED: "FAILED", EXIT_COULD_NOT_RUN: "INCOMPLETE (could not check "
                "everything)", EXIT_WAITING: "BOOTSTRAPPING (only waits)"}


def render_json(diagnosis: Diagnosis) -> str:
    return json.dumps(diagnosis.to_dict(), indent=2, sort_keys=False)


def render_chain(chain: Chain, verbose: bool = True) -> list[str]:
    lines = [f"{chain.target}  (IMEX mode: {chain.mode})"]
    first = chain.first_broken
    if first is not None:
        lines.append(f"FIRST BROKEN LINK: {first.verdict.value} {first.key}: {first.summary}")
        if first.causes:
            lines.append("  likely causes:")
            lines += [f"    - {cause}" for cause in first.causes]
        if first.next_command:
            lines.append(f"  next: {first.next_command}")
    elif any(link.hidden for link in chain.links):
        lines.append("NOT FULLY CHECKED: some objects are hidden by RBAC (see SKIP lines)")
    else:
        lines.append("every link holds")
    lines.append("")
    for link in chain.links:
        lines.append(f"  {link.verdict.value:<4}  {link.key:<14} {link.summary}")
        if verbose:
            lines += [f"          {item}" for item in link.evidence]
    lines.append(f"result: {RESULT_WORDS[chain.exit_code]} (exit {chain.exit_code})")
    return lines


def render_text(diagnosis: Diagnosis, verbose: bool = True) -> str:
    if diagnosis.error:
        return f"cdriver diagnose could not run: {diagnosis.error}"
    blocks = ["\n".join(render_chain(chain, verbose)) for chain in diagnosis.chains]
    return "\n\n".join(blocks)
