-- Generated from scheduler/transitions.py by scheduler/sqlgen.py
-- (`manage.py dbcode --generate`): do not edit. Mirrors STEP_TRANSITIONS, JOB_TRANSITIONS,
-- ATTEMPT_TRANSITIONS and ATTEMPT_LATE_OUTCOMES; a test fails when this file differs from them.
CREATE TRIGGER scheduler_job_status_guard BEFORE UPDATE OF status ON scheduler_job
FOR EACH ROW WHEN OLD.status <> NEW.status
    AND (OLD.status || '>' || NEW.status) NOT IN ('compensating>cancelled', 'compensating>compensated', 'compensating>needs_attention', 'failed>compensating', 'failed>running', 'needs_attention>cancelled', 'needs_attention>compensating', 'needs_attention>failed', 'needs_attention>running', 'needs_attention>succeeded', 'pending>cancelled', 'pending>compensating', 'pending>failed', 'pending>running', 'running>cancelled', 'running>compensating', 'running>failed', 'running>needs_attention', 'running>succeeded', 'succeeded>compensating', 'waiting>cancelled', 'waiting>compensating', 'waiting>running')
BEGIN
    SELECT RAISE(ABORT, 'job status: a move not in scheduler.transitions');
END;
