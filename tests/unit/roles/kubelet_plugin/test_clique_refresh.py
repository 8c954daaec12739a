"""The clique ID is re-read and its node label re-applied."""

from __future__ import annotations

from pathlib import Path

from tests.unit.roles.kubelet_plugin.fixtures import plugin_state


class RecordingLabeler:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None]] = []

    def set_label(self, key: str, value: str | None) -> None:
        self.calls.append((key, value))


def test_clique_id_is_re_read_and_its_label_re_applied(tmp_path: Path):
    from cdriver.nvml.discover import FabricError
    from cdriver.roles.kubelet_plugin.clique_refresh import CliqueRefresher

    state = plugin_state(tmp_path)
    state.labeler = RecordingLabeler()
    answers: list[str | Exception] = ["", "uuid.5", FabricError("registration in progress")]

    def read() -> str:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    changes: list[str] = []
    refresher = CliqueRefresher(state, read, own_label=True, on_change=changes.append)
    assert refresher.refresh() == ""  # still no fabric: nothing to label
    assert state.labeler.calls == []
    assert refresher.refresh() == "uuid.5"  # the fabric registered after start
    assert state.discovery.clique_id == "uuid.5"
    assert changes == ["uuid.5"]  # the plugin watches that clique's objects from now on
    assert refresher.refresh() == "uuid.5"  # a failed re-read keeps the known ID, label re-applied
    assert state.labeler.calls == [("nvidia.com/gpu.clique", "uuid.5")] * 2
    assert changes == ["uuid.5"]


def test_the_plugin_watches_only_its_own_cliques_objects():
    from cdriver.api import constants
    from cdriver.roles.kubelet_plugin.main import clique_informer

    mine = clique_informer(object(), "drv", "uuid.5")  # type: ignore[arg-type]
    assert (mine.namespace, mine.label_selector) == ("drv", f"{constants.LABEL_CLIQUE_ID}=uuid.5")
    assert clique_informer(object(), "drv", "").label_selector is None  # type: ignore[arg-type]
