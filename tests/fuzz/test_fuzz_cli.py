"""Generated bad inputs for every subcommand (fuzz_cli.py): each ends with exit status 2, one line
on stderr and no traceback, within the time cap; a sample run as processes also stays under the
peak-RSS cap. CI runs a representative budget; EDGEOPS_TEST_FULL=1 the whole one."""
import random

import pytest

from edgeops.env import switch
from fuzz_cli import World, generate, run_inprocess, run_process, table

FULL = switch("EDGEOPS_TEST_FULL", False)
SEED = 27
BUDGET, PROCESSES = (2000, 60) if FULL else (240, 6)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return World.build(tmp_path_factory.mktemp("fuzz"))


@pytest.fixture(scope="module")
def cases(world):
    return generate(world, SEED, BUDGET, slow=True)


def test_every_generated_bad_input_is_refused_in_one_line(cases):
    outs = [run_inprocess(c) for c in cases]
    bad = [o for o in outs if o.kind != "clean"]
    assert not bad, table(outs) + "".join(
        f"\n[{o.kind}] {' '.join(o.case.argv)[:200]}: {o.err.strip()[-300:]}" for o in bad)
    assert len({o.case.cmd for o in outs}) >= 12, table(outs)     # the spread CI relies on


def test_a_sample_as_processes_within_time_and_rss(cases, world):
    sample = random.Random(SEED).sample(cases, PROCESSES)
    outs = [run_process(c, world.work) for c in sample]
    bad = [o for o in outs if o.kind != "clean"]
    assert not bad, table(outs) + "".join(
        f"\n[{o.kind}] {' '.join(o.case.argv)[:200]} (rss {o.rss}): {o.err.strip()[-300:]}"
        for o in bad)
