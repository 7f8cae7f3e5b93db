"""``edgeops calibrate --to TRANSPORT``: run the calibration grid on a board through a deploy
transport and keep its file here (edgeops.pipeline.calibrate measures; this only carries)."""
from __future__ import annotations

import json

from edgeops.errors import EdgeOpsError
from edgeops.pipeline.calibrate import DEFAULT_GRID


def calibrate_remote(uri: str, board: str, *, grid: str = DEFAULT_GRID, threads=(1, 2),
                     force: bool = False) -> dict:
    """Run the grid on a board through deploy's transport ``uri`` (the board's edgeops, pushed
    if needed) and store its calibration here as ``board``'s. An emulated board (qemu) is
    refused: its times are the emulator's, not the board's."""
    from edgeops import boards
    from edgeops.deploy.push import ensure_edgeops
    from edgeops.deploy.transports import QemuTransport, open_transport
    from edgeops.simulator import calibration as cal
    b = boards.load(board)
    t = open_transport(uri)
    if isinstance(t, QemuTransport):
        raise EdgeOpsError(f"{uri} is an emulator: qemu times measure the emulation, not the "
                           f"board, and would mislead every prediction; calibrate on the real "
                           f"board (ssh://)")
    target = cal.path_for(b.name)
    if target.exists() and not force:
        raise EdgeOpsError(f"{target} already exists (a calibration of {b.name}); use --force "
                           f"to replace it")
    ensure_edgeops(t)
    rc, out, err = t._exec(["-m", "edgeops", "calibrate", "--board", b.name, "--grid", grid,
                            "--threads", *[str(x) for x in threads], "--here", "--json",
                            "--output", "calibration.json", "--force"])
    if rc != 0:
        msg = err.strip().splitlines()[-1] if err.strip() else f"exit status {rc}"
        raise EdgeOpsError(f"calibrating on the board ({uri}): {msg}")
    target.parent.mkdir(parents=True, exist_ok=True)
    t.get_file("calibration.json", target)
    doc = json.loads(target.read_text())
    doc["path"] = str(target)
    return doc
