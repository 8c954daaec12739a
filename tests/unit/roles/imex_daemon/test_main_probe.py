"""The daemon's own readiness probe of nvidia-imex: READY once per child, only once it listens,
then asked again while that child runs."""

from __future__ import annotations

import socket
import threading

from cdriver.roles.imex_daemon.main import ImexReadyProbe, port_accepts


def test_probe_waits_for_the_port_then_reports_each_child_once() -> None:
    state = {"pid": 10, "port": False, "answers": [False, True]}
    calls: list[int] = []
    ready: list[int] = []
    got = threading.Event()

    def probe() -> bool:
        calls.append(state["pid"])
        return state["answers"].pop(0) if state["answers"] else True

    def on_ready(pid: int) -> None:
        ready.append(pid)
        got.set()

    prober = ImexReadyProbe(probe, lambda: state["pid"], on_ready, port_open=lambda: state["port"],
                            initial=0.001, maximum=0.01)
    prober.start()
    try:
        prober.arm()
        assert not got.wait(0.1)
        assert calls == []  # the ctl is not run while the command port is closed
        state["port"] = True
        assert got.wait(5)
        assert ready == [10] and calls == [10, 10]
        got.clear()
        state["pid"] = 11  # restarted child
        prober.arm()
        assert got.wait(5)
        assert ready == [10, 11]
    finally:
        prober.stop()


def test_a_ready_child_is_asked_again_and_every_answer_reported() -> None:
    state: dict = {"pid": 10, "answers": [True, True, False]}
    answers: list[tuple[int, bool]] = []
    ready: list[int] = []
    got = threading.Event()

    def probe() -> bool:
        return state["answers"].pop(0) if state["answers"] else True

    def on_answer(pid: int, ok: bool) -> None:
        answers.append((pid, ok))
        if len(answers) >= 3:
            got.set()

    prober = ImexReadyProbe(probe, lambda: state["pid"], ready.append, initial=0.001, maximum=0.01,
                            on_answer=on_answer, recheck=0.01)
    prober.start()
    try:
        prober.arm()
        assert got.wait(5)
        # READY once per child; the answers after it (the last one not READY) reach the pod's probes
        assert ready == [10] and answers[:3] == [(10, True), (10, True), (10, False)]
        state["pid"] = 11  # restarted: the new child answers READY once, then is asked again
        got.clear()
        answers.clear()
        prober.arm()
        assert got.wait(5)
        assert ready == [10, 11] and {pid for pid, _ in answers[1:]} == {11}
    finally:
        prober.stop()


def test_port_accepts_sees_a_listener() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        assert not port_accepts("127.0.0.1", port)
        listener.listen()
        assert port_accepts("127.0.0.1", port)
