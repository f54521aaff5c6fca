-- Generated from scheduler/transitions.py by scheduler/sqlgen.py
-- (`manage.py dbcode --generate`): do not edit. Mirrors STEP_TRANSITIONS, JOB_TRANSITIONS,
-- ATTEMPT_TRANSITIONS and ATTEMPT_LATE_OUTCOMES; a test fails when this file differs from them.
CREATE TRIGGER scheduler_step_status_guard BEFORE UPDATE OF status ON scheduler_step
FOR EACH ROW WHEN OLD.status <> NEW.status
    AND (OLD.status || '>' || NEW.status) NOT IN ('attempt_failed>dispatched', 'attempt_failed>failed', 'attempt_failed>held', 'attempt_failed>retry_wait', 'attempt_failed>succeeded', 'attempt_failed>waiting', 'dispatched>attempt_failed', 'dispatched>held', 'dispatched>succeeded', 'dispatched>unknown', 'failed>compensated', 'failed>dispatched', 'failed>succeeded', 'failed>waiting', 'held>dispatched', 'held>failed', 'held>succeeded', 'held>waiting', 'pending>dispatched', 'pending>failed', 'pending>held', 'pending>skipped', 'pending>succeeded', 'pending>waiting', 'retry_wait>dispatched', 'retry_wait>failed', 'retry_wait>held', 'retry_wait>succeeded', 'retry_wait>waiting', 'succeeded>compensated', 'unknown>dispatched', 'unknown>failed', 'unknown>held', 'unknown>retry_wait', 'unknown>succeeded', 'unknown>waiting', 'waiting>dispatched', 'waiting>failed', 'waiting>held', 'waiting>skipped', 'waiting>succeeded')
BEGIN
    SELECT RAISE(ABORT, 'step status: a move not in scheduler.transitions');
END;
