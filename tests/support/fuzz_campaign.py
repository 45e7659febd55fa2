"""The long fuzz campaign of the engine (``make fuzz``; ``python -m tests.support.fuzz_campaign``).

Runs the state machine of tests/engine/runtime/test_engine_fuzz.py in rounds of ``FUZZ_EXAMPLES``
examples of up to ``FUZZ_STEPS`` rules each until ``FUZZ_RULE_CALLS`` rule calls have
been made (default 50,000). A failure is shrunk by Hypothesis, written with its steps to
``FUZZ_LOG`` (default ``logitscope-fuzz-failures.txt`` in the temporary folder), and the campaign goes on with the next
round. At the end it prints the rule calls by rule, the distinct rejections (by message
template) and the failures found; the exit status is 1 when any was found.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import time
import traceback

from hypothesis.stateful import run_state_machine_as_test

from tests.engine.runtime.test_engine_fuzz import WHY, EngineMachine, fuzz_settings, summary
from tests.support.engine_shadow import RULE_CALLS, template


def rule_calls() -> int:
    return sum(count for name, count in RULE_CALLS.items() if name not in ("setup", "teardown"))


def signature(error: BaseException) -> str:
    """One key per kind of failure: the exception type and its first line, values replaced."""
    first = re.sub(r"request \d+", "request <n>", str(error).strip().split("\n")[0])
    return f"{type(error).__name__}: {template(first)}"


def main() -> int:
    target = int(os.environ.get("FUZZ_RULE_CALLS", "50000"))
    examples = int(os.environ.get("FUZZ_EXAMPLES", "40"))
    steps = int(os.environ.get("FUZZ_STEPS", "50"))
    log_path = os.environ.get("FUZZ_LOG", os.path.join(tempfile.gettempdir(), "logitscope-fuzz-failures.txt"))
    failures: dict[str, int] = {}
    started = time.monotonic()
    rounds = 0
    with open(log_path, "w", encoding="utf-8") as log:
        while rule_calls() < target:
            rounds += 1
            try:
                run_state_machine_as_test(EngineMachine, settings=fuzz_settings(examples, steps, database=None))
            except Exception as error:  # a failure: record it and go on
                key = signature(error)
                failures[key] = failures.get(key, 0) + 1
                if failures[key] == 1:
                    log.write(f"=== {key}\n{''.join(traceback.format_exception(error))}\n")
                    log.flush()
            minutes = (time.monotonic() - started) / 60
            print(
                f"round {rounds}: {rule_calls()} rule calls, {minutes:.1f} min, {len(failures)} failures",
                flush=True,
            )
    print(f"\n{rounds} rounds of {examples} examples (up to {steps} rules each) in {minutes:.1f} min")
    print(summary([f"{key} (hit in {n} rounds)" for key, n in failures.items()]))
    print("rejected inputs by kind (as the fuzzer made them invalid):")
    print("\n".join(f"  {count:6d}  {kind}" for kind, count in WHY.most_common()))
    if failures:
        print(f"the failures and their steps are in {log_path}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
