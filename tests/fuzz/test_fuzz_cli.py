"""Generated bad inputs for every subcommand (fuzz_cli.py): each ends with exit status 2, one line
on stderr and no traceback, within the time cap (a damaged calibration in the cache instead: exit
0 with a warning, or that one-line refusal); a sample run as processes also stays under the
peak-RSS cap. Generated bad HTTP requests (fuzz_http.py) get JSON 4xx answers from edgeops serve,
never a 500, and leave it healthy. CI runs a representative budget; EDGEOPS_TEST_FULL=1 the whole
one."""
import random

import pytest

from edgeops.env import switch
from fuzz_cli import World, generate, run_inprocess, run_process, table

FULL = switch("EDGEOPS_TEST_FULL", False)
SEED = 27
BUDGET, PROCESSES, HTTP = (2000, 60, 2000) if FULL else (240, 6, 120)


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


def test_generated_bad_http_requests_get_json_4xx(world):
    import fuzz_http
    from edgeops import package
    from edgeops.serve.http import Server
    from edgeops.serve.service import Service
    spec = package.load(world.pkg, check_kernels=False).manifest["inputs"][0]
    cases = fuzz_http.generate(spec["name"], spec["shape"], SEED, HTTP)
    svc = Service(world.pkg, workers=1, max_queue=8, watch=False).start()
    srv = Server(svc, max_body=1 << 20, read_timeout_s=2.0)
    srv.start_background()
    try:
        got = [(c, *fuzz_http.send(srv.server_address[:2], c)) for c in cases]
        health = fuzz_http.send(srv.server_address[:2], fuzz_http.HttpCase(
            b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "health"))
    finally:
        srv.shutdown()
        srv.server_close()
        svc.close()
    bad = [(c.why, kind, detail) for c, kind, detail in got if kind != "clean"]
    assert bad == [] and health[1].split()[1] == "200", (bad, health)
