"""The study storage: a Ctrl-C that arrives inside a database call is raised after it."""

from __future__ import annotations

import logging
import os
import signal

import optuna
import pytest
import sqlalchemy

from xsweep.search.storage import interrupts_deferred, open_storage


def _interrupt_inside_next_statement(storage) -> list[str]:
    """Send SIGINT to this process just before the storage's next SQL statement runs."""
    sent: list[str] = []

    def send(conn, cursor, statement, *rest):
        if not sent:
            sent.append(statement)
            os.kill(os.getpid(), signal.SIGINT)

    sqlalchemy.event.listen(storage.engine, "before_cursor_execute", send)
    return sent


def test_a_ctrl_c_inside_a_storage_call_is_raised_after_it_completes(tmp_path, caplog):
    storage = open_storage(f"sqlite:///{tmp_path / 'study.db'}")
    sent = _interrupt_inside_next_statement(storage)
    with caplog.at_level(logging.WARNING), pytest.raises(KeyboardInterrupt):
        storage.create_new_study([optuna.study.StudyDirection.MINIMIZE], "made")
    assert sent, "the interrupt was never sent"
    # The call was done whole before the interrupt was raised, and nothing was logged.
    assert [s.study_name for s in storage.get_all_studies()] == ["made"]
    assert not caplog.records
    # The connection is still good.
    study = optuna.load_study(study_name="made", storage=storage)
    study.tell(study.ask(), 1.0)
    assert [t.value for t in study.get_trials()] == [1.0]


def test_a_ctrl_c_inside_a_call_of_optunas_cache_is_raised_after_it(tmp_path, caplog):
    # A study goes through Optuna's cache, which calls the storage's private methods
    # (_create_new_trial, _get_trials, ...): those calls too finish before the interrupt.
    storage = open_storage(f"sqlite:///{tmp_path / 'study.db'}")
    study = optuna.create_study(study_name="made", storage=storage)
    sent = _interrupt_inside_next_statement(storage)
    caplog.clear()  # the study's creation is logged
    with caplog.at_level(logging.WARNING), pytest.raises(KeyboardInterrupt):
        storage._create_new_trial(study._study_id)
    assert sent, "the interrupt was never sent"
    assert not caplog.records
    assert len(study.get_trials()) == 1  # the trial was made whole


def test_plain_optuna_storage_breaks_on_the_same_interrupt(tmp_path, caplog):
    # The premise of the test above: without deferral the interrupt lands in SQLAlchemy.
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'study.db'}")
    _interrupt_inside_next_statement(storage)
    with pytest.raises(KeyboardInterrupt):
        storage.create_new_study([optuna.study.StudyDirection.MINIMIZE], "made")
    assert storage.get_all_studies() == []


def test_deferred_blocks_nest_and_raise_once_at_the_outer_end():
    order: list[str] = []
    with pytest.raises(KeyboardInterrupt), interrupts_deferred():
        with interrupts_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            order.append("inner body done")
        order.append("outer body done")
    assert order == ["inner body done", "outer body done"]


def test_outside_a_deferred_block_the_handler_is_put_back():
    before = signal.getsignal(signal.SIGINT)
    with interrupts_deferred():
        assert signal.getsignal(signal.SIGINT) is not before
    assert signal.getsignal(signal.SIGINT) is before


def test_the_connection_pool_does_not_report_an_interrupt_as_an_error(tmp_path, caplog):
    # SQLAlchemy resets connections that the garbage collector finds unused; an interrupt
    # landing there is raised again, but the pool logs it first: only that record goes
    storage = open_storage(f"sqlite:///{tmp_path / 'study.db'}")
    logger = storage.engine.pool.logger
    with caplog.at_level(logging.ERROR):
        for error in (KeyboardInterrupt(), RuntimeError("a real failure")):
            try:
                raise error
            except BaseException:  # noqa: BLE001 - logged as the pool would
                logger.error("Exception during reset or similar", exc_info=True)
    assert [r.exc_info[0] for r in caplog.records] == [RuntimeError]
